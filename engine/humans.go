package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// This file holds the steps that wait: approval and wait_event steps, agent steps whose calls
// need approval or that paused on needs_human, and sleep steps; and the events that end their
// waits: decision, resume, signal and the ticks of their timeouts.

// wait makes sr wait for kind. With a timeout, the wait ends at Until = now + timeout, and the
// engine asks for a tick then; without, only the run's deadline ends it.
func (d *decider) wait(key string, sr *StepRun, kind protocol.WaitKind, timeout time.Duration) {
	sr.Status, sr.Wait, sr.WaitingSince, sr.Until = protocol.StepWaiting, kind, d.at, time.Time{}
	if timeout > 0 {
		sr.Until = d.at.Add(timeout)
		name, item := address(key, sr)
		d.emit(Command{Type: CmdSchedule, At: sr.Until, Step: name, Item: item, Activation: sr.Activation})
	}
}

// unwait ends the wait of sr: the step runs again (or is about to end). The time it waited is
// added to Waited, so that an agent's max_duration bounds its own work, not a human's thinking.
func (d *decider) unwait(sr *StepRun) {
	if !sr.WaitingSince.IsZero() && d.at.After(sr.WaitingSince) {
		sr.Waited += d.at.Sub(sr.WaitingSince)
	}
	sr.Status = protocol.StepRunning
	clearWait(sr)
}

// clearWait forgets what sr waited for (or slept until).
func clearWait(sr *StepRun) {
	sr.Wait, sr.Until, sr.WaitingSince = "", time.Time{}, time.Time{}
}

// sleep starts a sleep step: it stays running until a tick at now + duration. A duration of
// zero ends it at once.
func (d *decider) sleep(key string, sr *StepRun, step *workflow.Step) {
	dur := step.Duration.Std()
	if dur <= 0 {
		d.completeWith(key, sr, step, sr.Input, "")
		return
	}
	sr.Wait, sr.Until = protocol.WaitSleep, d.at.Add(dur)
	name, item := address(key, sr)
	d.emit(Command{Type: CmdSchedule, At: sr.Until, Step: name, Item: item, Activation: sr.Activation})
}

// completeWith completes a sleep or wait_event step with output: its label is the value at its
// branch path when it has one, else def (a child's label is def: its edges are never followed).
func (d *decider) completeWith(key string, sr *StepRun, step *workflow.Step, output json.RawMessage, def string) {
	label := def
	if sr.Parent == "" {
		l, err := labelFor(step, output, "", def)
		if err != nil {
			sr.Output = output
			d.failStep(key, sr, err.Error())
			return
		}
		label = l
	}
	d.completeStep(key, sr, output, label, "")
}

// addresses reports whether a decision or resume event is for the wait sr is in. The event may
// leave Activation, Iteration and Attempt zero (it then means whatever the step waits for now);
// each one it gives must be sr's, and with an Iteration its Resume must be sr's too, so that a
// decision delivered late never decides a later wait.
func addresses(sr *StepRun, ev protocol.Event) bool {
	switch {
	case ev.Activation > 0 && ev.Activation != sr.Activation,
		ev.Iteration > 0 && (ev.Iteration != sr.Iteration || ev.Resume != sr.Resume),
		ev.Attempt > 0 && ev.Attempt != sr.Attempt:
		return false
	}
	return true
}

// onWaiting makes an agent step whose task stopped on calls that need approval wait for a
// decision on each. A waiting answer without valid pending calls is a permanent failure of the
// attempt, as an output that is not JSON is.
func (d *decider) onWaiting(key string, sr *StepRun, step *workflow.Step, ev protocol.Event) {
	pending, err := pendingCalls(ev.Pending)
	if err != nil {
		d.attemptFailed(key, sr, step, err.Error(), true)
		return
	}
	if err := d.checkChildren(step, pending); err != nil {
		d.attemptFailed(key, sr, step, err.Error(), true)
		return
	}
	sr.Pending, sr.Decisions, sr.ChildResults = pending, nil, nil
	d.startToolChildren(key, sr)
	d.awaitPending(key, sr, step)
}

// pendingCalls checks and copies the pending calls of a waiting answer: at least one, each with
// a call id of its own and arguments that are JSON (kept canonical).
func pendingCalls(calls []protocol.PendingCall) ([]protocol.PendingCall, error) {
	if len(calls) == 0 {
		return nil, errors.New("the task answered waiting without a pending call")
	}
	out := make([]protocol.PendingCall, len(calls))
	for i, c := range calls {
		id := clean(c.CallID)
		switch {
		case id == "":
			return nil, fmt.Errorf("pending call %d has no call id", i+1)
		case slices.ContainsFunc(out[:i], func(p protocol.PendingCall) bool { return p.CallID == id }):
			return nil, fmt.Errorf("pending call id %q appears twice", id)
		}
		args, err := canon(c.Arguments)
		if err != nil {
			return nil, fmt.Errorf("the arguments of pending call %q are %s", id, err)
		}
		out[i] = protocol.PendingCall{CallID: id, Tool: clean(c.Tool), Arguments: args}
		if c.Child != nil {
			out[i].Child = &protocol.ChildCall{Agent: clean(c.Child.Agent), Workflow: clean(c.Child.Workflow)}
		}
	}
	return out, nil
}

// onDecision applies a human decision to a step waiting for approval: an approval step
// completes with it; an agent step records it for one pending call (CallID) or for every
// pending call not decided yet (CallID ""), and once every call is decided, the iteration is
// dispatched again with the decisions. A call decided before keeps its first decision.
func (d *decider) onDecision(ev protocol.Event) {
	key, sr, step := d.lookup(ev.Step, ev.Item)
	if sr == nil || step == nil || sr.Status != protocol.StepWaiting || sr.Wait != protocol.WaitApproval || !addresses(sr, ev) {
		return
	}
	dec := protocol.Decision{CallID: clean(ev.CallID), Approve: ev.Approve, Message: clean(ev.Message), By: clean(ev.By), OnBehalfOf: clean(ev.OnBehalfOf)}
	if why := refusal(approversOf(step), dec, ev.Roles); why != "" {
		d.act(key, ev, why) // recorded, and nothing else changes: the step keeps waiting
		return
	}
	switch step.Type {
	case workflow.Approval:
		if dec.CallID != "" {
			return
		}
		label, out := protocol.LabelDenied, json.RawMessage("null")
		if dec.Approve {
			label = protocol.LabelApproved
		}
		if dec.Message != "" {
			out = jsonString(dec.Message)
		}
		sr.Decisions = map[string]protocol.Decision{"": dec}
		d.act(key, ev, "")
		d.unwait(sr)
		d.completeStep(key, sr, out, label, "")
	case workflow.Agent:
		decided := false
		for _, p := range sr.Pending {
			if _, done := sr.Decisions[p.CallID]; done || p.Child != nil || dec.CallID != "" && dec.CallID != p.CallID {
				continue
			}
			if sr.Decisions == nil {
				sr.Decisions = map[string]protocol.Decision{}
			}
			one := dec
			one.CallID = p.CallID
			sr.Decisions[p.CallID] = one
			decided = true
		}
		if decided {
			d.act(key, ev, "")
			d.awaitPending(key, sr, step)
		}
	}
}

// resumeIteration dispatches the current iteration of an agent step again once every pending
// call is decided and every sub-run of one ended: same attempt, the next Resume, the decisions
// and the sub-runs' results in the task.
func (d *decider) resumeIteration(key string, sr *StepRun, step *workflow.Step) {
	d.unwait(sr)
	sr.Resume++
	d.dispatch(key, sr, step, time.Time{})
}

// onResume goes on with an agent step paused on needs_human: the next iteration, with the
// human's answer, or the end of the step at its bound. An answer that is not JSON changes
// nothing (the shell refuses it before sending).
func (d *decider) onResume(ev protocol.Event) {
	key, sr, step := d.lookup(ev.Step, ev.Item)
	if sr == nil || step == nil || step.Type != workflow.Agent || sr.Status != protocol.StepWaiting || sr.Wait != protocol.WaitInput || !addresses(sr, ev) {
		return
	}
	human, err := canon(ev.Output)
	if err != nil {
		return
	}
	if why := ActRefusal(d.def, d.run, "resume", actor(ev), ev.Roles); why != "" {
		d.act(key, ev, why) // recorded, and nothing else changes: the step keeps waiting
		return
	}
	d.act(key, ev, "")
	d.unwait(sr)
	d.iterate(key, sr, step, sr.Output, human)
}

// onSignal gives a signal to the first wait_event step waiting for its name, or keeps it in
// Run.Signals for a wait_event step that starts later. A signal taken before (same ID), one
// without a name, or one whose data is not JSON changes nothing. One from a principal who may
// not signal the run (ActRefusal), or past the run's MaxSignals, is recorded refused, without
// its data.
func (d *decider) onSignal(ev protocol.Event) {
	name, id := clean(ev.Name), clean(ev.ID)
	if name == "" || slices.Contains(d.run.SignalIDs, id) {
		return
	}
	data, err := canon(ev.Output)
	if err != nil {
		return
	}
	why := ActRefusal(d.def, d.run, "signal", actor(ev), ev.Roles)
	if why == "" {
		why = SignalsSpent(d.run, actor(ev))
	}
	if why != "" {
		d.act("", ev, why)
		return
	}
	d.run.SignalIDs = append(d.run.SignalIDs, id)
	d.act("", ev, "")
	if key, sr, step := d.eventWaiter(name); sr != nil {
		d.unwait(sr)
		d.completeWith(key, sr, step, data, name)
		return
	}
	if d.run.Signals == nil {
		d.run.Signals, d.signalsOwn = map[string][]json.RawMessage{}, true
	}
	d.ownSignals()
	d.run.Signals[name] = append(d.run.Signals[name], data)
}

// eventWaiter finds the wait_event step waiting for the signal name: the first in declaration
// order, a child of a parallel or map step taking its parent's place, children in index order.
func (d *decider) eventWaiter(name string) (string, *StepRun, *workflow.Step) {
	waits := func(sr *StepRun) *workflow.Step {
		if sr == nil || sr.Status != protocol.StepWaiting || sr.Wait != protocol.WaitEvent {
			return nil
		}
		if step := d.g.steps[sr.Step]; step != nil && step.Type == workflow.WaitEvent && step.Event == name {
			return step
		}
		return nil
	}
	for _, s := range d.def.Steps {
		sr := d.run.Steps[s.ID]
		if step := waits(sr); step != nil {
			return s.ID, d.step(s.ID), step // the signal completes it
		}
		if (s.Type != workflow.Parallel && s.Type != workflow.Map) || sr == nil || sr.Status != protocol.StepRunning {
			continue
		}
		for i := range sr.Children {
			ck := childKey(s.ID, i)
			if c := d.run.Steps[ck]; c != nil && c.Activation == sr.Activation {
				if step := waits(c); step != nil {
					return ck, d.step(ck), step
				}
			}
		}
	}
	return "", nil, nil
}

// takeSignal takes the oldest signal kept for name, if any.
func (d *decider) takeSignal(name string) (json.RawMessage, bool) {
	q := d.run.Signals[name]
	if len(q) == 0 {
		return nil, false
	}
	d.ownSignals()
	if len(q) == 1 {
		delete(d.run.Signals, name)
		if len(d.run.Signals) == 0 {
			d.run.Signals = nil
		}
	} else {
		d.run.Signals[name] = q[1:]
	}
	return q[0], true
}

// waitTimedOut ends a wait at its Until: a wait_event step fails; an approval step is denied
// (on_timeout "deny", the default) or fails ("fail"); an agent step's undecided calls are denied
// and the iteration goes on, or the step fails.
func (d *decider) waitTimedOut(key string, sr *StepRun, step *workflow.Step) {
	switch {
	case step.Type == workflow.WaitEvent && sr.Wait == protocol.WaitEvent:
		d.unwait(sr)
		d.failStep(key, sr, fmt.Sprintf("no event %s within %s", step.Event, step.Timeout))
	case step.Type == workflow.Approval && sr.Wait == protocol.WaitApproval:
		msg := "no decision within " + step.Timeout.String()
		d.unwait(sr)
		if step.OnTimeout == "fail" {
			d.failStep(key, sr, msg)
			return
		}
		sr.Decisions = map[string]protocol.Decision{"": {Message: msg}}
		d.completeStep(key, sr, jsonString(msg), protocol.LabelDenied, "")
	case step.Type == workflow.Agent && sr.Wait == protocol.WaitApproval:
		msg := "no decision within " + step.ApprovalTimeout.String()
		if step.OnTimeout == "fail" {
			d.abandon(key, sr)
			d.unwait(sr)
			d.failStep(key, sr, msg)
			return
		}
		if sr.Decisions == nil {
			sr.Decisions = map[string]protocol.Decision{}
		}
		for _, p := range sr.Pending {
			if _, done := sr.Decisions[p.CallID]; !done && p.Child == nil {
				sr.Decisions[p.CallID] = protocol.Decision{CallID: p.CallID, Message: msg}
			}
		}
		d.awaitPending(key, sr, step)
	}
}

// approversOf lists who may decide step: an approval step's approvers, an agent policy's.
func approversOf(step *workflow.Step) []string {
	if step.Type == workflow.Agent && step.Policy != nil {
		return step.Policy.Approvers
	}
	return step.Approvers
}

// MayDecide reports whether principal, holding roles, is one of approvers: named ("alice"), or
// holding a role they name ("role:finance"). No approvers means anyone who may approve at all
// (the server's permissions say who may).
func MayDecide(approvers []string, principal string, roles []string) bool {
	if len(approvers) == 0 {
		return true
	}
	for _, a := range approvers {
		if role, ok := strings.CutPrefix(a, "role:"); ok {
			if slices.Contains(roles, role) {
				return true
			}
		} else if a == principal {
			return true
		}
	}
	return false
}

// actor is who an event by a person is judged as: the principal an admin acted for, else the
// one who sent it.
func actor(ev protocol.Event) string {
	if who := clean(ev.OnBehalfOf); who != "" {
		return who
	}
	return clean(ev.By)
}

// roleAdmin is the role of a server's operators (operator.RoleAdmin), who may do anything.
const roleAdmin = "admin"

// Signallers lists the approvers def names (its approval steps' approvers and its agent
// policies' approvers), each once, in declaration order: besides its submitter and admins,
// the only ones who may signal or resume a run of def.
func Signallers(def *workflow.Definition) []string {
	var out []string
	for i := range def.Steps {
		for _, a := range approversOf(&def.Steps[i]) {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// ActRefusal says in one sentence why principal, holding roles, may not act (signal or resume,
// as act names it) on run, a run of def, or "" when it may: the run's submitter
// ([Run.StartedBy]) may, and so may an admin and an approver def names (Signallers: by name, or
// by "role:NAME" held). A sub-run has no submitter of its own.
func ActRefusal(def *workflow.Definition, run *Run, act, principal string, roles []string) string {
	approvers := Signallers(def)
	switch {
	case slices.Contains(roles, roleAdmin),
		principal != "" && principal == run.StartedBy,
		len(approvers) > 0 && MayDecide(approvers, principal, roles):
		return ""
	}
	if principal == "" {
		principal = "an unnamed principal"
	}
	var may []string
	if run.StartedBy != "" {
		may = append(may, "its submitter ("+run.StartedBy+")")
	}
	if len(approvers) > 0 {
		may = append(may, "the approvers its workflow names ("+strings.Join(approvers, ", ")+")")
	}
	may = append(may, "admins")
	who := may[0]
	if len(may) > 1 {
		who = strings.Join(may[:len(may)-1], ", ") + " and " + may[len(may)-1]
	}
	return fmt.Sprintf("principal %s may not %s this run: only %s may", principal, act, who)
}

// SignalsSpent says in one sentence why principal may not signal run any more, or "" when it
// may: the run took as many signals as its Limits allow.
func SignalsSpent(run *Run, principal string) string {
	l := run.Limits
	if l == nil || l.MaxSignals <= 0 || len(run.SignalIDs) < l.MaxSignals {
		return ""
	}
	if principal == "" {
		principal = "an unnamed principal"
	}
	return fmt.Sprintf("principal %s may not signal this run: it took %d signals, the most its server allows a run (max_signals_per_run)", principal, len(run.SignalIDs))
}

// refusal says why dec may not decide a step with approvers, or "" when it may. A decision an
// admin takes on behalf of someone is judged as that someone's.
func refusal(approvers []string, dec protocol.Decision, roles []string) string {
	who := dec.By
	if dec.OnBehalfOf != "" {
		who = dec.OnBehalfOf
	}
	if MayDecide(approvers, who, roles) {
		return ""
	}
	if who == "" {
		who = "an unnamed principal"
	}
	return fmt.Sprintf("principal %s is not one of the approvers (%s)", who, strings.Join(approvers, ", "))
}

// act records in Run.Acts what a person did (refused: why it changed nothing else). An event
// recorded before (same ID) is not recorded again; refused acts keep only the most recent
// MaxRefusedActs.
func (d *decider) act(key string, ev protocol.Event, refused string) {
	id := clean(ev.ID)
	if id != "" && slices.ContainsFunc(d.run.Acts, func(a Act) bool { return a.ID == id }) {
		return
	}
	a := Act{ID: id, Type: ev.Type, At: d.at, By: clean(ev.By),
		OnBehalfOf: clean(ev.OnBehalfOf), Step: key, CallID: clean(ev.CallID), Refused: refused}
	if ev.Type == protocol.EvCancel {
		a.Reason = clean(ev.Reason)
	}
	if id == "" && refused != "" && slices.Contains(d.run.Acts, a) {
		return // the same refused act without an id, delivered again
	}
	d.run.Acts = append(d.run.Acts, a)
	if refused == "" {
		return
	}
	n := 0
	for _, a := range d.run.Acts {
		if a.Refused != "" {
			n++
		}
	}
	for i := 0; n > MaxRefusedActs && i < len(d.run.Acts); {
		if d.run.Acts[i].Refused != "" {
			d.run.Acts = slices.Delete(d.run.Acts, i, i+1)
			n--
			continue
		}
		i++
	}
}
