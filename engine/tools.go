package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// This file holds the calls of agent steps that run as sub-runs (agent and workflow tools): the
// iteration stops on them as on calls that need approval, the engine starts one sub-run per
// call, and once every sub-run ended (and every call that needs approval is decided) it
// dispatches the iteration again with their results.

// checkChildren checks the pending calls that run as children against the workflow: each names
// a tool of the step whose agent or workflow it gives.
func (d *decider) checkChildren(step *workflow.Step, pending []protocol.PendingCall) error {
	for _, p := range pending {
		if p.Child == nil {
			continue
		}
		t, ok := d.def.Tools[p.Tool]
		switch {
		case !ok || !t.RunsChild():
			return fmt.Errorf("pending call %q of tool %s asks for a sub-run, but the workflow's tool %s runs none", p.CallID, p.Tool, p.Tool)
		case t.Agent != p.Child.Agent || t.Workflow != p.Child.Workflow:
			return fmt.Errorf("pending call %q asks to run agent %q or workflow %q, but tool %s runs agent %q or workflow %q", p.CallID, p.Child.Agent, p.Child.Workflow, p.Tool, t.Agent, t.Workflow)
		case t.Agent != "" && !d.g.childOnly[t.Agent]:
			return fmt.Errorf("pending call %q of tool %s runs step %s, which does not only run as a child", p.CallID, p.Tool, t.Agent)
		}
	}
	return nil
}

// openChildren lists the sub-runs of sr's pending calls that have not ended (no result yet).
func (d *decider) openChildren(key string, sr *StepRun) []ChildRun {
	var subs []ChildRun
	for _, p := range sr.Pending {
		if _, done := sr.ChildResults[p.CallID]; p.Child != nil && !done {
			subs = append(subs, d.toolChild(key, sr, p))
		}
	}
	return subs
}

// startToolChildren starts the sub-run of every pending call that runs as a child and has no
// result yet.
func (d *decider) startToolChildren(key string, sr *StepRun) {
	for _, c := range d.openChildren(key, sr) {
		d.emit(Command{Type: CmdStartChild, Child: &c})
	}
}

// toolChild is the sub-run of pending call p of sr, as start_child names it.
func (d *decider) toolChild(key string, sr *StepRun, p protocol.PendingCall) ChildRun {
	name, item := address(key, sr)
	return ChildRun{RunID: d.toolChildRunID(key, sr, p.CallID), Workflow: p.Child.Workflow, Agent: p.Child.Agent,
		Input: p.Arguments, Step: name, Item: item, Activation: sr.Activation, Iteration: sr.Iteration, CallID: p.CallID,
		StartedBy: d.run.StartedBy}
}

// toolChildRunID names the sub-run of call callID of sr's current iteration:
// run/step/activation[/index]/iteration/call.
func (d *decider) toolChildRunID(key string, sr *StepRun, callID string) string {
	return d.childRunID(key, sr) + "/" + strconv.Itoa(sr.Iteration) + "/" + CallToken(callID)
}

// maxCallToken bounds the part of a sub-run's id that a call id becomes.
const maxCallToken = 40

// CallToken is the part of a tool sub-run's id that names its call: the call id when it is 1 to
// 40 characters of A-Z a-z 0-9 _ -, else "h" and 16 hex digits of its SHA-256. Models choose
// call ids; run ids must make subject tokens and keys.
func CallToken(callID string) string {
	ok := callID != "" && len(callID) <= maxCallToken
	for i := 0; ok && i < len(callID); i++ {
		c := callID[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	if ok {
		return callID
	}
	sum := sha256.Sum256([]byte(callID))
	return "h" + hex.EncodeToString(sum[:8])
}

// undecided counts the pending calls of sr that wait for a human's decision.
func undecided(sr *StepRun) int {
	n := 0
	for _, p := range sr.Pending {
		if _, done := sr.Decisions[p.CallID]; p.Child == nil && !done {
			n++
		}
	}
	return n
}

// awaitPending makes an agent step with pending calls wait for what they wait for: waiting for
// humans while a call needs a decision (its sub-runs running meanwhile), else running with
// Wait children while a sub-run has not ended, else the iteration is dispatched again.
func (d *decider) awaitPending(key string, sr *StepRun, step *workflow.Step) {
	switch {
	case undecided(sr) > 0:
		if sr.Status != protocol.StepWaiting {
			d.wait(key, sr, protocol.WaitApproval, step.ApprovalTimeout.Std())
		}
	case len(d.openChildren(key, sr)) > 0:
		if sr.Wait != protocol.WaitChildren {
			d.unwait(sr)
			// Like a human's, the sub-runs' time is not the step's own work: they have their
			// own bounds, and the step's max_duration does not count it (Waited).
			sr.Wait, sr.WaitingSince = protocol.WaitChildren, d.at
		}
	default:
		d.resumeIteration(key, sr, step)
	}
}

// onToolChildFinished records how the sub-run of a pending call ended; once nothing else is
// pending, the iteration is dispatched again with the results. A result for a call that is not
// pending in the step's current iteration, that has one already, or that names another sub-run
// than the call's (Child), changes nothing.
func (d *decider) onToolChildFinished(ev protocol.Event) {
	key, sr, step := d.lookup(ev.Step, ev.Item)
	if sr == nil || step == nil || step.Type != workflow.Agent || !d.awaitsChild(sr, ev) || ev.Child != d.toolChildRunID(key, sr, ev.CallID) {
		return
	}
	res := protocol.ChildResult{CallID: sr.pendingCall(ev.CallID).CallID, RunID: d.toolChildRunID(key, sr, ev.CallID),
		Status: ev.Status, StopReason: clean(ev.StopReason), StopDetail: clean(ev.StopDetail), Error: clean(ev.Error)}
	if res.Status == "" {
		res.Status = protocol.RunCompleted
	}
	if ev.Usage != nil {
		u := *ev.Usage
		res.Usage = &u
	}
	out, err := canon(ev.Output)
	switch {
	case err != nil:
		res.Status, res.Error = protocol.RunFailed, "its output is "+err.Error()
	case res.Status == protocol.RunCompleted && res.Error == "":
		res.Output = out
	}
	if sr.ChildResults == nil {
		sr.ChildResults = map[string]protocol.ChildResult{}
	}
	sr.ChildResults[res.CallID] = res
	d.awaitPending(key, sr, step)
}

// awaitsChild reports whether sr waits for the sub-run ev reports on: a call of its current
// activation and iteration that runs as a child and has no result yet.
func (d *decider) awaitsChild(sr *StepRun, ev protocol.Event) bool {
	if sr.Status != protocol.StepRunning && sr.Status != protocol.StepWaiting || ev.Activation != sr.Activation || ev.Iteration != sr.Iteration {
		return false
	}
	p := sr.pendingCall(ev.CallID)
	_, done := sr.ChildResults[ev.CallID]
	return p != nil && p.Child != nil && !done
}

// pendingCall returns the pending call of sr with that id, or nil.
func (sr *StepRun) pendingCall(callID string) *protocol.PendingCall {
	for i := range sr.Pending {
		if sr.Pending[i].CallID == callID {
			return &sr.Pending[i]
		}
	}
	return nil
}

// cancelToolChildren cancels the sub-runs of sr's pending calls that have not ended: the
// engine gives up on the step.
func (d *decider) cancelToolChildren(key string, sr *StepRun) {
	for _, c := range d.openChildren(key, sr) {
		d.emit(Command{Type: CmdCancelChild, Child: &c})
	}
}

// toolSubRuns lists the sub-runs of sr's pending calls that have not ended, for SubRuns: sr is
// running, waiting, or was cancelled when its run ended.
func (d *decider) toolSubRuns(key string, sr *StepRun) []ChildRun {
	if sr.Status != protocol.StepRunning && sr.Status != protocol.StepWaiting && sr.Status != protocol.StepCancelled {
		return nil
	}
	return d.openChildren(key, sr)
}

// childResults lists the results of sr's pending calls that ran as children, in the order of
// the pending calls, for the resumed task.
func childResults(sr *StepRun) []protocol.ChildResult {
	var out []protocol.ChildResult
	for _, p := range sr.Pending {
		if r, ok := sr.ChildResults[p.CallID]; ok && p.Child != nil {
			out = append(out, r)
		}
	}
	return out
}
