package eval_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/eval"
	"github.com/reins-run/reins/fixture"
	"github.com/reins-run/reins/loop"
)

// TestReplayFromSavedState is the "replay from saved state" item of the evaluation strategy, for
// every shipped fixture: stop the run after each iteration, save its State as JSON, resume it on
// a fresh controller (fresh model, mocks and approver) in a clock at the same time, and require
// the same outcome as the uninterrupted run.
func TestReplayFromSavedState(t *testing.T) {
	fixtures, err := eval.LoadAll([]string{"../evals"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fixtures {
		if f.CancelAfter != nil {
			continue // cancellation comes from the caller, not from the state: not a replay
		}
		t.Run(f.CaseID, func(t *testing.T) {
			want := runWhole(t, f)
			for cut := 1; cut <= want.State.Iteration; cut++ {
				got := runResumed(t, f, cut)
				if got.StopReason != want.StopReason || got.Answer != want.Answer || got.Detail != want.Detail {
					t.Fatalf("resumed after iteration %d: got %s %q (%s), want %s %q (%s)",
						cut, got.StopReason, got.Answer, got.Detail, want.StopReason, want.Answer, want.Detail)
				}
				if got.State.Iteration != want.State.Iteration || got.State.ToolCalls != want.State.ToolCalls {
					t.Fatalf("resumed after iteration %d: %d iterations and %d tool calls, want %d and %d",
						cut, got.State.Iteration, got.State.ToolCalls, want.State.Iteration, want.State.ToolCalls)
				}
				if g, w := mustJSON(t, got.State.Messages), mustJSON(t, want.State.Messages); g != w {
					t.Fatalf("resumed after iteration %d: the conversation differs from the uninterrupted run", cut)
				}
			}
		})
	}
}

func runWhole(t *testing.T, f *fixture.Fixture) loop.Result {
	t.Helper()
	c, err := eval.Controller(f, clock.NewVirtual(eval.Epoch), eval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Run(context.Background(), "replay", f.Goal)
}

// runResumed runs cut iterations, saves the state as JSON, and finishes on a new controller.
func runResumed(t *testing.T, f *fixture.Fixture, cut int) loop.Result {
	t.Helper()
	clk := clock.NewVirtual(eval.Epoch)
	c, err := eval.Controller(f, clk, eval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := c.Start("replay", f.Goal)
	stopped := false
	for r.State().Iteration < cut && !stopped {
		stopped = r.Step(context.Background())
	}
	saved, err := json.Marshal(r.State())
	if err != nil {
		t.Fatal(err)
	}
	var st loop.State
	if err := json.Unmarshal(saved, &st); err != nil {
		t.Fatal(err)
	}
	clk2 := clock.NewVirtual(clk.Now())
	c2, err := eval.Controller(f, clk2, eval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r2 := c2.Resume(&st)
	for !r2.Step(context.Background()) {
	}
	return r2.Result()
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
