package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/template"
	"github.com/reins-run/reins/workflow"
)

// Start begins a run of def: it is Decide on a fresh Run{ID: runID} with a start event.
func Start(def *workflow.Definition, runID string, input json.RawMessage, at time.Time) (*Run, []Command, error) {
	return Decide(def, &Run{ID: runID}, protocol.Event{Type: protocol.EvStart, At: at, Input: input, Item: -1})
}

// Decide applies one event to a run and returns the new state and the commands to carry out.
// It never modifies run: the state it returns is a copy, which shares with run what the
// decision left alone (steps, values, lists), so a caller changes neither in place ([Run.Clone]
// makes one of its own). An event that is not for the current
// step, activation, iteration, attempt and resume (or for what a waiting step waits for), a
// repeated event, or any event for a finished run returns the state unchanged and no commands.
// The error is for programming errors only (a nil definition or run, an unknown event type, an
// event before start, a start that cannot be made, a run paired with another definition, a
// signal without an ID); what happens in the workflow, failures included, is in the state and
// the commands.
func Decide(def *workflow.Definition, run *Run, ev protocol.Event) (*Run, []Command, error) {
	switch {
	case def == nil:
		return nil, nil, errors.New("engine: no workflow definition")
	case run == nil:
		return nil, nil, errors.New("engine: no run")
	}
	switch ev.Type {
	case protocol.EvStart, protocol.EvCompleted, protocol.EvContinued, protocol.EvFailed, protocol.EvTimedOut, protocol.EvTick, protocol.EvCancel, protocol.EvChildFinished, protocol.EvStateTooLarge,
		protocol.EvWaiting, protocol.EvDecision, protocol.EvResume, protocol.EvGranted:
	case protocol.EvSignal:
		if ev.ID == "" {
			return nil, nil, fmt.Errorf("engine: signal %q for run %q has no id: the shell must give every signal one, so that a signal delivered again is not taken twice", ev.Name, run.ID)
		}
	default:
		return nil, nil, fmt.Errorf("engine: unknown event type %q", ev.Type)
	}
	d := &decider{def: def, g: graphOf(def), run: run.fork(), orig: run, at: ev.At.Round(0).UTC()}
	if d.run.Status == "" {
		if ev.Type != protocol.EvStart {
			return nil, nil, fmt.Errorf("engine: run %q has not started: its first event must be start, not %s", run.ID, ev.Type)
		}
		d.run.StartedBy = clean(ev.By) // before the first tasks, which carry it (sessions)
		if err := d.start(ev.Input, ev.Refused); err != nil {
			return nil, nil, err
		}
		d.syncStatus()
		if l := d.run.Limits; l != nil && l.MaxEvents > 0 {
			d.tookEvent() // the start
		}
		return d.run, d.cmds, nil
	}
	if !active(d.run) || ev.Type == protocol.EvStart {
		return d.run, nil, nil
	}
	if d.run.Workflow != def.Name || len(d.run.Edges) != len(def.Edges) {
		return nil, nil, fmt.Errorf("engine: run %q was started with workflow %s (%d edges), not with %s (%d edges): pass the definition whose hash the run records",
			run.ID, d.run.Workflow, len(d.run.Edges), def.Name, len(def.Edges))
	}
	if !d.at.Before(d.run.Deadline) {
		d.finish(protocol.RunTimedOut, nil, &protocol.RunError{Code: protocol.CodeDeadline,
			Message: fmt.Sprintf("the run passed its deadline of %s (due %s)", d.deadline(), d.run.Deadline.Format(time.RFC3339Nano))})
		return d.run, d.cmds, nil
	}
	if d.run.Status == protocol.RunQueued {
		switch ev.Type {
		case protocol.EvGranted:
			d.granted()
		case protocol.EvSignal:
			d.onSignal(ev) // kept for a wait_event step that starts later
			d.countEvent(run)
			return d.run, d.cmds, nil
		case protocol.EvCancel, protocol.EvStateTooLarge:
		default:
			return d.run, nil, nil // nothing else concerns a run that has not started
		}
	}
	d.apply(ev)
	d.drain()
	d.syncStatus()
	d.countEvent(run)
	return d.run, d.cmds, nil
}

// apply decides ev on a run that has started and not finished.
func (d *decider) apply(ev protocol.Event) {
	switch ev.Type {
	case protocol.EvCancel:
		reason := clean(ev.Reason)
		if reason == "" {
			reason = "the run was cancelled"
		}
		if clean(ev.By) != "" {
			if why := ActRefusal(d.def, d.run, "cancel", actor(ev), ev.Roles); why != "" {
				d.act("", ev, why)
				return
			}
			d.act("", ev, "")
		}
		d.finish(protocol.RunCancelled, nil, &protocol.RunError{Code: protocol.CodeCancelled, Message: reason})
	case protocol.EvStateTooLarge:
		d.finish(protocol.RunFailed, nil, &protocol.RunError{Code: protocol.CodeStateTooLarge, Message: clean(ev.Error)})
	case protocol.EvCompleted, protocol.EvContinued, protocol.EvFailed, protocol.EvTimedOut, protocol.EvWaiting:
		d.onTask(ev)
	case protocol.EvChildFinished:
		d.onChildFinished(ev)
	case protocol.EvTick:
		d.onTick(ev)
	case protocol.EvDecision:
		d.onDecision(ev)
	case protocol.EvResume:
		d.onResume(ev)
	case protocol.EvSignal:
		d.onSignal(ev)
	case protocol.EvGranted:
		// A queued run was started above; a run that runs already holds its slot.
	}
}

// countEvent counts the event just decided in Run.Events when the run's Limits bound its
// events and the event changed the run (before is the run as it was) beyond a refused act,
// which costs the run nothing: whoever is refused cannot end someone else's run. The event
// that brings the count to MaxEvents ends a run that has not finished failed (E_MAX_EVENTS).
func (d *decider) countEvent(before *Run) {
	if lim := d.run.Limits; lim != nil && lim.MaxEvents > 0 && d.changed(before) {
		d.tookEvent()
	}
}

// tookEvent counts one more event the run took, and ends it failed when that is its last.
func (d *decider) tookEvent() {
	d.run.Events++
	if d.run.Events >= d.run.Limits.MaxEvents {
		d.fail(protocol.CodeMaxEvents, fmt.Sprintf("the run took %d events, the most its server allows a run (max_events_per_run)", d.run.Events), "")
	}
}

// changed reports whether the decision so far changed the run, before as it was, beyond its
// acts: it has commands, or a state that differs.
func (d *decider) changed(before *Run) bool {
	if len(d.cmds) > 0 {
		return true
	}
	a, b := *before, *d.run
	a.Acts, b.Acts = nil, nil
	return !reflect.DeepEqual(&a, &b)
}

// InFlight lists the tasks of run that are dispatched and not answered yet, ordered by MsgID,
// exactly as they were dispatched (same MsgID, input, NotBefore, Resume, Decisions and
// HumanInput): what a shell that lost track of them publishes again, relying on JetStream to
// drop the ones it already stored. A waiting step has no task in flight, nor has a running step
// with a Wait (one whose calls' sub-runs run).
func InFlight(def *workflow.Definition, run *Run) []*protocol.Task {
	if def == nil || !active(run) {
		return nil
	}
	d := &decider{def: def, g: graphOf(def), run: run}
	var tasks []*protocol.Task
	for key, sr := range run.Steps {
		if sr == nil || sr.Status != protocol.StepRunning || sr.Workflow != "" || sr.Wait != "" {
			continue
		}
		if step := d.g.steps[sr.Step]; step != nil && dispatched(step.Type) {
			tasks = append(tasks, d.task(key, sr, step))
		}
	}
	slices.SortFunc(tasks, func(a, b *protocol.Task) int { return strings.Compare(a.MsgID, b.MsgID) })
	return tasks
}

// decider is one decision in progress: the copy of the run it changes and the commands so far.
type decider struct {
	def *workflow.Definition
	g   *graph
	run *Run
	// orig is the run Decide was given, which run shares what the decision has not changed
	// yet with ([Run.fork]): a step, the edges and the signals are copied before their first
	// change. Nil when the decider only reads run (InFlight, SubRuns).
	orig *Run
	// edgesOwn and signalsOwn say that run's Edges and Signals are the decision's own.
	edgesOwn, signalsOwn bool
	at                   time.Time
	cmds                 []Command
	// queue holds the steps a fired loop edge starts again, in the order the edges fired.
	queue []queued
}

// step returns the state of step key for the decision to change, nil when the run has none: on
// the first call, a copy of the one the run given to Decide holds ([ownStep]), which stays as
// it was. Whatever may change a step reaches it through step; a bare read of run.Steps is
// only for reading, and the pointer it gives is not kept.
func (d *decider) step(key string) *StepRun {
	sr := d.run.Steps[key]
	if sr == nil || d.orig == nil || d.orig.Steps[key] != sr {
		return sr // the decision's own already (or made by it)
	}
	sr = ownStep(sr)
	d.run.Steps[key] = sr
	return sr
}

// edge returns edge i's state for the decision to change, the edges copied on the first call.
func (d *decider) edge(i int) *EdgeState {
	if !d.edgesOwn {
		d.run.Edges, d.edgesOwn = slices.Clone(d.run.Edges), true
	}
	return &d.run.Edges[i]
}

// ownSignals makes the kept signals the decision's own before it changes them: the map, and
// the queues clipped so that an append moves them.
func (d *decider) ownSignals() {
	if d.signalsOwn || d.run.Signals == nil {
		return
	}
	own := make(map[string][]json.RawMessage, len(d.run.Signals))
	for name, q := range d.run.Signals {
		own[name] = slices.Clip(q)
	}
	d.run.Signals, d.signalsOwn = own, true
}

type queued struct {
	step  string
	input json.RawMessage
}

func (d *decider) live() bool { return active(d.run) }

// syncStatus makes a run that has not finished waiting when one of its steps waits, and
// running otherwise; a queued run stays queued.
func (d *decider) syncStatus() {
	if !active(d.run) || d.run.Status == protocol.RunQueued {
		return
	}
	d.run.Status = protocol.RunRunning
	for _, sr := range d.run.Steps {
		if sr != nil && sr.Status == protocol.StepWaiting {
			d.run.Status = protocol.RunWaiting
			return
		}
	}
}

func (d *decider) deadline() time.Duration {
	if d.def.Deadline > 0 {
		return d.def.Deadline.Std()
	}
	return workflow.DefaultDeadline.Std()
}

// maxSteps is the run's bound on step activations: the definition's max_steps, or its
// server's when that is lower.
func (d *decider) maxSteps() int {
	n := workflow.DefaultMaxSteps
	if d.def.MaxSteps > 0 {
		n = d.def.MaxSteps
	}
	if l := d.run.Limits; l != nil && l.MaxSteps > 0 {
		n = min(n, l.MaxSteps)
	}
	return n
}

// emit adds a command; nothing is emitted after the run finished.
func (d *decider) emit(c Command) {
	if d.live() {
		d.cmds = append(d.cmds, c)
	}
}

// finish ends the run, once.
func (d *decider) finish(status protocol.RunStatus, output json.RawMessage, err *protocol.RunError) {
	if !d.live() {
		return
	}
	d.run.Status, d.run.Output, d.run.Error = status, output, err
	d.settle(status)
	c := Command{Type: CmdFinish, Status: status, Output: output}
	if err != nil {
		e := *err
		c.Error = &e
	}
	d.cmds = append(d.cmds, c)
	if d.def.Concurrency != nil {
		d.cmds = append(d.cmds, Command{Type: CmdRelease})
	}
}

// settle gives every step a final status when the run ends: a step still running or waiting is
// cancelled (stop reason "cancelled", or "timeout" when the run passed its deadline), and a step
// the run never reached is skipped.
func (d *decider) settle(status protocol.RunStatus) {
	reason := protocol.LabelCancelled
	if status == protocol.RunTimedOut {
		reason = protocol.LabelTimeout
	}
	for key, sr := range d.run.Steps {
		switch sr.Status {
		case protocol.StepRunning, protocol.StepWaiting:
			sr = d.step(key) // replacing the value of a key the loop reached is allowed
			sr.Status, sr.StopReason, sr.StopDetail = protocol.StepCancelled, reason, "the run ended while the step ran"
		case protocol.StepPending:
			d.step(key).Status = protocol.StepSkipped
		}
	}
}

func (d *decider) fail(code, msg, step string) {
	d.finish(protocol.RunFailed, nil, &protocol.RunError{Code: code, Message: msg, Step: step})
}

// start initializes a fresh run and activates the start step.
func (d *decider) start(input json.RawMessage, refused *protocol.RunError) error {
	r, def := d.run, d.def
	if def.Start == "" || d.g.steps[def.Start] == nil {
		return fmt.Errorf("engine: workflow %s has no start step %q (validate and normalize it first)", def.Name, def.Start)
	}
	in, err := canon(input)
	if err != nil {
		return fmt.Errorf("engine: the input of run %q is not valid JSON: %w", r.ID, err)
	}
	hash, err := def.Hash()
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	r.Workflow, r.Hash, r.Status, r.Input = def.Name, hash, protocol.RunRunning, in
	r.StartedAt, r.Deadline = d.at, d.at.Add(d.deadline())
	r.Steps = make(map[string]*StepRun, len(def.Steps))
	for _, s := range def.Steps {
		if !d.g.childOnly[s.ID] && r.Steps[s.ID] == nil {
			r.Steps[s.ID] = &StepRun{Step: s.ID, Status: protocol.StepPending}
		}
	}
	r.Edges, d.edgesOwn = make([]EdgeState, len(def.Edges)), true
	for i, e := range def.Edges {
		r.Edges[i].State = EdgePending
		if d.g.childOnly[e.From] {
			r.Edges[i].State = EdgeDead
		}
	}
	if refused != nil {
		e := *refused
		d.finish(protocol.RunFailed, nil, &e)
		return nil
	}
	if c := def.Concurrency; c != nil {
		key, err := template.Render(template.Scope{Input: in}, c.Key)
		if err != nil {
			d.fail(protocol.CodeConcurrencyKey, "the concurrency key "+c.Key+" cannot be rendered from the run's input: "+err.Error(), "")
			return nil
		}
		r.Status, r.Slot = protocol.RunQueued, &Slot{Key: key, Limit: c.Limit}
		d.emit(Command{Type: CmdSchedule, At: r.Deadline, Item: -1})
		d.emit(Command{Type: CmdAcquire, Slot: &Slot{Key: key, Limit: c.Limit}})
		return nil
	}
	d.emit(Command{Type: CmdSchedule, At: r.Deadline, Item: -1})
	d.queue = append(d.queue, queued{step: def.Start, input: in})
	d.drain()
	return nil
}

// granted starts a queued run that now holds a slot of its concurrency key: the start step is
// activated with the run input, at the time of the grant.
func (d *decider) granted() {
	if d.run.Slot != nil {
		slot := *d.run.Slot // shared with the run given to Decide
		slot.Granted = d.at
		d.run.Slot = &slot
	}
	d.run.Status = protocol.RunRunning
	d.queue = append(d.queue, queued{step: d.def.Start, input: d.run.Input})
}

// drain runs what the last change made possible: steps a loop edge starts again first, then,
// in declaration order, steps that became ready or dead, until nothing changes; then, when
// nothing is in flight, the run completes.
func (d *decider) drain() {
	for d.live() {
		if len(d.queue) > 0 {
			q := d.queue[0]
			d.queue = d.queue[1:]
			d.activate(q.step, q.input)
			continue
		}
		if !d.advance() {
			break
		}
	}
	if d.live() && !d.busy() {
		d.complete()
	}
}

// advance takes the first pending step (in declaration order) that has incoming edges none of
// which is pending: it activates it when one of them fired, else skips it and kills its edges
// (dead-path elimination). It reports whether it changed anything.
func (d *decider) advance() bool {
	for _, s := range d.def.Steps {
		sr := d.run.Steps[s.ID]
		ins := d.g.in[s.ID]
		if sr == nil || sr.Status != protocol.StepPending || len(ins) == 0 {
			continue
		}
		fired, pending := false, false
		for _, i := range ins {
			switch d.run.Edges[i].State {
			case EdgePending:
				pending = true
			case EdgeFired:
				fired = true
			}
		}
		switch {
		case pending:
			continue
		case fired:
			d.activate(s.ID, d.joinInput(ins))
		default:
			d.step(s.ID).Status = protocol.StepSkipped
			for _, i := range d.g.out[s.ID] {
				d.edge(i).State = EdgeDead
			}
		}
		return true
	}
	return false
}

// busy reports whether anything is in flight or waited for: a task, a sub-run, children, a
// sleep, a human or a signal.
func (d *decider) busy() bool {
	for _, sr := range d.run.Steps {
		if sr != nil && (sr.Status == protocol.StepRunning || sr.Status == protocol.StepWaiting) {
			return true
		}
	}
	return false
}

// complete ends the run as completed. Its output is the output of the step that ended the
// only branch, or an object {step: output} of every step that ended a branch (declaration
// order) when there are several.
func (d *decider) complete() {
	var ends []string
	var outs []json.RawMessage
	for _, s := range d.def.Steps {
		sr := d.run.Steps[s.ID]
		if sr != nil && sr.Status == protocol.StepCompleted && len(d.g.out[s.ID]) == 0 && !slices.Contains(ends, s.ID) {
			ends = append(ends, s.ID)
			outs = append(outs, orNull(sr.Output))
		}
	}
	var out json.RawMessage
	switch len(ends) {
	case 0:
		out = json.RawMessage("null")
	case 1:
		out = outs[0]
	default:
		out = object(ends, outs)
	}
	d.finish(protocol.RunCompleted, out, nil)
}

// count records one more step activation; past max_steps it fails the run and returns false.
func (d *decider) count() bool {
	d.run.Executed++
	if d.run.Executed > d.maxSteps() {
		d.fail(protocol.CodeMaxSteps, fmt.Sprintf("the run activated more than max_steps = %d steps", d.maxSteps()), "")
		return false
	}
	return true
}

// activate starts a step that is not a child, with the default input given.
func (d *decider) activate(id string, input json.RawMessage) {
	sr, step := d.step(id), d.g.steps[id]
	if sr == nil || step == nil || !d.live() {
		return
	}
	d.abandon(id, sr)
	if !d.count() {
		return
	}
	sr.Activation++
	sr.Status = protocol.StepRunning
	sr.Iteration, sr.Attempt = 1, 1
	sr.StartedAt, sr.FirstIterationAt, sr.NotBefore = d.at, d.at, time.Time{}
	sr.Label, sr.StopReason, sr.StopDetail, sr.Error = "", "", "", ""
	sr.Prompt, sr.Instructions, sr.Goal, sr.Session = "", "", "", ""
	clearWait(sr)
	sr.Waited = 0
	sr.Pending, sr.Decisions, sr.ChildResults, sr.Resume, sr.HumanInput = nil, nil, nil, 0, nil
	for _, i := range d.g.out[id] {
		d.edge(i).State = EdgePending
	}
	sr.Input = input
	if step.Input != "" {
		v, err := d.value(step.Input)
		if err != nil {
			d.failStep(id, sr, "input: "+err.Error())
			return
		}
		sr.Input = v
	}
	d.begin(id, sr, step)
}

// begin does what a step of its type does once started (activation or child start): dispatch
// a task, route at once, end the run, start children or a sub-run.
func (d *decider) begin(key string, sr *StepRun, step *workflow.Step) {
	switch step.Type {
	case workflow.Task, workflow.AgentLoop, workflow.LLM, workflow.Agent:
		if err := d.render(sr, step); err != nil {
			d.failStep(key, sr, err.Error())
			return
		}
		d.dispatch(key, sr, step, time.Time{})
	case workflow.Switch:
		v, err := template.Path(d.scope(), step.Expr)
		if err != nil { // the error names the path
			d.failStep(key, sr, "expr: "+err.Error())
			return
		}
		label, err := template.Label(v)
		if err != nil {
			d.failStep(key, sr, "expr "+step.Expr+": "+err.Error())
			return
		}
		d.completeStep(key, sr, sr.Input, label, "")
	case workflow.Terminate:
		if sr.Parent != "" {
			d.completeStep(key, sr, sr.Input, "", "")
			return
		}
		sr.Status, sr.Output = protocol.StepCompleted, sr.Input
		d.run.Path = append(d.run.Path, key)
		d.finish(protocol.RunCompleted, sr.Input, nil)
	case workflow.Fail:
		msg, err := template.Render(d.scope(), step.Message)
		if err != nil {
			msg = step.Message + " (the message could not be rendered: " + err.Error() + ")"
		}
		if sr.Parent != "" {
			d.failStep(key, sr, msg)
			return
		}
		sr.Status, sr.Error, sr.Label = protocol.StepFailed, msg, protocol.LabelError
		d.run.Path = append(d.run.Path, key)
		d.fail(protocol.CodeFail, msg, key)
	case workflow.Parallel, workflow.Map:
		if sr.Parent != "" {
			d.failStep(key, sr, fmt.Sprintf("a %s step cannot run as a parallel branch or map body yet", step.Type))
			return
		}
		d.startChildren(key, sr, step)
	case workflow.Call:
		d.timer(key, sr, step)
		d.startChildRun(key, sr, step.Workflow)
	case workflow.Approval:
		if err := d.render(sr, step); err != nil {
			d.failStep(key, sr, err.Error())
			return
		}
		d.wait(key, sr, protocol.WaitApproval, step.Timeout.Std())
	case workflow.WaitEvent:
		if data, ok := d.takeSignal(step.Event); ok {
			d.completeWith(key, sr, step, data, step.Event)
			return
		}
		d.wait(key, sr, protocol.WaitEvent, step.Timeout.Std())
	case workflow.Sleep:
		d.sleep(key, sr, step)
	default:
		d.failStep(key, sr, fmt.Sprintf("step type %s is not supported", step.Type))
	}
}

// render fills in the texts of an llm or agent step, once per activation.
func (d *decider) render(sr *StepRun, step *workflow.Step) error {
	var err error
	scope := d.scope()
	r := func(name, tmpl string, dst *string) {
		if err != nil {
			return
		}
		s, rerr := template.Render(scope, tmpl)
		if rerr != nil {
			err = fmt.Errorf("%s: %w", name, rerr)
			return
		}
		*dst = s
	}
	switch step.Type {
	case workflow.LLM:
		r("prompt", step.Prompt, &sr.Prompt)
		r("instructions", step.Instructions, &sr.Instructions)
	case workflow.Agent:
		r("goal", step.Goal, &sr.Goal)
		r("instructions", step.Instructions, &sr.Instructions)
		if step.Session != "" {
			r("session", step.Session, &sr.Session)
			if err == nil && strings.TrimSpace(sr.Session) == "" {
				err = fmt.Errorf("session: the template %s rendered an empty value: a session needs a key", step.Session)
			}
			if err == nil && strings.Contains(d.run.ID, "/") { // the engine names sub-runs parent/step/activation
				// A sub-run keeps no session: its conversation would be shared by every run of
				// its root's principal that calls the same workflow.
				err = fmt.Errorf("session: a sub-run (an agent or workflow tool, a call or map over a workflow) cannot keep a session")
			}
		}
	case workflow.Approval:
		r("prompt", step.Prompt, &sr.Prompt)
	}
	return err
}

// timer asks for a tick at the end of the timeout of a parallel, map or call step (a task's
// timeout is the shell's to watch: it knows when the worker took it).
func (d *decider) timer(key string, sr *StepRun, step *workflow.Step) {
	if step.Timeout <= 0 {
		return
	}
	name, item := address(key, sr)
	d.emit(Command{Type: CmdSchedule, At: d.at.Add(step.Timeout.Std()), Step: name, Item: item, Activation: sr.Activation})
}

// address returns how events and commands name a step: its id and -1, or for a child its
// parent and index.
func address(key string, sr *StepRun) (string, int) {
	if sr.Parent != "" {
		return sr.Parent, sr.Item
	}
	return key, -1
}

// handlerFor names the worker handler that serves a step: its own handler, or the built-in
// handler of its type.
func handlerFor(step *workflow.Step) string {
	switch step.Type {
	case workflow.LLM:
		return protocol.HandlerLLM
	case workflow.Agent:
		return protocol.HandlerAgent
	}
	return step.Handler
}

func childKey(parent string, i int) string { return protocol.StepKey(parent, i) }

// task is the task of the current attempt of sr (and of its current resume, after decisions).
func (d *decider) task(key string, sr *StepRun, step *workflow.Step) *protocol.Task {
	name, item := address(key, sr)
	t := &protocol.Task{
		RunID: d.run.ID, Step: name, Item: item, Body: sr.Step, Type: step.Type,
		Handler: handlerFor(step), Model: step.Model, Workflow: d.run.Hash,
		Prompt: sr.Prompt, Instructions: sr.Instructions, Goal: sr.Goal,
		Session:    sr.Session,
		Activation: sr.Activation, Iteration: sr.Iteration, Attempt: sr.Attempt,
		Input:     sr.Input,
		MsgID:     taskMsgID(d.run.ID, key, sr.Activation, sr.Iteration, sr.Attempt),
		NotBefore: sr.NotBefore,
		Timeout:   step.Timeout.Std(),
		Resume:    sr.Resume,
		Protocol:  protocol.Version,
	}
	if sr.Session != "" {
		t.StartedBy = d.run.StartedBy
	}
	if sr.Resume == 0 {
		// A resumed task acts on a pending turn its checkpoint holds, which came after the
		// human's answer: only the tasks that start the iteration need that answer.
		t.HumanInput = sr.HumanInput
		return t
	}
	t.MsgID += "/r" + strconv.Itoa(sr.Resume)
	for _, p := range sr.Pending {
		if dec, ok := sr.Decisions[p.CallID]; ok {
			t.Decisions = append(t.Decisions, dec)
		}
	}
	t.ChildResults = childResults(sr)
	return t
}

// taskMsgID is RUN/KEY/ACTIVATION/ITERATION/ATTEMPT, built in one buffer (every iteration
// dispatches a task: fmt.Sprintf boxed its numbers).
func taskMsgID(run, key string, activation, iteration, attempt int) string {
	var buf [96]byte // on the stack: only the string is allocated
	id := append(buf[:0], run...)
	id = append(append(id, '/'), key...)
	for _, n := range [...]int{activation, iteration, attempt} {
		id = strconv.AppendInt(append(id, '/'), int64(n), 10)
	}
	return string(id)
}

func (d *decider) dispatch(key string, sr *StepRun, step *workflow.Step, notBefore time.Time) {
	sr.NotBefore = notBefore
	sr.Dispatched = d.at
	sr.Attempts++
	at := TaskWatch(sr, step)
	if d.cmds == nil && !at.IsZero() {
		d.cmds = make([]Command, 0, 2) // the task and its watch, in one allocation
	}
	d.emit(Command{Type: CmdDispatch, Task: d.task(key, sr, step)})
	if !at.IsZero() {
		name, item := address(key, sr)
		d.emit(Command{Type: CmdSchedule, At: at, Step: name, Item: item, Activation: sr.Activation, Watch: true, Dispatched: sr.Dispatched})
	}
}

// MinTaskGrace is the least time the engine waits past a task's timeout for its answer.
const MinTaskGrace = 30 * time.Second

// TaskWatch is when the engine times out the current attempt of sr itself, if no answer came:
// the attempt's due time (when it was dispatched, or its NotBefore if later), plus the step's
// timeout, plus a grace of the timeout again (at least MinTaskGrace), time in the queue
// included. Zero when the step has no timeout or sr runs no task now.
func TaskWatch(sr *StepRun, step *workflow.Step) time.Time {
	if step == nil || step.Timeout <= 0 || !runsTask(step.Type) || sr.Status != protocol.StepRunning || sr.Wait != "" || sr.Dispatched.IsZero() {
		return time.Time{}
	}
	due := sr.Dispatched
	if sr.NotBefore.After(due) {
		due = sr.NotBefore
	}
	t := step.Timeout.Std()
	return due.Add(t + max(t, MinTaskGrace))
}

// runsTask reports whether steps of type t are carried out by tasks that workers answer.
func runsTask(t workflow.StepType) bool {
	return t == workflow.Task || t == workflow.LLM || t == workflow.Agent || t == workflow.AgentLoop
}

// childRunID names the sub-run of a call step or of a child: run/step/activation, or
// run/parent/activation/index.
func (d *decider) childRunID(key string, sr *StepRun) string {
	name, item := address(key, sr)
	id := fmt.Sprintf("%s/%s/%d", d.run.ID, name, sr.Activation)
	if item >= 0 {
		id += "/" + strconv.Itoa(item)
	}
	return id
}

func (d *decider) startChildRun(key string, sr *StepRun, file string) {
	name, item := address(key, sr)
	d.emit(Command{Type: CmdStartChild, Child: &ChildRun{
		RunID: d.childRunID(key, sr), Workflow: file, Input: sr.Input,
		Step: name, Item: item, Activation: sr.Activation, StartedBy: d.run.StartedBy,
	}})
}

// runsChild reports whether sr waits for a sub-run.
func (d *decider) runsChild(sr *StepRun) bool {
	if sr.Workflow != "" {
		return true
	}
	step := d.g.steps[sr.Step]
	return step != nil && step.Type == workflow.Call
}

// abandon stops what a running step has in flight before the engine gives up on it or starts
// it again: its children are skipped and its sub-runs cancelled (those of an agent step's
// calls too, running or waiting). A task in flight needs
// nothing: its events no longer match and change nothing.
func (d *decider) abandon(key string, sr *StepRun) {
	if sr.Status == protocol.StepRunning || sr.Status == protocol.StepWaiting {
		d.cancelToolChildren(key, sr)
	}
	if sr.Status != protocol.StepRunning {
		return
	}
	if step := d.g.steps[sr.Step]; sr.Parent == "" && step != nil && (step.Type == workflow.Parallel || step.Type == workflow.Map) {
		for i := range sr.Children {
			ck := childKey(key, i)
			c := d.run.Steps[ck]
			if c == nil || c.Activation != sr.Activation {
				continue
			}
			if c.Status == protocol.StepRunning || c.Status == protocol.StepWaiting || c.Status == protocol.StepPending {
				c = d.step(ck)
				d.abandon(ck, c)
				c.Status = protocol.StepSkipped
			}
		}
		sr.Running = 0
	}
	if d.runsChild(sr) {
		d.emit(Command{Type: CmdCancelChild, Child: &ChildRun{
			RunID: d.childRunID(key, sr), Workflow: sr.Workflow, Input: sr.Input,
		}})
	}
}

// completeStep ends a step with an output and a label: a child reports to its parent, any
// other step is routed.
func (d *decider) completeStep(key string, sr *StepRun, output json.RawMessage, label, bound string) {
	sr.Status, sr.Output, sr.Label = protocol.StepCompleted, output, label
	if sr.Parent != "" {
		d.childCompleted(sr.Parent)
		return
	}
	d.run.Path = append(d.run.Path, key)
	d.route(key, sr, label, false, bound)
}

// failStep ends a step as failed for good (label "error"): a child fails its parent, any other
// step takes its error edge or fails the run.
func (d *decider) failStep(key string, sr *StepRun, msg string) {
	sr.Status, sr.Error, sr.Label = protocol.StepFailed, msg, protocol.LabelError
	if sr.Parent != "" {
		d.childFailed(sr.Parent, sr)
		return
	}
	d.run.Path = append(d.run.Path, key)
	d.route(key, sr, protocol.LabelError, true, "")
}

// route follows the edges of step key for label (or, failed, its "error" edges): see the
// package documentation for the rules.
func (d *decider) route(key string, sr *StepRun, label string, failed bool, bound string) {
	outs := d.g.out[key]
	if len(outs) == 0 {
		if failed {
			d.fail(protocol.CodeStepFailed, fmt.Sprintf("step %s failed: %s", key, sr.Error), key)
		}
		return
	}
	edges := d.def.Edges
	match := func(e workflow.Edge) bool {
		if failed {
			return e.When == protocol.LabelError
		}
		return e.When == label || e.When == ""
	}
	spent := func(i int) bool { return edges[i].IsLoop() && d.run.Edges[i].Uses >= edges[i].MaxIterations }
	shadowed := map[string]bool{} // conditions with an unspent loop edge: their plain edges wait
	for _, i := range outs {
		if e := edges[i]; e.IsLoop() && match(e) && !spent(i) {
			shadowed[e.When] = true
		}
	}
	var taken, spentLoops []int
	for _, i := range outs {
		e := edges[i]
		take := match(e)
		switch {
		case take && e.IsLoop() && spent(i):
			take = false
			spentLoops = append(spentLoops, i)
		case take && !e.IsLoop() && shadowed[e.When]:
			take = false
		}
		if take {
			e := d.edge(i)
			e.State = EdgeFired
			e.Uses++
			taken = append(taken, i)
		} else {
			d.edge(i).State = EdgeDead
		}
	}
	if len(taken) == 0 {
		var msg, code string
		if failed {
			code, msg = protocol.CodeStepFailed, fmt.Sprintf("step %s failed: %s", key, sr.Error)
		} else {
			code = protocol.CodeNoRoute
			if bound != "" {
				msg = fmt.Sprintf("step %s stopped at its bound %s and has no edge for label %q", key, bound, label)
			} else {
				msg = fmt.Sprintf("step %s has no edge for label %q", key, label)
			}
		}
		for _, i := range spentLoops {
			msg += fmt.Sprintf("; its loop edge to %s is spent (max_iterations = %d)", edges[i].To, edges[i].MaxIterations)
		}
		d.fail(code, msg, key)
		return
	}
	out := d.sourceOutput(key)
	for _, i := range taken {
		e := edges[i]
		if !e.IsLoop() || slices.ContainsFunc(d.queue, func(q queued) bool { return q.step == e.To }) {
			continue
		}
		d.resetRegion(e.To)
		d.queue = append(d.queue, queued{step: e.To, input: out})
	}
}

// resetRegion makes the steps a loop edge into u runs again pending, with their outgoing
// edges: u and every step reachable from it through non-loop edges.
func (d *decider) resetRegion(u string) {
	for _, s := range d.g.region(u) {
		sr := d.step(s)
		if sr == nil {
			continue
		}
		d.abandon(s, sr)
		sr.Status = protocol.StepPending
		clearWait(sr)
		for _, i := range d.g.out[s] {
			d.edge(i).State = EdgePending
		}
	}
}

// sourceOutput is what an edge from step id hands on: its output, or, when it failed, an
// object {"step": id, "error": message}.
func (d *decider) sourceOutput(id string) json.RawMessage {
	sr := d.run.Steps[id]
	if sr == nil {
		return json.RawMessage("null")
	}
	if sr.Status == protocol.StepFailed {
		return object([]string{"step", "error"}, []json.RawMessage{jsonString(id), jsonString(sr.Error)})
	}
	return orNull(sr.Output)
}

// joinInput is the default input of a step whose incoming edges ins are decided: the output
// of the one source whose edge fired, or an object {source: output} of them all, in the
// declaration order of the edges.
func (d *decider) joinInput(ins []int) json.RawMessage {
	var srcs []string
	for _, i := range ins {
		if from := d.def.Edges[i].From; d.run.Edges[i].State == EdgeFired && !slices.Contains(srcs, from) {
			srcs = append(srcs, from)
		}
	}
	if len(srcs) == 1 {
		return d.sourceOutput(srcs[0])
	}
	outs := make([]json.RawMessage, len(srcs))
	for k, s := range srcs {
		outs[k] = d.sourceOutput(s)
	}
	return object(srcs, outs)
}

// scope is the data templates read: the run input and the latest output of every step. A
// branch or map body that ran as a child is there under its own id, with the output of its
// highest-numbered completed child, unless it also ran on its own.
func (d *decider) scope() template.Scope {
	outs := make(map[string]json.RawMessage, len(d.run.Steps))
	for _, s := range d.def.Steps {
		if s.Type != workflow.Parallel && s.Type != workflow.Map {
			continue
		}
		p := d.run.Steps[s.ID]
		if p == nil {
			continue
		}
		for i := range p.Children {
			if c := d.run.Steps[childKey(s.ID, i)]; c != nil && c.Step != "" && c.Status == protocol.StepCompleted {
				outs[c.Step] = c.Output
			}
		}
	}
	for _, s := range d.def.Steps {
		if sr := d.run.Steps[s.ID]; sr != nil && sr.Output != nil {
			outs[s.ID] = sr.Output
		}
	}
	return template.Scope{Input: d.run.Input, Outputs: outs}
}

// value evaluates a step input (template.Value) in canonical JSON.
func (d *decider) value(s string) (json.RawMessage, error) {
	v, err := template.Value(d.scope(), s)
	if err != nil {
		return nil, err
	}
	return canon(v)
}

// labelFor is a step's label: the explicit one, else the value at its branch path, else the
// stop reason ("" for steps that have none).
func labelFor(step *workflow.Step, output json.RawMessage, explicit, stopReason string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if step.Branch != "" {
		v, err := template.Relative(output, step.Branch)
		if err != nil { // the error names the path
			return "", fmt.Errorf("branch: %w", err)
		}
		l, err := template.Label(v)
		if err != nil {
			return "", fmt.Errorf("branch %s: %w", step.Branch, err)
		}
		return l, nil
	}
	return stopReason, nil
}

// canon returns raw in the form encoding/json writes it (compact, HTML characters escaped), so
// that a state that goes through JSON and back holds the same bytes. Empty is null.
func canon(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null"), nil
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("not valid UTF-8")
	}
	if !json.Valid(raw) {
		return nil, errors.New("not valid JSON")
	}
	if compactPlain(raw) {
		return bytes.Clone(raw), nil // the bytes json.Marshal would write, without its work
	}
	return json.Marshal(raw)
}

// compactPlain reports whether valid JSON raw is already what json.Marshal writes for it: no
// space outside strings and nothing it escapes for HTML (<, >, &, U+2028, U+2029). An
// answer's output is, as a worker encodes it, and copying it costs a fraction of a Marshal.
func compactPlain(raw []byte) bool {
	inString, escaped := false, false
	for i, c := range raw {
		switch {
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xA8 || raw[i+2] == 0xA9):
			return false
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}

// clean makes a string from an event safe to store: JSON keeps only valid UTF-8.
func clean(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// object builds the JSON object {keys[i]: vals[i]} in that order, from canonical values.
func object(keys []string, vals []json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(k))
		b.WriteByte(':')
		b.Write(orNull(vals[i]))
	}
	b.WriteByte('}')
	return b.Bytes()
}

// array builds the JSON array of vals, from canonical values.
func array(vals []json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(orNull(v))
	}
	b.WriteByte(']')
	return b.Bytes()
}
