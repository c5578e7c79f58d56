package clock

import (
	"context"
	"sync"
	"time"
)

// Manual is a clock that moves only when Advance is called, and whose waits block until it
// gets there: for tests of code that waits while other goroutines go on (a rate limiter's
// waiters and lease renewals), where a Virtual clock, which jumps forward on every Sleep, would
// let each wait move the others' time. Nothing happens in real time: a test advances it after
// it knows, through a channel, that what it awaits is waiting.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	waiters []manualWaiter
}

type manualWaiter struct {
	at time.Time
	c  chan time.Time
}

// NewManual returns a manual clock at start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// After returns a channel that receives the clock's time once Advance has moved it d past the
// time of this call. The wait is registered before After returns.
func (m *Manual) After(d time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if d <= 0 {
		c <- m.now
		return c
	}
	m.waiters = append(m.waiters, manualWaiter{at: m.now.Add(d), c: c})
	return c
}

// Sleep blocks until Advance has moved the clock d past the time of the call, or ctx is done.
func (m *Manual) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	select {
	case <-m.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WithDeadline returns a context cancelled once Advance reaches deadline.
func (m *Manual) WithDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	c := m.After(deadline.Sub(m.Now()))
	go func() {
		select {
		case <-c:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Next returns the time of the earliest wait not yet due, and false when nothing waits: a test
// that lets time run as fast as its waits allow advances to it.
func (m *Manual) Next() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.waiters) == 0 {
		return time.Time{}, false
	}
	next := m.waiters[0].at
	for _, w := range m.waiters[1:] {
		if w.at.Before(next) {
			next = w.at
		}
	}
	return next, true
}

// Advance moves the clock forward by d (negative durations are ignored) and wakes the waits
// that are due.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if w.at.After(m.now) {
			kept = append(kept, w)
			continue
		}
		w.c <- m.now
	}
	clear(m.waiters[len(kept):])
	m.waiters = kept
}
