package engine_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// newLimitedDriver is newDriver with a run that a shell starts for principal by, with a
// server's limits (nil: none).
func newLimitedDriver(t *testing.T, def *workflow.Definition, input string, sc script, by string, lim *engine.Limits) *driver {
	t.Helper()
	d := &driver{t: t, def: def, now: t0, script: sc, used: map[string]int{}, maxInFlight: map[string]int{}}
	run, cmds, err := engine.Decide(def, &engine.Run{ID: "run1", Limits: lim}, protocol.Event{Type: protocol.EvStart, At: t0, Input: json.RawMessage(input), Item: -1, By: by})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	d.run = run
	d.take(cmds)
	return d
}

// held waits for the event go, then for a decision of alice or a principal of role finance.
func held(t *testing.T) *workflow.Definition {
	wf := workflow.New("held")
	wf.WaitEvent("hold", "go")
	wf.Approval("ok", "Go on?").WithApprovers("alice", "role:finance")
	wf.Edge("hold", "ok")
	return build(t, wf)
}

// signalBy is a signal go with data, sent by principal by holding roles (an admin may act on
// behalf of someone: then the roles are that someone's).
func signalBy(id, by, onBehalfOf string, roles ...string) protocol.Event {
	return protocol.Event{Type: protocol.EvSignal, Item: -1, Name: "go", Output: json.RawMessage(`"` + id + `"`), ID: id, By: by, OnBehalfOf: onBehalfOf, Roles: roles}
}

// TestWhoMaySignal: a signal counts from the run's submitter, an approver its workflow names
// (by name, or by a role held) and an admin; anyone else's is recorded refused, one sentence
// naming the principal, and changes nothing else: the step keeps waiting.
func TestWhoMaySignal(t *testing.T) {
	const others = "only its submitter (bob), the approvers its workflow names (alice, role:finance) and admins may"
	for _, c := range []struct {
		name    string
		ev      protocol.Event
		refused string
	}{
		{"the submitter", signalBy("s1", "bob", "", "submitter", "approver"), ""},
		{"a named approver", signalBy("s1", "alice", "", "approver"), ""},
		{"a principal of a named role", signalBy("s1", "carol", "", "approver", "finance"), ""},
		{"an admin", signalBy("s1", "root", "", "admin"), ""},
		{"another approver", signalBy("s1", "mallory", "", "submitter", "approver"), "principal mallory may not signal this run: " + others},
		{"an admin on behalf of another", signalBy("s1", "root", "mallory", "approver"), "principal mallory may not signal this run: " + others},
		{"a role that is not named", signalBy("s1", "dave", "", "approver", "legal"), "principal dave may not signal this run: " + others},
		{"nobody", signalBy("s1", "", ""), "principal an unnamed principal may not signal this run: " + others},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newLimitedDriver(t, held(t), `{}`, nil, "bob", nil)
			d.runUntil("the wait", waiting("hold"))
			d.human(time.Minute, c.ev)
			acts := d.run.Acts
			if len(acts) != 1 || acts[0].Refused != c.refused || acts[0].ID != "s1" || acts[0].Type != protocol.EvSignal {
				t.Fatalf("acts %+v, want one signal refused %q", acts, c.refused)
			}
			hold := d.stepRun("hold")
			if c.refused != "" {
				if hold.Status != protocol.StepWaiting || d.run.SignalIDs != nil || d.run.Signals != nil {
					t.Fatalf("a refused signal changed the run: hold %s, signal ids %v, kept %v", hold.Status, d.run.SignalIDs, d.run.Signals)
				}
				return
			}
			if hold.Status != protocol.StepCompleted || string(hold.Output) != `"s1"` {
				t.Fatalf("hold is %s with %s, want completed with the signal", hold.Status, hold.Output)
			}
		})
	}
}

// TestWhoMayResume: a resume follows the same rule as a signal; one refused leaves the agent
// paused and is recorded refused.
func TestWhoMayResume(t *testing.T) {
	paused := `{"stop_reason":"needs_human","detail":"which order?"}`
	def := agentWorkflow(t, func(s *workflow.AgentStep) {
		s.WithOnNeedsHuman("pause").WithPolicy(workflow.Policy{Approvers: []string{"role:finance"}})
	})
	for _, c := range []struct {
		name, by string
		roles    []string
		refused  string
	}{
		{"the submitter", "bob", []string{"submitter"}, ""},
		{"a principal of the policy's role", "carol", []string{"approver", "finance"}, ""},
		{"an admin", "root", []string{"admin"}, ""},
		{"another approver", "mallory", []string{"approver"}, "principal mallory may not resume this run: only its submitter (bob), the approvers its workflow names (role:finance) and admins may"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newLimitedDriver(t, def, `{"order":"O-1"}`, script{"act": {stopped(paused, "needs_human"), done(`"refunded"`)}, "after": {done(`1`)}}, "bob", nil)
			d.runUntil("the pause", waiting("act"))
			d.human(time.Minute, protocol.Event{Type: protocol.EvResume, Step: "act", Item: -1, Output: json.RawMessage(`"O-1"`), ID: "r1", By: c.by, Roles: c.roles})
			if len(d.run.Acts) != 1 || d.run.Acts[0].Refused != c.refused {
				t.Fatalf("acts %+v, want the resume refused %q", d.run.Acts, c.refused)
			}
			if act := d.stepRun("act"); (act.Status == protocol.StepWaiting) != (c.refused != "") {
				t.Fatalf("step act is %s after the resume (refused %q)", act.Status, c.refused)
			}
		})
	}
}

// TestSignalLimit: a run takes at most Limits.MaxSignals signals, the submitter's too; the
// next is refused naming the limit. A flood of refused signals keeps the run's record
// bounded: the last MaxRefusedActs refused acts, no signal id, no data.
func TestSignalLimit(t *testing.T) {
	def := held(t)
	d := newLimitedDriver(t, def, `{}`, nil, "bob", &engine.Limits{MaxSignals: 3})
	d.runUntil("the wait", waiting("hold"))
	for i := range 2000 {
		d.human(time.Millisecond, signalBy("m"+strconvI(i), "mallory", "", "approver"))
	}
	size := len(mustJSON(t, d.run))
	if n := len(d.run.Acts); n != engine.MaxRefusedActs || d.run.SignalIDs != nil || size > 8<<10 {
		t.Fatalf("after 2000 refused signals: %d acts, signal ids %v, %d bytes; want %d acts, none taken, a small record", n, d.run.SignalIDs, size, engine.MaxRefusedActs)
	}
	for i := range 3 {
		ev := signalBy("b"+strconvI(i), "bob", "", "submitter")
		ev.Name = "later"
		d.human(time.Minute, ev)
	}
	d.human(time.Minute, signalBy("b3", "bob", "", "submitter"))
	last := d.run.Acts[len(d.run.Acts)-1]
	if want := "principal bob may not signal this run: it took 3 signals, the most its server allows a run (max_signals_per_run)"; last.ID != "b3" || last.Refused != want {
		t.Fatalf("the fourth signal of bob: %+v, want refused %q", last, want)
	}
	if len(d.run.SignalIDs) != 3 || len(d.run.Signals["later"]) != 3 || d.stepRun("hold").Status != protocol.StepWaiting {
		t.Fatalf("signal ids %v, kept %v, hold %s; want bob's 3 kept and hold waiting", d.run.SignalIDs, d.run.Signals, d.stepRun("hold").Status)
	}
}

// TestEventLimit: a run that takes Limits.MaxEvents events (its start included) ends failed
// with E_MAX_EVENTS at the one that reaches it, whatever it was doing; what changes nothing
// (an answer repeated, a refused act) does not count.
func TestEventLimit(t *testing.T) {
	wf := workflow.New("forever")
	wf.AgentLoop("spin", "h").WithMaxIterations(1000)
	def := build(t, wf)
	replies := make([]reply, 1000)
	for i := range replies {
		replies[i] = cont(strconvI(i))
	}
	d := newLimitedDriver(t, def, `0`, script{"spin": replies}, "bob", &engine.Limits{MaxEvents: 50})
	d.runUntil("20 iterations", func(r *engine.Run) bool { return r.Steps["spin"].Iteration == 20 })
	events := d.run.Events
	for i := range 30 {
		d.human(0, signalBy("m"+strconvI(i), "mallory", "", "approver")) // refused: not counted
	}
	if d.run.Events != events || events != 20 {
		t.Fatalf("events %d after 30 refused signals, %d before; want 20 (the start and 19 answers)", d.run.Events, events)
	}
	d.runToEnd()
	d.expect(protocol.RunFailed, protocol.CodeMaxEvents)
	d.expectErrorContains("the run took 50 events, the most its server allows a run (max_events_per_run)")
	if it := d.stepRun("spin"); d.run.Events != 50 || it.Iteration != 50 || it.Status != protocol.StepCancelled {
		t.Fatalf("events %d, spin at iteration %d %s; want 50, 50, cancelled", d.run.Events, it.Iteration, it.Status)
	}
}

// TestStepLimit: a server's MaxSteps lowers the definition's max_steps, never raises it.
func TestStepLimit(t *testing.T) {
	wf := workflow.New("looping").MaxSteps(7).Start("a")
	wf.Task("a", "h")
	wf.Task("b", "h")
	wf.Edge("a", "b")
	wf.Edge("b", "a").MaxIterations(100)
	def := build(t, wf)
	for _, c := range []struct {
		lim  int
		want string
	}{{4, "max_steps = 4"}, {20, "max_steps = 7"}} {
		sc := script{"a": slices.Repeat([]reply{done(`1`)}, 10), "b": slices.Repeat([]reply{done(`1`)}, 10)}
		d := newLimitedDriver(t, def, `{}`, sc, "bob", &engine.Limits{MaxSteps: c.lim})
		d.runToEnd()
		d.expect(protocol.RunFailed, protocol.CodeMaxSteps)
		if !strings.Contains(d.run.Error.Message, c.want) {
			t.Errorf("a limit of %d: %q, want %q", c.lim, d.run.Error.Message, c.want)
		}
	}
}
