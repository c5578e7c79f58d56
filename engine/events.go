package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/template"
	"github.com/reins-run/reins/workflow"
)

// lookup finds the step an event addresses: Step, or for a parallel or map step with Item >= 0
// its child Step#Item. It returns nil when there is none, or when it is a child of an earlier
// activation of its parent. step is the definition the StepRun runs (nil for a child that runs
// a workflow file).
func (d *decider) lookup(name string, item int) (key string, sr *StepRun, step *workflow.Step) {
	def := d.g.steps[name]
	if def == nil {
		return "", nil, nil
	}
	key = keyOf(def, item)
	sr = d.run.Steps[key]
	if sr == nil {
		return "", nil, nil
	}
	if sr.Parent != "" {
		p := d.run.Steps[sr.Parent]
		if p == nil || p.Status != protocol.StepRunning || p.Activation != sr.Activation {
			return "", nil, nil
		}
	}
	return key, d.step(key), d.g.steps[sr.Step] // the callers change what the event addresses
}

// keyOf is the key in Run.Steps of the step an event addresses: the step's id, or for item >= 0
// of a parallel or map step its child "id#item".
func keyOf(step *workflow.Step, item int) string {
	if (step.Type == workflow.Parallel || step.Type == workflow.Map) && item >= 0 {
		return childKey(step.ID, item)
	}
	return step.ID
}

// onTask handles the answer to a task: it counts only for the current attempt (and resume) of
// the current iteration of the current activation of a running step, and only when the step's
// type can give that answer (continued: agent and agent_loop; waiting: agent).
func (d *decider) onTask(ev protocol.Event) {
	key, sr, step := d.lookup(ev.Step, ev.Item)
	if sr == nil || step == nil || sr.Workflow != "" || !dispatched(step.Type) || sr.Status != protocol.StepRunning || sr.Wait != "" ||
		ev.Activation != sr.Activation || ev.Iteration != sr.Iteration || ev.Attempt != sr.Attempt || ev.Resume != sr.Resume ||
		ev.Type == protocol.EvContinued && !iterates(step.Type) || ev.Type == protocol.EvWaiting && step.Type != workflow.Agent {
		return
	}
	if ev.Usage != nil {
		sr.Usage.Add(*ev.Usage)
	}
	switch ev.Type {
	case protocol.EvCompleted:
		d.onCompleted(key, sr, step, ev)
	case protocol.EvContinued:
		d.onContinued(key, sr, step, ev)
	case protocol.EvWaiting:
		d.onWaiting(key, sr, step, ev)
	case protocol.EvFailed:
		msg := clean(ev.Error)
		if msg == "" {
			msg = "the task failed"
		}
		if ev.Permanent {
			// A stop reason of the failure (output_too_large) is the step's: edges and the
			// run result show it.
			sr.StopReason = clean(ev.StopReason)
		}
		d.attemptFailed(key, sr, step, msg, ev.Permanent)
	case protocol.EvTimedOut:
		msg := fmt.Sprintf("attempt %d timed out", sr.Attempt)
		if step.Timeout > 0 {
			msg += " after " + step.Timeout.String()
		}
		if e := clean(ev.Error); e != "" {
			msg += ": " + e
		}
		d.attemptFailed(key, sr, step, msg, false)
	}
}

func (d *decider) onCompleted(key string, sr *StepRun, step *workflow.Step, ev protocol.Event) {
	out, err := canon(ev.Output)
	if err != nil {
		d.attemptFailed(key, sr, step, "the output is "+err.Error(), true)
		return
	}
	if iterates(step.Type) {
		sr.StopReason, sr.StopDetail = clean(ev.StopReason), clean(ev.StopDetail)
		if sr.StopReason == "" {
			sr.StopReason = protocol.LabelCompleted
		}
	}
	if step.Type == workflow.Agent && step.OnNeedsHuman == "pause" && sr.StopReason == string(loop.NeedsHuman) {
		// The step does not end: it waits for a human's answer, and the next iteration goes on
		// with it (onResume).
		sr.Output = out
		d.wait(key, sr, protocol.WaitInput, 0)
		return
	}
	label := clean(ev.Label)
	if sr.Parent == "" {
		if label, err = labelFor(step, out, label, sr.StopReason); err != nil {
			sr.Output = out
			d.failStep(key, sr, err.Error())
			return
		}
	} else if label == "" {
		label = sr.StopReason
	}
	d.completeStep(key, sr, out, label, "")
}

// onContinued starts the next iteration of an agent or agent_loop step with the output of this
// one, or ends the step at its bound.
func (d *decider) onContinued(key string, sr *StepRun, step *workflow.Step, ev protocol.Event) {
	out, err := canon(ev.Output)
	if err != nil {
		d.attemptFailed(key, sr, step, "the output is "+err.Error(), true)
		return
	}
	sr.Output = out
	d.iterate(key, sr, step, out, nil)
}

// iterate dispatches the next iteration of an agent or agent_loop step with input (and, after a
// pause on needs_human, the human's answer), or completes the step with input as its output at
// its bound: iterations first, then the duration since the first iteration, not counting the
// time it waited for humans.
func (d *decider) iterate(key string, sr *StepRun, step *workflow.Step, input, human json.RawMessage) {
	maxIter, maxDur, durLabel := bounds(step)
	bound, detail := "", ""
	switch {
	case sr.Iteration+1 > maxIter:
		bound, detail = protocol.LabelMaxIterations, fmt.Sprintf("max_iterations (%d)", maxIter)
	case maxDur > 0 && !d.at.Before(sr.FirstIterationAt.Add(sr.Waited).Add(maxDur)):
		bound, detail = durLabel, fmt.Sprintf("max_duration (%s)", maxDur)
	}
	if bound != "" {
		sr.StopReason, sr.StopDetail = bound, "the step reached its "+detail
		d.completeStep(key, sr, input, bound, detail)
		return
	}
	sr.Input = input
	sr.Iteration++
	sr.Attempt = 1
	sr.StopReason, sr.StopDetail = "", ""
	sr.Pending, sr.Decisions, sr.ChildResults, sr.Resume, sr.HumanInput = nil, nil, nil, 0, human
	var notBefore time.Time
	if step.LoopDelay > 0 {
		notBefore = d.at.Add(step.LoopDelay.Std())
	}
	d.dispatch(key, sr, step, notBefore)
}

// bounds returns the iteration and duration bounds of an agent_loop step (its max_iterations
// and max_duration, the latter ending with label max_duration) or of an agent step (its
// budget's, with the loop's defaults; the duration ends with the loop's stop reason timeout).
func bounds(step *workflow.Step) (maxIter int, maxDur time.Duration, durLabel string) {
	if step.Type == workflow.Agent {
		b := loop.DefaultBudget()
		if step.Budget != nil {
			if step.Budget.MaxIterations > 0 {
				b.MaxIterations = step.Budget.MaxIterations
			}
			if step.Budget.MaxDuration > 0 {
				b.MaxDuration = step.Budget.MaxDuration.Std()
			}
		}
		return b.MaxIterations, b.MaxDuration, protocol.LabelTimeout
	}
	return max(step.MaxIterations, 1), step.MaxDuration.Std(), protocol.LabelMaxDuration
}

// attemptFailed retries the current attempt when the failure is retryable and the retry policy
// allows another attempt, else dead-letters the task and fails the step.
func (d *decider) attemptFailed(key string, sr *StepRun, step *workflow.Step, msg string, permanent bool) {
	maxAttempts := 1
	if step.Retry != nil && step.Retry.MaxAttempts > 1 {
		maxAttempts = step.Retry.MaxAttempts
	}
	if !permanent && sr.Attempt < maxAttempts {
		delay := Backoff(step.Retry, sr.Attempt)
		sr.Attempt++
		d.dispatch(key, sr, step, d.at.Add(delay))
		return
	}
	d.emit(Command{Type: CmdDeadLetter, Task: d.task(key, sr, step), Reason: msg})
	d.failStep(key, sr, msg)
}

// DefaultInitialDelay is the first retry delay when a retry policy names none.
const DefaultInitialDelay = time.Second

// Backoff is the delay before the attempt after attempt (1-based) under policy r: fixed
// initial_delay; linear initial_delay × attempt; exponential (the default when backoff is
// empty) initial_delay × 2^(attempt−1); never more than max_delay when it is set.
func Backoff(r *workflow.Retry, attempt int) time.Duration {
	initial, maxDelay, kind := DefaultInitialDelay, time.Duration(math.MaxInt64), ""
	if r != nil {
		if r.InitialDelay > 0 {
			initial = r.InitialDelay.Std()
		}
		if r.MaxDelay > 0 {
			maxDelay = r.MaxDelay.Std()
		}
		kind = r.Backoff
	}
	attempt = max(attempt, 1)
	var delay time.Duration
	switch kind {
	case "fixed":
		delay = initial
	case "linear":
		if initial > time.Duration(math.MaxInt64)/time.Duration(attempt) {
			delay = time.Duration(math.MaxInt64)
		} else {
			delay = initial * time.Duration(attempt)
		}
	default: // exponential
		if shift := attempt - 1; shift >= 62 || initial > time.Duration(math.MaxInt64)>>shift {
			delay = time.Duration(math.MaxInt64)
		} else {
			delay = initial << shift
		}
	}
	return min(delay, maxDelay)
}

// onChildFinished ends a call step, or a child that runs a workflow file, with its sub-run's
// result; the sub-run of an agent step's call (CallID) is onToolChildFinished's. An event that
// names another sub-run (Child) than the one the step started changes nothing.
func (d *decider) onChildFinished(ev protocol.Event) {
	if ev.CallID != "" {
		d.onToolChildFinished(ev)
		return
	}
	key, sr, step := d.lookup(ev.Step, ev.Item)
	if sr == nil || sr.Status != protocol.StepRunning || ev.Activation != sr.Activation || !d.runsChild(sr) || ev.Child != d.childRunID(key, sr) {
		return
	}
	if ev.Usage != nil {
		sr.Usage.Add(*ev.Usage) // what the sub-run's steps spent
	}
	if msg := clean(ev.Error); msg != "" || (ev.Status != "" && ev.Status != protocol.RunCompleted) {
		if msg == "" {
			msg = "it ended " + string(ev.Status)
		}
		d.failStep(key, sr, fmt.Sprintf("sub-run %s failed: %s", d.childRunID(key, sr), msg))
		return
	}
	out, err := canon(ev.Output)
	if err != nil {
		d.failStep(key, sr, fmt.Sprintf("sub-run %s: the output is %s", d.childRunID(key, sr), err))
		return
	}
	label := clean(ev.Label)
	if sr.Parent == "" && step != nil {
		if label, err = labelFor(step, out, label, ""); err != nil {
			sr.Output = out
			d.failStep(key, sr, err.Error())
			return
		}
	}
	d.completeStep(key, sr, out, label, "")
}

// onTick ends a wait whose time is up (a waiting step's timeout, a sleep), fails a parallel,
// map or call step whose timeout has passed, or times out an attempt whose task was not
// answered by its TaskWatch. A tick before its time, or for another activation,
// changes nothing. (The deadline was checked before: a tick for it needs nothing else.)
func (d *decider) onTick(ev protocol.Event) {
	if ev.Step == "" {
		return
	}
	key, sr, step := d.lookup(ev.Step, ev.Item)
	if sr == nil || step == nil || ev.Activation != sr.Activation {
		return
	}
	switch {
	case sr.Status == protocol.StepWaiting:
		if !sr.Until.IsZero() && !d.at.Before(sr.Until) {
			d.waitTimedOut(key, sr, step)
		}
	case sr.Status == protocol.StepRunning && sr.Wait == protocol.WaitSleep:
		if !d.at.Before(sr.Until) {
			clearWait(sr)
			d.completeWith(key, sr, step, sr.Input, "")
		}
	case sr.Status == protocol.StepRunning && timed(step.Type) && step.Timeout > 0 && !d.at.Before(sr.StartedAt.Add(step.Timeout.Std())):
		d.abandon(key, sr)
		d.failStep(key, sr, "timed out after "+step.Timeout.String())
	default:
		if at := TaskWatch(sr, step); !at.IsZero() && !d.at.Before(at) {
			// No answer, not even the worker's timed_out: the task was lost (its worker
			// dropped it, or its answer) or never taken. The attempt is over all the same.
			d.attemptFailed(key, sr, step, fmt.Sprintf("attempt %d was not answered within %s of being due (its timeout %s and the engine's grace)",
				sr.Attempt, at.Sub(d.taskDue(sr)), step.Timeout), false)
		}
	}
}

// taskDue is when the current attempt of sr was due.
func (d *decider) taskDue(sr *StepRun) time.Time {
	if sr.NotBefore.After(sr.Dispatched) {
		return sr.NotBefore
	}
	return sr.Dispatched
}

// timed reports whether a running step of type t has a timeout the engine watches (a task's is
// the shell's; a waiting step's is its Until).
func timed(t workflow.StepType) bool {
	return t == workflow.Parallel || t == workflow.Map || t == workflow.Call
}

// startChildren starts a parallel step's branches or a map step's items as children
// key#0, key#1, …, at most max_concurrent at a time (0: all).
func (d *decider) startChildren(key string, sr *StepRun, step *workflow.Step) {
	var inputs []json.RawMessage
	var bodies, files []string
	if step.Type == workflow.Parallel {
		for _, b := range step.Branches {
			inputs = append(inputs, sr.Input)
			bodies = append(bodies, b.Step)
			files = append(files, b.Workflow)
		}
	} else {
		items, err := template.Items(d.scope(), step.Items, step.MaxItems)
		if err != nil {
			d.failStep(key, sr, "items: "+err.Error())
			return
		}
		for _, it := range items {
			v, err := canon(it)
			if err != nil { // the scope is canonical JSON: this cannot happen
				d.failStep(key, sr, "items: "+err.Error())
				return
			}
			inputs = append(inputs, v)
			bodies = append(bodies, step.Step)
			files = append(files, step.Workflow)
		}
	}
	for i := len(inputs); i < sr.Children; i++ {
		delete(d.run.Steps, childKey(key, i))
	}
	sr.Children, sr.Next, sr.Running, sr.Done = len(inputs), 0, 0, 0
	for i := range inputs {
		d.run.Steps[childKey(key, i)] = &StepRun{
			Step: bodies[i], Parent: key, Item: i, Workflow: files[i],
			Status: protocol.StepPending, Activation: sr.Activation, Input: inputs[i],
		}
	}
	d.timer(key, sr, step)
	if sr.Children == 0 {
		d.parentCompleted(key, sr, step)
		return
	}
	d.fill(key)
}

// fill starts the next children of a parent, in index order, while it is below its
// max_concurrent. A child may end at once (a switch body), which calls fill again: the loop
// reads the counters afresh each time.
func (d *decider) fill(key string) {
	step := d.g.steps[key]
	for d.live() {
		p := d.step(key)
		limit := step.MaxConcurrent
		if limit <= 0 {
			limit = p.Children
		}
		if p.Status != protocol.StepRunning || p.Next >= p.Children || p.Running >= limit {
			return
		}
		i := p.Next
		p.Next++
		p.Running++
		d.startChild(key, i)
	}
}

// startChild starts child i of a parent: its input is the item (map) or the parent's input,
// unless a branch step has an input of its own (parallel).
func (d *decider) startChild(parent string, i int) {
	ck := childKey(parent, i)
	c := d.step(ck)
	if !d.count() {
		return
	}
	c.Status = protocol.StepRunning
	c.Iteration, c.Attempt = 1, 1
	c.StartedAt, c.FirstIterationAt = d.at, d.at
	if c.Workflow != "" {
		d.startChildRun(ck, c, c.Workflow)
		return
	}
	step := d.g.steps[c.Step]
	if step == nil {
		d.failStep(ck, c, fmt.Sprintf("step %q does not exist", c.Step))
		return
	}
	if d.g.steps[parent].Type == workflow.Parallel && step.Input != "" {
		v, err := d.value(step.Input)
		if err != nil {
			d.failStep(ck, c, "input: "+err.Error())
			return
		}
		c.Input = v
	}
	d.begin(ck, c, step)
}

// childCompleted counts a completed child; the parent completes with the last one.
func (d *decider) childCompleted(parent string) {
	p := d.step(parent)
	p.Running--
	p.Done++
	if p.Done == p.Children {
		d.parentCompleted(parent, p, d.g.steps[parent])
		return
	}
	d.fill(parent)
}

// parentCompleted completes a parallel or map step with the array of its children's outputs,
// in declaration or item order.
func (d *decider) parentCompleted(key string, p *StepRun, step *workflow.Step) {
	outs := make([]json.RawMessage, p.Children)
	for i := range outs {
		if c := d.run.Steps[childKey(key, i)]; c != nil {
			outs[i] = c.Output
		}
	}
	out := array(outs)
	label, err := labelFor(step, out, "", "")
	if err != nil {
		p.Output = out
		d.failStep(key, p, err.Error())
		return
	}
	d.completeStep(key, p, out, label, "")
}

// childFailed fails the parent of a child that failed for good, giving up on its other
// children.
func (d *decider) childFailed(parent string, c *StepRun) {
	p := d.step(parent)
	p.Running--
	d.abandon(parent, p)
	what, name := "branch", c.Step
	if d.g.steps[parent].Type == workflow.Map {
		what = "item"
	}
	if name == "" {
		name = c.Workflow
	}
	d.failStep(parent, p, fmt.Sprintf("%s %d (%s) failed: %s", what, c.Item, name, c.Error))
}
