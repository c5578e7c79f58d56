package engine_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// decision is a human decision on a step that is not a child.
func decision(step, callID string, approve bool, msg string) protocol.Event {
	return protocol.Event{Type: protocol.EvDecision, Step: step, Item: -1, CallID: callID, Approve: approve, Message: msg}
}

// signal is a signal with its data and id, by an admin (who may signal any run).
func signal(name, data, id string) protocol.Event {
	return protocol.Event{Type: protocol.EvSignal, Item: -1, Name: name, Output: json.RawMessage(data), ID: id, By: "admin", Roles: []string{"admin"}}
}

// resume is a human's answer to a step paused on needs_human, by an admin.
func resume(step, answer string) protocol.Event {
	return protocol.Event{Type: protocol.EvResume, Step: step, Item: -1, Output: json.RawMessage(answer), By: "admin", Roles: []string{"admin"}}
}

// scheduled reports whether the driver saw a schedule command for step (item -1, activation 1)
// at exactly at.
func (d *driver) scheduled(step string, at time.Time) bool {
	return slices.ContainsFunc(d.cmds, func(c engine.Command) bool {
		return c.Type == engine.CmdSchedule && c.Step == step && c.Item == -1 && c.Activation == 1 && c.At.Equal(at)
	})
}

// unchanged applies ev to the driver's run and fails the test if it changed anything.
func (d *driver) unchanged(name string, ev protocol.Event) {
	d.t.Helper()
	if ev.At.IsZero() {
		ev.At = d.now
	}
	next, cmds, err := engine.Decide(d.def, d.run, ev)
	if err != nil {
		d.t.Fatalf("%s: %v", name, err)
	}
	if len(cmds) != 0 || !bytes.Equal(mustJSON(d.t, next), mustJSON(d.t, d.run)) {
		d.t.Fatalf("%s changed the run: commands %s\nbefore %s\nafter  %s", name, mustJSON(d.t, cmds), d.state(), mustJSON(d.t, next))
	}
}

// expectWaiting checks that step waits for kind until until (zero: no timeout), that the run
// waits, that nothing of the step is in flight, and that its timer (if any) is scheduled and
// re-armed by Timers.
func (d *driver) expectWaiting(step string, kind protocol.WaitKind, until time.Time) {
	d.t.Helper()
	sr := d.stepRun(step)
	if sr.Status != protocol.StepWaiting || sr.Wait != kind || !sr.Until.Equal(until) {
		d.t.Fatalf("%s: status %s, wait %q until %s; want waiting for %s until %s", step, sr.Status, sr.Wait, sr.Until, kind, until)
	}
	if d.run.Status != protocol.RunWaiting {
		d.t.Fatalf("run status %s while %s waits", d.run.Status, step)
	}
	for _, tk := range engine.InFlight(d.def, d.run) {
		if tk.Body == step {
			d.t.Fatalf("task %s in flight while %s waits", tk.MsgID, step)
		}
	}
	timer := slices.ContainsFunc(engine.Timers(d.def, d.run), func(c engine.Command) bool { return c.Step == step && c.At.Equal(until) })
	if !until.IsZero() && (!timer || !d.scheduled(step, until)) {
		d.t.Fatalf("%s: timer at %s scheduled %v, re-armed by Timers %v", step, until, d.scheduled(step, until), timer)
	}
	if until.IsZero() && slices.ContainsFunc(engine.Timers(d.def, d.run), func(c engine.Command) bool { return c.Step == step }) {
		d.t.Fatalf("%s waits without a timeout, but Timers has a timer for it", step)
	}
}

func approvalWorkflow(t *testing.T, onTimeout string, errorEdge bool) *workflow.Definition {
	wf := workflow.New("approve").Deadline(48 * time.Hour)
	wf.Task("prep", "h")
	wf.Approval("gate", "Ship {{prep.output.name}}?").WithTimeout(time.Hour).WithOnTimeout(onTimeout)
	wf.Task("ship", "h")
	wf.Task("stop", "h")
	wf.Edge("prep", "gate")
	wf.Edge("gate", "ship").When("approved")
	wf.Edge("gate", "stop").When("denied")
	if errorEdge {
		wf.Edge("gate", "stop").When("error")
	}
	return build(t, wf)
}

func TestApprovalStep(t *testing.T) {
	prepDone := t0.Add(time.Second)
	until := prepDone.Add(time.Hour)
	for _, tc := range []struct {
		name      string
		onTimeout string
		errorEdge bool
		decide    *protocol.Event // nil: nobody decides
		status    protocol.RunStatus
		code      string
		path      []string
		label     string
		output    string // the gate's output; "" when it failed
		err       string // the gate's error
		decided   protocol.Decision
		endedAt   time.Time
	}{
		{name: "approved with a message", decide: &protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, Approve: true, Message: "Ship it.", By: "ana"},
			status: protocol.RunCompleted, path: []string{"prep", "gate", "ship"}, label: "approved", output: `"Ship it."`,
			decided: protocol.Decision{Approve: true, Message: "Ship it.", By: "ana"}, endedAt: prepDone.Add(10 * time.Minute)},
		{name: "denied without a message: the output is null", decide: &protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, By: "bo"},
			status: protocol.RunCompleted, path: []string{"prep", "gate", "stop"}, label: "denied", output: `null`,
			decided: protocol.Decision{By: "bo"}, endedAt: prepDone.Add(10 * time.Minute)},
		{name: "a decision fully addressed", decide: &protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, Activation: 1, Iteration: 1, Attempt: 1, Approve: true},
			status: protocol.RunCompleted, path: []string{"prep", "gate", "ship"}, label: "approved", output: `null`,
			decided: protocol.Decision{Approve: true}, endedAt: prepDone.Add(10 * time.Minute)},
		{name: "no decision: denied at the timeout by default",
			status: protocol.RunCompleted, path: []string{"prep", "gate", "stop"}, label: "denied", output: `"no decision within 1h0m0s"`,
			decided: protocol.Decision{Message: "no decision within 1h0m0s"}, endedAt: until},
		{name: "no decision, on_timeout deny", onTimeout: "deny",
			status: protocol.RunCompleted, path: []string{"prep", "gate", "stop"}, label: "denied", output: `"no decision within 1h0m0s"`,
			decided: protocol.Decision{Message: "no decision within 1h0m0s"}, endedAt: until},
		{name: "no decision, on_timeout fail: the error edge", onTimeout: "fail", errorEdge: true,
			status: protocol.RunCompleted, path: []string{"prep", "gate", "stop"}, label: "error", err: "no decision within 1h0m0s", endedAt: until},
		{name: "no decision, on_timeout fail, no error edge: the run fails", onTimeout: "fail",
			status: protocol.RunFailed, code: protocol.CodeStepFailed, path: []string{"prep", "gate"}, label: "error", err: "no decision within 1h0m0s", endedAt: until},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t, approvalWorkflow(t, tc.onTimeout, tc.errorEdge), `{}`, script{
				"prep": {done(`{"name":"box"}`)}, "ship": {done(`"shipped"`)}, "stop": {done(`"stopped"`)},
			})
			d.runUntil("the gate", waiting("gate"))
			d.expectWaiting("gate", protocol.WaitApproval, until)
			if sr := d.stepRun("gate"); sr.Prompt != "Ship box?" || !sr.WaitingSince.Equal(prepDone) {
				t.Fatalf("gate: prompt %q, waiting since %s", sr.Prompt, sr.WaitingSince)
			}
			if tc.decide != nil {
				d.human(10*time.Minute, *tc.decide)
			}
			d.runToEnd()
			d.expect(tc.status, tc.code)
			d.expectPath(tc.path...)
			sr := d.stepRun("gate")
			if sr.Label != tc.label || sr.Error != tc.err || sr.Wait != "" || !sr.Until.IsZero() {
				t.Fatalf("gate: label %q, error %q, wait %q until %s", sr.Label, sr.Error, sr.Wait, sr.Until)
			}
			if tc.output != "" && string(sr.Output) != tc.output {
				t.Fatalf("gate output %s, want %s", sr.Output, tc.output)
			}
			if tc.err == "" && !reflect.DeepEqual(sr.Decisions, map[string]protocol.Decision{"": tc.decided}) {
				t.Fatalf("gate decisions %+v, want %+v", sr.Decisions, tc.decided)
			}
			if at := d.events[slices.IndexFunc(d.events, func(e protocol.Event) bool {
				return e.Type == protocol.EvDecision || e.Type == protocol.EvTick && e.Step == "gate"
			})].At; !at.Equal(tc.endedAt) {
				t.Fatalf("the gate ended at %s, want %s", at, tc.endedAt)
			}
		})
	}
}

// TestHumanEventsThatDoNotApply: a decision, resume, signal or tick that is not for what a step
// waits for changes nothing.
func TestHumanEventsThatDoNotApply(t *testing.T) {
	d := newDriver(t, approvalWorkflow(t, "", false), `{}`, script{"prep": {done(`{"name":"box"}`)}})
	d.runUntil("the gate", waiting("gate"))
	until := d.stepRun("gate").Until
	for _, tc := range []struct {
		name string
		ev   protocol.Event
	}{
		{"a decision for a call of an approval step", decision("gate", "c1", true, "")},
		{"a decision for a step that does not wait", decision("prep", "", true, "")},
		{"a decision for a pending step", decision("ship", "", true, "")},
		{"a decision for an unknown step", decision("nope", "", true, "")},
		{"a decision for another activation", protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, Activation: 2, Approve: true}},
		{"a decision for another iteration", protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, Iteration: 2, Approve: true}},
		{"a decision for another resume", protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, Iteration: 1, Resume: 1, Approve: true}},
		{"a decision for another attempt", protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, Attempt: 3, Approve: true}},
		{"a resume for a step waiting for a decision", resume("gate", `"go"`)},
		{"a tick before the timeout", protocol.Event{Type: protocol.EvTick, At: until.Add(-time.Nanosecond), Step: "gate", Item: -1, Activation: 1}},
		{"a tick of another activation", protocol.Event{Type: protocol.EvTick, At: until, Step: "gate", Item: -1, Activation: 2}},
		{"a waiting answer for an approval step", protocol.Event{Type: protocol.EvWaiting, Step: "gate", Item: -1, Activation: 1, Iteration: 1, Attempt: 1,
			Pending: []protocol.PendingCall{{CallID: "c1"}}}},
		{"an answer for an approval step", protocol.Event{Type: protocol.EvCompleted, Step: "gate", Item: -1, Activation: 1, Iteration: 1, Attempt: 1}},
		{"a signal without a name", signal("", `1`, "s1")},
		{"a signal whose data is not JSON", signal("paid", `{`, "s1")},
	} {
		t.Run(tc.name, func(t *testing.T) { d.unchanged(tc.name, tc.ev) })
	}
}

func waitEventWorkflow(t *testing.T, prepTakes time.Duration) (*workflow.Definition, script) {
	wf := workflow.New("hear").Deadline(24 * time.Hour)
	wf.Task("prep", "h")
	wf.WaitEvent("wt", "paid").WithTimeout(30 * time.Minute)
	wf.Task("ok", "h")
	wf.Task("late", "h")
	wf.Edge("prep", "wt")
	wf.Edge("wt", "ok").When("paid")
	wf.Edge("wt", "late").When("error")
	return build(t, wf), script{"prep": {done(`1`).after(prepTakes)}, "ok": {done(`"ok"`)}, "late": {done(`"late"`)}}
}

func TestWaitEvent(t *testing.T) {
	type sent struct {
		after time.Duration
		ev    protocol.Event
	}
	for _, tc := range []struct {
		name      string
		prepTakes time.Duration
		signals   []sent
		waits     bool // whether wt waits once it starts
		path      []string
		output    string
		err       string
		kept      map[string][]json.RawMessage
	}{
		{name: "a signal while it waits", prepTakes: time.Second, waits: true,
			signals: []sent{{5 * time.Minute, signal("paid", `{"amount": 3}`, "s1")}},
			path:    []string{"prep", "wt", "ok"}, output: `{"amount":3}`},
		{name: "a signal before it waits is kept, then taken at once", prepTakes: 10 * time.Minute,
			signals: []sent{{time.Minute, signal("paid", `"early"`, "s1")}},
			path:    []string{"prep", "wt", "ok"}, output: `"early"`},
		{name: "the oldest signal is taken, the others kept", prepTakes: 10 * time.Minute,
			signals: []sent{{time.Minute, signal("paid", `1`, "s1")}, {time.Minute, signal("paid", `2`, "s2")}, {time.Minute, signal("shipped", `3`, "s3")}},
			path:    []string{"prep", "wt", "ok"}, output: `1`,
			kept: map[string][]json.RawMessage{"paid": {json.RawMessage(`2`)}, "shipped": {json.RawMessage(`3`)}}},
		{name: "a signal of another name is kept; the step times out", prepTakes: time.Second, waits: true,
			signals: []sent{{time.Minute, signal("shipped", `null`, "s1")}},
			path:    []string{"prep", "wt", "late"}, err: "no event paid within 30m0s",
			kept: map[string][]json.RawMessage{"shipped": {json.RawMessage(`null`)}}},
		{name: "a signal delivered again later is taken once", prepTakes: 10 * time.Minute,
			signals: []sent{{time.Minute, signal("paid", `"once"`, "s1")}, {time.Minute, signal("paid", `"once"`, "s1")}},
			path:    []string{"prep", "wt", "ok"}, output: `"once"`},
		{name: "a signal without data is null", prepTakes: time.Second, waits: true,
			signals: []sent{{time.Minute, signal("paid", ``, "s1")}},
			path:    []string{"prep", "wt", "ok"}, output: `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def, sc := waitEventWorkflow(t, tc.prepTakes)
			d := newDriver(t, def, `{}`, sc)
			if tc.waits {
				d.runUntil("wt waits", waiting("wt"))
				d.expectWaiting("wt", protocol.WaitEvent, t0.Add(time.Second+30*time.Minute))
			}
			for _, s := range tc.signals {
				d.human(s.after, s.ev)
			}
			d.runToEnd()
			d.expect(protocol.RunCompleted, "")
			d.expectPath(tc.path...)
			sr := d.stepRun("wt")
			if tc.output != "" && (string(sr.Output) != tc.output || sr.Label != "paid") {
				t.Fatalf("wt: output %s, label %q; want %s, paid", sr.Output, sr.Label, tc.output)
			}
			if sr.Error != tc.err {
				t.Fatalf("wt: error %q, want %q", sr.Error, tc.err)
			}
			if !reflect.DeepEqual(d.run.Signals, tc.kept) {
				t.Fatalf("signals kept %s, want %s", mustJSON(t, d.run.Signals), mustJSON(t, tc.kept))
			}
			var ids []string
			for _, s := range tc.signals {
				if !slices.Contains(ids, s.ev.ID) {
					ids = append(ids, s.ev.ID)
				}
			}
			if !slices.Equal(d.run.SignalIDs, ids) {
				t.Fatalf("signal ids %v, want %v", d.run.SignalIDs, ids)
			}
		})
	}
}

// TestSignalGoesToTheFirstWaiter: several wait_event steps wait for one name: a signal goes to
// the first in declaration order, a child in its parent's place, children by index.
func TestSignalGoesToTheFirstWaiter(t *testing.T) {
	wf := workflow.New("waiters")
	wf.Task("prep", "h")
	wf.Parallel("fan", "w1", "w2")
	wf.WaitEvent("w1", "go")
	wf.WaitEvent("w2", "go")
	wf.WaitEvent("solo", "go")
	wf.Edge("prep", "solo")
	wf.Edge("prep", "fan")
	def := build(t, wf)
	d := newDriver(t, def, `{}`, script{"prep": {done(`0`)}})
	d.runUntil("the waiters", waiting("fan#1"))
	for i, want := range []string{"fan#0", "fan#1", "solo"} {
		d.human(time.Minute, signal("go", strconvI(i), "s"+strconvI(i)))
		if sr := d.stepRun(want); sr.Status != protocol.StepCompleted || string(sr.Output) != strconvI(i) {
			t.Fatalf("signal %d: %s is %s with output %s", i, want, sr.Status, sr.Output)
		}
	}
	d.runToEnd()
	d.expect(protocol.RunCompleted, "")
	d.expectOutput(`{"fan":[0,1],"solo":2}`)
}

func strconvI(i int) string { return string(mustJSONAny(i)) }

func mustJSONAny(v any) []byte { b, _ := json.Marshal(v); return b }

func TestSleep(t *testing.T) {
	t.Run("a sleep completes with its input at its end", func(t *testing.T) {
		wf := workflow.New("nap")
		wf.Task("prep", "h")
		wf.Sleep("nap", 5*time.Minute).WithBranch("mood")
		wf.Task("calm", "h")
		wf.Edge("prep", "nap")
		wf.Edge("nap", "calm").When("calm")
		d := newDriver(t, build(t, wf), `{}`, script{"prep": {done(`{"mood":"calm"}`)}, "calm": {done(`"ok"`)}})
		d.runUntil("the sleep", func(r *engine.Run) bool { return r.Steps["nap"].Status == protocol.StepRunning })
		until := t0.Add(time.Second + 5*time.Minute)
		sr := d.stepRun("nap")
		if sr.Wait != protocol.WaitSleep || !sr.Until.Equal(until) || d.run.Status != protocol.RunRunning {
			t.Fatalf("nap: wait %q until %s, run %s; want sleep until %s, running", sr.Wait, sr.Until, d.run.Status, until)
		}
		if !d.scheduled("nap", until) || !slices.ContainsFunc(engine.Timers(d.def, d.run), func(c engine.Command) bool { return c.Step == "nap" && c.At.Equal(until) }) {
			t.Fatalf("the end of the sleep is not scheduled or not re-armed: %+v", engine.Timers(d.def, d.run))
		}
		d.unchanged("a tick before the end", protocol.Event{Type: protocol.EvTick, At: until.Add(-time.Millisecond), Step: "nap", Item: -1, Activation: 1})
		d.runToEnd()
		d.expect(protocol.RunCompleted, "")
		d.expectPath("prep", "nap", "calm")
		if sr := d.stepRun("nap"); string(sr.Output) != `{"mood":"calm"}` || sr.Label != "calm" || sr.Wait != "" {
			t.Fatalf("nap: output %s, label %q, wait %q", sr.Output, sr.Label, sr.Wait)
		}
		if calm := d.tasksOf("calm")[0]; !calm.cause.Equal(until) {
			t.Fatalf("calm dispatched at %s, want %s", calm.cause, until)
		}
	})
	t.Run("a sleep of zero ends at once", func(t *testing.T) {
		def := load(t, `
name = "zero"
[[steps]]
id = "nap"
type = "sleep"
duration = "0s"
`, nil)
		run, cmds, err := engine.Start(def, "r", json.RawMessage(`7`), t0)
		if err != nil {
			t.Fatal(err)
		}
		if run.Status != protocol.RunCompleted || len(cmds) != 2 || cmds[1].Type != engine.CmdFinish || string(cmds[1].Output) != `7` {
			t.Fatalf("status %s, commands %s", run.Status, mustJSON(t, cmds))
		}
	})
}

// agentWorkflow is an agent step with an error edge to fallback and a plain edge to after.
func agentWorkflow(t *testing.T, configure func(*workflow.AgentStep)) *workflow.Definition {
	wf := workflow.New("agentwait").Deadline(24 * time.Hour)
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	s := wf.Agent("act", "m").WithGoal("Refund {{input.order}}").WithBudget(workflow.Budget{MaxIterations: 3})
	if configure != nil {
		configure(s)
	}
	wf.Task("after", "h")
	wf.Task("fallback", "h")
	wf.Edge("act", "after")
	wf.Edge("act", "fallback").When("error")
	return build(t, wf)
}

func TestAgentApprovals(t *testing.T) {
	approve := func(id, by string) protocol.Decision { return protocol.Decision{CallID: id, Approve: true, By: by} }
	deny := func(id, msg string) protocol.Decision { return protocol.Decision{CallID: id, Message: msg} }
	type resumed struct {
		msgID     string
		iteration int
		attempt   int
		resume    int
		decisions []protocol.Decision
	}
	for _, tc := range []struct {
		name      string
		configure func(*workflow.AgentStep)
		replies   []reply
		humans    []protocol.Event // each one minute after the other, once act waits
		path      []string
		tasks     []resumed // every task of act, in order
		err       string
	}{
		{name: "calls decided one by one",
			replies: []reply{waits("c1", "c2"), done(`"refunded"`)},
			humans:  []protocol.Event{{Type: protocol.EvDecision, Step: "act", Item: -1, CallID: "c1", Approve: true, By: "ana"}, decision("act", "c2", false, "too much")},
			path:    []string{"act", "after"},
			tasks: []resumed{{"run1/act/1/1/1", 1, 1, 0, nil},
				{"run1/act/1/1/1/r1", 1, 1, 1, []protocol.Decision{approve("c1", "ana"), deny("c2", "too much")}}}},
		{name: "one decision for every call, in pending order",
			replies: []reply{waits("b", "a"), done(`"refunded"`)},
			humans:  []protocol.Event{decision("act", "", true, "")},
			path:    []string{"act", "after"},
			tasks: []resumed{{"run1/act/1/1/1", 1, 1, 0, nil},
				{"run1/act/1/1/1/r1", 1, 1, 1, []protocol.Decision{approve("b", ""), approve("a", "")}}}},
		{name: "a call decided first keeps its decision",
			replies: []reply{waits("c1", "c2"), done(`"refunded"`)},
			humans:  []protocol.Event{decision("act", "c1", false, "no"), decision("act", "c1", true, "yes after all"), decision("act", "", true, "")},
			path:    []string{"act", "after"},
			tasks: []resumed{{"run1/act/1/1/1", 1, 1, 0, nil},
				{"run1/act/1/1/1/r1", 1, 1, 1, []protocol.Decision{deny("c1", "no"), approve("c2", "")}}}},
		{name: "the approval timeout denies the undecided calls",
			configure: func(s *workflow.AgentStep) { s.WithApprovalTimeout(10 * time.Minute) },
			replies:   []reply{waits("c1", "c2"), done(`"refunded"`)},
			humans:    []protocol.Event{decision("act", "c1", true, "")},
			path:      []string{"act", "after"},
			tasks: []resumed{{"run1/act/1/1/1", 1, 1, 0, nil},
				{"run1/act/1/1/1/r1", 1, 1, 1, []protocol.Decision{approve("c1", ""), deny("c2", "no decision within 10m0s")}}}},
		{name: "the approval timeout fails the step with on_timeout fail",
			configure: func(s *workflow.AgentStep) { s.WithApprovalTimeout(10 * time.Minute).WithOnTimeout("fail") },
			replies:   []reply{waits("c1")},
			path:      []string{"act", "fallback"},
			tasks:     []resumed{{"run1/act/1/1/1", 1, 1, 0, nil}},
			err:       "no decision within 10m0s"},
		{name: "a resumed task that fails is retried with its decisions",
			configure: func(s *workflow.AgentStep) { s.WithRetry(workflow.Retry{MaxAttempts: 2, Backoff: "fixed"}) },
			replies:   []reply{waits("c1"), fails("flaky"), done(`"refunded"`)},
			humans:    []protocol.Event{decision("act", "c1", true, "")},
			path:      []string{"act", "after"},
			tasks: []resumed{{"run1/act/1/1/1", 1, 1, 0, nil},
				{"run1/act/1/1/1/r1", 1, 1, 1, []protocol.Decision{approve("c1", "")}},
				{"run1/act/1/1/2/r1", 1, 2, 1, []protocol.Decision{approve("c1", "")}}}},
		{name: "a resumed task that waits again",
			replies: []reply{waits("c1"), waits("c2"), done(`"refunded"`)},
			humans:  []protocol.Event{decision("act", "c1", true, ""), decision("act", "c2", false, "")},
			path:    []string{"act", "after"},
			tasks: []resumed{{"run1/act/1/1/1", 1, 1, 0, nil},
				{"run1/act/1/1/1/r1", 1, 1, 1, []protocol.Decision{approve("c1", "")}},
				{"run1/act/1/1/1/r2", 1, 1, 2, []protocol.Decision{deny("c2", "")}}}},
		{name: "the next iteration starts afresh",
			replies: []reply{waits("c1"), cont(`"more"`), done(`"refunded"`)},
			humans:  []protocol.Event{decision("act", "c1", true, "")},
			path:    []string{"act", "after"},
			tasks: []resumed{{"run1/act/1/1/1", 1, 1, 0, nil},
				{"run1/act/1/1/1/r1", 1, 1, 1, []protocol.Decision{approve("c1", "")}},
				{"run1/act/1/2/1", 2, 1, 0, nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := agentWorkflow(t, tc.configure)
			d := newDriver(t, def, `{"order":"O-1"}`, script{"act": tc.replies, "after": {done(`"after"`)}, "fallback": {done(`"fallback"`)}})
			for _, ev := range tc.humans {
				d.runUntil("act waits", waiting("act"))
				sr := d.stepRun("act")
				var until time.Time
				if step := def.StepByID("act"); step.ApprovalTimeout > 0 {
					until = sr.WaitingSince.Add(step.ApprovalTimeout.Std())
				}
				d.expectWaiting("act", protocol.WaitApproval, until)
				if len(sr.Pending) == 0 || sr.Pending[0].Tool != "pay" || string(sr.Pending[0].Arguments) != `{"call":"`+sr.Pending[0].CallID+`"}` {
					t.Fatalf("pending %+v", sr.Pending)
				}
				d.human(time.Minute, ev)
				// While the resumed task is in flight, InFlight rebuilds it exactly.
				if last := d.dispatches[len(d.dispatches)-1].task; d.run.Steps["act"].Status == protocol.StepRunning {
					got := engine.InFlight(def, d.run)
					if len(got) != 1 || !bytes.Equal(mustJSON(t, got[0]), mustJSON(t, last)) {
						t.Fatalf("in flight %s, dispatched %s", mustJSON(t, got), mustJSON(t, last))
					}
				}
			}
			d.runToEnd()
			d.expect(protocol.RunCompleted, "")
			d.expectPath(tc.path...)
			var got []resumed
			for _, x := range d.tasksOf("act") {
				got = append(got, resumed{x.task.MsgID, x.task.Iteration, x.task.Attempt, x.task.Resume, x.task.Decisions})
			}
			if !reflect.DeepEqual(got, tc.tasks) {
				t.Fatalf("tasks of act:\n got %+v\nwant %+v", got, tc.tasks)
			}
			if sr := d.stepRun("act"); sr.Error != tc.err || sr.Attempts != len(tc.tasks) {
				t.Fatalf("act: error %q, attempts %d", sr.Error, sr.Attempts)
			}
		})
	}
}

// TestAgentWaitingEventsThatDoNotApply: once an agent step waits on calls c1 and c2, these
// events change nothing.
func TestAgentWaitingEventsThatDoNotApply(t *testing.T) {
	def := agentWorkflow(t, nil)
	d := newDriver(t, def, `{"order":"O-1"}`, script{"act": {waits("c1", "c2"), hangs()}})
	d.runUntil("act waits", waiting("act"))
	task := protocol.Event{Step: "act", Item: -1, Activation: 1, Iteration: 1, Attempt: 1}
	answer := func(typ protocol.EventType, resume int) protocol.Event {
		ev := task
		ev.Type, ev.Resume, ev.Output = typ, resume, json.RawMessage(`"late"`)
		return ev
	}
	for _, tc := range []struct {
		name string
		ev   protocol.Event
	}{
		{"a decision for an unknown call", decision("act", "c9", true, "")},
		{"a resume of a step waiting for a decision", resume("act", `"go on"`)},
		{"the paused task's answer again", answer(protocol.EvWaiting, 0)},
		{"a late answer of the paused task", answer(protocol.EvCompleted, 0)},
		{"an answer of a resumed task not dispatched yet", answer(protocol.EvCompleted, 1)},
		{"a decision addressed to another resume", protocol.Event{Type: protocol.EvDecision, Step: "act", Item: -1, Activation: 1, Iteration: 1, Resume: 1, CallID: "c1", Approve: true}},
		{"a tick: no approval timeout", protocol.Event{Type: protocol.EvTick, At: t0.Add(23 * time.Hour), Step: "act", Item: -1, Activation: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) { d.unchanged(tc.name, tc.ev) })
	}

	// After every call is decided, the paused task's answers are stale; the resumed task's count.
	d.human(time.Minute, decision("act", "", true, ""))
	d.unchanged("a late answer of the paused task", answer(protocol.EvCompleted, 0))
	d.unchanged("a decision once resumed", decision("act", "c1", false, ""))
	next, cmds, err := engine.Decide(def, d.run, answer(protocol.EvCompleted, 1))
	if err != nil || len(cmds) != 1 || cmds[0].Task.Body != "after" || next.Steps["act"].Status != protocol.StepCompleted {
		t.Fatalf("the resumed task's answer: err %v, commands %s", err, mustJSON(t, cmds))
	}
}

func TestInvalidWaitingAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending []protocol.PendingCall
		err     string
	}{
		{"no pending call", nil, "the task answered waiting without a pending call"},
		{"a call without an id", []protocol.PendingCall{{CallID: "c1"}, {Tool: "pay"}}, "pending call 2 has no call id"},
		{"a call id twice", []protocol.PendingCall{{CallID: "c1"}, {CallID: "c1"}}, `pending call id "c1" appears twice`},
		{"arguments that are not JSON", []protocol.PendingCall{{CallID: "c1", Arguments: json.RawMessage(`{`)}}, `the arguments of pending call "c1" are not valid JSON`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := agentWorkflow(t, func(s *workflow.AgentStep) { s.WithRetry(workflow.Retry{MaxAttempts: 3}) })
			d := newDriver(t, def, `{"order":"O-1"}`, script{"act": {hangs()}, "fallback": {done(`"fallback"`)}})
			d.apply(protocol.Event{Type: protocol.EvWaiting, At: t0.Add(time.Second), Step: "act", Item: -1, Activation: 1, Iteration: 1, Attempt: 1, Pending: tc.pending})
			d.runToEnd()
			d.expect(protocol.RunCompleted, "")
			d.expectPath("act", "fallback")
			// A permanent failure: not retried, dead-lettered.
			if sr := d.stepRun("act"); sr.Error != tc.err || sr.Attempts != 1 || len(d.deadLetters) != 1 || d.deadLetters[0].Reason != tc.err {
				t.Fatalf("act: error %q, attempts %d, dead letters %+v", sr.Error, sr.Attempts, d.deadLetters)
			}
		})
	}
}

func TestAgentPause(t *testing.T) {
	paused := `{"stop_reason":"needs_human","detail":"which order?"}`
	for _, tc := range []struct {
		name      string
		configure func(*workflow.AgentStep)
		replies   []reply
		answer    string // "": nobody answers (the step must not wait)
		after     time.Duration
		label     string
		output    string
		tasks     int
	}{
		{name: "paused, answered, completed",
			configure: func(s *workflow.AgentStep) { s.WithOnNeedsHuman("pause") },
			replies:   []reply{stopped(paused, "needs_human"), done(`"refunded"`)},
			answer:    `{"order":"O-2"}`, after: time.Hour, label: "completed", output: `"refunded"`, tasks: 2},
		{name: "answered at max_iterations: the step ends there",
			configure: func(s *workflow.AgentStep) {
				s.WithOnNeedsHuman("pause").WithBudget(workflow.Budget{MaxIterations: 1})
			},
			replies: []reply{stopped(paused, "needs_human")},
			answer:  `"go on"`, after: time.Minute, label: "max_iterations", output: paused, tasks: 1},
		{name: "the time waited for the human is not the agent's: max_duration counts its own work",
			configure: func(s *workflow.AgentStep) {
				s.WithOnNeedsHuman("pause").WithBudget(workflow.Budget{MaxIterations: 5, MaxDuration: clock.Duration(time.Minute)})
			},
			// Iteration 1 takes 1s and pauses; 2h later the human answers; iteration 2 takes 1s
			// (62s of work would be past the bound, 2h2s of wall time far past it); iteration 3
			// takes a minute: past the bound.
			replies: []reply{stopped(paused, "needs_human"), cont(`"2"`), cont(`"3"`).after(time.Minute)},
			answer:  `"go on"`, after: 2 * time.Hour, label: "timeout", output: `"3"`, tasks: 3},
		{name: "on_needs_human complete: the stop reason is the label",
			configure: func(s *workflow.AgentStep) { s.WithOnNeedsHuman("complete") },
			replies:   []reply{stopped(paused, "needs_human")},
			label:     "needs_human", output: paused, tasks: 1},
		{name: "by default needs_human completes",
			replies: []reply{stopped(paused, "needs_human")},
			label:   "needs_human", output: paused, tasks: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := agentWorkflow(t, tc.configure)
			d := newDriver(t, def, `{"order":"O-1"}`, script{"act": tc.replies, "after": {done(`"after"`)}})
			if tc.answer != "" {
				d.runUntil("act pauses", waiting("act"))
				d.expectWaiting("act", protocol.WaitInput, time.Time{})
				if sr := d.stepRun("act"); string(sr.Output) != paused || sr.StopReason != "needs_human" || sr.Label != "" {
					t.Fatalf("paused act: output %s, stop reason %q, label %q", sr.Output, sr.StopReason, sr.Label)
				}
				d.unchanged("a decision for a step waiting for input", decision("act", "", true, ""))
				d.human(tc.after, resume("act", tc.answer))
			}
			d.runToEnd()
			d.expect(protocol.RunCompleted, "")
			d.expectPath("act", "after")
			sr := d.stepRun("act")
			if sr.Label != tc.label || sr.StopReason != tc.label || string(sr.Output) != tc.output || d.dispatchCount("act") != tc.tasks {
				t.Fatalf("act: label %q, stop reason %q, output %s, %d tasks", sr.Label, sr.StopReason, sr.Output, d.dispatchCount("act"))
			}
			if tc.answer == "" || tc.tasks < 2 {
				return
			}
			next := d.tasksOf("act")[1].task
			if next.MsgID != "run1/act/1/2/1" || next.Iteration != 2 || next.Attempt != 1 || next.Resume != 0 ||
				string(next.HumanInput) != string(mustCanon(t, tc.answer)) || string(next.Input) != paused || next.Decisions != nil {
				t.Fatalf("the iteration after the pause: %s", mustJSON(t, next))
			}
			if sr.Waited != tc.after {
				t.Fatalf("act waited %s, want %s", sr.Waited, tc.after)
			}
		})
	}
}

func mustCanon(t *testing.T, s string) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return mustJSON(t, v)
}

// TestHumanInputInEveryAttemptOfItsIteration: a retry of the iteration after a pause carries the
// human's answer again, and InFlight rebuilds it; a resumed task of that iteration carries its
// decisions instead, and the next iteration neither.
func TestHumanInputInEveryAttemptOfItsIteration(t *testing.T) {
	def := agentWorkflow(t, func(s *workflow.AgentStep) {
		s.WithOnNeedsHuman("pause").WithRetry(workflow.Retry{MaxAttempts: 2, Backoff: "fixed"})
	})
	d := newDriver(t, def, `{"order":"O-1"}`, script{"act": {stopped(`1`, "needs_human"), fails("flaky"), waits("c1"), cont(`2`), hangs()}})
	d.runUntil("act pauses", waiting("act"))
	d.human(time.Minute, resume("act", `"the order is O-3"`))
	d.runUntil("the retry", func(r *engine.Run) bool { return r.Steps["act"].Attempt == 2 })
	tasks := d.tasksOf("act")
	retry := tasks[len(tasks)-1].task
	if retry.MsgID != "run1/act/1/2/2" || string(retry.HumanInput) != `"the order is O-3"` {
		t.Fatalf("retry %s", mustJSON(t, retry))
	}
	if got := engine.InFlight(def, d.run); len(got) != 1 || !bytes.Equal(mustJSON(t, got[0]), mustJSON(t, retry)) {
		t.Fatalf("in flight %s", mustJSON(t, got))
	}
	d.runUntil("act waits for a decision", waiting("act"))
	d.human(time.Minute, decision("act", "c1", true, ""))
	d.runUntil("iteration 3", func(r *engine.Run) bool { return r.Steps["act"].Iteration == 3 })
	tasks = d.tasksOf("act")
	resumed, third := tasks[len(tasks)-2].task, tasks[len(tasks)-1].task
	if resumed.MsgID != "run1/act/1/2/2/r1" || resumed.HumanInput != nil || len(resumed.Decisions) != 1 {
		t.Fatalf("resumed %s", mustJSON(t, resumed))
	}
	if third.MsgID != "run1/act/1/3/1" || third.HumanInput != nil || third.Decisions != nil || string(third.Input) != `2` {
		t.Fatalf("iteration 3 %s", mustJSON(t, third))
	}
}

func TestWaitingRuns(t *testing.T) {
	twoApprovals := func(t *testing.T) *driver {
		wf := workflow.New("both").Deadline(time.Hour)
		wf.Parallel("fan", "a", "b")
		wf.Approval("a", "A?")
		wf.Approval("b", "B?")
		return newDriver(t, build(t, wf), `{}`, nil)
	}
	t.Run("a run waits while any step waits", func(t *testing.T) {
		d := twoApprovals(t)
		for _, key := range []string{"fan#0", "fan#1"} {
			if sr := d.stepRun(key); sr.Status != protocol.StepWaiting {
				t.Fatalf("%s: %s", key, sr.Status)
			}
		}
		if d.run.Status != protocol.RunWaiting || d.run.Finished() {
			t.Fatalf("run %s", d.run.Status)
		}
		d.human(time.Minute, protocol.Event{Type: protocol.EvDecision, Step: "fan", Item: 1, Approve: true, Message: "B ok"})
		if d.run.Status != protocol.RunWaiting || d.stepRun("fan#1").Status != protocol.StepCompleted {
			t.Fatalf("run %s, fan#1 %s", d.run.Status, d.stepRun("fan#1").Status)
		}
		d.human(time.Minute, protocol.Event{Type: protocol.EvDecision, Step: "fan", Item: 0})
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`[null,"B ok"]`)
	})
	t.Run("a waiting run is cancelled; its waiting steps too", func(t *testing.T) {
		d := twoApprovals(t)
		d.human(time.Minute, protocol.Event{Type: protocol.EvCancel, Item: -1, Reason: "stop"})
		d.expect(protocol.RunCancelled, protocol.CodeCancelled)
		for _, key := range []string{"fan", "fan#0", "fan#1"} {
			if sr := d.stepRun(key); sr.Status != protocol.StepCancelled || sr.StopReason != protocol.LabelCancelled {
				t.Fatalf("%s: %s, %q", key, sr.Status, sr.StopReason)
			}
		}
		d.unchanged("a decision after the end", protocol.Event{Type: protocol.EvDecision, Step: "fan", Item: 0, Approve: true})
		if engine.Timers(d.def, d.run) != nil || engine.InFlight(d.def, d.run) != nil {
			t.Fatal("a finished run has timers or tasks in flight")
		}
	})
	t.Run("a waiting run times out at its deadline", func(t *testing.T) {
		d := twoApprovals(t)
		d.runToEnd()
		d.expect(protocol.RunTimedOut, protocol.CodeDeadline)
		if sr := d.stepRun("fan#0"); sr.Status != protocol.StepCancelled || sr.StopReason != protocol.LabelTimeout {
			t.Fatalf("fan#0: %s, %q", sr.Status, sr.StopReason)
		}
	})
	t.Run("a failed branch abandons a waiting one", func(t *testing.T) {
		wf := workflow.New("fails")
		wf.Parallel("fan", "a", "w")
		wf.Task("a", "h")
		wf.Approval("w", "W?")
		d := drive(t, build(t, wf), `{}`, script{"a": {failsForGood("broken")}})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		if sr := d.stepRun("fan#1"); sr.Status != protocol.StepSkipped {
			t.Fatalf("fan#1: %s", sr.Status)
		}
	})
	t.Run("a loop edge starts a waiting step again", func(t *testing.T) {
		wf := workflow.New("again").Start("ask")
		wf.Approval("ask", "Again?")
		wf.Task("work", "h").WithBranch("next")
		wf.Terminate("fin")
		wf.Edge("ask", "work")
		wf.Edge("work", "ask").When("again").MaxIterations(1)
		wf.Edge("work", "fin").When("end")
		d := newDriver(t, build(t, wf), `{}`, script{"work": {done(`{"next":"again"}`), done(`{"next":"end"}`)}})
		d.human(time.Minute, decision("ask", "", true, "first"))
		d.runUntil("ask again", waiting("ask"))
		if sr := d.stepRun("ask"); sr.Activation != 2 || sr.Decisions != nil || sr.Label != "" {
			t.Fatalf("ask, second activation: %+v", sr)
		}
		d.unchanged("a decision for the first activation", protocol.Event{Type: protocol.EvDecision, Step: "ask", Item: -1, Activation: 1, Approve: true})
		d.human(time.Minute, decision("ask", "", true, "second"))
		d.runToEnd()
		d.expect(protocol.RunCompleted, "")
		d.expectPath("ask", "work", "ask", "work", "fin")
	})
}

// TestTimersOfWaits: Timers re-arms the timers of sleeping and waiting steps with their original
// due times, from the state alone and from its JSON, exactly as Decide scheduled them.
func TestTimersOfWaits(t *testing.T) {
	wf := workflow.New("timers").Deadline(24 * time.Hour)
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	wf.Task("prep", "h")
	wf.Approval("gate", "Go?").WithTimeout(time.Hour)
	wf.Sleep("nap", 5*time.Minute)
	wf.WaitEvent("hear", "paid")
	wf.WaitEvent("hearsoon", "paid").WithTimeout(2 * time.Hour)
	wf.Agent("act", "m").WithGoal("g").WithApprovalTimeout(10 * time.Minute)
	wf.Agent("ask", "m").WithGoal("g").WithOnNeedsHuman("pause").WithApprovalTimeout(10 * time.Minute)
	for _, to := range []string{"gate", "nap", "hear", "hearsoon", "act", "ask"} {
		wf.Edge("prep", to)
	}
	def := build(t, wf)
	d := newDriver(t, def, `{}`, script{
		"prep": {done(`1`)},
		"act":  {waits("c1").after(3 * time.Second)},
		"ask":  {stopped(`1`, "needs_human").after(4 * time.Second)},
	})
	d.runUntil("every wait", func(r *engine.Run) bool { return r.Steps["ask"].Status == protocol.StepWaiting })
	at := t0.Add(time.Second)
	cmd := func(step string, due time.Time) engine.Command {
		return engine.Command{Type: engine.CmdSchedule, At: due, Step: step, Item: -1, Activation: 1}
	}
	want := []engine.Command{
		{Type: engine.CmdSchedule, At: t0.Add(24 * time.Hour), Item: -1},
		cmd("act", at.Add(3*time.Second+10*time.Minute)), // the agent's approval timeout
		cmd("gate", at.Add(time.Hour)),
		cmd("hearsoon", at.Add(2*time.Hour)),
		cmd("nap", at.Add(5*time.Minute)),
		// ask waits for input (no timeout), hear for a signal without one.
	}
	var saved engine.Run
	if err := json.Unmarshal(mustJSON(t, d.run), &saved); err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]*engine.Run{"state": d.run, "state from JSON": &saved} {
		got := engine.Timers(def, run)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: Timers\n got %+v\nwant %+v", name, got, want)
		}
		for _, c := range got {
			if !slices.ContainsFunc(d.cmds, func(s engine.Command) bool { return reflect.DeepEqual(s, c) }) {
				t.Fatalf("Timers returned %+v, which Decide never scheduled", c)
			}
		}
	}
}

func TestCloneCopiesWaits(t *testing.T) {
	run := &engine.Run{
		ID: "r", Status: protocol.RunWaiting,
		Signals:   map[string][]json.RawMessage{"paid": {json.RawMessage(`1`)}},
		SignalIDs: []string{"s1"},
		Steps: map[string]*engine.StepRun{"act": {
			Status: protocol.StepWaiting, Wait: protocol.WaitApproval,
			Pending:    []protocol.PendingCall{{CallID: "c1", Tool: "pay", Arguments: json.RawMessage(`{"a":1}`)}},
			Decisions:  map[string]protocol.Decision{"c1": {CallID: "c1", Approve: true}},
			HumanInput: json.RawMessage(`"hi"`),
		}},
	}
	before := mustJSON(t, run)
	c := run.Clone()
	if !bytes.Equal(before, mustJSON(t, c)) {
		t.Fatalf("the clone differs:\n%s\n%s", before, mustJSON(t, c))
	}
	c.Signals["paid"][0][0] = '2'
	c.Signals["paid"] = append(c.Signals["paid"], json.RawMessage(`3`))
	c.Signals["new"] = nil
	c.SignalIDs[0] = "x"
	sr := c.Steps["act"]
	sr.Pending[0].Arguments[2] = 'b'
	sr.Pending[0].CallID = "x"
	sr.Decisions["c1"] = protocol.Decision{}
	sr.Decisions["c2"] = protocol.Decision{}
	sr.HumanInput[1] = 'H'
	if !bytes.Equal(before, mustJSON(t, run)) {
		t.Fatalf("changing the clone changed the run:\n%s\n%s", before, mustJSON(t, run))
	}
}

// TestRestartFromJSONWithHumans runs a workflow with every kind of wait twice: once keeping the
// state in memory, once saving it to JSON and loading it back before every event, humans' and
// signals included.
func TestRestartFromJSONWithHumans(t *testing.T) {
	wf := workflow.New("humans").Deadline(24 * time.Hour)
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	wf.Agent("act", "m").WithGoal("g <{{input.x}}>").WithOnNeedsHuman("pause").WithApprovalTimeout(time.Hour)
	wf.Approval("gate", "Ship {{act.output}}?").WithTimeout(time.Hour)
	wf.Sleep("nap", time.Minute)
	wf.WaitEvent("hear", "paid")
	wf.Edge("act", "gate")
	wf.Edge("gate", "nap").When("approved")
	wf.Edge("nap", "hear")
	def := build(t, wf)
	sc := func() script {
		return script{"act": {waits("c<1>", "c2"), stopped(`{"q":"\u00e9 <b>"}`, "needs_human"), done(`"box & co"`)}}
	}
	humans := func(d *driver) {
		d.runUntil("act waits", waiting("act"))
		d.human(time.Minute, signal("paid", `{ "amount" : "<5>" }`, "s1"))
		d.human(time.Minute, protocol.Event{Type: protocol.EvDecision, Step: "act", Item: -1, CallID: "c<1>", Approve: true, By: "ana <a@x>"})
		d.human(time.Minute, decision("act", "c2", false, "no \u00e9"))
		d.runUntil("act pauses", waiting("act"))
		d.human(time.Minute, resume("act", `{"answer": "O-1 <x>"}`))
		d.runUntil("the gate", waiting("gate"))
		d.human(time.Minute, decision("gate", "", true, "ok <3>"))
		d.runToEnd()
	}
	a := newDriver(t, def, `{"x":"<y>"}`, sc())
	humans(a)
	b := newDriver(t, def, `{"x":"<y>"}`, sc())
	b.reload = true
	humans(b)
	if x, y := mustJSON(t, a.cmds), mustJSON(t, b.cmds); !bytes.Equal(x, y) {
		t.Fatalf("commands differ after restarts:\n%s\n%s", x, y)
	}
	if x, y := mustJSON(t, a.run), mustJSON(t, b.run); !bytes.Equal(x, y) {
		t.Fatalf("final states differ:\n%s\n%s", x, y)
	}
	a.expect(protocol.RunCompleted, "")
	a.expectPath("act", "gate", "nap", "hear")
	a.expectOutput(`{"amount":"<5>"}`)
}
