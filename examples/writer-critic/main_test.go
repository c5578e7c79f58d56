package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/agent"
)

// TestRun runs the program in process and durably, end to end: the critic approves the third
// draft by escalating, which ends the loop, and both modes print the same events and result.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outputs := map[bool]string{}
	for _, durable := range []bool{false, true} {
		var buf bytes.Buffer
		res, err := Run(ctx, &buf, Options{Durable: durable, Data: t.TempDir()})
		if err != nil {
			t.Fatalf("durable=%v: %v", durable, err)
		}
		if res.Reason != agent.Escalated || res.By != "critic" || res.Turns != 6 || res.Usage.ModelCalls != 3 {
			t.Errorf("durable=%v: result %+v", durable, res)
		}
		if end := res.Loops["refine"]; end.Reason != agent.Escalated || end.Iterations != 3 {
			t.Errorf("durable=%v: the loop ended %+v", durable, end)
		}
		out := buf.String()
		for _, want := range []string{
			"  2 refine  iteration 1\n",
			`sets draft = "Agent loops can run forever."`,
			`critic  sets feedback = "Revise: say what bounds the loop;`,
			" 28 refine  iteration 3\n",
			" 39 critic  escalates: approved after 3 reviews\n",
			" 41 refine  ends escalated by critic: approved after 3 reviews\n",
			"result: escalated by critic (approved after 3 reviews) after 6 turns, 3 model calls, 201 tokens\n",
			"draft: Bounded agent loops stop when a budget runs out,",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("durable=%v: the output lacks %q:\n%s", durable, want, out)
			}
		}
		outputs[durable] = out
	}
	durable, ok := strings.CutSuffix(outputs[true], "durable: 6 tasks, one turn each\n")
	if !ok || durable != outputs[false] {
		t.Errorf("the two modes printed different things:\n%s\n---\n%s", outputs[false], outputs[true])
	}
}

// TestBudget: a critic that never approves ends at the run's turn budget, not never.
func TestBudget(t *testing.T) {
	root := agent.NewLoop("refine", 0, agent.Func("writer", func(context.Context, *agent.Turn) error { return nil }),
		agent.Func("critic", critique))
	s := agent.NewSession("budget", agent.Config{Budget: budget})
	for range agent.Run(context.Background(), root, s) {
	}
	if res := s.Result(); res.Reason != agent.MaxTurns || res.Turns != budget.MaxTurns {
		t.Errorf("result %+v", res)
	}
}
