package engine_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// TestDecideSharesSafely: the state Decide returns shares with the one it was given what the
// decision left alone, and two decisions from one state (a shell decides another event on the
// state it holds when a save fails) never see each other's changes: each writes only into what
// it copied, and an append to a list of the state moves the list even when it has room left, as
// a decoded state's lists may have.
func TestDecideSharesSafely(t *testing.T) {
	def := build(t, func() *workflow.Builder {
		wf := workflow.New("share")
		wf.Task("s", "h")
		wf.Task("x", "h")
		wf.Task("y", "h")
		wf.Edge("s", "x")
		wf.Edge("s", "y") // both fire: x and y run at once, and either may end first
		return wf
	}())
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	decide := func(run *engine.Run, ev protocol.Event) *engine.Run {
		t.Helper()
		ev.At = at
		next, _, err := engine.Decide(def, run, ev)
		if err != nil {
			t.Fatalf("Decide(%s): %v", ev.Type, err)
		}
		return next
	}
	answer := func(typ protocol.EventType, step, out string) protocol.Event {
		return protocol.Event{Type: typ, Step: step, Item: -1, Activation: 1, Iteration: 1, Attempt: 1, Output: json.RawMessage(out), Error: "no", Permanent: true}
	}
	signal := func(id, data string) protocol.Event {
		return protocol.Event{Type: protocol.EvSignal, Name: "later", ID: id, By: "ann", Output: json.RawMessage(data), Item: -1}
	}
	run := decide(&engine.Run{ID: "r"}, protocol.Event{Type: protocol.EvStart, Input: json.RawMessage(`{}`), By: "ann", Item: -1})
	run = decide(run, answer(protocol.EvCompleted, "s", `"s"`))
	run = decide(run, signal("s0", `0`)) // kept: no step waits for it
	// Lists with room left, as json.Unmarshal leaves them.
	run.Path = append(make([]string, 0, 8), run.Path...)
	run.SignalIDs = append(make([]string, 0, 8), run.SignalIDs...)
	run.Acts = append(make([]engine.Act, 0, 8), run.Acts...)
	run.Signals["later"] = append(make([]json.RawMessage, 0, 8), run.Signals["later"]...)
	before := mustJSON(t, run)

	events := []protocol.Event{
		answer(protocol.EvCompleted, "x", `"x"`), // appends x to Path
		answer(protocol.EvCompleted, "y", `"y"`), // appends y in the same place
		answer(protocol.EvFailed, "x", ""),       // and x again, failed, and the run ends
		signal("s1", `1`),                        // a signal id, an act and a kept signal
		signal("s2", `2`),                        // others in the same places
		{Type: protocol.EvCancel, By: "ann", Item: -1},
	}
	results := make([]*engine.Run, len(events))
	saved := make([][]byte, len(events))
	for i, ev := range events {
		results[i] = decide(run, ev)
		saved[i] = mustJSON(t, results[i])
	}
	for i, ev := range events {
		if got := mustJSON(t, results[i]); !bytes.Equal(got, saved[i]) {
			t.Errorf("the state decided from %s %s changed when other events were decided on the same state:\nthen %s\nnow  %s", ev.Type, ev.Step+ev.ID, saved[i], got)
		}
	}
	if after := mustJSON(t, run); !bytes.Equal(after, before) {
		t.Errorf("Decide changed the state it was given:\nbefore %s\nafter  %s", before, after)
	}

	next := results[0] // x completed: s and y are as they were
	for key, shared := range map[string]bool{"s": true, "y": true, "x": false} {
		if got := next.Steps[key] == run.Steps[key]; got != shared {
			t.Errorf("step %s shared with the state decided from: %v, want %v", key, got, shared)
		}
	}
	if !bytes.Equal(next.Input, run.Input) || &next.Input[0] != &run.Input[0] {
		t.Error("the run's input was copied: a decision never writes into it")
	}
	if !slices.Equal(next.Path, []string{"s", "x"}) || !slices.Equal(results[1].Path, []string{"s", "y"}) {
		t.Errorf("paths %v and %v, want [s x] and [s y]", next.Path, results[1].Path)
	}
}
