package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
)

// record is what one durable task appends to the step's checkpoint: the events of its turn, the
// state keys it changed (outside Parallel branches, whose writes are in the cursor until they
// merge), and the cursor after it. Appending keeps the bytes a task writes in proportion to its
// turn, not to the run's history.
type record struct {
	Iteration int                        `json:"iteration"`
	Events    []Event                    `json:"events,omitempty"`
	State     map[string]json.RawMessage `json:"state,omitempty"`
	Cursor    *cursor                    `json:"cursor"`
	Result    *Result                    `json:"result,omitempty"`
}

// progress is the output of a task that continues: where the run is.
type progress struct {
	Turns  int `json:"turns"`
	Events int `json:"events"`
}

// Handler returns a worker handler that runs the composition a as an agent_loop step, one leaf
// turn per task: it reads the cursor, the state and the event count from the step's
// checkpoint, runs the next leaf turn (with the steps down the tree before and after it), appends
// the turn's record to the checkpoint, and answers Continue while the run goes on, or
// CompleteWith(Result) with the run's Reason as label and stop reason once it ended.
//
// The first task's input is the initial state: a JSON object's members become keys; any other
// value (but null) is put under key "input". The session id, which prefixes the leaves' loop run
// ids, is RUN/STEP (RUN/STEP#ITEM for a child of a parallel or map step, /ACTIVATION added after
// the first activation).
//
// A leaf that fails fails the attempt (Fail: the step's retry policy runs the turn again from the
// same checkpoint); a run that breaks the composition's rules ([ErrComposition]) fails the step for
// good (FailPermanent). A task interrupted by its context (timeout, the run's end, the worker
// stopping) fails the attempt without writing anything. The step's max_iterations must leave room
// for the composition's turns plus one ([Budget.MaxTurns]+1): it is the engine's bound, and the
// composition's own budget should end the run first.
func Handler(a Agent, cfg Config) worker.Handler {
	cfg = cfg.withDefaults()
	t, err := compile(a)
	return func(tc worker.TaskContext) error {
		if err != nil {
			return tc.FailPermanent(err)
		}
		return serveTurn(tc, t, cfg)
	}
}

// serveTurn answers one task.
func serveTurn(tc worker.TaskContext, t *tree, cfg Config) error {
	base, cur, err := loadTurn(tc, t, cfg)
	if err != nil {
		return fail(tc, err)
	}
	before := cur.Usage
	rec := &record{Iteration: tc.Iteration(), Cursor: cur}
	rt := newRuntime(t, sessionID(tc.Task()), cfg, cur, false)
	m := &machine{rt: rt, root: t.root, view: base, st: &cur.Machine, out: func(ev Event) bool {
		rt.stamp(&ev)
		rec.Events = append(rec.Events, ev)
		return true
	}}
	m.run(tc, 1)
	if err := context.Cause(tc); err != nil {
		return tc.Fail(fmt.Errorf("composition %q: turn %d was interrupted and will run again: %w", t.root.name, tc.Iteration(), err))
	}
	res := resultOf(rt, base)
	if res.Err != nil {
		cfg.Logger.Warn("composition failed", "run", tc.RunID(), "step", tc.StepID(), "turn", tc.Iteration(), "error", res.Err)
		return fail(tc, res.Err)
	}
	rec.State = make(map[string]json.RawMessage, len(base.dirty))
	for k := range base.dirty {
		rec.State[k] = base.vals[k]
	}
	if cur.Machine.Done {
		rec.Result = &res
	}
	if err := tc.AppendCheckpoint(rec); err != nil {
		return tc.Fail(fmt.Errorf("composition %q: cannot checkpoint turn %d: %w", t.root.name, tc.Iteration(), err))
	}
	tc.AddUsage(usageSince(cur.Usage, before))
	if !cur.Machine.Done {
		cfg.Logger.Debug("composition turn", "run", tc.RunID(), "step", tc.StepID(), "turn", tc.Iteration(), "events", len(rec.Events))
		return tc.Continue(progress{Turns: cur.Turns, Events: cur.Seq})
	}
	cfg.Logger.Debug("composition ended", "run", tc.RunID(), "step", tc.StepID(), "reason", res.Reason, "turns", res.Turns)
	return tc.CompleteWith(res, worker.Outcome{Label: string(res.Reason), StopReason: string(res.Reason)})
}

// fail answers a task that went wrong: for good when the composition broke its rules, else the
// attempt (the step's retry policy runs the turn again).
func fail(tc worker.TaskContext, err error) error {
	if errors.Is(err, ErrComposition) {
		return tc.FailPermanent(err)
	}
	return tc.Fail(err)
}

// loadTurn reads the checkpoint: the state (the task's input folded with every record's writes)
// and the last cursor, checked against the tree. The first task starts a new cursor, and marks
// the input's keys as written so that its record holds them.
func loadTurn(tc worker.TaskContext, t *tree, cfg Config) (*view, *cursor, error) {
	raw, err := tc.LoadCheckpoint()
	if err != nil {
		return nil, nil, fmt.Errorf("composition %q: cannot load the checkpoint before turn %d: %w", t.root.name, tc.Iteration(), err)
	}
	recs, err := decodeRecords(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: composition %q: %w", ErrComposition, t.root.name, err)
	}
	base := newView(nil)
	base.dirty = map[string]bool{}
	if len(recs) == 0 {
		if tc.Iteration() > 1 {
			return nil, nil, fmt.Errorf("%w: composition %q: turn %d found no checkpoint", ErrComposition, t.root.name, tc.Iteration())
		}
		if err := putInput(base, tc.Input()); err != nil {
			return nil, nil, fmt.Errorf("%w: composition %q: %w", ErrComposition, t.root.name, err)
		}
		return base, &cursor{Started: cfg.Clock.Now()}, nil
	}
	for _, r := range recs {
		maps.Copy(base.vals, r.State)
	}
	cur := recs[len(recs)-1].Cursor
	if err := checkCursor(t, cur); err != nil {
		return nil, nil, fmt.Errorf("%w: composition %q: the checkpoint does not match the composition: %w", ErrComposition, t.root.name, err)
	}
	return base, cur, nil
}

func decodeRecords(raw json.RawMessage) ([]record, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, nil
	}
	var recs []record
	if err := json.Unmarshal(trimmed, &recs); err != nil {
		return nil, fmt.Errorf("the checkpoint is not a list of turn records: %w", err)
	}
	for i, r := range recs {
		if r.Cursor == nil {
			return nil, fmt.Errorf("turn record %d has no cursor", i+1)
		}
	}
	return recs, nil
}

// putInput sets the initial state from a step's input.
func putInput(v *view, input json.RawMessage) error {
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	if trimmed[0] != '{' {
		raw, err := compactValue("input", trimmed)
		if err != nil {
			return err
		}
		v.set("input", raw)
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return fmt.Errorf("the step's input is not a valid JSON object: %w", err)
	}
	for k, val := range obj {
		raw, err := compactValue(k, val)
		if err != nil {
			return err
		}
		v.set(k, raw)
	}
	return nil
}

// sessionID names the composition run of a task: RUN/STEP, RUN/STEP#ITEM for a child, with
// /ACTIVATION after the first activation.
func sessionID(task *protocol.Task) string {
	id := task.RunID + "/" + task.Step
	if task.Item >= 0 && task.Body != task.Step {
		id += "#" + strconv.Itoa(task.Item)
	}
	if task.Activation > 1 {
		id += "/" + strconv.Itoa(task.Activation)
	}
	return id
}

// usageSince is the usage spent between b and a, as the engine counts it.
func usageSince(a, b protocol.Usage) protocol.Usage {
	return protocol.Usage{
		ModelCalls:   a.ModelCalls - b.ModelCalls,
		ToolCalls:    a.ToolCalls - b.ToolCalls,
		InputTokens:  a.InputTokens - b.InputTokens,
		OutputTokens: a.OutputTokens - b.OutputTokens,
		CostUSD:      a.CostUSD - b.CostUSD,
	}
}

// Events returns the events a durable composition recorded in its checkpoint (the value
// [worker.TaskContext.LoadCheckpoint] returns for its step), in order.
func Events(checkpoint json.RawMessage) ([]Event, error) {
	recs, err := decodeRecords(checkpoint)
	if err != nil {
		return nil, err
	}
	var out []Event
	for _, r := range recs {
		out = append(out, r.Events...)
	}
	return out, nil
}

// checkCursor checks that a checkpointed cursor names places of the tree: a composition changed
// between two tasks of a run cannot go on from it.
func checkCursor(t *tree, c *cursor) error {
	return checkMachine(t, t.root, &c.Machine)
}

func checkMachine(t *tree, root *node, st *machineState) error {
	parent := (*node)(nil)
	for i, f := range st.Stack {
		n, ok := t.byPath[f.Path]
		switch {
		case !ok:
			return fmt.Errorf("it is inside agent %q, which the composition does not have", f.Path)
		case n.kind == kindLeaf:
			return fmt.Errorf("it is inside %q, which is a leaf agent here", f.Path)
		case i == 0 && n != root, i > 0 && (n.parent != parent || parent.kind == kindParallel):
			return fmt.Errorf("agent %q is not where the checkpoint has it", f.Path)
		case f.Child < 0 || f.Child > len(n.subs):
			return fmt.Errorf("agent %q is at sub-agent %d of %d", f.Path, f.Child+1, len(n.subs))
		case n.kind == kindParallel && len(f.Branches) != len(n.subs):
			return fmt.Errorf("parallel agent %q has %d branches, the checkpoint %d", f.Path, len(n.subs), len(f.Branches))
		}
		if i > 0 {
			if c := st.Stack[i-1].Child; c >= len(parent.subs) || parent.subs[c] != n {
				return fmt.Errorf("agent %q is not the current sub-agent of %q", f.Path, parent.path)
			}
		}
		for j, b := range f.Branches {
			if b == nil {
				return fmt.Errorf("parallel agent %q has no state for branch %d", f.Path, j+1)
			}
			if err := checkMachine(t, n.subs[j], &b.Machine); err != nil {
				return err
			}
		}
		parent = n
	}
	return nil
}
