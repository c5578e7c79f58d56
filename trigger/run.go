package trigger

import (
	"context"
	"time"
)

// SyncEvery is how often Run reads the registry again for workflows registered since, and the
// longest it sleeps between two ticks.
const SyncEvery = 5 * time.Second

// Run follows the registry and decides the schedules on their due times until ctx ends. It
// returns once ready is closed: after the first Sync (an error of which is returned), so that
// a caller knows the triggers registered before are active.
func (s *Service) Run(ctx context.Context, ready chan<- struct{}) error {
	if err := s.Sync(ctx); err != nil {
		return err
	}
	if err := s.startSubjects(ctx); err != nil {
		return err
	}
	defer s.stopSubjects()
	s.syncSubjects(ctx)
	close(ready)
	for {
		next, _ := s.Tick(ctx) // errors are logged; the trigger is decided again soon
		wait := SyncEvery
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(s.cfg.Clock.Now()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Error("trigger: cannot read the registry of workflows; trying again", "err", err)
		}
		s.syncSubjects(ctx)
	}
}
