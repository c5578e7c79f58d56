package engine_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// perCustomer is two tasks under the concurrency key {{input.customer_id}}, limit 2.
func perCustomer(t *testing.T) *workflow.Definition {
	wf := workflow.New("per-customer").Deadline(10*time.Minute).Concurrency("{{input.customer_id}}", 2)
	wf.Task("a", "h.a").WithRetry(workflow.Retry{MaxAttempts: 3, Backoff: "fixed"})
	wf.Task("b", "h.b")
	wf.Edge("a", "b")
	return build(t, wf)
}

// types lists the types of cmds, in order.
func types(cmds []engine.Command) []engine.CommandType {
	out := make([]engine.CommandType, len(cmds))
	for i, c := range cmds {
		out[i] = c.Type
	}
	return out
}

// TestConcurrencyStartsQueued: a run of a workflow with a concurrency key starts queued, with
// its deadline scheduled and one acquire command carrying the key rendered from its input and
// the limit; nothing runs, and nothing is in flight, until the granted event.
func TestConcurrencyStartsQueued(t *testing.T) {
	def := perCustomer(t)
	for _, tc := range []struct{ input, key string }{
		{`{"customer_id":"c-42"}`, "c-42"},
		{`{"customer_id":42}`, "42"},
		{`{"customer_id":"a.b c/*>"}`, "a.b c/*>"}, // any text: the shell hashes it
	} {
		run, cmds, err := engine.Start(def, "r", json.RawMessage(tc.input), t0)
		if err != nil {
			t.Fatal(err)
		}
		if run.Status != protocol.RunQueued || run.Finished() {
			t.Fatalf("status %s (finished %v), want queued and not finished", run.Status, run.Finished())
		}
		if got := types(cmds); !slices.Equal(got, []engine.CommandType{engine.CmdSchedule, engine.CmdAcquire}) {
			t.Fatalf("commands %v, want the deadline and an acquire", got)
		}
		if s := cmds[1].Slot; s == nil || s.Key != tc.key || s.Limit != 2 || !s.Granted.IsZero() {
			t.Fatalf("acquire %+v, want key %q limit 2", s, tc.key)
		}
		if run.Slot == nil || run.Slot.Key != tc.key || !run.Slot.Granted.IsZero() {
			t.Fatalf("run slot %+v", run.Slot)
		}
		for id, sr := range run.Steps {
			if sr.Status != protocol.StepPending {
				t.Fatalf("step %s is %s while queued", id, sr.Status)
			}
		}
		if n := len(engine.InFlight(def, run)); n != 0 {
			t.Fatalf("%d tasks in flight while queued", n)
		}
		if tm := engine.Timers(def, run); len(tm) != 1 || !tm[0].At.Equal(t0.Add(10*time.Minute)) {
			t.Fatalf("timers %+v, want the deadline only", tm)
		}
	}
}

// TestConcurrencyGranted: the granted event starts the run at the time of the grant; it runs
// to its end as any run, and its finish is followed by exactly one release. A granted event
// for a run that runs or ended changes nothing (the driver delivers every event twice).
func TestConcurrencyGranted(t *testing.T) {
	def := perCustomer(t)
	d := newDriver(t, def, `{"customer_id":"c1"}`, script{"a": {done(`1`)}, "b": {done(`2`)}})
	d.holdGrants = true
	d.now = t0.Add(3 * time.Minute)
	d.apply(protocol.Event{Type: protocol.EvGranted, At: d.now, Item: -1})
	if d.run.Status != protocol.RunRunning || !d.run.Slot.Granted.Equal(d.now) {
		t.Fatalf("status %s, slot %+v after the grant", d.run.Status, d.run.Slot)
	}
	if len(d.dispatches) != 1 || d.dispatches[0].task.Step != "a" || !d.run.Steps["a"].StartedAt.Equal(d.now) {
		t.Fatalf("dispatches %+v: want step a at the grant", d.dispatches)
	}
	d.runToEnd()
	d.expect(protocol.RunCompleted, "")
	if d.released != 1 || d.cmds[len(d.cmds)-1].Type != engine.CmdRelease {
		t.Fatalf("%d releases, last command %s: want one release, after the finish", d.released, d.cmds[len(d.cmds)-1].Type)
	}
	for _, ev := range []protocol.Event{
		{Type: protocol.EvGranted, At: d.now, Item: -1},
		{Type: protocol.EvCancel, At: d.now, Item: -1},
	} {
		next, cmds, err := engine.Decide(def, d.run, ev)
		if err != nil || len(cmds) != 0 || !bytes.Equal(mustJSON(t, next), mustJSON(t, d.run)) {
			t.Fatalf("%s after the end: err %v, commands %v", ev.Type, err, types(cmds))
		}
	}
}

// TestConcurrencyWhileQueued: what each event does to a queued run. A cancel or the deadline
// ends it (finish, then release: it leaves the queue); a signal is kept for later; anything
// else changes nothing.
func TestConcurrencyWhileQueued(t *testing.T) {
	wf := workflow.New("queued").Deadline(10*time.Minute).Concurrency("{{input.c}}", 1)
	wf.WaitEvent("w", "go")
	wf.Task("a", "h")
	wf.Edge("w", "a")
	def := build(t, wf)
	queued, _, err := engine.Start(def, "r", json.RawMessage(`{"c":"x"}`), t0)
	if err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	for _, tc := range []struct {
		name   string
		ev     protocol.Event
		status protocol.RunStatus
		code   string
	}{
		{"cancel", protocol.Event{Type: protocol.EvCancel, At: at, Item: -1, Reason: "not needed"}, protocol.RunCancelled, protocol.CodeCancelled},
		{"the deadline", protocol.Event{Type: protocol.EvTick, At: t0.Add(10 * time.Minute), Item: -1}, protocol.RunTimedOut, protocol.CodeDeadline},
		{"any event past the deadline", protocol.Event{Type: protocol.EvGranted, At: t0.Add(11 * time.Minute), Item: -1}, protocol.RunTimedOut, protocol.CodeDeadline},
		{"a state too large", protocol.Event{Type: protocol.EvStateTooLarge, At: at, Item: -1, Error: "big"}, protocol.RunFailed, protocol.CodeStateTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, cmds, err := engine.Decide(def, queued, tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if run.Status != tc.status || run.Error == nil || run.Error.Code != tc.code {
				t.Fatalf("status %s, error %+v: want %s %s", run.Status, run.Error, tc.status, tc.code)
			}
			if got := types(cmds); !slices.Equal(got, []engine.CommandType{engine.CmdFinish, engine.CmdRelease}) {
				t.Fatalf("commands %v, want finish then release", got)
			}
			for id, sr := range run.Steps {
				if sr.Status != protocol.StepSkipped {
					t.Fatalf("step %s is %s, want skipped: the run never started", id, sr.Status)
				}
			}
		})
	}
	for _, ev := range []protocol.Event{
		{Type: protocol.EvCompleted, At: at, Step: "a", Item: -1, Activation: 1, Iteration: 1, Attempt: 1, Output: json.RawMessage(`1`)},
		{Type: protocol.EvTick, At: at, Step: "w", Item: -1, Activation: 1},
		{Type: protocol.EvDecision, At: at, Step: "w", Item: -1, Approve: true, By: "ann", ID: "d1"},
		{Type: protocol.EvResume, At: at, Step: "w", Item: -1, Output: json.RawMessage(`1`), By: "ann", ID: "r1"},
		{Type: protocol.EvStart, At: at, Item: -1},
	} {
		run, cmds, err := engine.Decide(def, queued, ev)
		if err != nil || len(cmds) != 0 || !bytes.Equal(mustJSON(t, run), mustJSON(t, queued)) {
			t.Fatalf("%s while queued: err %v, commands %v, status %s", ev.Type, err, types(cmds), run.Status)
		}
	}
	// A signal waits in the run for the wait_event step, which takes it once the run started.
	run, cmds, err := engine.Decide(def, queued, protocol.Event{Type: protocol.EvSignal, At: at, Item: -1, Name: "go", Output: json.RawMessage(`"sig"`), ID: "s1", By: "admin", Roles: []string{"admin"}})
	if err != nil || len(cmds) != 0 || run.Status != protocol.RunQueued || len(run.Signals["go"]) != 1 {
		t.Fatalf("signal while queued: err %v, commands %v, status %s, signals %v", err, types(cmds), run.Status, run.Signals)
	}
	run, cmds, err = engine.Decide(def, run, protocol.Event{Type: protocol.EvGranted, At: at.Add(time.Minute), Item: -1})
	if err != nil || run.Steps["w"].Status != protocol.StepCompleted || string(run.Steps["w"].Output) != `"sig"` || len(cmds) != 1 || cmds[0].Task.Step != "a" {
		t.Fatalf("after the grant: err %v, step w %+v, commands %v", err, run.Steps["w"], types(cmds))
	}
}

// TestConcurrencyKeyCannotRender: a run whose input lacks the key's path fails at once with
// E_CONCURRENCY_KEY, before any step, without queueing (no acquire, no deadline); a default in
// the key gives such runs a key instead. A refused start ends failed too; both release (a run
// that never queued releases nothing, and the shell finds nothing to free).
func TestConcurrencyKeyCannotRender(t *testing.T) {
	def := perCustomer(t)
	run, cmds, err := engine.Start(def, "r", json.RawMessage(`{"name":"no id"}`), t0)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != protocol.RunFailed || run.Error.Code != protocol.CodeConcurrencyKey || run.Slot != nil {
		t.Fatalf("status %s, error %+v, slot %+v", run.Status, run.Error, run.Slot)
	}
	if got := types(cmds); !slices.Equal(got, []engine.CommandType{engine.CmdFinish, engine.CmdRelease}) {
		t.Fatalf("commands %v", got)
	}
	wf := workflow.New("defaulted").Concurrency(`{{input.customer_id ?? "anonymous"}}`, 1)
	wf.Task("a", "h")
	run, cmds, err = engine.Start(build(t, wf), "r", json.RawMessage(`{}`), t0)
	if err != nil || run.Status != protocol.RunQueued || cmds[1].Slot.Key != "anonymous" {
		t.Fatalf("err %v, status %s, commands %+v", err, run.Status, cmds)
	}
	refused := &protocol.RunError{Code: "E_OPERATOR_ONLY", Message: "no"}
	run, cmds, err = engine.Decide(def, &engine.Run{ID: "r"}, protocol.Event{Type: protocol.EvStart, At: t0, Input: json.RawMessage(`{"customer_id":"c"}`), Item: -1, Refused: refused})
	if err != nil || run.Status != protocol.RunFailed || !slices.Equal(types(cmds), []engine.CommandType{engine.CmdFinish, engine.CmdRelease}) {
		t.Fatalf("refused: err %v, status %s, commands %v", err, run.Status, types(cmds))
	}
}

// TestConcurrencyRunsLikeAnyRun: under the driver (every event delivered twice, decided on the
// state decoded from JSON too), a run with a concurrency key takes the same path as the same
// workflow without one; only the workflow with a key acquires and releases.
func TestConcurrencyRunsLikeAnyRun(t *testing.T) {
	sc := func() script {
		return script{"a": {fails("flaky"), done(`1`)}, "b": {done(`2`)}}
	}
	with := newDriver(t, perCustomer(t), `{"customer_id":"c"}`, sc())
	with.reload = true
	with.runToEnd()
	without := drive(t, twoTasks(t), `{"customer_id":"c"}`, sc())
	with.expect(protocol.RunCompleted, "")
	without.expect(protocol.RunCompleted, "")
	if !slices.Equal(with.run.Path, without.run.Path) || with.dispatchCount("a") != without.dispatchCount("a") {
		t.Fatalf("paths %v and %v", with.run.Path, without.run.Path)
	}
	if len(with.acquired) != 1 || with.released != 1 || len(without.acquired) != 0 || without.released != 0 {
		t.Fatalf("with a key: %d acquires, %d releases; without: %d, %d", len(with.acquired), with.released, len(without.acquired), without.released)
	}
}
