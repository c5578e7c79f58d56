package clock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
)

// TestManual: a wait returns only once Advance has moved the clock past it, waits due at the
// same Advance all return, and a context deadline is cancelled by the clock, not real time.
func TestManual(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := clock.NewManual(start)
	short, long := m.After(time.Second), m.After(time.Minute)
	ctx, cancel := m.WithDeadline(context.Background(), start.Add(30*time.Second))
	defer cancel()
	if next, ok := m.Next(); !ok || !next.Equal(start.Add(time.Second)) {
		t.Errorf("Next = %v, %t: want the 1s wait", next, ok)
	}
	m.Advance(999 * time.Millisecond)
	select {
	case <-short:
		t.Fatal("a 1s wait returned after 999ms")
	default:
	}
	m.Advance(time.Millisecond)
	if got := <-short; !got.Equal(start.Add(time.Second)) {
		t.Errorf("the wait returned at %v", got)
	}
	if ctx.Err() != nil {
		t.Fatal("the deadline passed at 1s")
	}
	m.Advance(time.Hour)
	<-long
	<-ctx.Done()
	if now := m.Now(); !now.Equal(start.Add(time.Hour + time.Second)) {
		t.Errorf("Now = %v", now)
	}
	done := make(chan error, 1)
	sctx, scancel := context.WithCancel(context.Background())
	go func() { done <- m.Sleep(sctx, time.Second) }()
	scancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Sleep with its context cancelled = %v", err)
	}
	if err := m.Sleep(context.Background(), 0); err != nil {
		t.Errorf("Sleep(0) = %v", err)
	}
}

// ExampleManual: a wait returns only once the clock is moved past it.
func ExampleManual() {
	m := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	done := m.After(time.Minute)
	m.Advance(30 * time.Second)
	select {
	case <-done:
		fmt.Println("returned after 30s")
	default:
		fmt.Println("still waiting after 30s")
	}
	m.Advance(30 * time.Second)
	fmt.Println("returned at", (<-done).Format("15:04"))
	// Output:
	// still waiting after 30s
	// returned at 00:01
}
