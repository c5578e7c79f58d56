package runstore

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// runSlots calls visit with every raw value of a run state.
func runSlots(r *engine.Run, visit func(*json.RawMessage)) {
	visit(&r.Input)
	visit(&r.Output)
	for _, q := range r.Signals {
		for i := range q {
			visit(&q[i])
		}
	}
	for _, s := range r.Steps {
		if s == nil {
			continue
		}
		visit(&s.Input)
		visit(&s.Output)
		visit(&s.HumanInput)
		for i := range s.Pending {
			visit(&s.Pending[i].Arguments)
		}
		for id, r := range s.ChildResults {
			before := r.Output
			if visit(&r.Output); !bytes.Equal(before, r.Output) {
				s.ChildResults[id] = r // only when it changed: a visit that reads writes nothing
			}
		}
	}
}

// DropValues returns a copy of r without its values and the texts rendered for its steps
// (prompts, instructions, goals), and reports whether there was any: the last resort of a run
// that ended with a state still too large to save. r is left as it was: a decided state shares
// its steps and values with the state it was decided from (engine.Decide), which the engine
// still holds.
func DropValues(r *engine.Run) (*engine.Run, bool) {
	c, dropped := shallowRun(r), false
	runSlots(c, func(p *json.RawMessage) {
		if len(*p) > 0 {
			*p, dropped = nil, true
		}
	})
	for _, s := range c.Steps {
		if s != nil && s.Prompt+s.Instructions+s.Goal != "" {
			s.Prompt, s.Instructions, s.Goal, dropped = "", "", "", true
		}
	}
	return c, dropped
}

// OutRun returns r, or when it holds values too large to stay inline a copy of r that shares
// what it does not change, with references in their place (stored by v). With pack, every
// value of more than a kibibyte goes out: what a caller asks for when the state is still too
// large to save.
func OutRun(ctx context.Context, v *wire.Values, r *engine.Run, pack bool) (*engine.Run, error) {
	if !v.AnyOut(func(f func(*json.RawMessage)) { runSlots(r, f) }, pack) {
		return r, nil
	}
	c := shallowRun(r)
	return c, v.OutSlots(ctx, r.ID, func(f func(*json.RawMessage)) { runSlots(c, f) }, pack)
}

// InRun takes back the values of r (decoded from a record) in place, from v.
func InRun(ctx context.Context, v *wire.Values, r *engine.Run) error {
	return v.InSlots(ctx, r.ID, func(f func(*json.RawMessage)) { runSlots(r, f) })
}

// shallowRun copies r and what holds its raw values (steps, signals, pending calls), sharing
// the values themselves: OutRun replaces values in the copy, never in r.
func shallowRun(r *engine.Run) *engine.Run {
	c := *r
	if r.Signals != nil {
		c.Signals = make(map[string][]json.RawMessage, len(r.Signals))
		for name, q := range r.Signals {
			c.Signals[name] = append([]json.RawMessage(nil), q...)
		}
	}
	if r.Steps != nil {
		c.Steps = make(map[string]*engine.StepRun, len(r.Steps))
		for k, s := range r.Steps {
			if s == nil {
				c.Steps[k] = nil
				continue
			}
			sc := *s
			sc.Pending = append([]protocol.PendingCall(nil), s.Pending...)
			sc.ChildResults = maps.Clone(s.ChildResults)
			c.Steps[k] = &sc
		}
	}
	return &c
}
