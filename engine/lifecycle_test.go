package engine_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

func twoTasks(t *testing.T) *workflow.Definition {
	wf := workflow.New("two").Deadline(10 * time.Minute)
	wf.Task("a", "h.a").WithRetry(workflow.Retry{MaxAttempts: 3, Backoff: "fixed"})
	wf.Task("b", "h.b")
	wf.Edge("a", "b")
	return build(t, wf)
}

func TestDeadline(t *testing.T) {
	t.Run("the deadline tick ends the run", func(t *testing.T) {
		d := drive(t, twoTasks(t), `{}`, script{"a": {done(`1`)}, "b": {done(`2`).after(2 * time.Hour)}})
		d.expect(protocol.RunTimedOut, protocol.CodeDeadline)
		if !d.finishAt().Equal(t0.Add(10 * time.Minute)) {
			t.Fatalf("timed out at %s", d.finishAt())
		}
		d.expectErrorContains("deadline of 10m0s")
	})
	t.Run("any event at or after the deadline ends the run", func(t *testing.T) {
		def := twoTasks(t)
		run, _, err := engine.Start(def, "r", json.RawMessage(`{}`), t0)
		if err != nil {
			t.Fatal(err)
		}
		late := protocol.Event{Type: protocol.EvCompleted, At: t0.Add(10 * time.Minute), Step: "a", Item: -1, Activation: 1, Iteration: 1, Attempt: 1, Output: json.RawMessage(`1`)}
		run, cmds, err := engine.Decide(def, run, late)
		if err != nil {
			t.Fatal(err)
		}
		if run.Status != protocol.RunTimedOut || len(cmds) != 1 || cmds[0].Type != engine.CmdFinish || cmds[0].Error.Code != protocol.CodeDeadline {
			t.Fatalf("status %s, commands %+v", run.Status, cmds)
		}
		if a := run.Steps["a"]; a.Output != nil || a.Status != protocol.StepCancelled || a.StopReason != protocol.LabelTimeout {
			t.Fatalf("step a: %s, stop reason %q, output %s: want cancelled by the deadline, the late answer not recorded", a.Status, a.StopReason, a.Output)
		}
	})
}

func TestMaxSteps(t *testing.T) {
	wf := workflow.New("runaway").MaxSteps(10).Start("a")
	wf.Task("a", "h")
	wf.Task("b", "h")
	wf.Edge("a", "b")
	wf.Edge("b", "a").MaxIterations(1_000_000)
	var as, bs []reply
	for range 5 {
		as, bs = append(as, done(`1`)), append(bs, done(`2`))
	}
	d := drive(t, build(t, wf), `{}`, script{"a": as, "b": bs})
	d.expect(protocol.RunFailed, protocol.CodeMaxSteps)
	if d.run.Executed != 11 {
		t.Fatalf("executed %d, want 11 (the one over max_steps is refused)", d.run.Executed)
	}
	if d.dispatchCount("a") != 5 || d.dispatchCount("b") != 5 {
		t.Fatalf("dispatches a %d, b %d", d.dispatchCount("a"), d.dispatchCount("b"))
	}
	d.expectErrorContains("max_steps = 10")
}

func TestCancel(t *testing.T) {
	def := twoTasks(t)
	d := newDriver(t, def, `{}`, script{"a": {hangs()}})
	d.apply(protocol.Event{Type: protocol.EvCancel, At: t0.Add(time.Second), Item: -1, Reason: "operator stop"})
	d.expect(protocol.RunCancelled, protocol.CodeCancelled)
	if d.run.Error.Message != "operator stop" {
		t.Fatalf("error %+v", d.run.Error)
	}
	// Everything after is ignored, even a valid answer.
	for _, ev := range []protocol.Event{
		{Type: protocol.EvCompleted, At: t0.Add(2 * time.Second), Step: "a", Item: -1, Activation: 1, Iteration: 1, Attempt: 1},
		{Type: protocol.EvCancel, At: t0.Add(2 * time.Second), Item: -1},
		{Type: protocol.EvTick, At: t0.Add(time.Hour), Item: -1},
		{Type: protocol.EvStart, At: t0.Add(time.Hour), Item: -1},
	} {
		run, cmds, err := engine.Decide(def, d.run, ev)
		if err != nil || len(cmds) != 0 || !bytes.Equal(mustJSON(t, run), mustJSON(t, d.run)) {
			t.Fatalf("%s after cancel: err %v, commands %+v", ev.Type, err, cmds)
		}
	}
}

// TestStaleAndDuplicateEvents checks that events that are not for the current attempt change
// nothing (the driver also delivers every event of every test twice).
func TestStaleAndDuplicateEvents(t *testing.T) {
	def := twoTasks(t)
	run, _, err := engine.Start(def, "r", json.RawMessage(`{}`), t0)
	if err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Second)
	ok := protocol.Event{Type: protocol.EvFailed, At: at, Step: "a", Item: -1, Activation: 1, Iteration: 1, Attempt: 1, Error: "flaky"}
	unchanged := func(name string, run *engine.Run, ev protocol.Event) {
		t.Helper()
		next, cmds, err := engine.Decide(def, run, ev)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(cmds) != 0 || !bytes.Equal(mustJSON(t, next), mustJSON(t, run)) {
			t.Fatalf("%s changed the run: %+v", name, cmds)
		}
	}
	for name, mod := range map[string]func(*protocol.Event){
		"wrong attempt":    func(e *protocol.Event) { e.Attempt = 2 },
		"wrong activation": func(e *protocol.Event) { e.Activation = 2 },
		"wrong iteration":  func(e *protocol.Event) { e.Iteration = 2 },
		"unknown step":     func(e *protocol.Event) { e.Step = "nope" },
		"pending step":     func(e *protocol.Event) { e.Step = "b" },
		"child of a task":  func(e *protocol.Event) { e.Item = 0; e.Attempt = 9 },
		"tick for a task":  func(e *protocol.Event) { e.Type = protocol.EvTick },
		"child_finished for a task": func(e *protocol.Event) {
			e.Type = protocol.EvChildFinished
		},
		"start again": func(e *protocol.Event) { e.Type = protocol.EvStart },
	} {
		ev := ok
		mod(&ev)
		unchanged(name, run, ev)
	}
	next, cmds, err := engine.Decide(def, run, ok)
	if err != nil || len(cmds) != 1 || cmds[0].Task.Attempt != 2 {
		t.Fatalf("the failure was not retried: %v %+v", err, cmds)
	}
	unchanged("the same failure again", next, ok)
	ok2 := ok
	ok2.Type, ok2.Attempt, ok2.Output = protocol.EvCompleted, 1, json.RawMessage(`1`)
	unchanged("an answer to the retried attempt", next, ok2)
	ok2.Attempt = 2
	done, cmds, err := engine.Decide(def, next, ok2)
	if err != nil || len(cmds) != 1 || cmds[0].Task.Body != "b" {
		t.Fatalf("b was not dispatched: %v %+v", err, cmds)
	}
	unchanged("the same completion again", done, ok2)
}

func TestDecideDoesNotMutate(t *testing.T) {
	def := refiner(t)
	run, cmds, err := engine.Start(def, "r", json.RawMessage(`{"product":"reins"}`), t0)
	if err != nil {
		t.Fatal(err)
	}
	tk := cmds[1].Task
	before := mustJSON(t, run)
	ev := protocol.Event{Type: protocol.EvCompleted, At: t0.Add(time.Second), Step: tk.Step, Item: tk.Item,
		Activation: tk.Activation, Iteration: tk.Iteration, Attempt: tk.Attempt, Output: json.RawMessage(`"draft"`)}
	next, _, err := engine.Decide(def, run, ev)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, mustJSON(t, run)) {
		t.Fatal("Decide changed its input")
	}
	if next == run || next.Steps["generate"] == run.Steps["generate"] {
		t.Fatal("Decide returned shared state")
	}
	// Changing the result, or the event's buffer, does not reach the input.
	next.Steps["generate"].Status = "scribbled"
	next.Steps["generate"].Output[1] = 'X'
	next.Edges[0].State = "scribbled"
	next.Path[0] = "scribbled"
	ev.Output[1] = 'Y'
	if !bytes.Equal(before, mustJSON(t, run)) {
		t.Fatal("the result shares memory with the input")
	}
	// The output in the new state is its own copy of the event's bytes.
	next2, _, _ := engine.Decide(def, run, protocol.Event{Type: protocol.EvCompleted, At: t0.Add(time.Second), Step: "generate", Item: -1,
		Activation: 1, Iteration: 1, Attempt: 1, Output: ev.Output})
	ev.Output[1] = 'Z'
	if string(next2.Steps["generate"].Output) != `"Yraft"` {
		t.Fatalf("the state aliases the event's output: %s", next2.Steps["generate"].Output)
	}
}

// TestRestartFromJSON runs the same script twice: once keeping the state in memory, once saving
// it to JSON and loading it back before every event, as a restarted engine would.
func TestRestartFromJSON(t *testing.T) {
	def := refiner(t)
	sc := func() script {
		return script{
			"generate": {done(`"d1 <b>&"`), done(`"d2"`)},
			"evaluate": {done(`{ "verdict" : "retry", "note": "\u00e9 <x>" }`), done(`{"verdict":"accept"}`)},
		}
	}
	a := drive(t, def, `{"product": "reins <1.0>"}`, sc())

	b := newDriver(t, def, `{"product": "reins <1.0>"}`, sc())
	for b.finish == nil {
		saved := mustJSON(t, b.run)
		var loaded engine.Run
		if err := json.Unmarshal(saved, &loaded); err != nil {
			t.Fatal(err)
		}
		if again := mustJSON(t, &loaded); !bytes.Equal(saved, again) {
			t.Fatalf("the state does not round-trip:\n%s\n%s", saved, again)
		}
		b.run = &loaded
		if !b.step() {
			t.Fatal("stuck")
		}
	}
	if x, y := mustJSON(t, a.cmds), mustJSON(t, b.cmds); !bytes.Equal(x, y) {
		t.Fatalf("commands differ after restarts:\n%s\n%s", x, y)
	}
	if x, y := mustJSON(t, a.run), mustJSON(t, b.run); !bytes.Equal(x, y) {
		t.Fatalf("final states differ:\n%s\n%s", x, y)
	}
	a.expect(protocol.RunCompleted, "")
	a.expectOutput(`"d2"`)
}

func TestInFlightRebuildsTasks(t *testing.T) {
	d := newDriver(t, parallelWorkflow(t, 2, false), `{"topic":"x"}`, script{"a": {hangs()}, "b": {hangs()}})
	tasks := engine.InFlight(d.def, d.run)
	if len(tasks) != 2 {
		t.Fatalf("%d tasks in flight, want 2", len(tasks))
	}
	for i, tk := range tasks {
		if got, want := mustJSON(t, tk), mustJSON(t, d.dispatches[i].task); !bytes.Equal(got, want) {
			t.Fatalf("rebuilt task %s, dispatched %s", got, want)
		}
	}
	// A retried task is rebuilt with its NotBefore.
	def := twoTasks(t)
	run, _, _ := engine.Start(def, "r", nil, t0)
	run, cmds, _ := engine.Decide(def, run, protocol.Event{Type: protocol.EvFailed, At: t0.Add(time.Second), Step: "a", Item: -1, Activation: 1, Iteration: 1, Attempt: 1})
	if got := engine.InFlight(def, run); len(got) != 1 || !bytes.Equal(mustJSON(t, got[0]), mustJSON(t, cmds[0].Task)) {
		t.Fatalf("in flight %+v, dispatched %+v", got, cmds[0].Task)
	}
	if string(run.Input) != "null" {
		t.Fatalf("no input is null, got %s", run.Input)
	}
}

func TestProgrammingErrors(t *testing.T) {
	def := twoTasks(t)
	run, _, _ := engine.Start(def, "r", nil, t0)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"nil definition", func() error { _, _, err := engine.Decide(nil, run, protocol.Event{Type: protocol.EvTick}); return err }, "definition"},
		{"nil run", func() error { _, _, err := engine.Decide(def, nil, protocol.Event{Type: protocol.EvTick}); return err }, "no run"},
		{"unknown event", func() error { _, _, err := engine.Decide(def, run, protocol.Event{Type: "poke"}); return err }, `"poke"`},
		{"event before start", func() error {
			_, _, err := engine.Decide(def, &engine.Run{ID: "x"}, protocol.Event{Type: protocol.EvTick})
			return err
		}, "has not started"},
		{"input that is not JSON", func() error { _, _, err := engine.Start(def, "x", json.RawMessage(`{`), t0); return err }, "not valid JSON"},
		{"another definition", func() error {
			_, _, err := engine.Decide(refiner(t), run, protocol.Event{Type: protocol.EvTick, At: t0})
			return err
		}, "was started with workflow two"},
		{"a signal without an id", func() error {
			_, _, err := engine.Decide(def, run, protocol.Event{Type: protocol.EvSignal, At: t0, Item: -1, Name: "paid"})
			return err
		}, `signal "paid" for run "r" has no id`},
		{"no start step", func() error {
			bad := *def
			bad.Start = "nope"
			_, _, err := engine.Start(&bad, "x", nil, t0)
			return err
		}, "no start step"},
	} {
		err := tc.call()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}
