package runner

import (
	"errors"
	"fmt"
	"testing"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/testkit/allocs"
	"github.com/reins-run/reins/workflow"
)

// TestNewEntryAllocs: a decision's entry and its record are one allocation, and the entry
// points at the record it was given.
func TestNewEntryAllocs(t *testing.T) {
	run, b := &engine.Run{ID: "r-1"}, &workflow.Bundle{}
	ent := newEntry(engine.Record{Run: run}, b)
	if ent.rec.Run != run || ent.bundle != b {
		t.Fatalf("newEntry = %+v", ent)
	}
	if n := allocs.PerRun(100, func() { _ = newEntry(engine.Record{Run: run}, b) }); n != 1 {
		t.Errorf("newEntry allocates %v times, want 1", n)
	}
}

// TestIsRefusal: a refusal is told apart, wrapped or not, and checking an event without an
// error allocates nothing.
func TestIsRefusal(t *testing.T) {
	ref := &refusal{}
	for _, c := range []struct {
		err  error
		want bool
	}{{nil, false}, {errors.New("x"), false}, {ref, true}, {fmt.Errorf("w: %w", ref), true}} {
		if got := isRefusal(c.err); got != c.want {
			t.Errorf("isRefusal(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if n := allocs.PerRun(100, func() { _ = isRefusal(nil) }); n != 0 {
		t.Errorf("isRefusal(nil) allocates %v times, want 0", n)
	}
}
