package runner

import (
	"context"
	"errors"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/protocol"
)

// Saves that wait. A decision that only dispatches the next task of a running run (the next
// iteration of a loop, the next step) is carried out at once, but its save may wait up to the
// save window, so that the decisions of a fast loop are saved together: one write of the run
// record for several iterations. Nothing is lost meanwhile. The events stay unacknowledged
// until a save covers them, so an engine that dies before that save has them delivered again
// to the next engine, which decides them again on the saved state: the same decisions, whose
// tasks JetStream stores once (their message ids are the same). Everything else is saved at
// once, with whatever waited before it: the end of a run, a wait, schedules, sub-runs,
// signals, decisions of humans.

// DefaultSaveWindow is how long a decision may wait for the save that covers it when
// [Config.SaveWindow] is 0.
const DefaultSaveWindow = 100 * time.Millisecond

// maxWaiting bounds the decisions of a run that wait for a save, and so the events an engine
// that dies decides again.
const maxWaiting = 64

// deferSave reports whether the decision of ev, from old to next with cmds, may wait for a
// later save.
func (e *Engine) deferSave(sh *shard, ev *protocol.Event, old, next *entry, cmds []engine.Command) bool {
	if e.saveWindow <= 0 || old == nil || len(old.pending) >= maxWaiting || next.rec.Run.Status != protocol.RunRunning || sh.single[next.rec.Run.ID] || statusChanged(old, next) {
		return false
	}
	if ev.Type != protocol.EvContinued && ev.Type != protocol.EvCompleted {
		return false
	}
	for _, c := range cmds {
		if c.Type != engine.CmdDispatch && (c.Type != engine.CmdSchedule || !c.Watch) {
			return false
		}
	}
	return true
}

// saveQueue lists the runs of a shard whose decisions wait for a save, by when the save is due.
// The window is the same for every run, so they are due in the order they were added.
type saveQueue struct {
	due   []dueSave
	timer *time.Timer
}

type dueSave struct {
	runID string
	at    time.Time
}

func (q *saveQueue) add(runID string, at time.Time) {
	q.due = append(q.due, dueSave{runID, at})
	if len(q.due) == 1 {
		q.arm()
	}
}

// arm sets the timer to the first save due (none: it stays stopped).
func (q *saveQueue) arm() {
	if len(q.due) == 0 {
		return
	}
	d := time.Until(q.due[0].at)
	if q.timer == nil {
		q.timer = time.NewTimer(d)
		return
	}
	q.timer.Reset(d)
}

// fired is the channel of the timer; nil (never ready) when nothing is due.
func (q *saveQueue) fired() <-chan time.Time {
	if q.timer == nil || len(q.due) == 0 {
		return nil
	}
	return q.timer.C
}

// saveDue saves the runs of sh whose save is due, then arms the timer for the next one.
func (e *Engine) saveDue(ctx context.Context, sh *shard) {
	now := time.Now()
	n := 0
	for ; n < len(sh.saves.due) && !sh.saves.due[n].at.After(now); n++ {
		if ent := sh.cache.peek(sh.saves.due[n].runID); ent != nil && len(ent.pending) > 0 {
			e.flush(ctx, sh, ent)
		}
	}
	sh.saves.due = sh.saves.due[n:]
	sh.saves.arm()
}

// saveAll saves every run of sh whose decisions wait, as the engine stops.
func (e *Engine) saveAll(ctx context.Context, sh *shard) {
	var waiting []*entry // flush may remove an entry: not while the cache is walked
	sh.cache.all(func(ent *entry) {
		if len(ent.pending) > 0 {
			waiting = append(waiting, ent)
		}
	})
	for _, ent := range waiting {
		e.flush(ctx, sh, ent)
	}
	sh.saves.due = nil
	if sh.saves.timer != nil {
		sh.saves.timer.Stop()
	}
}

// flush saves ent, whose decisions wait, and acknowledges their events. When the save fails
// (another engine saved the run meanwhile, or the server did not answer), the events go back
// to JetStream, to be decided again on the saved state, and the cached state is dropped.
func (e *Engine) flush(ctx context.Context, sh *shard, ent *entry) {
	id := ent.rec.Run.ID
	data, err := e.encode(ctx, ent)
	if err == nil {
		var rev uint64
		if rev, err = e.put(ctx, id, data, false, ent.rev); err == nil {
			pending := ent.pending
			ent.pending, ent.rev = nil, rev
			e.settleAll(pending, ack)
			return
		}
	}
	e.log.Warn("runner: a run was not saved: its last events will be decided again", "run_id", id, "events", len(ent.pending), "err", err)
	e.unsaved(sh, id, ent, errors.As(err, new(*runstore.TooLargeError)))
}

// evict drops the cached state of a run, after saving what waits for a save.
func (e *Engine) evict(ctx context.Context, sh *shard, runID string) {
	if ent := sh.cache.peek(runID); ent != nil && len(ent.pending) > 0 {
		e.flush(ctx, sh, ent)
	}
	sh.cache.remove(runID)
}

// settleAll settles the events of ds as out; acknowledged, their decisions are saved, and
// the spans of what they ended are emitted.
func (e *Engine) settleAll(ds []decided, out outcome) {
	if out == ack {
		emitSpans(ds...)
	}
	for _, d := range ds {
		e.settle(d.m, out, d.ev)
	}
}
