package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/workflow"
)

// QueuePoll is how often a schedule with a due time queued behind a running run looks whether
// that run ended.
const QueuePoll = 5 * time.Second

// maxRaces bounds the decisions of one trigger in one Tick that lose their compare-and-set to
// another engine: each loss means another engine moved the state, so the next decision sees it.
const maxRaces = 8

// Tick decides every schedule trigger of the active workflows at the clock's now: it starts
// the runs Plan says, then saves the state with compare-and-set (a crash in between starts the
// same runs again, by the same ids: nothing new). It returns when it should be called again:
// the earliest next due time (or a QueuePoll ahead while a due time waits in a queue); the zero
// time when no schedule is active.
func (s *Service) Tick(ctx context.Context) (time.Time, error) {
	kv, err := s.bucket(ctx)
	if err != nil {
		return time.Time{}, err
	}
	var next time.Time
	var errs []error
	for _, a := range s.snapshot() {
		for _, t := range a.def.Triggers {
			sch := a.schedules[t.Name]
			if sch == nil {
				continue
			}
			at, err := s.decide(ctx, kv, a, t, sch)
			if err != nil {
				errs = append(errs, err)
				s.cfg.Log.Error("trigger: a schedule could not be decided; trying again", "workflow", a.reg.Name, "trigger", t.Name, "err", err)
				at = s.cfg.Clock.Now().Add(QueuePoll)
			}
			if !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	return next, errors.Join(errs...)
}

// decide decides trigger t of a once (again after losing a race), and returns when to decide it
// next.
func (s *Service) decide(ctx context.Context, kv jetstream.KeyValue, a *active, t workflow.Trigger, sch *workflow.Schedule) (time.Time, error) {
	key := ScheduleKey(a.reg.Name, t.Name)
	for range maxRaces {
		st, rev, err := readState(ctx, kv, key)
		if err != nil {
			return time.Time{}, err
		}
		now := s.cfg.Clock.Now()
		running := false
		if st.Run != "" && t.Overlap != workflow.OverlapAllow {
			if running, err = s.running(ctx, st, now); err != nil {
				return time.Time{}, err
			}
		}
		d := Plan(sch, t, st, running, now)
		for _, due := range d.Fire {
			id := RunID("schedule", a.reg.Name, t.Name, DueKey(due))
			in, _ := json.Marshal(map[string]string{"trigger": t.Name, "due": DueKey(due)})
			_, err := s.start(ctx, a, t.Name, id, in)
			switch {
			case errors.Is(err, ErrTaken): // deciding it again would not free the id: go on
				s.cfg.Log.Error("trigger: a due time's run id names a run the trigger did not start; the due time starts nothing", "workflow", a.reg.Name, "trigger", t.Name, "run_id", id)
				continue
			case err != nil:
				return time.Time{}, err
			}
			d.State.Run, d.State.Started = id, now.UTC()
		}
		if d.Skipped > 0 {
			s.cfg.Log.Info("trigger: due times start no run (missed beyond catch_up, or overlapping the previous run)", "workflow", a.reg.Name, "trigger", t.Name, "skipped", d.Skipped, "overlap", t.Overlap)
		}
		if d.State == st {
			return nextWake(sch, d.State, now), nil
		}
		ok, err := saveState(ctx, kv, key, d.State, rev)
		if err != nil {
			return time.Time{}, err
		}
		if ok && !d.More {
			return nextWake(sch, d.State, now), nil
		}
		// Another engine saved first (decide again on what it saved), or more due times wait.
	}
	return s.cfg.Clock.Now(), nil
}

// nextWake is when a trigger in state st is decided next.
func nextWake(sch *workflow.Schedule, st State, now time.Time) time.Time {
	next := Next(sch, st)
	if !st.Queued.IsZero() {
		if poll := now.Add(QueuePoll); next.IsZero() || poll.Before(next) {
			next = poll
		}
	}
	return next
}

// running reports whether st.Run still runs: its record says so, or it has none yet and was
// started less than StartingFor ago.
func (s *Service) running(ctx context.Context, st State, now time.Time) (bool, error) {
	rec, err := s.admin.Get(ctx, st.Run)
	switch {
	case errors.Is(err, client.ErrNotFound):
		return now.Sub(st.Started) < StartingFor, nil
	case err != nil:
		return false, err
	}
	return !rec.Run.Finished(), nil
}

// readState reads the state at key and its revision (0: none yet).
func readState(ctx context.Context, kv jetstream.KeyValue, key string) (State, uint64, error) {
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return State{}, 0, nil
	case err != nil:
		return State{}, 0, fmt.Errorf("trigger: read %s: %w", key, err)
	}
	var st State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		// A state that cannot be read starts over from now, as a new trigger does.
		return State{}, e.Revision(), nil
	}
	return st, e.Revision(), nil
}

// saveState writes st at key if its revision is still rev (0: the key must not exist); false
// when another writer was first.
func saveState(ctx context.Context, kv jetstream.KeyValue, key string, st State, rev uint64) (bool, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return false, err
	}
	if rev == 0 {
		_, err = kv.Create(ctx, key, b)
	} else {
		_, err = kv.Update(ctx, key, b, rev)
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists), isWrongSequence(err):
		return false, nil
	}
	return false, fmt.Errorf("trigger: save %s: %w", key, err)
}

// isWrongSequence reports whether err is a compare-and-set that lost.
func isWrongSequence(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
