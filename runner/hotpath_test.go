package runner

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/testkit/allocs"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
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

// TestKeptEventLeavesItsValues: an event handed back to events is emptied, so that the next
// event decoded into it writes into slices of its own: the output, usage and parent the state
// decided from the first event holds stay as they were. Getting an event and decoding into it
// allocates nothing but what the event holds.
func TestKeptEventLeavesItsValues(t *testing.T) {
	first := []byte(`{"run_id":"r-1","type":"continued","at":"2026-11-30T00:00:00Z","step":"s","activation":1,"iteration":1,"attempt":1,"output":{"n":1},"usage":{"model_calls":1},"parent":{"run_id":"p","step":"c","item":-1,"activation":1}}`)
	second := []byte(`{"run_id":"r-2","type":"continued","at":"2026-11-30T00:00:01Z","step":"s","activation":1,"iteration":2,"attempt":1,"output":{"n":2},"usage":{"model_calls":5},"parent":{"run_id":"q","step":"d","item":-1,"activation":2}}`)
	ev := new(protocol.Event)
	if err := wire.DecodeEventInto(first, ev); err != nil {
		t.Fatal(err)
	}
	output, usage, parent := ev.Output, ev.Usage, ev.Parent
	keepEvent(ev)
	if !reflect.DeepEqual(*ev, protocol.Event{}) {
		t.Fatalf("a kept event holds %+v, want nothing", *ev)
	}
	if err := wire.DecodeEventInto(second, ev); err != nil {
		t.Fatal(err)
	}
	if string(output) != `{"n":1}` || usage.ModelCalls != 1 || parent.RunID != "p" {
		t.Errorf("the values of the first event became %s, %+v, %+v after a second was decoded into its event", output, usage, parent)
	}
	if want, _ := wire.DecodeEvent(second); !reflect.DeepEqual(ev, want) {
		t.Errorf("the second event decoded into a kept one = %+v, want %+v", ev, want)
	}

	bare := []byte(`{"run_id":"r-1","type":"continued","at":"2026-11-30T00:00:00Z","step":"s","activation":1,"iteration":1,"attempt":1}`)
	n := allocs.PerRun(100, func() {
		ev := events.Get().(*protocol.Event)
		if err := wire.DecodeEventInto(bare, ev); err != nil {
			t.Fatal(err)
		}
		keepEvent(ev)
	})
	if !allocs.Race && n != 0 {
		t.Errorf("an event from events, decoded and kept, allocates %v times, want 0", n)
	}
}
