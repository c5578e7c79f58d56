package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/reins-run/reins/agent"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
)

// ComposedLoopIterations measures b.Loops() iterations of a Loop agent (package agent, in process)
// whose one sub-agent is an LLM agent on a scripted model: each iteration is one leaf turn, that
// is a goal rendered from the state, a new loop run of one controller iteration (a text answer),
// its trace events wrapped and handed on, the answer written under the agent's output key, and
// the composition's own events (iteration, start, message, state, end) with their budget checks.
// Every event is read by the caller. A new session starts every RunLength iterations, and its
// setup is part of the measurement, as in LoopIterations, which is the figure to compare with.
func ComposedLoopIterations(b B) {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	turns := make([]model.Turn, RunLength)
	for i := range turns {
		text := fmt.Sprintf("draft %d", i)
		turns[i] = model.Turn{Text: &text}
	}
	m, err := model.NewScripted(turns, clk)
	if err != nil {
		b.Fatal(err)
	}
	writer, err := agent.NewLLM(agent.LLMConfig{Name: "writer", Goal: "Improve {{draft ?? \"\"}}", OutputKey: "draft",
		Loop: loop.Config{Model: m, Clock: clk, Budget: loop.Budget{MaxIterations: 2}}})
	if err != nil {
		b.Fatal(err)
	}
	composedLoop(b, clk, agent.NewLoop("refine", 0, writer), 9)
}

// ComposedFuncIterations is ComposedLoopIterations with a Func agent writing one state key in
// place of the LLM agent: the composition's own cost per iteration, without a loop controller.
func ComposedFuncIterations(b B) {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	leaf := agent.Func("count", func(_ context.Context, t *agent.Turn) error {
		return t.Set("n", t.Invocation().N)
	})
	composedLoop(b, clk, agent.NewLoop("refine", 0, leaf), 4)
}

// composedLoop runs root (a Loop agent with MaxIterations 0) for b.Loops() leaf turns in all, in
// sessions of at most RunLength turns, each ended by its turn budget. minEvents is the number of
// events an iteration must at least emit (tracing cannot be off).
func composedLoop(b B, clk clock.Clock, root agent.Agent, minEvents int) {
	ctx := context.Background()
	events := 0
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.Loops(); {
		n := min(RunLength, b.Loops()-done)
		s := agent.NewSession("bench", agent.Config{Budget: agent.Budget{MaxTurns: n, MaxDuration: time.Hour}, Clock: clk})
		for ev, err := range agent.Run(ctx, root, s) {
			if err != nil {
				b.Fatal(err)
			}
			events += min(ev.Seq, 1)
		}
		if res := s.Result(); res.Reason != agent.MaxTurns || res.Turns != n {
			b.Fatalf("the session ended %s after %d turns (%s), want max_turns after %d", res.Reason, res.Turns, res.Detail, n)
		}
		done += n
	}
	b.StopTimer()
	if events < minEvents*b.Loops() {
		b.Fatalf("%d events for %d iterations, want at least %d each", events, b.Loops(), minEvents)
	}
}
