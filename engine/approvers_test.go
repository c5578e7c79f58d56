package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

func TestMayDecide(t *testing.T) {
	for _, tc := range []struct {
		approvers []string
		who       string
		roles     []string
		want      bool
	}{
		{nil, "anyone", nil, true},
		{[]string{"alice"}, "alice", nil, true},
		{[]string{"alice"}, "bob", []string{"approver"}, false},
		{[]string{"alice", "role:finance"}, "carol", []string{"approver", "finance"}, true},
		{[]string{"role:finance"}, "finance", nil, false}, // a name is not a role
		{[]string{"role:finance"}, "dan", []string{"approver"}, false},
		{[]string{"alice"}, "", nil, false},
	} {
		if got := engine.MayDecide(tc.approvers, tc.who, tc.roles); got != tc.want {
			t.Errorf("MayDecide(%v, %q, %v) = %t, want %t", tc.approvers, tc.who, tc.roles, got, tc.want)
		}
	}
}

// gated is the approval workflow whose gate only alice and role finance may decide.
func gated(t *testing.T) *workflow.Definition {
	def := approvalWorkflow(t, "", false)
	def.StepByID("gate").Approvers = []string{"alice", "role:finance"}
	return def
}

// TestApproversRefuse: a decision by a principal who is not an approver changes nothing but the
// record of the refusal (once per event), and the run keeps waiting; an approver's decision then
// decides, and the run records who did.
func TestApproversRefuse(t *testing.T) {
	d := newDriver(t, gated(t), `{}`, script{"prep": {done(`{"name":"box"}`)}, "ship": {done(`"shipped"`)}})
	d.runUntil("the gate", waiting("gate"))
	bob := protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, Approve: true, By: "bob", Roles: []string{"approver"}, ID: "e1"}
	d.human(time.Minute, bob)
	sr := d.stepRun("gate")
	if sr.Status != protocol.StepWaiting || len(sr.Decisions) != 0 {
		t.Fatalf("after bob's decision the gate is %s with decisions %v; want still waiting with none", sr.Status, sr.Decisions)
	}
	if len(d.run.Acts) != 1 || d.run.Acts[0].By != "bob" || d.run.Acts[0].Refused != "principal bob is not one of the approvers (alice, role:finance)" || d.run.Acts[0].Step != "gate" {
		t.Fatalf("acts %+v; want bob's refusal naming him and the approvers", d.run.Acts)
	}
	bob.At = d.now
	d.unchanged("bob's decision delivered again", bob)

	carol := protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, Approve: true, By: "carol", Roles: []string{"approver", "finance"}, ID: "e2"}
	d.human(time.Minute, carol)
	d.runToEnd()
	d.expect(protocol.RunCompleted, "")
	d.expectPath("prep", "gate", "ship")
	if got := d.stepRun("gate").Decisions[""]; got.By != "carol" || !got.Approve {
		t.Fatalf("gate decision %+v; want carol's approval", got)
	}
	if len(d.run.Acts) != 2 || d.run.Acts[1].By != "carol" || d.run.Acts[1].Refused != "" || d.run.Acts[1].Type != protocol.EvDecision {
		t.Fatalf("acts %+v; want bob's refusal, then carol's decision", d.run.Acts)
	}
}

// TestApproversOnBehalf: an admin's decision on behalf of an approver is judged as the
// approver's, and the record keeps both names.
func TestApproversOnBehalf(t *testing.T) {
	d := newDriver(t, gated(t), `{}`, script{"prep": {done(`{"name":"box"}`)}, "stop": {done(`"stopped"`)}})
	d.runUntil("the gate", waiting("gate"))
	d.human(time.Minute, protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, By: "root", OnBehalfOf: "alice", ID: "e1"})
	d.runToEnd()
	d.expectPath("prep", "gate", "stop")
	if got := d.stepRun("gate").Decisions[""]; got.By != "root" || got.OnBehalfOf != "alice" {
		t.Fatalf("gate decision %+v; want root on behalf of alice", got)
	}
	if a := d.run.Acts; len(a) != 1 || a[0].By != "root" || a[0].OnBehalfOf != "alice" {
		t.Fatalf("acts %+v", a)
	}
}

// TestRefusedActsBounded: a principal who keeps sending refused decisions cannot grow the run
// record without bound.
func TestRefusedActsBounded(t *testing.T) {
	d := newDriver(t, gated(t), `{}`, script{"prep": {done(`{"name":"box"}`)}})
	d.runUntil("the gate", waiting("gate"))
	for i := range engine.MaxRefusedActs + 5 {
		d.human(time.Second, protocol.Event{Type: protocol.EvDecision, Step: "gate", Item: -1, By: "mallory", ID: fmt.Sprint("m", i)})
	}
	if n := len(d.run.Acts); n != engine.MaxRefusedActs {
		t.Fatalf("%d acts kept; want the last %d", n, engine.MaxRefusedActs)
	}
	if first := d.run.Acts[0].ID; first != "m5" {
		t.Fatalf("oldest act kept %s; want m5", first)
	}
}

// TestAgentPolicyApprovers: an agent's calls that need approval are decided only by the
// policy's approvers.
func TestAgentPolicyApprovers(t *testing.T) {
	wf := workflow.New("agent-gate").Deadline(time.Hour)
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: []byte(`[{"answer":"ok"}]`)})
	wf.Tool("pay", workflow.ToolDef{Handler: "pay"})
	wf.Agent("act", "m").WithGoal("g").WithTools("pay").WithPolicy(workflow.Policy{RequireApproval: []string{"pay"}})
	def := build(t, wf)
	def.StepByID("act").Policy.Approvers = []string{"role:finance"}
	d := newDriver(t, def, `{}`, script{"act": {waits("c1"), stopped(`{}`, "completed")}})
	d.runUntil("the calls wait", waiting("act"))
	d.human(time.Second, protocol.Event{Type: protocol.EvDecision, Step: "act", Item: -1, CallID: "c1", Approve: true, By: "bob", Roles: []string{"approver"}, ID: "e1"})
	if sr := d.stepRun("act"); sr.Status != protocol.StepWaiting || len(sr.Decisions) != 0 {
		t.Fatalf("bob decided: %s %v", sr.Status, sr.Decisions)
	}
	d.human(time.Second, protocol.Event{Type: protocol.EvDecision, Step: "act", Item: -1, CallID: "c1", Approve: true, By: "fin", Roles: []string{"finance"}, ID: "e2"})
	d.runToEnd()
	d.expect(protocol.RunCompleted, "")
}

// TestStartRefused: a start the shell refused ends the run failed with that error at once;
// nothing is dispatched, and every step is skipped.
func TestStartRefused(t *testing.T) {
	def := approvalWorkflow(t, "", false)
	refused := &protocol.RunError{Code: "E_OPERATOR_ONLY", Message: "models.m.base_url: no"}
	run, cmds, err := engine.Decide(def, &engine.Run{ID: "r1"}, protocol.Event{Type: protocol.EvStart, At: t0, Item: -1, Input: []byte(`{}`), By: "sam", Refused: refused})
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != protocol.RunFailed || run.Error == nil || *run.Error != *refused || run.StartedBy != "sam" {
		t.Fatalf("run %s error %+v started by %q; want failed with the refusal, by sam", run.Status, run.Error, run.StartedBy)
	}
	if len(cmds) != 1 || cmds[0].Type != engine.CmdFinish {
		t.Fatalf("commands %+v; want the finish only", cmds)
	}
	for id, sr := range run.Steps {
		if sr.Status != protocol.StepSkipped {
			t.Errorf("step %s is %s; want skipped", id, sr.Status)
		}
	}
}

// TestOutputTooLarge: a permanent failure with a stop reason (the shell's output_too_large)
// gives the step that stop reason.
func TestOutputTooLarge(t *testing.T) {
	wf := workflow.New("big").Deadline(time.Hour)
	wf.Task("make", "h")
	d := newDriver(t, build(t, wf), `{}`, script{"make": {{kind: "permanent", err: "too big", stop: "output_too_large"}}})
	d.runToEnd()
	d.expect(protocol.RunFailed, protocol.CodeStepFailed)
	if sr := d.stepRun("make"); sr.StopReason != "output_too_large" || sr.Label != "error" {
		t.Fatalf("make: stop reason %q label %q", sr.StopReason, sr.Label)
	}
}
