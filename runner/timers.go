package runner

import (
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/wire"
)

// timers holds the in-memory timers of schedule commands, by run and by the message id of the
// tick each one publishes (so that a timer armed twice runs once).
type timers struct {
	now  func() time.Time
	fire func(runID string, c engine.Command) error
	log  *slog.Logger

	mu     sync.Mutex
	runs   map[string]map[string]*timer
	closed bool
}

// timer is one armed timer; fired compares it with the map's, since a watch may have replaced it.
// due is when it fires, on the engine's clock.
type timer struct {
	t   *time.Timer
	due time.Time
}

func newTimers(now func() time.Time, fire func(string, engine.Command) error, log *slog.Logger) *timers {
	return &timers{now: now, fire: fire, log: log, runs: map[string]map[string]*timer{}}
}

// arm sets a timer for c, a schedule command of run runID, unless one is set for the same tick.
// A tick already due fires at once.
// A task's watch (c.Watch) replaces the step's previous one, so that a step has one timer
// however many iterations it dispatches, and a loop that answers in time fires none. out is
// when the task a watch is for went out at the latest, on the engine's clock (watchDue).
func (t *timers) arm(runID string, c engine.Command, out time.Time) {
	key := wire.EventMsgID(outbox.TickEvent(runID, c), "")
	due := c.At
	if c.Watch {
		key = "watch/" + c.Step + "/" + strconv.Itoa(c.Item)
		due = watchDue(c, out)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if old, ok := t.runs[runID][key]; ok {
		if !c.Watch {
			return
		}
		old.t.Stop()
	}
	t.set(runID, key, c, due)
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

// set arms the timer to fire at due; t.mu is held.
func (t *timers) set(runID, key string, c engine.Command, due time.Time) {
	m := t.runs[runID]
	if m == nil {
		m = map[string]*timer{}
		t.runs[runID] = m
	}
	tm := &timer{due: due}
	m[key] = tm
	tm.t = time.AfterFunc(due.Sub(t.now()), func() { t.fired(runID, key, tm, c) })
}

// fired publishes the tick; a failed publication is tried again a second later. A timer that
// another replaced meanwhile leaves the map alone.
func (t *timers) fired(runID, key string, tm *timer, c engine.Command) {
	err := t.fire(runID, c)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.runs[runID][key] != tm {
		return
	}
	var d *dropError
	if err != nil && !errors.As(err, &d) {
		t.log.Warn("runner: a tick could not be published and is tried again", "run_id", runID, "tick", key, "err", err)
		t.set(runID, key, c, t.now().Add(retryDelay))
		return
	}
	if err != nil {
		t.log.Error("runner: a tick cannot be published", "run_id", runID, "tick", key, "err", err)
	}
	delete(t.runs[runID], key)
	if len(t.runs[runID]) == 0 {
		delete(t.runs, runID)
	}
}

// cancelRun stops the timers of a run that ended.
func (t *timers) cancelRun(runID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tm := range t.runs[runID] {
		tm.t.Stop()
	}
	delete(t.runs, runID)
}

// cancelWhere stops the timers of the runs mine accepts (those of a partition let go).
func (t *timers) cancelWhere(mine func(runID string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, m := range t.runs {
		if mine(id) {
			for _, tm := range m {
				tm.t.Stop()
			}
			delete(t.runs, id)
		}
	}
}

// close stops every timer; arm does nothing afterwards.
func (t *timers) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, m := range t.runs {
		for _, tm := range m {
			tm.t.Stop()
		}
	}
	t.runs = nil
}
