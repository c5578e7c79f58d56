package workflow_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/workflow"
)

// The agent loop step of the seed: a worker handler iterates in place, bounded by iterations and
// wall-clock time, then a report step writes up what it found.
func ExampleNew() {
	wf := workflow.New("code-review")
	wf.AgentLoop("review", "llm-review").
		WithMaxIterations(10).
		WithMaxDuration(5 * time.Minute).
		WithLoopDelay(500 * time.Millisecond).
		WithTimeout(30 * time.Second)
	wf.Task("report", "report-writer")
	wf.Edge("review", "report")

	def, err := wf.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := def.CanonicalJSON()
	fmt.Println(string(b))
	// Output:
	// {"name":"code-review","deadline":"1h0m0s","max_steps":10000,"start":"review","steps":[{"id":"review","type":"agent_loop","timeout":"30s","handler":"llm-review","max_iterations":10,"max_duration":"5m0s","loop_delay":"500ms"},{"id":"report","type":"task","handler":"report-writer"}],"edges":[{"from":"review","to":"report"}]}
}

// An evaluator–optimizer: the retry edge is a loop edge followed at most 3 times; once it is
// spent, the plain retry edge to a human is the way out.
func ExampleMermaid() {
	wf := workflow.New("draft").
		Model("writer", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text": "a draft"}]`)})
	wf.LLM("generate", "writer").WithPrompt("Write about {{input.topic}}")
	wf.LLM("evaluate", "writer").WithPrompt("Judge {{generate.output}}").WithBranch("verdict")
	wf.Approval("review", "Publish {{generate.output}}?")
	wf.Terminate("publish")
	wf.Edge("generate", "evaluate")
	wf.Edge("evaluate", "generate").When("retry").MaxIterations(3)
	wf.Edge("evaluate", "review").When("retry")
	wf.Edge("evaluate", "publish").When("accept")
	wf.Edge("review", "publish").When("approved")
	wf.Start("generate")

	def, err := wf.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(workflow.Mermaid(def))
	// Output:
	// %% workflow draft
	// flowchart TD
	//     entry(("start"))
	//     s0["generate<br/>llm: writer"]
	//     s1["evaluate<br/>llm: writer"]
	//     s2{{"review<br/>approval"}}
	//     s3(["publish<br/>terminate"]):::done
	//     style s0 stroke-width:3px
	//     entry --> s0
	//     s0 --> s1
	//     s1 ==>|"retry (loop ≤ 3)"| s0
	//     s1 -->|"retry"| s2
	//     s1 -->|"accept"| s3
	//     s2 -->|"approved"| s3
	//     classDef done fill:#e8f5e9
}

// Build reports every problem at once, as workflow.Problems.
func ExampleBuilder_Build_problems() {
	wf := workflow.New("broken")
	wf.AgentLoop("review", "llm-review") // no max_iterations
	wf.Task("report", "report-writer")
	wf.Edge("review", "report")
	wf.Edge("report", "publish") // no such step

	_, err := wf.Build()
	var problems workflow.Problems
	if errors.As(err, &problems) {
		for _, p := range problems {
			fmt.Println(p.Code, p.Key)
		}
	}
	// Output:
	// E_DANGLING_EDGE edges[1].to
	// E_MISSING_KEY steps[0].max_iterations
}

// An agent step whose conversation may grow long: each model call carries at most 60,000 input
// tokens, the oldest turns summarized by the cheaper model once it would carry more. A
// summarizer that is not declared in [models] is a problem of its own.
func ExampleAgentStep_WithContext() {
	wf := workflow.New("triage").
		Model("main", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text": "done"}]`)}).
		Model("cheap", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text": "a summary"}]`)})
	wf.Agent("triage", "main").
		WithGoal("Triage the tickets of {{input.queue}}.").
		WithContext(workflow.Context{MaxTokens: 60000, Strategy: loop.Summarize, KeepLast: 6, Summarizer: "cheap"})
	def, err := wf.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := json.Marshal(def.StepByID("triage").Context)
	fmt.Println(string(b))

	wf.Agent("other", "main").WithGoal("g").WithContext(workflow.Context{MaxTokens: 8000, Strategy: loop.Summarize, Summarizer: "cheaper"})
	wf.Edge("triage", "other")
	_, err = wf.Build()
	fmt.Println(err)
	// Output:
	// {"max_tokens":60000,"strategy":"summarize","keep_last":6,"summarizer":"cheap"}
	// E_UNKNOWN_MODEL steps[1].context.summarizer: agent step "other" uses model "cheaper" as its summarizer, which is not declared in [models]: did you mean cheap?
}

// A support agent that continues each customer's conversation across runs: runs whose input
// has the same customer_id (started by the same principal) share one session, kept 30 days
// after its last save by default, its model calls bounded by the context policy.
func ExampleAgentStep_WithSession() {
	wf := workflow.New("support").
		Model("main", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text": "We are on it."}]`)})
	wf.Agent("reply", "main").
		WithGoal("{{input.question}}").
		WithSession("{{input.customer_id}}", 0).
		WithContext(workflow.Context{MaxTokens: 8000, KeepLast: 6})
	def, err := wf.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	s := def.StepByID("reply")
	fmt.Println(s.Session, s.SessionTTL)

	wf.Agent("other", "main").WithGoal("g").WithSession("{{input.customer_id", 0)
	wf.Edge("reply", "other")
	_, err = wf.Build()
	fmt.Println(err)
	// Output:
	// {{input.customer_id}} 720h0m0s
	// E_TEMPLATE steps[1].session: step "other" has a malformed template in session: column 1: "{{" is not closed by "}}"
}

// An agent whose tool runs another agent of the workflow: each call of research runs the step
// researcher as a sub-run, on the workflow AgentDefinition derives for it.
func ExampleDefinition_AgentDefinition() {
	wf := workflow.New("support")
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text": "done"}]`)})
	wf.Tool("research", workflow.ToolDef{
		Description: "Research a question and return a short report.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`),
		Agent:       "researcher",
	})
	wf.Agent("lead", "m").WithGoal("Answer {{input.question}}").WithTools("research")
	wf.Agent("researcher", "m").WithGoal("Research {{input.question}}")
	def, err := wf.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("start:", def.Start, "agents run by tools:", def.ToolAgents(), "runs a child:", def.Tools["research"].RunsChild())
	sub, err := def.AgentDefinition("researcher")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sub.Name, "starts at", sub.Start, "with", len(sub.Steps), "step and", len(sub.Edges), "edges")
	// Output:
	// start: lead agents run by tools: [researcher] runs a child: true
	// support-researcher starts at researcher with 1 step and 0 edges
}

// A workflow that runs every weekday at 9:00 in Paris, and on each order created.
func ExampleBuilder_Trigger() {
	wf := workflow.New("daily-report")
	wf.Task("report", "reports.write")
	wf.Trigger(workflow.Trigger{Name: "weekdays", Schedule: "0 9 * * 1-5", Timezone: "Europe/Paris", Overlap: workflow.OverlapSkip}).
		Trigger(workflow.Trigger{Name: "orders", Subject: "orders.created"})
	def, err := wf.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	s, _ := workflow.ParseSchedule(def.Triggers[0].Schedule, def.Triggers[0].Timezone)
	fmt.Println(def.Triggers[0].Kind(), def.Triggers[0].CatchUpOr(), s.Next(time.Date(2026, 6, 5, 12, 0, 0, 0, time.UTC)))
	fmt.Println(def.Triggers[1].Kind(), def.Triggers[1].Subject)
	// Output:
	// schedule 1 2026-06-08 07:00:00 +0000 UTC
	// subject orders.created
}

// At most one run per customer at a time: runs of the same customer_id queue, first started
// first served; a key that reads a step's output is refused, since it is rendered before any
// step ran.
func ExampleBuilder_Concurrency() {
	wf := workflow.New("support-reply").Concurrency("{{input.customer_id}}", 1)
	wf.Task("reply", "support.reply")
	def, err := wf.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("key %s, limit %d\n", def.Concurrency.Key, def.Concurrency.Limit)

	bad := workflow.New("support-reply").Concurrency("{{reply.output.customer}}", 0)
	bad.Task("reply", "support.reply")
	_, err = bad.Build()
	fmt.Println(err)
	// Output:
	// key {{input.customer_id}}, limit 1
	// E_TEMPLATE concurrency.key: the concurrency key reads {{reply.output.customer}}, but it is rendered when a run starts, before any step ran: it may read only the run input (input or input.x)
	// E_BAD_BOUND concurrency.limit: the concurrency limit is 0: it must be at least 1 (how many runs with the same key may be active at once)
}
