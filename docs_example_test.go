package reins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/agent"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// The Go samples of README.md and docs/ are cut from the functions of this file (and from the
// packages' Example functions), so that each compiles, and the runnable ones print what they
// say; TestDocSamples finds each sample here.

// readOrder is the Go tool of the samples: it reads an order.
func readOrder(_ context.Context, o order) (status, error) { return status{Status: "delivered"}, nil }

// answer is the Go handler of the samples' task step.
func answer(tc worker.TaskContext) error {
	var in struct {
		Answer string `json:"answer"`
	}
	if err := json.Unmarshal(tc.Input(), &in); err != nil {
		return err
	}
	return tc.Complete("Answer: " + in.Answer)
}

// fromGo is the README's program: a workflow run from Go with a tool and a handler of its own.
func fromGo(ctx context.Context, def *workflow.Definition) error {
	r, err := reins.New(ctx, reins.Config{}) // an embedded NATS server, the engine and a worker
	if err != nil {
		return err
	}
	defer r.Close()
	r.Tool("orders.read", tool.Func("orders.read", "Read an order.", readOrder)) // for agent steps
	r.Handle("answer", answer)                                                   // for task and agent_loop steps
	res, err := r.Run(ctx, def, order{OrderID: "O-1"})                           // def: a workflow built in Go or read from TOML
	if err != nil {
		return err
	}
	fmt.Println(res.Status, string(res.Output))
	return nil
}

func Example_fromGo() {
	if err := fromGo(context.Background(), refundWorkflow()); err != nil {
		fmt.Println(err)
	}
	// Output: completed "Answer: The order was delivered."
}

// loopFromGo is the guide's loop without the engine: a scripted model, a Go tool and a policy.
func loopFromGo(ctx context.Context, turns []model.Turn, schema json.RawMessage,
	readOrder func(context.Context, json.RawMessage) (json.RawMessage, error)) error {
	m, err := model.NewScripted(turns, nil) // or a real provider: provider/openai, provider/anthropic
	if err != nil {
		return err
	}
	lookup := tool.New(tool.Spec{Name: "read_order", InputSchema: schema},
		func(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
			return readOrder(ctx, args) // key: the idempotency key of this call
		})
	c, err := loop.New(loop.Config{
		Model:  m,
		Tools:  []tool.Tool{lookup},
		Policy: loop.Policy{Forbid: []string{"issue_refund"}, RequiredEvidence: []string{"read_order"}},
		Budget: loop.Budget{MaxIterations: 8, MaxToolCalls: 12, MaxDuration: 2 * time.Minute},
	})
	if err != nil {
		return err
	}
	res := c.Run(ctx, "run-42", "Decide whether refund evidence is sufficient for order O-104.")
	fmt.Println(res.StopReason, res.Detail, res.Answer)
	return nil
}

func Example_loop() {
	verdict := "The order arrived 4 days late: the refund is justified."
	turns := []model.Turn{
		{ToolCalls: []model.ToolCall{{Name: "read_order", Arguments: json.RawMessage(`{"order_id":"O-104"}`)}}},
		{Text: &verdict},
	}
	schema := json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`)
	read := func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"status":"delivered","late_days":4}`), nil
	}
	if err := loopFromGo(context.Background(), turns, schema, read); err != nil {
		fmt.Println(err)
	}
	// Output: completed the model gave a final answer that passed validation The order arrived 4 days late: the refund is justified.
}

// codeReview is the guide's workflow built in Go.
func codeReview() (*workflow.Definition, error) {
	wf := workflow.New("code-review")
	wf.Model("reviewer", workflow.ModelDef{Provider: "openai", Model: "gpt-4.1-mini"})
	wf.AgentLoop("review", "llm-review").WithMaxIterations(10).
		WithMaxDuration(5 * time.Minute).WithLoopDelay(500 * time.Millisecond).WithTimeout(30 * time.Second)
	wf.LLM("report", "reviewer").WithPrompt("Summarise: {{review.output}}")
	wf.Edge("review", "report")
	def, err := wf.Build() // validated; err lists every problem (workflow.Problems)
	return def, err
}

func Example_codeReview() {
	def, err := codeReview()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(def.Name, len(def.Steps), "steps")
	// Output: code-review 2 steps
}

// review is the handler's work in the worker samples: one iteration's reply, and whether the
// loop is done.
type review func(ctx context.Context, input, history json.RawMessage) (reply any, done bool, err error)

// guideWorker is the guide's worker program: an agent_loop handler that keeps its conversation
// in the step's checkpoint.
func guideWorker(ctx context.Context, url, token string, review review) error {
	c, err := conn.Dial(ctx, url, conn.Token(token)) // links no nats-server
	if err != nil {
		return err
	}
	defer c.Close() // once Run returned: the worker leaves its connection open
	w, err := worker.New(c, worker.Options{})
	if err != nil {
		return err
	}
	w.Handle("llm-review", func(t worker.TaskContext) error {
		history, err := t.LoadCheckpoint() // nil on the first iteration
		if err != nil {
			return err
		}
		reply, done, err := review(t, t.Input(), history)
		if err != nil {
			return t.Fail(err) // the step's retry policy applies
		}
		if err := t.AppendCheckpoint(reply); err != nil { // bytes written per iteration ∝ what was added
			return err
		}
		if done {
			return t.Complete(reply)
		}
		return t.Continue(reply) // the engine checks max_iterations, max_duration, loop_delay
	})
	return w.Run(ctx)
}

// engineWorker is docs/engine.md's worker.
func engineWorker(ctx context.Context, token string, review review) error {
	c, err := conn.Dial(ctx, "nats://127.0.0.1:4222", conn.Token(token)) // a worker principal's
	if err != nil {
		return err
	}
	defer c.Close() // once Run returned
	w, err := worker.New(c, worker.Options{})
	if err != nil {
		return err
	}
	w.Handle("llm-review", func(t worker.TaskContext) error {
		history, err := t.LoadCheckpoint() // nil on the first iteration
		if err != nil {
			return err
		}
		reply, done, err := review(t, t.Input(), history) // t is a context.Context
		if err != nil {
			return t.Fail(err) // retryable: the step's retry policy applies
		}
		if err := t.AppendCheckpoint(reply); err != nil { // writes only what is added
			return err
		}
		if done {
			return t.CompleteWith(reply, worker.Outcome{Label: "approved"})
		}
		return t.Continue(reply) // the next iteration's input
	})
	err = w.Run(ctx)
	return err
}

// composedAgents is docs/agents.md's composition: a writer and a critic in a loop, then a
// publisher, run in process.
func composedAgents(ctx context.Context, m model.Model, tools []tool.Tool, good func(string) bool, publish agent.Agent) (agent.Result, error) {
	writer, err := agent.NewLLM(agent.LLMConfig{
		Name:      "writer",
		Goal:      `Write one paragraph about {{topic}}. {{feedback ?? ""}}`, // state keys, in the workflows' template syntax
		OutputKey: "draft",                                                   // the answer goes here
		Loop:      loop.Config{Model: m, Tools: tools, Budget: loop.Budget{MaxIterations: 5}},
	})
	critic := agent.Func("critic", func(ctx context.Context, t *agent.Turn) error {
		if !good(t.Text("draft")) {
			return t.Set("feedback", "Say why.") // a state event
		}
		t.Escalate("approved") // ends the innermost enclosing loop
		return nil
	})
	root := agent.NewSequential("review",
		agent.NewLoop("refine", 0, writer, critic), // 0: until an escalation, within the budget
		publish)

	s := agent.NewSession("run-42", agent.Config{Budget: agent.Budget{MaxTurns: 20, MaxDuration: 5 * time.Minute}})
	s.Put("topic", "bounded agent loops")          // inputs, before the run
	for ev, err := range agent.Run(ctx, root, s) { // every event, as it happens
		if err != nil { // at most once, with the last event, when the run failed
			return s.Result(), err
		}
		fmt.Println(ev.Seq, ev.Author, ev.Type)
	}
	res := s.Result() // Reason, By, Detail, Err, State, Turns, Usage, Loops
	return res, err
}

// durableAgents is docs/agents.md's composition served as a durable agent_loop step.
func durableAgents(ctx context.Context, root agent.Agent, def *workflow.Definition) (reins.Result, error) {
	r, err := reins.New(ctx, reins.Config{}) // or a worker.Worker's Handle, in a worker program
	defer r.Close()
	r.Handle("writer-critic", agent.Handler(root, agent.Config{Budget: agent.Budget{MaxTurns: 20}}))
	res, err := r.Run(ctx, def, map[string]string{"topic": "bounded agent loops"})
	return res, err
}

// draftRefiner is docs/workflows.md's evaluator–optimizer, built in Go, and a workflow with a
// concurrency key.
func draftRefiner() (*workflow.Definition, *workflow.Builder, error) {
	wf := workflow.New("draft_refiner").Deadline(10 * time.Minute)
	wf.Model("writer", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"draft"}]`)})
	wf.LLM("generate", "writer").WithPrompt("Write about {{input.topic}}")
	wf.LLM("evaluate", "writer").WithPrompt("Critique {{generate.output}}").WithBranch("verdict")
	wf.Approval("review", "Publish this draft?")
	wf.Terminate("publish")
	wf.Edge("generate", "evaluate")
	wf.Edge("evaluate", "generate").When("retry").MaxIterations(3) // the loop edge
	wf.Edge("evaluate", "review").When("retry")                    // the way out once it is spent
	wf.Edge("evaluate", "publish").When("accept")
	wf.Edge("review", "publish").When("approved")
	def, err := wf.Build()

	keyed := func() *workflow.Builder {
		wf := workflow.New("support_reply").Concurrency("{{input.customer_id}}", 1)
		return wf
	}
	return def, keyed(), err
}
