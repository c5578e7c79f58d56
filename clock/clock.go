// Package clock provides the time source of reins: the real wall clock for production runs and a
// virtual clock for evals and tests, so that budgets, latencies and backoff are deterministic.
//
// It owns nothing but time. It must not import any other reins package.
package clock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Clock is the loop's view of time. Every duration the loop measures or waits for goes through it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d or until ctx is done, whichever comes first, and returns ctx.Err() in the
	// latter case.
	Sleep(ctx context.Context, d time.Duration) error
	// WithDeadline returns a context that is cancelled when this clock reaches deadline. A virtual
	// clock cannot cancel anything in real time, so it returns ctx as it is and relies on callers
	// comparing Now() with the deadline.
	WithDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc)
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Sleep waits on a real timer.
func (Real) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WithDeadline is context.WithDeadline.
func (Real) WithDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, deadline)
}

// Virtual is a clock that only moves when someone sleeps on it or advances it. Sleeping returns at
// once after moving the clock forward by the duration, so a scripted latency of "2s" costs no real
// time. Concurrent sleeps add up: a virtual clock has no notion of overlapping waits, which makes
// it a conservative (never optimistic) measure of elapsed time.
type Virtual struct {
	mu  sync.Mutex
	now time.Time
}

// NewVirtual returns a virtual clock that starts at start.
func NewVirtual(start time.Time) *Virtual { return &Virtual{now: start} }

// Now returns the virtual time.
func (v *Virtual) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

// Sleep advances the virtual time by d, unless ctx is already done.
func (v *Virtual) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	v.Advance(d)
	return nil
}

// Advance moves the virtual time forward by d (negative durations are ignored).
func (v *Virtual) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	v.mu.Lock()
	v.now = v.now.Add(d)
	v.mu.Unlock()
}

// WithDeadline returns ctx unchanged with a no-op cancel: see the Clock interface.
func (v *Virtual) WithDeadline(ctx context.Context, _ time.Time) (context.Context, context.CancelFunc) {
	return ctx, func() {}
}

// Duration is a time.Duration written in files as a Go duration string ("30s", "5m", "1h30m").
// It reads from JSON strings and from TOML through encoding.TextUnmarshaler.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as a duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses a duration string; negative durations are rejected.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration (examples: \"500ms\", \"30s\", \"5m\")", b)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	*d = Duration(v)
	return nil
}
