package workflow_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/workflow"
)

// A definition built with the Go builder and the same workflow written as TOML
// serialize to the same JSON. These tests hold the builder program of every example file to that,
// byte for byte.

// eqExamples are the builder programs of the example workflows (examples/*/workflow.toml), by
// workflow name.
var eqExamples = map[string]func() *workflow.Builder{
	"draft_refiner":        eqDraftRefiner,
	"research_fanout":      eqResearchFanout,
	"refund_investigation": eqRefundInvestigation,
	"code_review":          eqCodeReview,
	"delegate":             eqDelegate,
}

func eqDraftRefiner() *workflow.Builder {
	wf := workflow.New("draft_refiner").
		Description("Generate a draft, critique it, retry at most 3 times, then ask a human.").
		Deadline(48*time.Hour).
		Start("generate").
		Model("writer", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"text": "Reins 1.0 is out: agent loops you can audit."},
			{"text": "Reins 1.0 is out: every agent loop runs inside a workflow you declared, with hard budgets."},
			{"text": "Reins 1.0 is out: every agent loop runs inside a workflow you declared, with hard budgets and a recorded reason for every stop."},
			{"text": "Reins 1.0 is out: agent loops run inside workflows you declare, stay within hard budgets, and record why they stopped."}
		]`)}).
		Model("critic", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"text": "{\"verdict\": \"retry\", \"feedback\": \"Say what makes the loops bounded.\"}"},
			{"text": "{\"verdict\": \"retry\", \"feedback\": \"Say what happens when a loop stops.\"}"},
			{"text": "{\"verdict\": \"retry\", \"feedback\": \"Shorter: one idea per clause.\"}"},
			{"text": "{\"verdict\": \"retry\", \"feedback\": \"Better; I would still cut a word or two.\"}"}
		]`)})

	wf.LLM("generate", "writer").
		WithInstructions("You write one-paragraph release announcements in plain words.").
		WithPrompt(`Announce {{input.product}}. Feedback of the critic on your last draft: {{evaluate.output.feedback ?? "none yet"}}`)
	wf.LLM("evaluate", "critic").
		WithInstructions("You review release announcements. Reply with JSON only.").
		WithPrompt("Judge this announcement of {{input.product}}: {{generate.output}}").
		WithOutputSchema(json.RawMessage(`{
			"type": "object",
			"properties": {
				"verdict": {"type": "string", "enum": ["accept", "retry"]},
				"feedback": {"type": "string"}
			},
			"required": ["verdict", "feedback"],
			"additionalProperties": false
		}`)).
		WithOutputRepairs(1).
		WithBranch("verdict")
	wf.Approval("review", "The critic still wants changes after 3 rewrites. Publish this draft anyway? {{generate.output}}").
		WithTimeout(24 * time.Hour).
		WithOnTimeout("deny")
	wf.Terminate("publish").WithInput("generate.output")
	wf.Fail("rejected", "A human rejected the draft after 3 rewrites: {{review.output}}")

	wf.Edge("generate", "evaluate")
	wf.Edge("evaluate", "generate").When("retry").MaxIterations(3)
	wf.Edge("evaluate", "review").When("retry")
	wf.Edge("evaluate", "publish").When("accept")
	wf.Edge("review", "publish").When("approved")
	wf.Edge("review", "rejected").When("denied")
	return wf
}

func eqResearchFanout() *workflow.Builder {
	queryOnly := json.RawMessage(`{"type": "object", "properties": {"query": {"type": "string", "minLength": 1}}, "required": ["query"], "additionalProperties": false}`)
	wf := workflow.New("research_fanout").
		Description("Research a question from three angles at once, then combine the findings into one brief.").
		Deadline(15*time.Minute).
		Model("market", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"tool_calls": [{"name": "market_data", "arguments": {"query": "support teams using agents for refunds"}}], "usage": {"input_tokens": 90, "output_tokens": 14}},
			{"text": "Market: about 40% of support teams already route refunds through an agent.", "usage": {"input_tokens": 150, "output_tokens": 18}}
		]`)}).
		Model("competitors", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"tool_calls": [{"name": "competitor_search", "arguments": {"query": "hosted refund agents"}}], "usage": {"input_tokens": 90, "output_tokens": 12}},
			{"text": "Competitors: two hosted products, neither bounds tool calls per run.", "usage": {"input_tokens": 160, "output_tokens": 16}}
		]`)}).
		Model("regulation", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"tool_calls": [{"name": "regulation_search", "arguments": {"query": "automated refund decisions"}}], "usage": {"input_tokens": 90, "output_tokens": 12}},
			{"text": "Regulation: automated refund decisions need a human in the loop above 500 EUR.", "usage": {"input_tokens": 170, "output_tokens": 19}}
		]`)}).
		Model("editor", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"text": "Brief: demand is real, rivals lack hard budgets, and large refunds need an approval step.", "usage": {"input_tokens": 240, "output_tokens": 22}}
		]`)}).
		Tool("market_data", workflow.ToolDef{
			Description: "Look up market figures.",
			InputSchema: queryOnly,
			Mock:        json.RawMessage(`[{"output": {"source": "Support Ops Survey 2026", "share_using_agents": 0.41}}]`),
		}).
		Tool("competitor_search", workflow.ToolDef{
			Description: "Search product pages and reviews of competing products.",
			InputSchema: queryOnly,
			Mock:        json.RawMessage(`[{"output": {"products": ["RefundBot Cloud", "AgentDesk"], "bounded_tool_calls": false}}]`),
		}).
		Tool("regulation_search", workflow.ToolDef{
			Description: "Search consumer-protection rules.",
			InputSchema: queryOnly,
			Mock:        json.RawMessage(`[{"output": {"rule": "Automated refund decisions above 500 EUR require human review."}}]`),
		})

	wf.Parallel("research", "market", "competitors", "regulation").
		WithMaxConcurrent(3).
		WithTimeout(5 * time.Minute)
	researcher := func(id, goal, tool string) {
		wf.Agent(id, id).
			WithGoal(goal).
			WithTools(tool).
			WithPolicy(workflow.Policy{Allow: []string{tool}, RequiredEvidence: []string{tool}}).
			WithBudget(workflow.Budget{MaxIterations: 4, MaxToolCalls: 3, MaxDuration: clock.Duration(2 * time.Minute)})
	}
	researcher("market", "Size the market for {{input.question}}. Answer in three sentences at most.", "market_data")
	researcher("competitors", "Who else answers {{input.question}}, and how? Answer in three sentences at most.", "competitor_search")
	researcher("regulation", "Which rules constrain {{input.question}}? Answer in three sentences at most.", "regulation_search")
	wf.LLM("combine", "editor").
		WithInstructions("You merge research notes into one brief. Keep every number and name.").
		WithPrompt("Question: {{input.question}}. Notes of the market, competitors and regulation agents, in that order (each with its stop reason and answer): {{research.output}}")
	wf.Terminate("done")

	wf.Edge("research", "combine")
	wf.Edge("combine", "done")
	return wf
}

func eqRefundInvestigation() *workflow.Builder {
	orderSchema := json.RawMessage(`{"type": "object", "properties": {"order_id": {"type": "string", "minLength": 1}}, "required": ["order_id"], "additionalProperties": false}`)
	wf := workflow.New("refund_investigation").
		Description("Decide whether the evidence supports a refund; never issue it from the loop.").
		Deadline(72*time.Hour).
		Model("investigator", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"tool_calls": [{"name": "read_order", "arguments": {"order_id": "O-104"}}], "usage": {"input_tokens": 120, "output_tokens": 18}, "cost_usd": 0.0005},
			{"tool_calls": [{"name": "read_delivery_status", "arguments": {"order_id": "O-104"}}], "usage": {"input_tokens": 180, "output_tokens": 20}, "cost_usd": 0.0007},
			{"tool_calls": [{"name": "search_refund_policy", "arguments": {"query": "late delivery"}}], "usage": {"input_tokens": 240, "output_tokens": 22}, "cost_usd": 0.0008},
			{"text": "Recommend a refund: O-104 arrived 4 days late and the policy refunds deliveries more than 3 days late.", "usage": {"input_tokens": 320, "output_tokens": 40}, "cost_usd": 0.0012}
		]`)}).
		Model("drafter", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"tool_calls": [{"name": "read_order", "arguments": {"order_id": "O-104"}}, {"name": "read_delivery_status", "arguments": {"order_id": "O-104"}}], "usage": {"input_tokens": 130, "output_tokens": 36}, "cost_usd": 0.0007},
			{"tool_calls": [{"name": "search_refund_policy", "arguments": {"query": "late delivery"}}], "usage": {"input_tokens": 250, "output_tokens": 22}, "cost_usd": 0.0008},
			{"tool_calls": [{"name": "draft_refund_recommendation", "arguments": {"order_id": "O-104", "amount": 42.5, "reason": "Delivered 4 days late; policy 4.2 refunds deliveries more than 3 days late in full."}}], "usage": {"input_tokens": 330, "output_tokens": 48}, "cost_usd": 0.0013},
			{"text": "Recommend a full refund of 42.50 USD for O-104 (delivered 4 days late, policy 4.2); the recommendation went to finance as draft D-104.", "usage": {"input_tokens": 410, "output_tokens": 44}, "cost_usd": 0.0015}
		]`)}).
		Model("eager", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"tool_calls": [{"name": "read_order", "arguments": {"order_id": "O-104"}}], "usage": {"input_tokens": 120, "output_tokens": 18}, "cost_usd": 0.0005},
			{"tool_calls": [{"name": "issue_refund", "arguments": {"order_id": "O-104"}}], "usage": {"input_tokens": 180, "output_tokens": 16}, "cost_usd": 0.0006}
		]`)}).
		Model("unsure", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"tool_calls": [{"name": "read_order", "arguments": {"order_id": "O-104"}}], "usage": {"input_tokens": 120, "output_tokens": 18}, "cost_usd": 0.0005},
			{"escalate": "the order total (42.50 USD) differs from the invoice (45.00 USD)", "usage": {"input_tokens": 180, "output_tokens": 21}, "cost_usd": 0.0006}
		]`)}).
		Tool("read_order", workflow.ToolDef{
			Description: "Read an order by id.",
			InputSchema: orderSchema,
			Mock:        json.RawMessage(`[{"output": {"order_id": "O-104", "status": "delivered", "total": 42.50, "currency": "USD"}}]`),
		}).
		Tool("read_delivery_status", workflow.ToolDef{
			Description: "Read the carrier's delivery record of an order.",
			InputSchema: orderSchema,
			Mock:        json.RawMessage(`[{"output": {"promised": "2026-11-10", "delivered": "2026-11-14", "late_days": 4}}]`),
		}).
		Tool("search_refund_policy", workflow.ToolDef{
			Description: "Search the refund policy.",
			InputSchema: json.RawMessage(`{"type": "object", "properties": {"query": {"type": "string", "minLength": 1}}, "required": ["query"], "additionalProperties": false}`),
			Mock:        json.RawMessage(`[{"output": {"section": "4.2", "text": "Deliveries more than 3 days late are refunded in full."}}]`),
		}).
		Tool("draft_refund_recommendation", workflow.ToolDef{
			Description: "Put a refund recommendation in front of finance. A person approves each draft before it is written.",
			InputSchema: json.RawMessage(`{"type": "object", "properties": {"order_id": {"type": "string", "minLength": 1}, "amount": {"type": "number", "exclusiveMinimum": 0}, "reason": {"type": "string", "minLength": 1}}, "required": ["order_id", "amount", "reason"], "additionalProperties": false}`),
			SideEffect:  true,
			Mock:        json.RawMessage(`[{"output": {"draft_id": "D-104", "status": "queued for finance"}}]`),
		}).
		Tool("issue_refund", workflow.ToolDef{
			Description: "Issue a refund. Payment side effect: never from the investigation loop.",
			InputSchema: orderSchema,
			SideEffect:  true,
			Handler:     "payments.issue_refund",
		})

	wf.Agent("investigate", "investigator").
		WithInstructions("You investigate refund requests. Gather evidence with the tools, then recommend. You may draft a recommendation for finance with draft_refund_recommendation; a person approves each draft. Never issue refunds yourself.").
		WithGoal("Decide whether refund evidence is sufficient for order {{input.order_id}}.").
		WithTools("read_order", "read_delivery_status", "search_refund_policy", "draft_refund_recommendation", "issue_refund").
		WithPolicy(workflow.Policy{
			Allow:            []string{"read_order", "read_delivery_status", "search_refund_policy", "draft_refund_recommendation"},
			Forbid:           []string{"issue_refund"},
			RequireApproval:  []string{"draft_refund_recommendation"},
			RequiredEvidence: []string{"read_order", "read_delivery_status"},
		}).
		WithBudget(workflow.Budget{
			MaxIterations:     8,
			MaxToolCalls:      6,
			MaxDuration:       clock.Duration(2 * time.Minute),
			MaxTokens:         20000,
			MaxCostUSD:        0.25,
			MaxToolFailures:   2,
			MaxRepeatedCalls:  2,
			MaxInvalidActions: 3,
		}).
		WithApprovalTimeout(24 * time.Hour).
		WithOnTimeout("deny")
	wf.Switch("route", "investigate.output.stop_reason")
	wf.Terminate("recommend").WithInput("investigate.output")
	wf.Approval("human_review", "The investigation of order {{input.order_id}} needs a person: {{investigate.output.detail}}. Approve the refund?").
		WithTimeout(48 * time.Hour).
		WithOnTimeout("fail")
	wf.Fail("declined", "A human declined the refund for order {{input.order_id}}: {{human_review.output}}")
	wf.Fail("stopped", "The investigation stopped without a recommendation ({{investigate.output.stop_reason}}).")

	wf.Edge("investigate", "route")
	wf.Edge("route", "recommend").When("completed")
	wf.Edge("route", "human_review").When("needs_human")
	wf.Edge("human_review", "recommend").When("approved")
	wf.Edge("human_review", "declined").When("denied")
	for _, reason := range []string{"refused", "tool_failure", "failed", "no_progress", "max_iterations", "max_tool_calls", "max_tokens", "max_cost", "timeout", "output_truncated"} {
		wf.Edge("route", "stopped").When(reason)
	}
	return wf
}

func eqCodeReview() *workflow.Builder {
	wf := workflow.New("code_review").
		Description("Review a change in a bounded loop, then write the report.").
		Deadline(15*time.Minute).
		Model("reporter", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text": "2 findings: an unchecked error in loop/act.go and a missing test for the retry path.", "usage": {"input_tokens": 310, "output_tokens": 24}}]`)})

	wf.AgentLoop("review", "llm-review").
		WithMaxIterations(10).
		WithMaxDuration(5 * time.Minute).
		WithLoopDelay(250 * time.Millisecond).
		WithTimeout(30 * time.Second).
		WithRetry(workflow.Retry{MaxAttempts: 3, Backoff: "exponential", InitialDelay: clock.Duration(time.Second), MaxDelay: clock.Duration(10 * time.Second)})
	wf.LLM("report", "reporter").
		WithInstructions("You write short code review reports: findings first, one line each.").
		WithPrompt("Write the review report of {{input.change}} from these findings, one per reviewed file: {{review.output.findings}}")

	wf.Edge("review", "report")
	return wf
}

func eqDelegate() *workflow.Builder {
	wf := workflow.New("delegate").
		Description("A lead agent that delegates research to another agent and summarising to a sub-workflow.").
		Deadline(10*time.Minute).
		Model("lead", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"tool_calls": [
				{"id": "r1", "name": "research", "arguments": {"question": "Why was order O-104 late?"}},
				{"id": "s1", "name": "summarize", "arguments": {"text": "Customer reports order O-104 arrived 4 days late and asks for a refund."}}
			], "usage": {"input_tokens": 120, "output_tokens": 24}, "cost_usd": 0.002},
			{"text": "Order O-104 was late because the carrier lost it for 4 days; refund the shipping fee.", "usage": {"input_tokens": 260, "output_tokens": 22}, "cost_usd": 0.003}
		]`)}).
		Model("researcher", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[
			{"tool_calls": [{"name": "read_delivery", "arguments": {"order_id": "O-104"}}], "usage": {"input_tokens": 60, "output_tokens": 8}, "cost_usd": 0.0005},
			{"text": "The carrier lost the parcel for 4 days before delivering it.", "usage": {"input_tokens": 90, "output_tokens": 12}, "cost_usd": 0.0007}
		]`)}).
		Tool("research", workflow.ToolDef{
			Description: "Research a question about an order and return a short report.",
			InputSchema: json.RawMessage(`{"type": "object", "properties": {"question": {"type": "string", "minLength": 1}}, "required": ["question"], "additionalProperties": false}`),
			Agent:       "researcher",
		}).
		Tool("summarize", workflow.ToolDef{
			Description: "Summarize a customer's message in one sentence.",
			InputSchema: json.RawMessage(`{"type": "object", "properties": {"text": {"type": "string", "minLength": 1}}, "required": ["text"], "additionalProperties": false}`),
			Workflow:    "summary.toml",
		}).
		Tool("read_delivery", workflow.ToolDef{
			Description: "Read the carrier's delivery record of an order.",
			InputSchema: json.RawMessage(`{"type": "object", "properties": {"order_id": {"type": "string", "pattern": "^O-[0-9]+$"}}, "required": ["order_id"], "additionalProperties": false}`),
			Mock:        json.RawMessage(`[{"output": {"order_id": "O-104", "late_days": 4, "carrier_note": "parcel lost in transit, found and delivered"}}]`),
		})

	wf.Agent("lead", "lead").
		WithGoal("Find out why order {{input.order_id}} was late and recommend what to do.").
		WithTools("research", "summarize").
		WithBudget(workflow.Budget{MaxIterations: 4, MaxToolCalls: 6, MaxCostUSD: 0.05}).
		WithContext(workflow.Context{MaxTokens: 8000, Strategy: "drop_oldest", KeepLast: 4})
	wf.Agent("researcher", "researcher").
		WithGoal("Answer: {{input.question}}").
		WithTools("read_delivery").
		WithBudget(workflow.Budget{MaxIterations: 3, MaxToolCalls: 2})
	return wf
}

func TestBuilderEqualsExampleFiles(t *testing.T) {
	if len(eqExamples) != len(exNames) {
		t.Fatalf("%d builder programs for %d example files", len(eqExamples), len(exNames))
	}
	for _, name := range exNames {
		t.Run(name, func(t *testing.T) {
			program, ok := eqExamples[name]
			if !ok {
				t.Fatalf("no builder program for %s.toml", name)
			}
			// BaseDir: the example's sub-workflow files are beside it, as for the loaded file.
			built, err := program().BuildWith(workflow.Options{BaseDir: exDir(t, name)})
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			loaded := exLoad(t, name)
			eqSame(t, built, loaded)
			if workflow.Mermaid(built) != workflow.Mermaid(loaded) || workflow.Dot(built) != workflow.Dot(loaded) {
				t.Error("the built and loaded definitions draw different graphs")
			}
		})
	}
}

// eqSame fails unless a and b have the same canonical JSON and hash.
func eqSame(t *testing.T, a, b *workflow.Definition) {
	t.Helper()
	ja, err := a.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	jb, err := b.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ja, jb) {
		t.Fatalf("canonical JSON differs:\n a %s\n b %s\nfirst difference at byte %d", ja, jb, eqFirstDiff(ja, jb))
	}
	ha, _ := a.Hash()
	hb, _ := b.Hash()
	if ha != hb {
		t.Fatalf("hashes differ: %s, %s", ha, hb)
	}
}

func eqFirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// eqParse parses a TOML variant, failing on any problem.
func eqParse(t *testing.T, name, src string) *workflow.Definition {
	t.Helper()
	file := name + ".toml"
	def, ps := workflow.Parse(file, []byte(src))
	if len(ps) == 0 {
		ps = workflow.Validate(def, workflow.Options{})
	}
	if len(ps) > 0 {
		t.Fatalf("variant %s has problems:\n%v", name, ps)
	}
	return def
}

// TestTOMLVariantsHashTheSame: ways of writing the same workflow that must not change its hash.
func TestTOMLVariantsHashTheSame(t *testing.T) {
	groups := []struct {
		name     string
		variants map[string]string
		builder  func() *workflow.Builder // the same workflow in Go, nil if not given
	}{
		{
			name: "key order",
			variants: map[string]string{
				"reference order": `
name = "order"
deadline = "5m"
[models.m]
provider = "scripted"
script = [{ text = "hi", usage = { input_tokens = 1, output_tokens = 2 } }]
[[steps]]
id = "a"
type = "llm"
model = "m"
prompt = "Say hi to {{input.who}}"
[[steps]]
id = "b"
type = "terminate"
[[edges]]
from = "a"
to = "b"
`,
				"shuffled": `
deadline = "5m"
name = "order"
[[steps]]
prompt = "Say hi to {{input.who}}"
model = "m"
type = "llm"
id = "a"
[[steps]]
type = "terminate"
id = "b"
[[edges]]
to = "b"
from = "a"
[models.m]
script = [{ usage = { output_tokens = 2, input_tokens = 1 }, text = "hi" }]
provider = "scripted"
`,
			},
			builder: func() *workflow.Builder {
				wf := workflow.New("order").Deadline(5*time.Minute).
					Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"usage":{"output_tokens":2,"input_tokens":1},"text":"hi"}]`)})
				wf.LLM("a", "m").WithPrompt("Say hi to {{input.who}}")
				wf.Terminate("b")
				wf.Edge("a", "b")
				return wf
			},
		},
		{
			name: "inline and standard tables",
			variants: map[string]string{
				"inline": `
name = "tables"
[tools.read]
handler = "orders.read"
input_schema = { type = "object", properties = { id = { type = "string" } } }
[models.m]
provider = "scripted"
script = [{ text = "done" }]
[[steps]]
id = "agent"
type = "agent"
model = "m"
goal = "Read {{input.id}}"
tools = ["read"]
retry = { max_attempts = 2, backoff = "fixed", initial_delay = "1s" }
policy = { allow = ["read"] }
budget = { max_iterations = 4, max_duration = "1m" }
context = { max_tokens = 60000, strategy = "summarize", keep_last = 6, summarizer = "m" }
`,
				"standard": `
name = "tables"

[tools.read]
handler = "orders.read"

[tools.read.input_schema]
type = "object"

[tools.read.input_schema.properties.id]
type = "string"

[models.m]
provider = "scripted"

[[models.m.script]]
text = "done"

[[steps]]
id = "agent"
type = "agent"
model = "m"
goal = "Read {{input.id}}"
tools = ["read"]

[steps.retry]
max_attempts = 2
backoff = "fixed"
initial_delay = "1s"

[steps.policy]
allow = ["read"]

[steps.budget]
max_iterations = 4
max_duration = "1m"

[steps.context]
max_tokens = 60000
strategy = "summarize"
keep_last = 6
summarizer = "m"
`,
				"dotted keys": `
name = "tables"
tools.read.handler = "orders.read"
tools.read.input_schema.type = "object"
tools.read.input_schema.properties.id.type = "string"
models.m.provider = "scripted"
models.m.script = [{ text = "done" }]
[[steps]]
id = "agent"
type = "agent"
model = "m"
goal = "Read {{input.id}}"
tools = ["read"]
retry.max_attempts = 2
retry.backoff = "fixed"
retry.initial_delay = "1s"
policy.allow = ["read"]
budget.max_iterations = 4
budget.max_duration = "1m"
context.summarizer = "m"
context.keep_last = 6
context.strategy = "summarize"
context.max_tokens = 60000
`,
			},
			builder: func() *workflow.Builder {
				wf := workflow.New("tables").
					Tool("read", workflow.ToolDef{Handler: "orders.read", InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)}).
					Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"done"}]`)})
				wf.Agent("agent", "m").
					WithGoal("Read {{input.id}}").
					WithTools("read").
					WithRetry(workflow.Retry{MaxAttempts: 2, Backoff: "fixed", InitialDelay: clock.Duration(time.Second)}).
					WithPolicy(workflow.Policy{Allow: []string{"read"}}).
					WithBudget(workflow.Budget{MaxIterations: 4, MaxDuration: clock.Duration(time.Minute)}).
					WithContext(workflow.Context{MaxTokens: 60000, Strategy: loop.Summarize, KeepLast: 6, Summarizer: "m"})
				return wf
			},
		},
		{
			name: "omitted and explicit defaults",
			variants: map[string]string{
				"omitted": `
name = "defaults"
[models.m]
provider = "scripted"
script = [{ text = "[]" }]
[[steps]]
id = "list"
type = "llm"
model = "m"
prompt = "List {{input.topic}}"
[[steps]]
id = "each"
type = "map"
items = "list.output"
step = "work"
max_items = 10
[[steps]]
id = "work"
type = "task"
handler = "work"
[[edges]]
from = "list"
to = "each"
`,
				"explicit": `
name = "defaults"
deadline = "1h"
max_steps = 10000
start = "list"
[models.m]
provider = "scripted"
script = [{ text = "[]" }]
[[steps]]
id = "list"
type = "llm"
model = "m"
prompt = "List {{input.topic}}"
output_repairs = 2
[[steps]]
id = "each"
type = "map"
items = "list.output"
step = "work"
max_items = 10
max_concurrent = 4
[[steps]]
id = "work"
type = "task"
handler = "work"
[[edges]]
from = "list"
to = "each"
`,
				"other spellings": `
name = "defaults"
deadline = "60m"
max_steps = 10_000
[models.m]
provider = "scripted"
script = [{ text = "[]" }]
[[steps]]
id = "list"
type = "llm"
model = "m"
prompt = "List {{input.topic}}"
output_repairs = 0x2
[[steps]]
id = "each"
type = "map"
items = "list.output"
step = "work"
max_items = 1_0
max_concurrent = 4
[[steps]]
id = "work"
type = "task"
handler = "work"
[[edges]]
from = "list"
to = "each"
`,
			},
			builder: func() *workflow.Builder {
				wf := workflow.New("defaults").
					Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"[]"}]`)})
				wf.LLM("list", "m").WithPrompt("List {{input.topic}}")
				wf.Map("each", "list.output").WithStep("work").WithMaxItems(10)
				wf.Task("work", "work")
				wf.Edge("list", "each")
				return wf
			},
		},
		{
			name: "numbers in raw JSON",
			variants: map[string]string{
				"integers and floats": `
name = "numbers"
[tools.t]
mock = [{ output = { n = 1, x = 2.5, big = 1e21, neg = -3 } }]
[models.m]
provider = "scripted"
script = [{ text = "ok" }]
[[steps]]
id = "a"
type = "agent"
model = "m"
goal = "go"
tools = ["t"]
`,
				"other spellings": `
name = "numbers"
[tools.t]
mock = [{ output = { neg = -3, big = 1_000e18, x = 25e-1, n = +1 } }]
[models.m]
provider = "scripted"
script = [{ text = "ok" }]
[[steps]]
id = "a"
type = "agent"
model = "m"
goal = "go"
tools = ["t"]
`,
			},
			builder: func() *workflow.Builder {
				wf := workflow.New("numbers").
					Tool("t", workflow.ToolDef{Mock: json.RawMessage(`[{"output": {"n": 1.0, "x": 2.50, "big": 1E21, "neg": -3}}]`)}).
					Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"ok"}]`)})
				wf.Agent("a", "m").WithGoal("go").WithTools("t")
				return wf
			},
		},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			var first *workflow.Definition
			var firstName string
			for _, name := range slices.Sorted(maps.Keys(g.variants)) {
				def := eqParse(t, name, g.variants[name])
				if first == nil {
					first, firstName = def, name
					continue
				}
				t.Run(firstName+" = "+name, func(t *testing.T) { eqSame(t, first, def) })
			}
			if g.builder != nil {
				built, err := g.builder().Build()
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				t.Run(firstName+" = builder", func(t *testing.T) { eqSame(t, first, built) })
			}
		})
	}
}

// TestHashChangesWithMeaning: the hash is not blind; any change of meaning changes it.
func TestHashChangesWithMeaning(t *testing.T) {
	base, err := eqCodeReview().Build()
	if err != nil {
		t.Fatal(err)
	}
	h0, _ := base.Hash()
	changes := map[string]func(*workflow.Builder){
		"deadline":  func(wf *workflow.Builder) { wf.Deadline(16 * time.Minute) },
		"max_steps": func(wf *workflow.Builder) { wf.MaxSteps(9999) },
		"new step":  func(wf *workflow.Builder) { wf.Terminate("done"); wf.Edge("report", "done") },
		"loop edge": func(wf *workflow.Builder) {
			wf.Start("review").Edge("report", "review").When("again").MaxIterations(2)
		},
	}
	for name, change := range changes {
		wf := eqCodeReview()
		change(wf)
		def, err := wf.Build()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h, _ := def.Hash(); h == h0 {
			t.Errorf("%s: the hash did not change", name)
		}
	}
}
