package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
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
	ev := func(typ protocol.EventType, step string, act, iter, att int) protocol.Event {
		return protocol.Event{Type: typ, At: at, Step: step, Item: -1, Activation: act, Iteration: iter, Attempt: att, Output: json.RawMessage(`1`)}
	}
	tests := []struct {
		name string
		ev   protocol.Event
		want bool
	}{
		{"current attempt", ev(protocol.EvContinued, "loop", 1, 1, 1), false},
		{"next attempt", ev(protocol.EvFailed, "loop", 1, 1, 2), true},
		{"next iteration", ev(protocol.EvContinued, "loop", 1, 2, 1), true},
		{"next activation", ev(protocol.EvCompleted, "loop", 2, 1, 1), true},
		{"step not started", ev(protocol.EvCompleted, "after", 1, 1, 1), true},
		{"unknown step", ev(protocol.EvCompleted, "nope", 1, 1, 1), false},
		{"tick", protocol.Event{Type: protocol.EvTick, At: at, Step: "loop", Item: -1, Activation: 9}, false},
		{"cancel", protocol.Event{Type: protocol.EvCancel, At: at}, false},
	}
	for _, tc := range tests {
		if got := engine.Ahead(def, run, tc.ev); got != tc.want {
			t.Errorf("%s: Ahead = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Once the iteration is decided, its answer is stale, not ahead, and the next one is current.
	run, _, err = engine.Decide(def, run, ev(protocol.EvContinued, "loop", 1, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if engine.Ahead(def, run, ev(protocol.EvContinued, "loop", 1, 1, 1)) {
		t.Error("a decided answer is reported ahead")
	}
	if engine.Ahead(def, run, ev(protocol.EvContinued, "loop", 1, 2, 1)) {
		t.Error("the current iteration is reported ahead")
	}
}

// TestAheadWithResumes: within an iteration, an answer of a resumed task the state has not
// dispatched yet is ahead; the paused task's answers are stale once it resumed.
func TestAheadWithResumes(t *testing.T) {
	b := workflow.New("ahead")
	b.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	b.Agent("act", "m").WithGoal("g")
	def, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run, _, err := engine.Start(def, "r1", json.RawMessage(`{}`), at)
	if err != nil {
		t.Fatal(err)
	}
	answer := func(typ protocol.EventType, attempt, resume int) protocol.Event {
		return protocol.Event{Type: typ, At: at, Step: "act", Item: -1, Activation: 1, Iteration: 1, Attempt: attempt, Resume: resume,
			Output: json.RawMessage(`1`), Pending: []protocol.PendingCall{{CallID: "c1"}}}
	}
	decide := func(run *engine.Run, ev protocol.Event) *engine.Run {
		t.Helper()
		next, _, err := engine.Decide(def, run, ev)
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	waiting := decide(run, answer(protocol.EvWaiting, 1, 0))
	resumed := decide(waiting, protocol.Event{Type: protocol.EvDecision, At: at, Step: "act", Item: -1, Approve: true})
	if resumed.Steps["act"].Resume != 1 || resumed.Steps["act"].Status != protocol.StepRunning {
		t.Fatalf("act was not resumed: %+v", resumed.Steps["act"])
	}
	tests := []struct {
		name string
		run  *engine.Run
		ev   protocol.Event
		want bool
	}{
		{"the current task waits", run, answer(protocol.EvWaiting, 1, 0), false},
		{"a waiting answer of the next attempt", run, answer(protocol.EvWaiting, 2, 0), true},
		{"the resumed task answers before the decision is saved", waiting, answer(protocol.EvCompleted, 1, 1), true},
		{"the resumed task's retry", resumed, answer(protocol.EvFailed, 2, 1), true},
		{"the resumed task", resumed, answer(protocol.EvCompleted, 1, 1), false},
		{"the paused task once resumed", resumed, answer(protocol.EvCompleted, 1, 0), false},
		{"a second resume", resumed, answer(protocol.EvCompleted, 1, 2), true},
		{"a decision", waiting, protocol.Event{Type: protocol.EvDecision, At: at, Step: "act", Item: -1, Iteration: 1, Resume: 1}, false},
		{"a resume", waiting, protocol.Event{Type: protocol.EvResume, At: at, Step: "act", Item: -1, Iteration: 2}, false},
		{"a signal", waiting, protocol.Event{Type: protocol.EvSignal, At: at, Item: -1, Name: "x", ID: "1"}, false},
	}
	for _, tc := range tests {
		if got := engine.Ahead(def, tc.run, tc.ev); got != tc.want {
			t.Errorf("%s: Ahead = %v, want %v", tc.name, got, tc.want)
		}
	}
}
