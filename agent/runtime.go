package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
)

// cursor is where a composition run is, as plain data: the position in the tree (Machine), the
// counters its budget and its leaves need. With the state, it is everything a durable task needs
// to run the next leaf turn.
type cursor struct {
	Started time.Time         `json:"started"`
	Seq     int               `json:"seq"`   // events emitted so far
	Turns   int               `json:"turns"` // leaf turns begun
	Usage   protocol.Usage    `json:"usage"`
	Leaves  map[string]*carry `json:"leaves,omitempty"` // by path
	Loops   map[string]End    `json:"loops,omitempty"`  // the last end of each loop, by name
	Machine machineState      `json:"machine"`
}

// carry is what a leaf's earlier turns did, for its next Invocation.
type carry struct {
	Turns      int            `json:"turns"`
	ModelCalls int            `json:"model_calls,omitempty"`
	ToolCalls  map[string]int `json:"tool_calls,omitempty"`
}

// runtime is what the machines of one run share: the tree, the budget, the counters, the
// session's id, and whether the caller still reads events.
type runtime struct {
	tree       *tree
	sessionID  string
	cfg        Config
	concurrent bool // Parallel branches on goroutines (in process) or one after the other (durable)

	mu  sync.Mutex // guards cur's counters, which concurrent branches share
	cur *cursor

	abandoned atomic.Bool
}

func newRuntime(t *tree, sessionID string, cfg Config, cur *cursor, concurrent bool) *runtime {
	if cur.Leaves == nil {
		cur.Leaves = map[string]*carry{}
	}
	if cur.Loops == nil {
		cur.Loops = map[string]End{}
	}
	return &runtime{tree: t, sessionID: sessionID, cfg: cfg, cur: cur, concurrent: concurrent}
}

// stamp gives ev its place in the run; it runs on the goroutine that hands events to the caller,
// so sequence numbers follow the order the caller sees.
func (rt *runtime) stamp(ev *Event) {
	rt.mu.Lock()
	rt.cur.Seq++
	ev.Seq = rt.cur.Seq
	rt.mu.Unlock()
	ev.Time = rt.cfg.Clock.Now()
	if rt.cfg.OnEvent != nil {
		rt.cfg.OnEvent(*ev)
	}
}

// spent says which budget stops the run before the next step down the tree, if any: the
// context first, then the wall clock, turns, tokens and cost.
func (rt *runtime) spent(ctx context.Context) *exit {
	if err := ctx.Err(); err != nil {
		return stopExit(contextStop(ctx))
	}
	b := rt.cfg.Budget
	if !rt.cfg.Clock.Now().Before(rt.cur.Started.Add(b.MaxDuration)) {
		return stopExit(Timeout, fmt.Sprintf("the wall-clock budget of %s ran out", b.MaxDuration))
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.spentLocked()
}

func (rt *runtime) spentLocked() *exit {
	b, c := rt.cfg.Budget, rt.cur
	switch {
	case c.Turns >= b.MaxTurns:
		return stopExit(MaxTurns, fmt.Sprintf("the turn budget of %d ran out", b.MaxTurns))
	case b.MaxTokens > 0 && int64(c.Usage.InputTokens+c.Usage.OutputTokens) >= b.MaxTokens:
		return stopExit(MaxTokens, fmt.Sprintf("%d tokens used, budget %d", c.Usage.InputTokens+c.Usage.OutputTokens, b.MaxTokens))
	case b.MaxCostUSD > 0 && c.Usage.CostUSD >= b.MaxCostUSD:
		return stopExit(MaxCost, fmt.Sprintf("cost $%.4f reached the budget of $%.4f", c.Usage.CostUSD, b.MaxCostUSD))
	}
	return nil
}

// claim begins a leaf turn: it counts the turn unless a budget is spent (checked again under the
// lock, since concurrent branches may have claimed the last turns meanwhile), and returns the
// leaf's Invocation.
func (rt *runtime) claim(n *node) (Invocation, *exit) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if e := rt.spentLocked(); e != nil {
		return Invocation{}, e
	}
	rt.cur.Turns++
	c := rt.cur.Leaves[n.path]
	if c == nil {
		c = &carry{}
		rt.cur.Leaves[n.path] = c
	}
	c.Turns++
	inv := Invocation{Path: n.path, N: c.Turns, ModelCalls: c.ModelCalls}
	if len(c.ToolCalls) > 0 {
		inv.ToolCalls = maps.Clone(c.ToolCalls)
	}
	inv.RunID = rt.sessionID + "/" + n.path + "/" + strconv.Itoa(c.Turns)
	return inv, nil
}

// account adds what a leaf's trace event says it spent to the run's usage and to the leaf's
// carry.
func (rt *runtime) account(n *node, te *trace.Event) {
	if te.Type != trace.ModelCall && te.Type != trace.ToolCall {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c := rt.cur.Leaves[n.path]
	if c == nil { // a leaf yields events only during its turn, which claim began
		return
	}
	u := &rt.cur.Usage
	switch te.Type {
	case trace.ModelCall:
		c.ModelCalls++ // failed calls too: the scripted model counts every call
		u.ModelCalls++
		u.InputTokens += int(te.InputTokens)
		u.OutputTokens += int(te.OutputTokens)
		u.CostUSD = model.AddCost(u.CostUSD, te.CostUSD)
	case trace.ToolCall:
		if c.ToolCalls == nil {
			c.ToolCalls = map[string]int{}
		}
		c.ToolCalls[te.Tool]++
		u.ToolCalls++
	}
}

// recordLoop keeps the last end of loop n.
func (rt *runtime) recordLoop(n *node, end End) {
	rt.mu.Lock()
	rt.cur.Loops[n.name] = end
	rt.mu.Unlock()
}

// contextStop says why a done ctx stops the run. A cause other than the plain cancellation
// (a Parallel stopping its branches) is named.
func contextStop(ctx context.Context) (Reason, string) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return Timeout, "the run's deadline passed"
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return Cancelled, cause.Error()
	}
	return Cancelled, "the caller cancelled the run"
}

// compactValue checks that a state value is JSON and compacts it, so that a value read back from
// a checkpoint is byte for byte the one written.
func compactValue(key string, raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, fmt.Errorf("%w: state key %q is written without a value", ErrComposition, key)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("%w: the value of state key %q is not valid JSON: %v", ErrComposition, key, err)
	}
	return buf.Bytes(), nil
}
