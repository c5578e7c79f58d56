package runner

import (
	"container/heap"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/reins-run/reins/engine"
)

// timers holds the in-memory timers of schedule commands, by run, each with the tick it
// publishes (so that a timer armed twice runs once). A waiting run holds one, so its cost is
// what ten thousand waiting runs weigh: a run's timers are a slice (a run has one or two), a
// timer keeps only what its tick needs, and is told apart by the tick's fields, not by its
// message id. A run with more than keyedFrom timers (a map step of thousands of items, each
// with a watch) also has them by key, so that arming and disarming one stays O(1).
//
// The timers wait in one queue ordered by when they are due, under one runtime timer (wake)
// set for the first of them, rather than a runtime timer each: a runtime timer, its closure and
// its place in the runtime's own heap cost more than the timer itself.
type timers struct {
	now  func() time.Time
	fire func(runID string, c engine.Command) error
	log  *slog.Logger

	mu    sync.Mutex
	runs  map[string][]*timer
	keyed map[string]map[tickKey]*timer
	queue timerQueue
	// wake fires at wakeAt (zero: stopped) for the queue's first timer, or earlier when that
	// one went since: it then finds nothing due and is set again.
	wake   *time.Timer
	wakeAt time.Time
	closed bool
}

// keyedFrom is how many timers a run holds before they are also kept by key: below it, a scan
// of the run's slice is as quick as a map and costs no memory.
const keyedFrom = 8

// tick is what a timer publishes: the fields of a schedule command its tick event is made of.
type tick struct {
	step       string
	item       int
	activation int
	at         time.Time
	watch      bool
}

// same tells whether k and o are one timer of a run: the same identity (key).
func (k tick) same(o tick) bool { return k.key() == o.key() }

// tickKey is a tick's identity, also its key in a run's keyed index: for a task's watch, its
// step and item, since a step has one watch at a time; for another tick, the fields its
// message id is made of, its time as the instant (time.Time's == also compares its location).
type tickKey struct {
	step       string
	item       int
	activation int
	sec        int64
	nsec       int
	watch      bool
}

// key is k's identity.
func (k tick) key() tickKey {
	if k.watch {
		return tickKey{step: k.step, item: k.item, watch: true}
	}
	return tickKey{step: k.step, item: k.item, activation: k.activation, sec: k.at.Unix(), nsec: k.at.Nanosecond()}
}

// timer is one armed timer; fired compares it with the run's, since a watch may have replaced
// it. due is when it fires, on the engine's clock; idx is its place in its run's slice, and
// queued its place in the queue (notQueued while it fires).
type timer struct {
	runID  string
	due    time.Time
	tick   tick
	idx    int32
	queued int32
}

// notQueued is the queue place of a timer that is not in the queue: taken out to fire.
const notQueued = -1

func newTimers(now func() time.Time, fire func(string, engine.Command) error, log *slog.Logger) *timers {
	t := &timers{now: now, fire: fire, log: log, runs: map[string][]*timer{}, keyed: map[string]map[tickKey]*timer{}}
	t.wake = time.AfterFunc(time.Hour, t.wakeUp)
	t.wake.Stop()
	return t
}

// tickOf is the tick of c, a schedule command.
func tickOf(c engine.Command) tick {
	return tick{step: c.Step, item: c.Item, activation: c.Activation, at: c.At, watch: c.Watch}
}

// command is the schedule command of tm's tick, as fire publishes it.
func (tm *timer) command() engine.Command {
	k := tm.tick
	return engine.Command{Type: engine.CmdSchedule, At: k.at, Step: k.step, Item: k.item, Activation: k.activation, Watch: k.watch}
}

// arm sets a timer for c, a schedule command of run runID, unless one is set for the same tick.
// A tick already due fires at once.
// A task's watch (c.Watch) replaces the step's previous one, so that a step has one timer
// however many iterations it dispatches, and a loop that answers in time fires none. out is
// when the task a watch is for went out at the latest, on the engine's clock (watchDue).
func (t *timers) arm(runID string, c engine.Command, out time.Time) {
	tk := tickOf(c)
	due := c.At
	if c.Watch {
		due = watchDue(c, out)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if old := t.find(runID, tk); old != nil {
		if !c.Watch {
			return
		}
		if old.queued != notQueued { // waiting, not firing: moved rather than made again
			old.tick, old.due = tk, due // a watch's key leaves its time out: the index holds
			heap.Fix(&t.queue, int(old.queued))
			t.rewind()
			return
		}
		t.remove(old)
	}
	t.set(&timer{runID: runID, tick: tk}, due)
}

// watchDue is when the watch c of a task that went out at out fires: at c.At, later by as much
// as the task went out after the decision that dispatched it (c.Dispatched, the event's time).
// Decide counts a task's timeout and grace from the time of its decision; an event decided
// long after its time (a partition's backlog decided after a failover) dispatches a task whose
// watch is already due by that count, and a tick at once would fail an attempt the worker has
// only just received (the run fails, or uses up a retry). The tick keeps c.At, its message id.
func watchDue(c engine.Command, out time.Time) time.Time {
	if late := out.Sub(c.Dispatched); !c.Dispatched.IsZero() && late > 0 {
		return c.At.Add(late)
	}
	return c.At
}

// find returns run runID's timer of tk, or nil; t.mu is held.
func (t *timers) find(runID string, tk tick) *timer {
	if m := t.keyed[runID]; m != nil {
		return m[tk.key()]
	}
	for _, tm := range t.runs[runID] {
		if tm.tick.same(tk) {
			return tm
		}
	}
	return nil
}

// remove takes tm out of the queue and out of its run's timers, moving the slice's last into
// its place; t.mu is held. A run's keyed index goes once it is down to half of keyedFrom, so
// that a map step's thousands of watches do not leave their map behind a run that waits with
// one.
func (t *timers) remove(tm *timer) {
	t.unqueue(tm)
	list := t.runs[tm.runID]
	last := len(list) - 1
	list[tm.idx] = list[last]
	list[tm.idx].idx = tm.idx
	list[last] = nil
	list = list[:last]
	if m := t.keyed[tm.runID]; m != nil {
		delete(m, tm.tick.key())
		if len(list) <= keyedFrom/2 {
			delete(t.keyed, tm.runID)
		}
	}
	if len(list) == 0 {
		delete(t.runs, tm.runID)
		return
	}
	t.runs[tm.runID] = list
}

// set arms tm to fire at due and adds it to its run's timers; t.mu is held.
func (t *timers) set(tm *timer, due time.Time) {
	tm.due = due
	list := append(t.runs[tm.runID], tm)
	tm.idx = int32(len(list) - 1)
	t.runs[tm.runID] = list
	t.index(tm.runID, list)
	heap.Push(&t.queue, tm)
	t.rewind()
}

// unqueue takes tm out of the queue if it waits there; t.mu is held. The wake set for it, if
// it was first, stays: it finds nothing due and is set again.
func (t *timers) unqueue(tm *timer) {
	if tm.queued != notQueued {
		heap.Remove(&t.queue, int(tm.queued))
	}
}

// rewind sets the wake for the queue's first timer unless it is set for that time or before;
// t.mu is held.
func (t *timers) rewind() {
	if len(t.queue) == 0 {
		return
	}
	first := t.queue[0].due
	if !t.wakeAt.IsZero() && !first.Before(t.wakeAt) {
		return
	}
	t.wakeAt = first
	t.wake.Reset(first.Sub(t.now()))
}

// wakeUp takes the timers due out of the queue and fires each on a goroutine of its own, as a
// runtime timer each would, then sets the wake for the next. Due means at or before the time
// the wake was set for, or now on the engine's clock if that is later.
func (t *timers) wakeUp() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	now := t.now()
	if now.Before(t.wakeAt) {
		now = t.wakeAt
	}
	t.wakeAt = time.Time{}
	for len(t.queue) > 0 && !t.queue[0].due.After(now) {
		go t.fired(heap.Pop(&t.queue).(*timer))
	}
	t.rewind()
}

// index keeps run runID's timers by key once it holds more than keyedFrom; t.mu is held.
func (t *timers) index(runID string, list []*timer) {
	if m := t.keyed[runID]; m != nil {
		tm := list[len(list)-1]
		m[tm.tick.key()] = tm
		return
	}
	if len(list) <= keyedFrom {
		return
	}
	m := make(map[tickKey]*timer, len(list))
	for _, tm := range list {
		m[tm.tick.key()] = tm
	}
	t.keyed[runID] = m
}

// fired publishes the tick; a failed publication is tried again a second later. A timer that
// another replaced meanwhile leaves the run's timers alone.
func (t *timers) fired(tm *timer) {
	err := t.fire(tm.runID, tm.command())
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.find(tm.runID, tm.tick) != tm {
		return
	}
	t.remove(tm)
	var d *dropError
	if err != nil && !errors.As(err, &d) {
		t.log.Warn("runner: a tick could not be published and is tried again", "run_id", tm.runID, "step", tm.tick.step, "item", tm.tick.item, "err", err)
		t.set(tm, t.now().Add(retryDelay))
		return
	}
	if err != nil {
		t.log.Error("runner: a tick cannot be published", "run_id", tm.runID, "step", tm.tick.step, "item", tm.tick.item, "err", err)
	}
}

// cancelRun stops the timers of a run that ended.
func (t *timers) cancelRun(runID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tm := range t.runs[runID] {
		t.unqueue(tm)
	}
	delete(t.runs, runID)
	delete(t.keyed, runID)
}

// cancelWhere stops the timers of the runs mine accepts (those of a partition let go).
func (t *timers) cancelWhere(mine func(runID string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, list := range t.runs {
		if mine(id) {
			for _, tm := range list {
				t.unqueue(tm)
			}
			delete(t.runs, id)
			delete(t.keyed, id)
		}
	}
}

// close stops every timer; arm does nothing afterwards.
func (t *timers) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.wake.Stop()
	t.runs = nil
	t.keyed = nil
	t.queue = nil
}

// timerQueue is a heap of timers, the first due first ([container/heap]); each timer knows its
// place in it, so that one disarmed leaves it in O(log n).
type timerQueue []*timer

func (q timerQueue) Len() int           { return len(q) }
func (q timerQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }

func (q timerQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].queued, q[j].queued = int32(i), int32(j)
}

func (q *timerQueue) Push(x any) {
	tm := x.(*timer)
	tm.queued = int32(len(*q))
	*q = append(*q, tm)
}

// Pop takes the last timer out; the queue's array shrinks by half once a quarter of it is in
// use, so that a burst of waiting runs, once over, does not keep its size.
func (q *timerQueue) Pop() any {
	old := *q
	last := len(old) - 1
	tm := old[last]
	old[last] = nil
	tm.queued = notQueued
	*q = old[:last]
	if c := cap(old); c > minQueueCap && last < c/4 {
		*q = append(make(timerQueue, 0, c/2), old[:last]...)
	}
	return tm
}

// minQueueCap is the size below which the queue's array is kept whatever it holds.
const minQueueCap = 256
