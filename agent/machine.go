package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// machineState is the position of one machine: the frames of the composites it is inside, root
// first, and once done how its root ended. It is plain data (a durable checkpoint holds it).
type machineState struct {
	Started bool     `json:"started,omitempty"`
	Stack   []*frame `json:"stack,omitempty"`
	Done    bool     `json:"done,omitempty"`
	Exit    *exit    `json:"exit,omitempty"` // nil when done: a Parallel branch that never started
}

// frame is one composite being run: the child it is at, a loop's iteration, a Parallel's
// branches.
type frame struct {
	Path      string    `json:"path"`
	Child     int       `json:"child"`
	Iteration int       `json:"iteration,omitempty"`
	Branches  []*branch `json:"branches,omitempty"`
}

// branch is one branch of a Parallel: its own machine and its writes, merged when all end.
type branch struct {
	Machine machineState               `json:"machine"`
	Writes  map[string]json.RawMessage `json:"writes,omitempty"`
}

// exitKind is how an agent's end travels up the tree.
type exitKind string

const (
	exitOK       exitKind = "ok"       // the parent goes on
	exitEscalate exitKind = "escalate" // ends every frame up to the target loop, which ends escalated
	exitError    exitKind = "error"    // ends every frame: the run failed
	exitStop     exitKind = "stop"     // ends every frame: a budget, or cancellation
)

// exit is an agent's end on its way up: End is what every frame it ends records.
type exit struct {
	Kind   exitKind `json:"kind"`
	End    End      `json:"end"`
	Target string   `json:"target,omitempty"` // escalate: the path of the loop it ends ("" the run)
	err    error    // exitError (never checkpointed: a durable run that fails is not saved)
}

func stopExit(reason Reason, detail string) *exit {
	return &exit{Kind: exitStop, End: End{Reason: reason, Detail: detail}}
}

func errorExit(err error) *exit {
	return &exit{Kind: exitError, End: End{Reason: Failed, Detail: err.Error()}, err: err}
}

// machine runs a subtree (the whole composition, or one Parallel branch) through its state: it
// steps down to the next leaf, runs it, and settles what the leaf's end means for the frames
// above it. The same steps run in process and durably, which is what makes the two modes give
// the same events.
type machine struct {
	rt   *runtime
	root *node
	view *view
	st   *machineState
	out  func(Event) bool // hands an event on; false when the caller stopped reading
}

// action is what a machine does next.
type action int

const (
	actEnterRoot action = iota
	actEnterChild
	actIterate
	actFinishSequential
	actFinishLoop
	actParallel
)

// next says what the machine does next, given its top frame (nil before the root started).
func (m *machine) next(f *frame) action {
	if f == nil {
		return actEnterRoot
	}
	n := m.rt.tree.byPath[f.Path]
	switch n.kind {
	case kindSequential:
		if f.Child < len(n.subs) {
			return actEnterChild
		}
		return actFinishSequential
	case kindLoop:
		switch {
		case f.Child < len(n.subs):
			return actEnterChild
		case n.maxIter > 0 && f.Iteration >= n.maxIter:
			return actFinishLoop
		}
		return actIterate
	}
	return actParallel
}

// descends reports whether act goes down the tree (towards a leaf turn): the budget is checked
// before each such step, and a durable task pauses there once it has run its turn.
func (a action) descends() bool {
	return a == actEnterRoot || a == actEnterChild || a == actIterate
}

// run steps the machine until it is done, or until it is about to begin leaf turn limit+1 with
// no budget spent. It returns the leaf turns it ran.
func (m *machine) run(ctx context.Context, limit int) int {
	ran := 0
	for !m.st.Done {
		if m.rt.abandoned.Load() {
			m.abandon()
			break
		}
		f := m.top()
		act := m.next(f)
		if act.descends() {
			if e := m.rt.spent(ctx); e != nil {
				m.settle(*e)
				continue
			}
			if ran >= limit {
				return ran
			}
		}
		switch act {
		case actEnterRoot:
			m.st.Started = true
			ran += m.enter(ctx, m.root)
		case actEnterChild:
			ran += m.enter(ctx, m.rt.tree.byPath[f.Path].subs[f.Child])
		case actIterate:
			f.Iteration++
			f.Child = 0
			m.emit(m.rt.tree.byPath[f.Path], Event{Type: EventIteration, Iteration: f.Iteration})
		case actFinishSequential:
			n := m.rt.tree.byPath[f.Path]
			m.finish(f, End{Reason: Completed, Detail: fmt.Sprintf("its %d agents ran", len(n.subs))})
		case actFinishLoop:
			m.finish(f, End{Reason: MaxIterations, Iterations: f.Iteration,
				Detail: fmt.Sprintf("it ran its %d iterations without an escalation ending it", f.Iteration)})
		case actParallel:
			n, paused := m.parallel(ctx, f, limit-ran)
			ran += n
			if paused {
				return ran
			}
		}
	}
	return ran
}

func (m *machine) top() *frame {
	if len(m.st.Stack) == 0 {
		return nil
	}
	return m.st.Stack[len(m.st.Stack)-1]
}

// enter begins n: a composite gets a frame (and a loop its first iteration); a leaf runs its turn.
// It returns the leaf turns run (0 or 1).
func (m *machine) enter(ctx context.Context, n *node) int {
	if n.kind == kindLeaf {
		return m.turn(ctx, n)
	}
	f := &frame{Path: n.path}
	m.st.Stack = append(m.st.Stack, f)
	m.emit(n, Event{Type: EventStart})
	switch n.kind {
	case kindLoop:
		f.Iteration = 1
		m.emit(n, Event{Type: EventIteration, Iteration: 1})
	case kindParallel:
		f.Branches = make([]*branch, len(n.subs))
		for i := range f.Branches {
			f.Branches[i] = &branch{}
		}
	}
	return 0
}

// finish ends frame f (the top one) normally and lets its parent go on.
func (m *machine) finish(f *frame, end End) {
	m.pop(f, end)
	m.settle(exit{Kind: exitOK, End: end})
}

// pop ends the top frame f with end.
func (m *machine) pop(f *frame, end End) {
	n := m.rt.tree.byPath[f.Path]
	if n.kind == kindLoop {
		end.Iterations = f.Iteration
		m.rt.recordLoop(n, end)
	}
	m.st.Stack = m.st.Stack[:len(m.st.Stack)-1]
	m.emit(n, Event{Type: EventEnd, End: &end})
}

// settle hands the end of the top frame's current child (or of the machine's root) to the frames
// above: on ok the parent goes on with its next child; an escalation ends the frames up to its
// target loop, whose parent then goes on; an error or a stop ends every frame.
func (m *machine) settle(e exit) {
	for {
		f := m.top()
		if f == nil {
			m.st.Done, m.st.Exit = true, &e
			return
		}
		switch {
		case e.Kind == exitOK:
			f.Child++
			return
		case e.Kind == exitEscalate && e.Target == f.Path:
			m.pop(f, e.End)
			e = exit{Kind: exitOK, End: e.End}
		default:
			m.pop(f, e.End)
		}
	}
}

// abandon ends the machine without events: the caller stopped reading them.
func (m *machine) abandon() {
	m.st.Done = true
	m.st.Exit = stopExit(Cancelled, "the caller stopped reading the run's events")
}

// emit hands an event of agent n on; it returns false once the caller stopped reading.
func (m *machine) emit(n *node, ev Event) bool {
	if ev.Author == "" {
		ev.Author = n.name
	}
	ev.Path = n.path
	return m.pass(ev)
}

// pass hands ev on unless the caller stopped reading; once it has, nothing is handed on again
// (a range loop's yield must not be called after it returned false).
func (m *machine) pass(ev Event) bool {
	if m.rt.abandoned.Load() {
		return false
	}
	if !m.out(ev) {
		m.rt.abandoned.Store(true)
		return false
	}
	return true
}

// turn runs one turn of leaf n and settles its end. It returns the turns run (0 when a budget
// stopped it first).
func (m *machine) turn(ctx context.Context, n *node) int {
	inv, stop := m.rt.claim(n)
	if stop != nil {
		m.settle(*stop)
		return 0
	}
	if !m.emit(n, Event{Type: EventStart}) {
		return 1
	}
	e := m.consume(ctx, n, inv)
	end := e.End
	m.emit(n, Event{Type: EventEnd, End: &end})
	m.settle(e)
	return 1
}

// leafTurn is the turn of a leaf being consumed: what its events said so far.
type leafTurn struct {
	m       *machine
	n       *node
	esc     *Escalation
	failure error
}

// yield takes one event (or the error) a leaf yields; false stops the leaf. It is a method
// rather than the body of a range loop so that one leafTurn holds what a range loop would
// move to the heap variable by variable.
func (lt *leafTurn) yield(ev Event, err error) bool {
	if err == nil {
		err = lt.m.apply(lt.n, &ev)
	}
	if err != nil {
		lt.failure = err
		return false
	}
	if ev.Type == EventEscalate && lt.esc == nil {
		lt.esc = ev.Escalate // the first escalation of a turn counts
	}
	return lt.m.emit(lt.n, ev)
}

// call runs the leaf's turn. A panic becomes the turn's error: in a Parallel branch it would
// otherwise end the program from a goroutine no caller can recover on.
func (lt *leafTurn) call(ctx context.Context, s *Session) {
	defer func() {
		if v := recover(); v != nil {
			lt.failure = fmt.Errorf("panic: %v", v)
		}
	}()
	lt.n.agent.Run(ctx, s)(lt.yield)
}

// consume runs leaf n's Run, checks and applies each event it yields, and says how the turn
// ended.
func (m *machine) consume(ctx context.Context, n *node, inv Invocation) exit {
	s := &Session{id: m.rt.sessionID, cfg: m.rt.cfg, view: m.view, inv: inv, started: true}
	// The run's wall clock also bounds the turn in flight (a real clock cancels the context at
	// the deadline; a virtual one leaves it to the checks between turns).
	b := m.rt.cfg.Budget
	turnCtx, cancel := m.rt.cfg.Clock.WithDeadline(ctx, m.rt.cur.Started.Add(b.MaxDuration))
	defer cancel()
	lt := &leafTurn{m: m, n: n}
	lt.call(turnCtx, s)
	esc, failure := lt.esc, lt.failure
	switch {
	case m.rt.abandoned.Load():
		return *stopExit(Cancelled, "the caller stopped reading the run's events")
	case failure != nil && errors.Is(failure, ErrComposition):
		return *errorExit(failure)
	case failure != nil && ctx.Err() != nil:
		return *stopExit(contextStop(ctx))
	case failure != nil && turnCtx.Err() != nil:
		return *stopExit(Timeout, fmt.Sprintf("the wall-clock budget of %s ran out during a turn of %q", b.MaxDuration, n.name))
	case failure != nil:
		return *errorExit(fmt.Errorf("agent %q failed: %w", n.path, failure))
	case esc != nil:
		return m.escalation(n, esc)
	}
	return exit{Kind: exitOK, End: End{Reason: Completed}}
}

// escalation resolves the loop an escalation of leaf n ends.
func (m *machine) escalation(n *node, esc *Escalation) exit {
	target, err := m.rt.tree.target(n, esc.Target)
	if err != nil {
		return *errorExit(err)
	}
	e := exit{Kind: exitEscalate, End: End{Reason: Escalated, By: n.name, Detail: esc.Reason}}
	if target != nil {
		e.Target, e.End.Target = target.path, target.name
	}
	return e
}

// apply checks an event leaf n yielded, fills in what the leaf may leave out, and carries out
// what it says: a state write goes into the view, a trace event into the usage.
func (m *machine) apply(n *node, ev *Event) error {
	if ev.Type == "" {
		ev.Type = inferType(ev)
	}
	switch ev.Type {
	case EventMessage:
	case EventState:
		if ev.Key == "" {
			return fmt.Errorf("%w: agent %q wrote a state value without a key", ErrComposition, n.path)
		}
		raw, err := compactValue(ev.Key, ev.Value)
		if err != nil {
			return fmt.Errorf("agent %q: %w", n.path, err)
		}
		ev.Value = raw
		m.view.set(ev.Key, raw)
	case EventEscalate:
		if ev.Escalate == nil {
			return fmt.Errorf("%w: agent %q yielded an escalate event without an Escalation", ErrComposition, n.path)
		}
	case EventTrace:
		if ev.Trace == nil {
			return fmt.Errorf("%w: agent %q yielded a trace event without a trace.Event", ErrComposition, n.path)
		}
		m.rt.account(n, ev.Trace)
	default:
		return fmt.Errorf("%w: agent %q yielded an event of type %q, which only the runtime emits or which does not exist", ErrComposition, n.path, ev.Type)
	}
	return nil
}

// inferType is the type of an event a leaf yielded without one, from the field it set.
func inferType(ev *Event) EventType {
	switch {
	case ev.Escalate != nil:
		return EventEscalate
	case ev.Trace != nil:
		return EventTrace
	case ev.Key != "":
		return EventState
	}
	return EventMessage
}
