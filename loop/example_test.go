package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// exampleController builds a controller with a scripted model (read an order, then answer) and
// a mocked read_order tool, everything on a virtual clock.
func exampleController(clk clock.Clock) *loop.Controller {
	answer := "Order O-104 was delivered 4 days late: the refund is justified."
	m, err := model.NewScripted([]model.Turn{
		{ToolCalls: []model.ToolCall{{Name: "read_order", Arguments: json.RawMessage(`{"order_id":"O-104"}`)}}},
		{Text: &answer},
	}, clk)
	if err != nil {
		panic(err)
	}
	readOrder, err := tool.NewMock(tool.Spec{
		Name:        "read_order",
		Description: "Read an order by id.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string","minLength":1}},"required":["order_id"],"additionalProperties":false}`),
	}, []tool.MockResult{{Output: json.RawMessage(`{"status": "delivered", "late_days": 4}`)}}, clk)
	if err != nil {
		panic(err)
	}
	c, err := loop.New(loop.Config{
		Model:  m,
		Tools:  []tool.Tool{readOrder},
		Policy: loop.Policy{RequiredEvidence: []string{"read_order"}},
		Budget: loop.Budget{MaxIterations: 5, MaxToolCalls: 3},
		Clock:  clk,
	})
	if err != nil {
		panic(err)
	}
	return c
}

func ExampleController_Run() {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := exampleController(clk)

	res := c.Run(context.Background(), "run-1", "Decide whether the refund for O-104 is justified.")
	fmt.Println("stop reason:", res.StopReason)
	fmt.Println("answer:", res.Answer)
	fmt.Println("iterations:", res.State.Iteration, "tool calls:", res.State.ToolCalls)
	for _, m := range res.State.Messages {
		if m.Role == model.RoleTool {
			fmt.Printf("result of %s: %s\n", m.CallID, m.Content)
		}
	}
	// Output:
	// stop reason: completed
	// answer: Order O-104 was delivered 4 days late: the refund is justified.
	// iterations: 2 tool calls: 1
	// result of call_0_0: {"status":"delivered","late_days":4}
}

func ExampleRun_Step() {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := exampleController(clk).Start("run-1", "Decide whether the refund for O-104 is justified.")
	for {
		stopped := r.Step(context.Background())
		st := r.State()
		fmt.Printf("after iteration %d: %d message(s), stopped=%v\n", st.Iteration, len(st.Messages), stopped)
		if stopped {
			break
		}
	}
	fmt.Println(r.Result().StopReason)
	// Output:
	// after iteration 1: 3 message(s), stopped=false
	// after iteration 2: 4 message(s), stopped=true
	// completed
}

func ExampleController_Resume() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewVirtual(start)
	r := exampleController(clk).Start("run-1", "Decide whether the refund for O-104 is justified.")
	r.Step(context.Background())
	saved, err := json.Marshal(r.State()) // for example, written to disk before a crash
	if err != nil {
		panic(err)
	}

	// Later, in another process: a new controller, the saved state, and the run goes on.
	var st loop.State
	if err := json.Unmarshal(saved, &st); err != nil {
		panic(err)
	}
	resumed := exampleController(clock.NewVirtual(clk.Now())).Resume(&st)
	for !resumed.Step(context.Background()) {
	}
	res := resumed.Result()
	fmt.Println(res.StopReason, "after", res.State.Iteration, "iterations")
	// Output:
	// completed after 2 iterations
}

func ExampleNew() {
	m, _ := model.NewScripted(nil, nil)
	_, err := loop.New(loop.Config{Model: m, Policy: loop.Policy{RequireApproval: []string{"issue_refund"}}})
	fmt.Println(errors.Is(err, loop.ErrConfig))
	fmt.Println(err)
	// Output:
	// true
	// invalid loop configuration: policy.require_approval names "issue_refund", which is not a declared tool
}

func ExampleDefaultBudget() {
	b := loop.DefaultBudget()
	fmt.Println(b.MaxIterations, b.MaxToolCalls, b.MaxDuration, b.MaxToolFailures, b.MaxRepeatedCalls, b.MaxInvalidActions)
	// Output:
	// 10 20 5m0s 3 3 3
}

// A context policy bounds what each model call carries: here drop_oldest leaves out the oldest
// turns once the conversation passes 1,500 input tokens, and the trace says so. The conversation
// itself (State.Messages) keeps every message.
func ExampleContextPolicy() {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	done := "Read all five pages."
	var turns []model.Turn
	for i := range 5 {
		turns = append(turns, model.Turn{ToolCalls: []model.ToolCall{{Name: "read_page", Arguments: json.RawMessage(fmt.Sprintf(`{"page":%d}`, i+1))}}})
	}
	m, _ := model.NewScripted(append(turns, model.Turn{Text: &done}), clk)
	page := json.RawMessage(fmt.Sprintf(`{"text":%q}`, strings.Repeat("lorem ipsum ", 200)))
	readPage, _ := tool.NewMock(tool.Spec{Name: "read_page"}, []tool.MockResult{{Output: page}}, clk)
	c, err := loop.New(loop.Config{
		Model:   m,
		Tools:   []tool.Tool{readPage},
		Clock:   clk,
		Context: loop.ContextPolicy{MaxTokens: 1500, Strategy: loop.DropOldest, KeepLast: 2},
	})
	if err != nil {
		panic(err)
	}
	res := c.Run(context.Background(), "run-1", "Read the five pages of the report.")
	fmt.Println("stop reason:", res.StopReason)
	for _, e := range res.Trace {
		if e.Type == trace.Context {
			fmt.Printf("iteration %d: %s\n", e.Iteration, e.Reason)
		}
	}
	fmt.Println("messages kept:", len(res.State.Messages), "first sent after the goal:", res.State.Context.From)
	// Output:
	// stop reason: completed
	// iteration 4: left out 2 message(s): 1908 → 1279 input tokens (max_tokens 1500)
	// iteration 5: left out 2 message(s): 1908 → 1279 input tokens (max_tokens 1500)
	// iteration 6: left out 2 message(s): 1908 → 1279 input tokens (max_tokens 1500)
	// messages kept: 12 first sent after the goal: 7
}

// A child tool's call runs elsewhere (a durable engine runs it as a sub-run): the turn waits
// for it, and ActOnChildren goes on with its result and what it spent.
func ExampleRun_ActOnChildren() {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	answer := "Paris."
	m, err := model.NewScripted([]model.Turn{
		{ToolCalls: []model.ToolCall{{ID: "c1", Name: "research", Arguments: json.RawMessage(`{"question":"capital of France?"}`)}}},
		{Text: &answer},
	}, clk)
	if err != nil {
		panic(err)
	}
	research := tool.New(tool.Spec{Name: "research", Description: "Ask the researcher agent."}, nil) // never called
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{research}, ChildTools: []string{"research"}, Clock: clk})
	if err != nil {
		panic(err)
	}
	r := c.Start("run-1", "What is the capital of France?")
	r.Step(context.Background())
	st := r.State()
	fmt.Println("waits for children:", st.AwaitingChildren(), st.Children[0].Call.ID)

	// The child run ended: its output is the call's result, its tokens count in this run's.
	err = r.ActOnChildren(context.Background(), map[string]loop.ChildResult{
		"c1": {Output: []byte(`{"answer":"Paris"}`), Usage: model.Usage{InputTokens: 300, OutputTokens: 20}},
	})
	if err != nil {
		panic(err)
	}
	for !r.Step(context.Background()) {
	}
	fmt.Println("stop reason:", st.StopReason, "answer:", st.Answer)
	fmt.Println("result of c1:", st.Messages[2].Content)
	fmt.Println("tokens:", st.Usage.Total())
	// Output:
	// waits for children: true c1
	// stop reason: completed answer: Paris.
	// result of c1: {"answer":"Paris"}
	// tokens: 320
}
