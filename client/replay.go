package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// Errors of Replay and Fork, to match with [errors.Is].
var (
	// ErrNotFinished: the run has not finished (it is running or waiting).
	ErrNotFinished = errors.New("the run has not finished")
	// ErrNoStart: the run's events hold no start event (a forked run, or its events are gone).
	ErrNoStart = errors.New("the run has no recorded start event")
)

// ReplayReport says whether a replay of a finished run took the path the run took.
type ReplayReport struct {
	RunID    string `json:"run_id"`
	Workflow string `json:"workflow"`
	// Hash is the hash of the definition replayed; Changed says that it is not the one the run
	// was started with (Replay was given another).
	Hash    string `json:"hash"`
	Changed bool   `json:"changed"`
	// Same: the replay has the path, every step's label, stop reason and iterations, and the
	// final status of the saved record.
	Same bool `json:"same"`
	// Difference says in one sentence where the replay and the run part (empty when Same);
	// Step and Iteration name the step (its key: "parent#i" for a child) and iteration, when
	// one step is to blame.
	Difference string `json:"difference,omitempty"`
	Step       string `json:"step,omitempty"`
	Iteration  int    `json:"iteration,omitempty"`
	// Events counts the recorded events; Decided those that changed the replayed run.
	Events  int `json:"events"`
	Decided int `json:"decided"`
	// Records counts the answers that carry the record of their iteration. RecordProblem says
	// in one sentence where the records and the answers disagree (an agent step's answer
	// without its record, a record of another iteration, another stop reason or other token
	// counts than its answer's); empty when they agree.
	Records       int    `json:"records"`
	RecordProblem string `json:"record_problem,omitempty"`
	// Original is the saved run's result, Replay the replayed run's.
	Original protocol.Result `json:"original"`
	Replay   protocol.Result `json:"replay"`
}

// Replay re-executes the finished run runID from its recorded events, without NATS traffic
// other than reading them, without workers and without side effects: [engine.Start] with the
// recorded input and start time, then every recorded event in its recorded order through
// [engine.Decide]. An answer to a task the replay has not dispatched yet is held back (as
// [engine.Ahead] says, as the engine does) and decided once the replay dispatches that task;
// external events (cancel, tick, decision, resume, signal, child_finished) come in their
// recorded order. Nothing is started: sub-runs' ends come from the recorded child_finished
// events.
//
// def nil replays the run's own definition. Another definition (normalized, as [workflow.Load]
// returns it) answers "would this definition take the same path on this recorded run?": the
// report then names the first task one of the two dispatched and the other did not, found by
// comparing with a replay of the run's own definition.
//
// [ErrNotFound] when there is no such run, [ErrNotFinished] when it has not finished, [ErrNoStart]
// when its events hold no start event (a forked run, or a run whose events were pruned).
func (c *Client) Replay(ctx context.Context, runID string, def *workflow.Definition) (*ReplayReport, error) {
	rec, err := c.Get(ctx, runID)
	if err != nil {
		return nil, err
	}
	if !rec.Run.Finished() {
		return nil, fmt.Errorf("client: run %s is %s: only a run that has ended can be replayed: %w", runID, rec.Run.Status, ErrNotFinished)
	}
	own, err := c.Definition(ctx, rec)
	if err != nil {
		return nil, err
	}
	evs, err := c.Events(ctx, runID)
	if err != nil {
		return nil, err
	}
	return ReplayRecord(rec, own, evs, def)
}

// ReplayRecord is Replay on a record, the definition the run was started with (own) and the
// run's events: the pure part of Replay, with no I/O.
func ReplayRecord(rec *Record, own *workflow.Definition, evs []protocol.Event, def *workflow.Definition) (*ReplayReport, error) {
	if rec == nil || rec.Run == nil || own == nil {
		return nil, errors.New("client: replay: no run record or definition")
	}
	runID := rec.Run.ID
	changed := false
	hash := rec.Run.Hash
	if def == nil {
		def = own
	} else {
		def = normalized(def)
		h, err := def.Hash()
		if err != nil {
			return nil, fmt.Errorf("client: replay run %s: %w", runID, err)
		}
		hash, changed = h, h != rec.Run.Hash
	}
	test := newReplayer(def, evs, rec.Run)
	if err := test.replay(runID); err != nil {
		return nil, err
	}
	rep := &ReplayReport{
		RunID: runID, Workflow: def.Name, Hash: hash, Changed: changed,
		Events: len(evs), Decided: test.decided(),
		Original: NewResult(own, rec),
		Replay:   NewResult(def, &Record{Run: test.run}),
	}
	rep.Same = sameOutcome(rec.Run, test.run)
	rep.Records, rep.RecordProblem = CheckRecords(own, evs)
	if rep.Same {
		return rep, nil
	}
	var d *difference
	if changed {
		ref := newReplayer(own, evs, rec.Run)
		if err := ref.replay(runID); err != nil {
			return nil, err
		}
		d = firstDispatchDifference(ref.log, test.log)
	}
	if d == nil {
		d = stateDifference(def, rec.Run, test)
	}
	rep.Difference, rep.Step, rep.Iteration = d.sentence, d.step, d.iteration
	return rep, nil
}

// CheckRecords counts the answers in evs that carry their iteration's record, and returns the
// first disagreement between an answer and its record: the built-in agent records every
// iteration it runs, and its record's usage and stop are the answer's.
func CheckRecords(def *workflow.Definition, evs []protocol.Event) (int, string) {
	n := 0
	for i := range evs {
		ev := &evs[i]
		if !IsAnswer(ev) {
			continue
		}
		where := fmt.Sprintf("the %s answer to iteration %d of step %s (attempt %d)", ev.Type, ev.Iteration, protocol.StepKey(ev.Step, ev.Item), ev.Attempt)
		r := ev.Record
		if r == nil {
			if st := def.StepByID(ev.Step); st != nil && st.Type == workflow.Agent && ev.Item < 0 &&
				(ev.Type == protocol.EvContinued || ev.Type == protocol.EvCompleted || ev.Type == protocol.EvWaiting) {
				return n, where + " has no record of what the iteration did"
			}
			continue
		}
		n++
		switch {
		case r.Iteration != ev.Iteration:
			return n, fmt.Sprintf("%s carries the record of iteration %d", where, r.Iteration)
		case ev.Type == protocol.EvCompleted && r.StopReason != "" && ev.StopReason != "" && r.StopReason != ev.StopReason:
			return n, fmt.Sprintf("%s stops %s, its record %s", where, ev.StopReason, r.StopReason)
		case ev.Usage != nil && !r.Recovered && r.InputTokens+r.OutputTokens != int64(ev.Usage.InputTokens+ev.Usage.OutputTokens):
			return n, fmt.Sprintf("%s reports %d tokens, its record %d", where, ev.Usage.InputTokens+ev.Usage.OutputTokens, r.InputTokens+r.OutputTokens)
		}
	}
	return n, ""
}

// normalized returns a normalized copy of def, leaving def untouched.
func normalized(def *workflow.Definition) *workflow.Definition {
	d := def.Clone()
	d.Normalize()
	return d
}

// replayer decides a run's recorded events again.
type replayer struct {
	def  *workflow.Definition
	evs  []protocol.Event
	run  *engine.Run
	used []bool // the events that changed the run
	held []int  // events engine.Ahead held back, in recorded order
	log  []dispatch
	at   int // the recorded event being replayed

	// limits are the run's, as its shell gave them at its start; took holds the ids of the
	// acts of people the run took: the replay does not know the server's roles, so those acts
	// are decided with an admin's and every role the workflow's approvers name (takenRoles),
	// the others with none.
	limits *engine.Limits
	took   map[string]bool

	// stop, when set, ends the replay after the decision that dispatched a task it accepts:
	// stopped is that task, stoppedAt the time of the event decided.
	stop      func(*protocol.Task) bool
	stopped   *protocol.Task
	stoppedAt time.Time
}

// dispatch is a task or sub-run the replay dispatched, while it replayed event at.
type dispatch struct {
	at    int
	key   string // the address: equal keys are the same task or sub-run
	step  string // the step's key in the run
	task  *protocol.Task
	child *engine.ChildRun
}

// newReplayer replays evs, the events of the run of orig (its saved state), on def.
func newReplayer(def *workflow.Definition, evs []protocol.Event, orig *engine.Run) *replayer {
	r := &replayer{def: def, evs: evs, used: make([]bool, len(evs)), limits: orig.Limits, took: map[string]bool{}}
	for _, a := range orig.Acts {
		if a.Refused == "" && a.ID != "" {
			r.took[a.ID] = true
		}
	}
	return r
}

func (r *replayer) decided() int {
	n := 0
	for _, u := range r.used {
		if u {
			n++
		}
	}
	return n
}

// takenRoles are the roles a replay gives an act the run took: an admin's, and every role the
// approvers of the replayed workflow name, so that what a role allowed is allowed again.
func (r *replayer) takenRoles() []string {
	roles := []string{natsbox.RoleAdmin}
	for _, a := range engine.Signallers(r.def) {
		if role, ok := strings.CutPrefix(a, "role:"); ok {
			roles = append(roles, role)
		}
	}
	return roles
}

// replay starts the run from its first start event and decides the events that follow.
func (r *replayer) replay(runID string) error {
	start := slices.IndexFunc(r.evs, func(e protocol.Event) bool { return e.Type == protocol.EvStart })
	if start < 0 {
		return fmt.Errorf("client: run %s cannot be replayed: %w (a forked run starts from another run's state; a pruned run has lost its events)", runID, ErrNoStart)
	}
	ev := r.evs[start]
	run, cmds, err := engine.Decide(r.def, &engine.Run{ID: runID, Limits: r.limits}, protocol.Event{Type: protocol.EvStart, At: ev.At, Input: ev.Input, Item: -1, By: ev.By})
	if err != nil {
		return fmt.Errorf("client: replay run %s: %w", runID, err)
	}
	r.run, r.at, r.used[start] = run, start, true
	r.record(cmds, ev.At)
	for i := range start { // anything recorded before the start waits for what it answers
		r.held = append(r.held, i)
	}
	if err := r.release(true); err != nil {
		return err
	}
	for i := start + 1; i < len(r.evs) && r.stopped == nil; i++ {
		r.at = i
		if r.evs[i].Type == protocol.EvStart {
			continue // a duplicate start changes nothing
		}
		if engine.Ahead(r.def, r.run, r.evs[i]) {
			r.held = append(r.held, i)
			continue
		}
		changed, err := r.apply(i)
		if err != nil {
			return err
		}
		if err := r.release(changed); err != nil {
			return err
		}
	}
	return nil
}

// release decides the held-back events that the run has caught up with, in recorded order,
// as long as the run changes.
func (r *replayer) release(changed bool) error {
	for changed && r.stopped == nil {
		changed = false
		for k := 0; k < len(r.held); k++ {
			j := r.held[k]
			if engine.Ahead(r.def, r.run, r.evs[j]) {
				continue
			}
			r.held = slices.Delete(r.held, k, k+1)
			ch, err := r.apply(j)
			if err != nil {
				return err
			}
			if ch {
				changed = true
				break // the run changed: look at the held events again from the first
			}
			k--
		}
	}
	return nil
}

// apply decides event i and reports whether it changed the run.
func (r *replayer) apply(i int) (bool, error) {
	ev := r.evs[i]
	if r.took[ev.ID] && wire.PersonKind(ev.Type) != "" {
		ev.Roles = r.takenRoles()
	}
	next, cmds, err := engine.Decide(r.def, r.run, ev)
	if err != nil {
		return false, fmt.Errorf("client: replay run %s: event %d (%s): %w", r.run.ID, i+1, ev.Type, err)
	}
	if len(cmds) == 0 && reflect.DeepEqual(next, r.run) {
		return false, nil
	}
	r.run, r.used[i] = next, true
	r.record(cmds, ev.At)
	return true, nil
}

// record logs the tasks and sub-runs of a decision.
func (r *replayer) record(cmds []engine.Command, at time.Time) {
	for _, c := range cmds {
		var d dispatch
		switch {
		case c.Type == engine.CmdDispatch && c.Task != nil:
			t := c.Task
			d = dispatch{task: t, step: wire.TaskKey(t),
				key: fmt.Sprintf("task %s/%d/%d/%d/%d", wire.TaskKey(t), t.Activation, t.Iteration, t.Attempt, t.Resume)}
			if r.stop != nil && r.stopped == nil && r.stop(t) {
				r.stopped, r.stoppedAt = t, at
			}
		case c.Type == engine.CmdStartChild && c.Child != nil:
			ch := c.Child
			step := protocol.StepKey(ch.Step, ch.Item)
			d = dispatch{child: ch, step: step, key: fmt.Sprintf("sub-run %s/%d", step, ch.Activation)}
			if ch.CallID != "" { // the sub-run of an agent step's call
				d.key += fmt.Sprintf("/%d/%s", ch.Iteration, ch.CallID)
			}
		default:
			continue
		}
		d.at = r.at
		r.log = append(r.log, d)
	}
}

// sameOutcome reports whether two runs have the same path, the same label, stop reason and
// iterations for every step, and the same status.
func sameOutcome(orig, rep *engine.Run) bool {
	if orig.Status != rep.Status || !slices.Equal(orig.Path, rep.Path) {
		return false
	}
	for _, key := range unionKeys(orig, rep) {
		if stepOutcome(orig.Steps[key]) != stepOutcome(rep.Steps[key]) {
			return false
		}
	}
	return true
}

type outcome3 struct {
	label, stop string
	iterations  int
}

func stepOutcome(sr *engine.StepRun) outcome3 {
	if sr == nil {
		return outcome3{}
	}
	return outcome3{sr.Label, sr.StopReason, sr.Iteration}
}

func unionKeys(a, b *engine.Run) []string {
	keys := map[string]bool{}
	for k := range a.Steps {
		keys[k] = true
	}
	for k := range b.Steps {
		keys[k] = true
	}
	return slices.Sorted(maps.Keys(keys))
}

// difference is where a replay and a run part.
type difference struct {
	sentence  string
	step      string
	iteration int
}

// firstDispatchDifference compares the tasks and sub-runs two replays of the same events
// dispatched (ref: the run's own definition, test: another) and returns the first one only
// one of them dispatched, in the order of the events being replayed; nil when they dispatched
// the same.
func firstDispatchDifference(ref, test []dispatch) *difference {
	inRef, inTest := map[string]bool{}, map[string]bool{}
	for _, d := range ref {
		inRef[d.key] = true
	}
	for _, d := range test {
		inTest[d.key] = true
	}
	var onlyTest, onlyRef *dispatch
	for i := range test {
		if !inRef[test[i].key] {
			onlyTest = &test[i]
			break
		}
	}
	for i := range ref {
		if !inTest[ref[i].key] {
			onlyRef = &ref[i]
			break
		}
	}
	// The first in the order of the events replayed; at the same event, the replay's.
	first, replayOnly := onlyTest, true
	if onlyTest == nil || onlyRef != nil && onlyRef.at < onlyTest.at {
		first, replayOnly = onlyRef, false
	}
	if first == nil {
		return nil
	}
	who, other := "the replay", "the original run"
	if !replayOnly {
		who, other = other, who
	}
	if first.child != nil {
		return &difference{step: first.step,
			sentence: fmt.Sprintf("step %q: %s started a sub-run %s did not", first.step, who, other)}
	}
	t := first.task
	return &difference{step: first.step, iteration: t.Iteration,
		sentence: fmt.Sprintf("%s: %s dispatched a task %s did not", where(first.step, t.Iteration, t.Attempt), who, other)}
}

// where names a step and iteration (and attempt, past the first) at the start of a sentence.
func where(step string, iteration, attempt int) string {
	s := fmt.Sprintf("step %q iteration %d", step, max(iteration, 1))
	if attempt > 1 {
		s += fmt.Sprintf(" attempt %d", attempt)
	}
	return s
}

// stateDifference compares the replayed run with the saved one: what the replay still waits
// for, then the path, then each step's label, stop reason and iterations, then the status.
func stateDifference(def *workflow.Definition, orig *engine.Run, r *replayer) *difference {
	rep := r.run
	if !rep.Finished() {
		if tasks := engine.InFlight(r.def, rep); len(tasks) > 0 {
			t := tasks[0]
			return &difference{step: wire.TaskKey(t), iteration: t.Iteration,
				sentence: fmt.Sprintf("%s: the replay waits for the answer to a task that the recorded events do not hold", where(wire.TaskKey(t), t.Iteration, t.Attempt))}
		}
		if ws := WaitingSteps(def, rep); len(ws) > 0 {
			w := ws[0]
			return &difference{step: w.Key, iteration: w.Step.Iteration,
				sentence: fmt.Sprintf("%s: the replay waits for a human or a signal that the recorded events do not hold", where(w.Key, w.Step.Iteration, 1))}
		}
		return &difference{sentence: fmt.Sprintf("the replay did not finish (it is %s), the original run ended %s", rep.Status, orig.Status)}
	}
	iter := func(run *engine.Run, key string) int {
		if sr := run.Steps[key]; sr != nil {
			return sr.Iteration
		}
		return 1
	}
	for k := 0; k < max(len(orig.Path), len(rep.Path)); k++ {
		switch {
		case k >= len(rep.Path):
			s := orig.Path[k]
			return &difference{step: s, iteration: iter(orig, s),
				sentence: fmt.Sprintf("%s: the original run ended it at position %d of its path, the replay did not", where(s, iter(orig, s), 1), k+1)}
		case k >= len(orig.Path):
			s := rep.Path[k]
			return &difference{step: s, iteration: iter(rep, s),
				sentence: fmt.Sprintf("%s: the replay ended it at position %d of its path, the original run did not", where(s, iter(rep, s), 1), k+1)}
		case orig.Path[k] != rep.Path[k]:
			s := orig.Path[k]
			return &difference{step: s, iteration: iter(orig, s),
				sentence: fmt.Sprintf("%s: the original run ended it at position %d of its path, where the replay ended step %q", where(s, iter(orig, s), 1), k+1, rep.Path[k])}
		}
	}
	keys := StepOrder(def, rep)
	for _, k := range unionKeys(orig, rep) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, key := range keys {
		o, p := stepOutcome(orig.Steps[key]), stepOutcome(rep.Steps[key])
		switch {
		case o.iterations != p.iterations:
			n := min(o.iterations, p.iterations) + 1
			who, other, stopped := "the original run", "the replay", p.iterations
			if p.iterations > o.iterations {
				who, other, stopped = other, who, o.iterations
			}
			return &difference{step: key, iteration: n,
				sentence: fmt.Sprintf("%s: %s reached it, %s stopped at iteration %d", where(key, n, 1), who, other, stopped)}
		case o.label != p.label:
			return &difference{step: key, iteration: max(o.iterations, 1),
				sentence: fmt.Sprintf("%s: the replay ended it with label %q, the original run with label %q", where(key, o.iterations, 1), p.label, o.label)}
		case o.stop != p.stop:
			return &difference{step: key, iteration: max(o.iterations, 1),
				sentence: fmt.Sprintf("%s: the replay ended it with stop reason %q, the original run with %q", where(key, o.iterations, 1), p.stop, o.stop)}
		}
	}
	return &difference{sentence: fmt.Sprintf("the replay ended %s, the original run %s", rep.Status, orig.Status)}
}
