package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
)

// callWorkflow is prep, then sub (a call step of child.toml), then after.
const callWorkflow = `
name = "parent"
[[steps]]
id = "prep"
type = "task"
handler = "h.prep"

[[steps]]
id = "sub"
type = "call"
workflow = "child.toml"

[[steps]]
id = "after"
type = "task"
handler = "h.after"

[[edges]]
from = "prep"
to = "sub"

[[edges]]
from = "sub"
to = "after"
`

// A child_finished event counts only when it names (Child) the sub-run the step started: the
// end of any other run, however well it names the step, changes nothing.
func TestChildFinishedNamesItsSubRun(t *testing.T) {
	def := load(t, callWorkflow, map[string]string{"child.toml": childFile})
	d := newDriver(t, def, `{}`, script{"prep": {done(`1`)}, "child.toml": {hangs()}, "after": {hangs()}})
	d.runUntil("the sub-run starts", func(*engine.Run) bool { return len(d.started) == 1 })
	ok := protocol.Event{Type: protocol.EvChildFinished, Step: "sub", Item: -1, Activation: 1, Child: "run1/sub/1",
		Status: protocol.RunCompleted, Output: json.RawMessage(`"the child's"`)}
	for _, tc := range []struct {
		name  string
		child string
	}{
		{"no sub-run named", ""},
		{"another run", "mallory-1"},
		{"another activation's sub-run", "run1/sub/2"},
		{"another step's sub-run", "run1/after/1"},
		{"a sub-run of a sub-run", "run1/sub/1/x/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := ok
			ev.Child = tc.child
			d.unchanged(tc.name, ev)
		})
	}
	d.apply(ok)
	if sr := d.stepRun("sub"); sr.Status != protocol.StepCompleted || string(sr.Output) != `"the child's"` {
		t.Fatalf("sub: %s %s; want completed with the child's output", sr.Status, sr.Output)
	}
}

// AwaitsChild: a run waits for a sub-run only at the step, item, activation, iteration and call
// its state started it at, under the id it derives, and only while it goes on.
func TestAwaitsChild(t *testing.T) {
	def := load(t, callWorkflow, map[string]string{"child.toml": childFile})
	d := newDriver(t, def, `{}`, script{"prep": {done(`1`)}, "child.toml": {hangs()}})
	if engine.AwaitsChild(def, d.run, "run1/sub/1", protocol.Parent{RunID: "run1", Step: "sub", Item: -1, Activation: 1}) {
		t.Fatal("a run waits for a sub-run before it started one")
	}
	d.runUntil("the sub-run starts", func(*engine.Run) bool { return len(d.started) == 1 })
	p := protocol.Parent{RunID: "run1", Step: "sub", Item: -1, Activation: 1}
	if !engine.AwaitsChild(def, d.run, "run1/sub/1", p) {
		t.Fatal("the run does not wait for the sub-run it started")
	}
	for _, tc := range []struct {
		name  string
		child string
		mod   func(*protocol.Parent)
	}{
		{"another id", "mallory-1", nil},
		{"another step", "run1/sub/1", func(p *protocol.Parent) { p.Step = "after" }},
		{"another item", "run1/sub/1", func(p *protocol.Parent) { p.Item = 0 }},
		{"another activation", "run1/sub/1", func(p *protocol.Parent) { p.Activation = 2 }},
		{"an iteration", "run1/sub/1", func(p *protocol.Parent) { p.Iteration = 1 }},
		{"a call", "run1/sub/1", func(p *protocol.Parent) { p.CallID = "k1" }},
		{"another run", "run1/sub/1", func(p *protocol.Parent) { p.RunID = "run2" }},
	} {
		q := p
		if tc.mod != nil {
			tc.mod(&q)
		}
		if engine.AwaitsChild(def, d.run, tc.child, q) {
			t.Errorf("%s: the run waits for sub-run %s at %+v", tc.name, tc.child, q)
		}
	}
	// The agent tool's sub-run: the call and iteration are part of it.
	tdef := toolWorkflow(t, nil)
	td := newDriver(t, tdef, `{"order":"O-1"}`, script{"act": {reply{}.spawns("k1"), hangs()}, "agent:helper": {hangs()}})
	td.runUntil("the child starts", func(*engine.Run) bool { return len(td.started) == 1 })
	tp := protocol.Parent{RunID: "run1", Step: "act", Item: -1, Activation: 1, Iteration: 1, CallID: "k1"}
	if !engine.AwaitsChild(tdef, td.run, "run1/act/1/1/k1", tp) {
		t.Fatal("the agent step does not wait for its call's sub-run")
	}
	tp.CallID = "k2"
	if engine.AwaitsChild(tdef, td.run, "run1/act/1/1/k1", tp) {
		t.Fatal("the agent step waits for its call's sub-run under another call")
	}
	// A run that ended waits for nothing.
	d.apply(protocol.Event{Type: protocol.EvCancel, At: d.now.Add(time.Second), Item: -1})
	if engine.AwaitsChild(def, d.run, "run1/sub/1", p) {
		t.Fatal("a cancelled run waits for its sub-run")
	}
}

// Every cancel that is taken records who made it: a person's by its principal, the engine's
// (the cancel of a sub-run, with the admin's roles the shell gives it) by the engine, each with
// its reason. A person who is neither the run's submitter, an approver its workflow names nor
// an admin cancels nothing: the act is recorded refused, and the run goes on.
func TestCancelRecordsWho(t *testing.T) {
	def := load(t, callWorkflow, map[string]string{"child.toml": childFile})
	for _, tc := range []struct {
		name, by, reason string
		roles            []string
		want             protocol.RunStatus
		acts             int
		refused          string
	}{
		{"its submitter", "bob", "not needed", nil, protocol.RunCancelled, 1, ""},
		{"the engine", "reins-engine", "its parent run p ended cancelled", []string{"admin"}, protocol.RunCancelled, 1, ""},
		{"an admin", "root", "cleanup", []string{"admin"}, protocol.RunCancelled, 1, ""},
		{"nobody named", "", "", nil, protocol.RunCancelled, 0, ""},
		{"another principal", "mallory", "mine now", []string{"submitter", "approver"}, protocol.RunRunning, 1,
			"principal mallory may not cancel this run: only its submitter (bob) and admins may"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t, def, `{}`, script{"prep": {hangs()}})
			d.run.StartedBy = "bob"
			d.apply(protocol.Event{Type: protocol.EvCancel, At: d.now.Add(time.Second), Item: -1, By: tc.by, Roles: tc.roles, Reason: tc.reason, ID: "c1"})
			if d.run.Status != tc.want {
				t.Fatalf("run %s; want %s", d.run.Status, tc.want)
			}
			if len(d.run.Acts) != tc.acts {
				t.Fatalf("acts %+v; want %d", d.run.Acts, tc.acts)
			}
			if tc.acts == 1 {
				if a := d.run.Acts[0]; a.By != tc.by || a.Reason != tc.reason || a.Type != protocol.EvCancel || a.Refused != tc.refused {
					t.Fatalf("act %+v; want a cancel by %s because %q, refused %q", a, tc.by, tc.reason, tc.refused)
				}
			}
		})
	}
}
