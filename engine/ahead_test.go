package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/workflow"
)

func TestAhead(t *testing.T) {
	b := workflow.New("ahead")
	b.AgentLoop("loop", "h").WithMaxIterations(5)
	b.Task("after", "h2")
	b.Edge("loop", "after")
	def, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run, _, err := engine.Start(def, "r1", json.RawMessage(`{}`), at)
	if err != nil {
		t.Fatal(err)
	}
	ev := func(typ engine.EventType, step string, act, iter, att int) engine.Event {
		return engine.Event{Type: typ, At: at, Step: step, Item: -1, Activation: act, Iteration: iter, Attempt: att, Output: json.RawMessage(`1`)}
	}
	tests := []struct {
		name string
		ev   engine.Event
		want bool
	}{
		{"current attempt", ev(engine.EvContinued, "loop", 1, 1, 1), false},
		{"next attempt", ev(engine.EvFailed, "loop", 1, 1, 2), true},
		{"next iteration", ev(engine.EvContinued, "loop", 1, 2, 1), true},
		{"next activation", ev(engine.EvCompleted, "loop", 2, 1, 1), true},
		{"step not started", ev(engine.EvCompleted, "after", 1, 1, 1), true},
		{"unknown step", ev(engine.EvCompleted, "nope", 1, 1, 1), false},
		{"tick", engine.Event{Type: engine.EvTick, At: at, Step: "loop", Item: -1, Activation: 9}, false},
		{"cancel", engine.Event{Type: engine.EvCancel, At: at}, false},
	}
	for _, tc := range tests {
		if got := engine.Ahead(def, run, tc.ev); got != tc.want {
			t.Errorf("%s: Ahead = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Once the iteration is decided, its answer is stale, not ahead, and the next one is current.
	run, _, err = engine.Decide(def, run, ev(engine.EvContinued, "loop", 1, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if engine.Ahead(def, run, ev(engine.EvContinued, "loop", 1, 1, 1)) {
		t.Error("a decided answer is reported ahead")
	}
	if engine.Ahead(def, run, ev(engine.EvContinued, "loop", 1, 2, 1)) {
		t.Error("the current iteration is reported ahead")
	}
}
