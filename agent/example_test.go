package agent_test

import (
	"context"
	"fmt"
	"time"

	"github.com/reins-run/reins/agent"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/worker"
)

// A writer (an LLM agent on a scripted model) and a critic (a Func agent) in a Loop: the critic
// escalates when it approves, which ends the loop.
func ExampleRun() {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	drafts := []string{"Loops end.", "Bounded loops end: every budget is checked before each step."}
	turns := make([]model.Turn, len(drafts))
	for i := range drafts {
		turns[i] = model.Turn{Text: &drafts[i]}
	}
	m, _ := model.NewScripted(turns, clk)
	writer, err := agent.NewLLM(agent.LLMConfig{
		Name: "writer", OutputKey: "draft",
		Goal: "Write one sentence about {{topic}}. {{feedback ?? \"\"}}",
		Loop: loop.Config{Model: m, Clock: clk},
	})
	if err != nil {
		panic(err)
	}
	critic := agent.Func("critic", func(_ context.Context, t *agent.Turn) error {
		if len(t.Text("draft")) < 20 {
			return t.Set("feedback", "Say why they end.")
		}
		t.Escalate("approved") // ends the innermost enclosing Loop, never an unrelated outer one
		return nil
	})
	root := agent.NewLoop("refine", 5, writer, critic) // 0 = until an escalation, within the budget

	s := agent.NewSession("example", agent.Config{Budget: agent.Budget{MaxTurns: 10}, Clock: clk})
	_ = s.Put("topic", "bounded loops")
	for ev, err := range agent.Run(context.Background(), root, s) {
		if err != nil {
			fmt.Println("error:", err)
			break
		}
		switch ev.Type {
		case agent.EventState:
			fmt.Printf("%d %s sets %s = %s\n", ev.Seq, ev.Author, ev.Key, ev.Value)
		case agent.EventEscalate:
			fmt.Printf("%d %s escalates: %s\n", ev.Seq, ev.Author, ev.Escalate.Reason)
		}
	}
	res := s.Result()
	fmt.Println(res.Reason, "by", res.By, "after", res.Turns, "turns") // escalated by critic after 4 turns
	// Output:
	// 10 writer sets draft = "Loops end."
	// 13 critic sets feedback = "Say why they end."
	// 23 writer sets draft = "Bounded loops end: every budget is checked before each step."
	// 26 critic escalates: approved
	// escalated by critic after 4 turns
}

// An escalation ends the innermost enclosing loop unless it names another enclosing loop.
func ExampleEscalateTo() {
	gate := agent.Func("gate", func(_ context.Context, t *agent.Turn) error {
		if t.Invocation().N == 1 {
			t.Escalate("inner is done") // ends "inner" only
		} else {
			t.EscalateTo("outer", "all done") // ends "inner" and "outer"
		}
		return nil
	})
	root := agent.NewLoop("outer", 10, agent.NewLoop("inner", 10, gate))
	s := agent.NewSession("scoping", agent.Config{})
	for ev := range agent.Run(context.Background(), root, s) {
		if ev.Type == agent.EventEnd && ev.Author != "gate" {
			fmt.Printf("%s ended %s by %s: %s\n", ev.Author, ev.End.Reason, ev.End.By, ev.End.Detail)
		}
	}
	// Output:
	// inner ended escalated by gate: inner is done
	// inner ended escalated by gate: all done
	// outer ended escalated by gate: all done
}

// Parallel branches run concurrently; their writes merge in declaration order.
func ExampleNewParallel() {
	root := agent.NewParallel("fan",
		agent.Func("a", func(_ context.Context, t *agent.Turn) error { return t.Set("winner", "a") }),
		agent.Func("b", func(_ context.Context, t *agent.Turn) error { return t.Set("winner", "b") }))
	s := agent.NewSession("fan", agent.Config{})
	for range agent.Run(context.Background(), root, s) {
	}
	fmt.Println(s.Text("winner"), s.Result().Reason)
	// Output: b completed
}

// A Loop without MaxIterations is still bounded by the run's budget.
func ExampleBudget() {
	root := agent.NewLoop("forever", 0, agent.Func("work", func(context.Context, *agent.Turn) error { return nil }))
	s := agent.NewSession("bounded", agent.Config{Budget: agent.Budget{MaxTurns: 3}})
	for range agent.Run(context.Background(), root, s) {
	}
	res := s.Result()
	fmt.Println(res.Reason+":", res.Detail)
	// Output: max_turns: the turn budget of 3 ran out
}

// The same composition served as a durable agent_loop step: each task runs one leaf turn.
func ExampleHandler() {
	root := agent.NewLoop("refine", 0,
		agent.Func("work", func(_ context.Context, t *agent.Turn) error { return t.Set("done", true) }),
		agent.Func("check", func(_ context.Context, t *agent.Turn) error { t.Escalate("done"); return nil }))
	var w *worker.Worker // worker.New(c.Conn(), worker.Options{}), c a dialed client
	if w != nil {
		// The workflow's agent_loop step names the handler, with max_iterations >= MaxTurns+1.
		w.Handle("refine", agent.Handler(root, agent.Config{Budget: agent.Budget{MaxTurns: 20}}))
	}
}
