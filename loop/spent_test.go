package loop_test

import (
	"context"
	"testing"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
)

// StopIfSpent stops a run whose iteration budget the last Step spent, without a model call, and
// leaves a run with budget left untouched.
func TestStopIfSpent(t *testing.T) {
	text := "done"
	calls := []model.ToolCall{{Name: "noop"}}
	m, err := model.NewScripted([]model.Turn{{ToolCalls: calls}, {ToolCalls: calls}, {Text: &text}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loop.New(loop.Config{Model: m, Budget: loop.Budget{MaxIterations: 2}, Clock: clock.NewVirtual(clock.Real{}.Now())})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := c.Start("run", "goal")
	if r.Step(ctx) || r.StopIfSpent(ctx) {
		t.Fatalf("stopped after iteration 1: %s", r.State().StopReason)
	}
	if r.Step(ctx) {
		t.Fatalf("Step stopped iteration 2: %s", r.State().StopReason)
	}
	calledBefore := r.State().ModelCalls
	if !r.StopIfSpent(ctx) || r.State().StopReason != loop.MaxIterations {
		t.Fatalf("after iteration 2 of 2: stopped %v with %q, want max_iterations", r.State().Stopped(), r.State().StopReason)
	}
	if r.State().ModelCalls != calledBefore {
		t.Fatal("StopIfSpent called the model")
	}
}
