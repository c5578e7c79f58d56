package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
)

// parallel runs the branches of the Parallel of frame f, then joins them. In process the
// branches run concurrently; durably they run one after the other, one leaf turn per task, with
// the same views and the same merge, so the state and the result are the same. It returns the
// leaf turns run, and whether a branch paused at limit (the machine pauses with it).
func (m *machine) parallel(ctx context.Context, f *frame, limit int) (int, bool) {
	n := m.rt.tree.byPath[f.Path]
	ran := 0
	if m.rt.concurrent {
		m.concurrently(ctx, f, n)
	} else {
		ran = m.inOrder(ctx, f, n, limit)
		if !allDone(f) {
			return ran, true
		}
	}
	m.join(f, n)
	return ran, false
}

func allDone(f *frame) bool {
	for _, b := range f.Branches {
		if !b.Machine.Done {
			return false
		}
	}
	return true
}

// branchMachine is the machine of branch i of the Parallel n (frame f): its view is its own
// writes over the state as the Parallel began.
func (m *machine) branchMachine(f *frame, n *node, i int, out func(Event) bool) *machine {
	b := f.Branches[i]
	if b.Writes == nil {
		b.Writes = map[string]json.RawMessage{}
	}
	v := &view{parent: m.view, vals: b.Writes}
	return &machine{rt: m.rt, root: n.subs[i], view: v, st: &b.Machine, out: out}
}

// inOrder runs the branches one after the other until limit turns ran. After a branch that
// failed or was stopped, the branches not yet started are skipped: the run ends anyway.
func (m *machine) inOrder(ctx context.Context, f *frame, n *node, limit int) int {
	ran := 0
	ending := false
	for i, b := range f.Branches {
		if b.Machine.Done {
			ending = ending || endsRun(b.Machine.Exit)
			continue
		}
		if ending && !b.Machine.Started {
			b.Machine.Done = true // skipped: its Exit stays nil
			continue
		}
		bm := m.branchMachine(f, n, i, m.out)
		ran += bm.run(ctx, limit-ran)
		if !b.Machine.Done {
			return ran
		}
		ending = ending || endsRun(b.Machine.Exit)
	}
	return ran
}

func endsRun(e *exit) bool { return e != nil && (e.Kind == exitError || e.Kind == exitStop) }

// delivery is an event of a branch goroutine on its way to the caller, with where to say whether
// the caller still reads.
type delivery struct {
	ev  Event
	ack chan bool
}

// concurrently runs every branch on a goroutine of its own and hands their events to the caller
// on this goroutine, as they come. A branch that fails cancels the others; an escalation or a
// budget does not: the Parallel waits for every branch, so that which branches ran does not
// depend on timing.
func (m *machine) concurrently(ctx context.Context, f *frame, n *node) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	events := make(chan delivery)
	var wg sync.WaitGroup
	for i, b := range f.Branches {
		if b.Machine.Done {
			continue
		}
		ack := make(chan bool, 1)
		bm := m.branchMachine(f, n, i, func(ev Event) bool {
			events <- delivery{ev: ev, ack: ack}
			return <-ack
		})
		wg.Go(func() {
			bm.run(ctx, math.MaxInt)
			if e := b.Machine.Exit; e != nil && e.Kind == exitError {
				cancel(fmt.Errorf("parallel agent %q stopped its other branches because %q failed", n.name, n.subs[i].name))
			}
		})
	}
	go func() {
		wg.Wait()
		close(events)
	}()
	for d := range events {
		d.ack <- m.pass(d.ev)
	}
}

// join merges the branches' writes into the state, in declaration order, and ends the Parallel:
// with the end of the first branch, in declaration order, that failed; else that was stopped;
// else that escalated beyond the Parallel; else completed. A key that several branches wrote
// gets a state event of the Parallel with the value that won, so that the trace's state events,
// applied in order, give the state.
func (m *machine) join(f *frame, n *node) {
	var worst *exit
	count := map[string]int{}
	for _, b := range f.Branches {
		if e := b.Machine.Exit; e != nil && (worst == nil || rank(e.Kind) > rank(worst.Kind)) {
			worst = e
		}
		for k, v := range b.Writes {
			m.view.set(k, v)
			count[k]++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(count)) {
		if count[k] > 1 {
			v, _ := m.view.get(k)
			m.emit(n, Event{Type: EventState, Key: k, Value: v})
		}
	}
	if worst == nil || worst.Kind == exitOK {
		m.finish(f, End{Reason: Completed, Detail: fmt.Sprintf("its %d branches ended", len(n.subs))})
		return
	}
	m.settle(*worst)
}

func rank(k exitKind) int {
	switch k {
	case exitError:
		return 3
	case exitStop:
		return 2
	case exitEscalate:
		return 1
	}
	return 0
}
