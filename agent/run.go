package agent

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"math"
)

// Run runs the composition a in process, on session s, and yields its events as they happen.
// When the run failed, the last pair carries the error (with the root's end event); otherwise
// every error is nil. s.Result() says how the run ended once the sequence is exhausted. Stopping
// the iteration early ends the run (cancelled): nothing more runs. A session runs once.
func Run(ctx context.Context, a Agent, s *Session) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if s.started {
			yield(Event{}, fmt.Errorf("agent: session %s has already run: a session runs once", s.id))
			return
		}
		s.started = true
		t, err := compile(a)
		if err != nil {
			s.result = &Result{Reason: Failed, Detail: err.Error(), Error: err.Error(), Err: err, State: s.State()}
			yield(Event{}, err)
			return
		}
		cur := &cursor{Started: s.cfg.Clock.Now()}
		rt := newRuntime(t, s.id, s.cfg, cur, true)
		// The root's end event of a failed run is held back and yielded with the error, so
		// that the error arrives once, last. (A copy, not a pointer: taking ev's address would
		// move every event to the heap.)
		var held Event
		m := &machine{rt: rt, root: t.root, view: s.view, st: &cur.Machine, out: func(ev Event) bool {
			rt.stamp(&ev)
			if ev.Type == EventEnd && ev.Path == t.root.path && ev.End.Reason == Failed {
				held = ev
				return true
			}
			return yield(ev, nil)
		}}
		m.run(ctx, math.MaxInt)
		res := resultOf(rt, s.view)
		s.result = &res
		rt.cfg.Logger.Debug("composition ended", "session", s.id, "reason", res.Reason, "turns", res.Turns)
		if res.Err != nil && !rt.abandoned.Load() {
			yield(held, res.Err)
		}
	}
}

// resultOf is the result of a run whose root machine is done.
func resultOf(rt *runtime, v *view) Result {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c := rt.cur
	res := Result{State: v.flatten(), Turns: c.Turns, Usage: c.Usage}
	if len(c.Loops) > 0 {
		res.Loops = maps.Clone(c.Loops)
	}
	e := c.Machine.Exit
	if e == nil {
		return res
	}
	res.Reason, res.By, res.Detail = e.End.Reason, e.End.By, e.End.Detail
	if e.Kind == exitError {
		res.Reason, res.Err = Failed, e.err
		if e.err != nil {
			res.Error = e.err.Error()
		}
	}
	return res
}
