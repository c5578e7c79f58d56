package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// ErrUnknownStep: the workflow has no such step, or the run never reached it.
var ErrUnknownStep = errors.New("no such step")

// ForkOptions say where a fork starts and what it changes.
type ForkOptions struct {
	// From is the step to start from: a step's id, or "parent#i" for one child of a parallel
	// or map step (a branch or map body's own id names its first child that runs).
	From string
	// Iteration is the iteration of From to start at (0 means 1).
	Iteration int
	// Input, when set, replaces the input of From's task (a JSON value).
	Input json.RawMessage
	// Model, when set, replaces the model of every llm and agent step: a model of the
	// definition's [models], or, when the definition has none of that name, AddModel declared
	// under that name in the fork's definition.
	Model    string
	AddModel *workflow.ModelDef
	// RunID is the fork's run id, one a client may choose ([wire.CheckClientRunID]); "" means
	// RUN-fork-N with N the smallest number not taken (a new random id when that is not a
	// valid run id: RUN is a sub-run, or too long).
	RunID string
}

// Forked describes a fork that started.
type Forked struct {
	RunID string
	// Definition is the fork's definition (its model replaced, with [ForkOptions.Model]), stored
	// under Hash.
	Definition *workflow.Definition
	Hash       string
	// Step and Iteration are where the fork starts (Step: the key of the step in the run).
	Step      string
	Iteration int
	// Tasks counts the tasks dispatched (From's and those in flight beside it), SubRuns the
	// sub-runs started, Checkpoints the checkpoint keys copied.
	Tasks, SubRuns, Checkpoints int
}

// Fork starts a new run from the state run runID had when its engine first dispatched
// iteration o.Iteration of step o.From, rebuilt by replaying its recorded events (as Replay
// does, with the run's own definition). The new run has its own id; its times are moved so
// that its deadline, its steps' max_duration and any delays keep the time they had left; it
// has no parent run. With o.Input, that task's input is replaced; with o.Model, the fork runs
// on a copy of the definition whose llm and agent steps use that model, stored as a new bundle
// by its hash. The checkpoint keys of every task in flight for the iterations before its own
// are copied into the new run's scope, so that the task continues from the checkpoint its
// original had. Then the tasks in flight are published as the engine dispatches them, the
// sub-runs in flight started, the record created as the engine saves one (by its own writer: the
// same format, values moved out until it fits a message), and a tick sent so that an engine
// loads the run and arms its timers. Run runID is only read.
//
// [ErrNotFound] when there is no run runID, [ErrUnknownStep] when its workflow has no step From
// or the run never dispatched that iteration of it, [ErrExists] when o.RunID is taken.
func (c *Client) Fork(ctx context.Context, runID string, o ForkOptions) (*Forked, error) {
	rec, err := c.Get(ctx, runID)
	if err != nil {
		return nil, err
	}
	_, wfs, err := c.buckets(ctx)
	if err != nil {
		return nil, err
	}
	store := runstore.NewStore(wfs)
	b, err := store.Get(ctx, rec.Run.Hash)
	if err != nil {
		return nil, fmt.Errorf("client: run %s: %w", runID, err)
	}
	def := b.Definition
	iteration := max(o.Iteration, 1)
	if err := checkFrom(def, o.From); err != nil {
		return nil, err
	}
	if o.RunID != "" {
		if err := wire.CheckClientRunID(o.RunID); err != nil {
			return nil, fmt.Errorf("client: fork run %s: %w", runID, err)
		}
	}
	var input json.RawMessage
	if o.Input != nil {
		if !json.Valid(o.Input) {
			return nil, fmt.Errorf("client: fork run %s: the input of step %s is not valid JSON", runID, o.From)
		}
		if input, err = json.Marshal(o.Input); err != nil { // the form the engine keeps
			return nil, fmt.Errorf("client: fork run %s: %w", runID, err)
		}
	}
	fdef, err := UseModel(def, o.Model, o.AddModel)
	if err != nil {
		return nil, fmt.Errorf("client: fork run %s: %w", runID, err)
	}

	evs, err := c.Events(ctx, runID)
	if err != nil {
		return nil, err
	}
	r := newReplayer(def, evs, rec.Run)
	r.stop = func(t *protocol.Task) bool {
		return (wire.TaskKey(t) == o.From || t.Body == o.From) && t.Iteration == iteration && t.Attempt == 1 && t.Resume == 0
	}
	if err := r.replay(runID); err != nil {
		return nil, err
	}
	if r.stopped == nil {
		return nil, notReached(runID, o.From, iteration, r.log)
	}
	state := r.run.Clone()
	if state.Finished() {
		return nil, fmt.Errorf("client: fork run %s: the run ended %s in the decision that dispatched iteration %d of step %s, so there is nothing to continue", runID, state.Status, iteration, o.From)
	}
	key := wire.TaskKey(r.stopped)

	hash, err := fdef.Hash()
	if err != nil {
		return nil, fmt.Errorf("client: fork run %s: %w", runID, err)
	}
	fb := &workflow.Bundle{Definition: fdef, Workflows: b.Workflows, Agents: b.Agents, BaseDir: b.BaseDir}
	if err := store.Put(ctx, &workflow.Bundles{Root: hash, All: map[string]*workflow.Bundle{hash: fb}}); err != nil {
		return nil, fmt.Errorf("client: fork run %s: %w", runID, err)
	}
	newID, err := c.forkID(ctx, runID, o.RunID)
	if err != nil {
		return nil, err
	}

	now := c.now().UTC().Round(0)
	shiftTimes(state, now.Sub(r.stoppedAt.UTC().Round(0)))
	state.ID, state.Hash = newID, hash
	if input != nil {
		state.Steps[key].Input = input
	}
	tasks := engine.InFlight(fdef, state)
	subs := engine.SubRuns(fdef, state)
	f := &Forked{RunID: newID, Definition: fdef, Hash: hash, Step: key, Iteration: iteration, Tasks: len(tasks), SubRuns: len(subs)}
	// As the engine does: the record encoded before anything of it happens (a state too large
	// to save dispatches nothing), what the state dispatched stored before the state, and its
	// status indexed before the record.
	saver := c.saver()
	data, err := saver.Encode(ctx, &Record{Run: state})
	if err != nil {
		return nil, fmt.Errorf("client: fork run %s into %s: %w", runID, newID, err)
	}
	if f.Checkpoints, err = c.copyCheckpoints(ctx, runID, newID, tasks); err != nil {
		return nil, err
	}
	if err := c.dispatchState(ctx, newID, fb, tasks, subs, now); err != nil {
		return nil, fmt.Errorf("client: fork run %s into %s: %w", runID, newID, err)
	}
	if err := saver.IndexStatus(ctx, state); err != nil {
		return nil, fmt.Errorf("client: fork run %s into %s: %w", runID, newID, err)
	}
	if _, err := saver.Put(ctx, newID, data, true, 0); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("client: fork run %s into %s: %w", runID, newID, ErrExists)
		}
		return nil, fmt.Errorf("client: fork run %s into %s: save the record: %w", runID, newID, err)
	}
	// A tick that changes nothing makes an engine load the run, which arms its timers (its
	// deadline, the timeouts of its parallel, map and call steps).
	if err := c.publish(ctx, outbox.TickEvent(newID, engine.Command{Type: engine.CmdSchedule, At: now, Item: -1})); err != nil {
		return nil, fmt.Errorf("client: fork %s: %w", newID, err)
	}
	return f, nil
}

// checkFrom refuses a step the definition does not have, or one that dispatches no task.
func checkFrom(def *workflow.Definition, from string) error {
	name, item, child := strings.Cut(from, "#")
	step := def.StepByID(name)
	if step == nil || name == "" {
		ids := make([]string, len(def.Steps))
		for i, s := range def.Steps {
			ids[i] = s.ID
		}
		return fmt.Errorf("client: workflow %s has no step %q%s: %w", def.Name, from, didYouMean(from, ids), ErrUnknownStep)
	}
	if child {
		if n, err := strconv.Atoi(item); err != nil || n < 0 || strconv.Itoa(n) != item || (step.Type != workflow.Parallel && step.Type != workflow.Map) {
			return fmt.Errorf("client: workflow %s has no step %q: only a parallel or map step has children step#N: %w", def.Name, from, ErrUnknownStep)
		}
		return nil
	}
	switch step.Type {
	case workflow.Task, workflow.LLM, workflow.Agent, workflow.AgentLoop:
		return nil
	}
	return fmt.Errorf("client: step %s of workflow %s is a %s step, which dispatches no task: a fork starts at a task, llm, agent or agent_loop step (or a child step#N of a parallel or map step)", name, def.Name, step.Type)
}

// notReached says that the run never dispatched iteration it of step from.
func notReached(runID, from string, it int, log []dispatch) error {
	reached := 0
	for _, d := range log {
		if d.task != nil && (d.step == from || d.task.Body == from) {
			reached = max(reached, d.task.Iteration)
		}
	}
	if reached == 0 {
		return fmt.Errorf("client: run %s never dispatched step %s: %w", runID, from, ErrUnknownStep)
	}
	return fmt.Errorf("client: run %s never dispatched iteration %d of step %s (it reached iteration %d): %w", runID, it, from, reached, ErrUnknownStep)
}

// UseModel returns def when name is "", else a copy of def whose llm and agent steps all use
// model name: a model of def's [models], or, when def declares none of that name, add declared
// under that name in the copy. It is how a fork ([ForkOptions.Model]) and reins run --model NAME
// replace a workflow's models; def is not modified. The error, when def declares no model name
// and add is nil, is one sentence listing the models it declares.
func UseModel(def *workflow.Definition, name string, add *workflow.ModelDef) (*workflow.Definition, error) {
	if name == "" {
		return def, nil
	}
	d := def.Clone()
	if _, ok := d.Models[name]; !ok {
		if add == nil {
			names := slices.Sorted(maps.Keys(d.Models))
			return nil, fmt.Errorf("workflow %s declares no model %q in [models] (it declares: %s)", def.Name, name, strings.Join(names, ", "))
		}
		if d.Models == nil {
			d.Models = map[string]workflow.ModelDef{}
		}
		d.Models[name] = *add
	}
	for i := range d.Steps {
		if s := &d.Steps[i]; s.Type == workflow.LLM || s.Type == workflow.Agent {
			s.Model = name
		}
	}
	return d, nil
}

// saver is the engine's writer of run records (runstore.Saver), on the client's buckets, which
// Fork opened.
func (c *Client) saver() *runstore.Saver {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &runstore.Saver{JS: c.js, Names: c.names, Runs: c.runs, Index: c.index, Values: c.values, MaxPayload: int(c.js.Conn().MaxPayload())}
}

// forkID is want, or RUN-fork-N with N the smallest number not taken.
func (c *Client) forkID(ctx context.Context, runID, want string) (string, error) {
	free := func(id string) (bool, error) {
		_, err := c.Get(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			return true, nil
		case err != nil:
			return false, err
		}
		return false, nil
	}
	if want != "" {
		ok, err := free(want)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("client: fork run %s into %s: %w", runID, want, ErrExists)
		}
		return want, nil
	}
	for n := 1; ; n++ {
		id := runID + wire.ForkRunMark + strconv.Itoa(n)
		if wire.CheckRunID(id) != nil { // the fork's id is the server's to give: only its form is checked
			return NewRunID(), nil
		}
		ok, err := free(id)
		if err != nil {
			return "", err
		}
		if ok {
			return id, nil
		}
	}
}

var timeType = reflect.TypeFor[time.Time]()

// shiftTimes moves every time of run (and of its steps) that is set by d.
func shiftTimes(run *engine.Run, d time.Duration) {
	shift := func(v reflect.Value) {
		for i := range v.NumField() {
			f := v.Field(i)
			if f.Type() != timeType || !f.CanSet() {
				continue
			}
			if t := f.Interface().(time.Time); !t.IsZero() {
				f.Set(reflect.ValueOf(t.Add(d)))
			}
		}
	}
	shift(reflect.ValueOf(run).Elem())
	for _, sr := range run.Steps {
		if sr != nil {
			shift(reflect.ValueOf(sr).Elem())
		}
	}
}

// copyCheckpoints copies, for every task, the checkpoint keys of the iterations before its own
// from run from's scope to run to's, and returns how many it copied.
func (c *Client) copyCheckpoints(ctx context.Context, from, to string, tasks []*protocol.Task) (int, error) {
	if len(tasks) == 0 {
		return 0, nil
	}
	kv, err := c.js.KeyValue(ctx, c.names.CheckpointsBucket())
	if err != nil {
		return 0, fmt.Errorf("client: bucket %s: %w", c.names.CheckpointsBucket(), err)
	}
	n := 0
	for _, t := range tasks {
		if t.Iteration <= 1 {
			continue
		}
		src := wire.CheckpointScope(from, t.Step, t.Item, t.Activation)
		dst := wire.CheckpointScope(to, t.Step, t.Item, t.Activation)
		for e, err := range natsbox.Entries(ctx, kv, src+".>") { // the copies go to other keys: dst's
			if err != nil {
				return n, fmt.Errorf("client: read the checkpoint of step %s of run %s: %w", wire.TaskKey(t), from, err)
			}
			w, err := wire.ParseCheckpointWrite(e.Key())
			if err != nil || w.Scope != src || w.Iteration >= t.Iteration {
				continue
			}
			w.Scope = dst // the same write, resumed writes included, in the new run's scope
			value, err := c.values.Move(ctx, from, to, e.Value())
			if err != nil {
				return n, fmt.Errorf("client: copy the checkpoint of step %s into run %s: %w", wire.TaskKey(t), to, err)
			}
			if _, err := kv.Put(ctx, w.Key(), value); err != nil {
				return n, fmt.Errorf("client: copy the checkpoint of step %s into run %s: %w", wire.TaskKey(t), to, err)
			}
			n++
		}
	}
	return n, nil
}

// dispatchState publishes, for run runID, the tasks and the start events of the sub-runs a
// state has in flight, exactly as the engine does when it decides them (package outbox): same subjects, bodies and
// message ids.
func (c *Client) dispatchState(ctx context.Context, runID string, b *workflow.Bundle, tasks []*protocol.Task, subs []engine.ChildRun, at time.Time) error {
	o := &outbox.Outbox{JS: c.js, Names: c.names, MaxPayload: int(c.js.Conn().MaxPayload()), Values: c.values}
	var msgs []*nats.Msg
	for _, t := range tasks {
		m, err := o.TaskMsg(ctx, t, at)
		if err != nil {
			return err
		}
		if m != nil {
			msgs = append(msgs, m)
		}
	}
	for i := range subs {
		m, err := o.StartChildMsg(ctx, runID, b, &subs[i], at)
		if err != nil {
			return err
		}
		if m != nil {
			msgs = append(msgs, m)
		}
	}
	return o.Publish(ctx, msgs)
}
