package agent

import (
	"context"
	"encoding/json"
	"iter"
)

// FuncAgent is a leaf agent made from a Go function (Func): handy for critics, routers and tests.
type FuncAgent struct {
	name string
	fn   func(ctx context.Context, t *Turn) error
}

// Func returns a leaf agent named name whose turn is fn. fn reads the state and yields events
// through t; returning an error fails the turn, which ends the run.
func Func(name string, fn func(ctx context.Context, t *Turn) error) *FuncAgent {
	return &FuncAgent{name: name, fn: fn}
}

// Name returns the agent's name.
func (a *FuncAgent) Name() string { return a.name }

// Run runs one turn: fn, with a Turn that yields its events.
func (a *FuncAgent) Run(ctx context.Context, s *Session) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		t := &Turn{s: s, yield: yield}
		if err := a.fn(ctx, t); err != nil && !t.stopped {
			yield(Event{}, err)
		}
	}
}

// Turn is what a Func agent's function gets: the session to read and the ways to yield events.
// Each event is handed on before the method returns, so a value written with Set is read back
// by Get at once. Once the runtime stops the turn (the caller stopped reading, or an event was
// refused), the methods do nothing and Stopped reports true.
type Turn struct {
	s       *Session
	yield   func(Event, error) bool
	stopped bool
}

// Session returns the session as this turn sees it.
func (t *Turn) Session() *Session { return t.s }

// Get returns the value of key as JSON, and whether it is set.
func (t *Turn) Get(key string) (json.RawMessage, bool) { return t.s.Get(key) }

// Text returns the value of key as text ("" when not set).
func (t *Turn) Text(key string) string { return t.s.Text(key) }

// Invocation describes this turn.
func (t *Turn) Invocation() Invocation { return t.s.Invocation() }

// Emit yields ev; it reports false once the turn is stopped.
func (t *Turn) Emit(ev Event) bool {
	if t.stopped {
		return false
	}
	if !t.yield(ev, nil) {
		t.stopped = true
	}
	return !t.stopped
}

// Say yields a message.
func (t *Turn) Say(text string) { t.Emit(Say(text)) }

// Set writes value (encoded as JSON) under key, as a state event.
func (t *Turn) Set(key string, value any) error {
	ev, err := Write(key, value)
	if err != nil {
		return err
	}
	t.Emit(ev)
	return nil
}

// Escalate ends the innermost loop enclosing the agent, once this turn ends.
func (t *Turn) Escalate(reason string) { t.Emit(Escalate(reason)) }

// EscalateTo ends the enclosing loop named target, once this turn ends.
func (t *Turn) EscalateTo(target, reason string) { t.Emit(EscalateTo(target, reason)) }

// Stopped reports whether the runtime stopped the turn.
func (t *Turn) Stopped() bool { return t.stopped }
