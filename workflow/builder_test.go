package workflow_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/workflow"
)

// bdCodes renders problems as "CODE key".
func bdCodes(ps workflow.Problems) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p.Code) + " " + p.Key
	}
	return out
}

// bdProblems fails unless err is workflow.Problems, and returns them.
func bdProblems(t *testing.T, err error) workflow.Problems {
	t.Helper()
	var ps workflow.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Build error %v (%T) is not workflow.Problems", err, err)
	}
	return ps
}

// TestBuilderSeedExample is the agent loop of the seed, written as it is there.
func TestBuilderSeedExample(t *testing.T) {
	wf := workflow.New("code-review")
	review := wf.AgentLoop("review", "llm-review").
		WithMaxIterations(10).
		WithMaxDuration(5 * time.Minute).
		WithLoopDelay(500 * time.Millisecond).
		WithTimeout(30 * time.Second)
	if review.ID() != "review" {
		t.Fatalf("ID() = %q", review.ID())
	}
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	want := &workflow.Definition{
		Name:     "code-review",
		Deadline: workflow.DefaultDeadline,
		MaxSteps: workflow.DefaultMaxSteps,
		Start:    "review",
		Steps: []workflow.Step{{
			ID: "review", Type: workflow.AgentLoop, Handler: "llm-review",
			MaxIterations: 10,
			MaxDuration:   clock.Duration(5 * time.Minute),
			LoopDelay:     clock.Duration(500 * time.Millisecond),
			Timeout:       clock.Duration(30 * time.Second),
		}},
	}
	if !reflect.DeepEqual(def, want) {
		t.Fatalf("built\n%+v\nwant\n%+v", def, want)
	}
	got, _ := def.CanonicalJSON()
	const wantJSON = `{"name":"code-review","deadline":"1h0m0s","max_steps":10000,"start":"review","steps":[{"id":"review","type":"agent_loop","timeout":"30s","handler":"llm-review","max_iterations":10,"max_duration":"5m0s","loop_delay":"500ms"}]}`
	if string(got) != wantJSON {
		t.Fatalf("canonical JSON\n got %s\nwant %s", got, wantJSON)
	}
}

// TestBuilderChainingKeepsTheConcreteType: the common methods return the step's own builder, so
// type-specific methods stay reachable after them. This is checked by the compiler; the test
// also checks that every common method wrote its field.
func TestBuilderChainingKeepsTheConcreteType(t *testing.T) {
	wf := workflow.New("chain")
	retry := workflow.Retry{MaxAttempts: 2, Backoff: "fixed"}
	var (
		_ *workflow.TaskStep      = wf.Task("a", "h").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label")
		_ *workflow.AgentLoopStep = wf.AgentLoop("b", "h").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label").WithMaxIterations(1)
		_ *workflow.LLMStep       = wf.LLM("c", "m").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label").WithPrompt("p")
		_ *workflow.AgentStep     = wf.Agent("d", "m").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("stop_reason").WithGoal("g")
		_ *workflow.SwitchStep    = wf.Switch("e", "input.x").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label")
		_ *workflow.ParallelStep  = wf.Parallel("f", "a").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label").WithMaxConcurrent(1)
		_ *workflow.MapStep       = wf.Map("g", "input.xs").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label").WithStep("a")
		_ *workflow.CallStep      = wf.Call("h", "sub.toml").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label")
		_ *workflow.ApprovalStep  = wf.Approval("i", "ok?").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label").WithOnTimeout("deny")
		_ *workflow.WaitEventStep = wf.WaitEvent("j", "ev").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label")
		_ *workflow.SleepStep     = wf.Sleep("k", time.Second).WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label")
		_ *workflow.TerminateStep = wf.Terminate("l").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label")
		_ *workflow.FailStep      = wf.Fail("m", "no").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label")
	)
	// The definition is not valid (no models, a dangling map body, ...), but none of its
	// problems may concern the common keys every step above set.
	_, err := wf.Build()
	for _, p := range bdProblems(t, err) {
		for _, k := range []string{".timeout", ".retry", ".input", ".branch"} {
			if strings.Contains(p.Key, k) {
				t.Errorf("unexpected problem with a common key: %v", p)
			}
		}
	}

	// And each common method writes its field.
	one := workflow.New("one")
	one.Task("a", "h").WithTimeout(time.Second).WithRetry(retry).WithInput("input.x").WithBranch("label")
	def, err := one.Build()
	if err != nil {
		t.Fatal(err)
	}
	s := def.Steps[0]
	if s.Timeout != clock.Duration(time.Second) || s.Retry == nil || *s.Retry != retry || s.Input != "input.x" || s.Branch != "label" {
		t.Fatalf("step = %+v", s)
	}
}

// bdEveryType is a valid workflow with every step type and the builder method of every key.
func bdEveryType() *workflow.Builder {
	wf := workflow.New("every-type").
		Description("Every step type.").
		Deadline(10*time.Minute).
		MaxSteps(500).
		Start("fetch").
		Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"ok"}]`)}).
		Tool("read", workflow.ToolDef{Description: "Read.", Handler: "orders.read", InputSchema: json.RawMessage(`{"type":"object"}`)}).
		Tool("pay", workflow.ToolDef{SideEffect: true, Mock: json.RawMessage(`[{"output":{"ok":true}}]`)})
	wf.Task("fetch", "orders.fetch").
		WithTimeout(30 * time.Second).
		WithRetry(workflow.Retry{MaxAttempts: 3, Backoff: "exponential", InitialDelay: clock.Duration(time.Second), MaxDelay: clock.Duration(10 * time.Second)}).
		WithInput("{{input.order}}")
	wf.AgentLoop("poll", "orders.poll").WithMaxIterations(20).WithMaxDuration(5 * time.Minute).WithLoopDelay(2 * time.Second)
	wf.LLM("draft", "m").WithPrompt("Write about {{fetch.output.title}}.").WithInstructions("Be brief.").
		WithOutputSchema(json.RawMessage(`{"type": "object"}`)).WithOutputRepairs(0).WithBranch("kind")
	wf.Agent("investigate", "m").WithGoal("Investigate {{input.order}}.").WithInstructions("Never pay.").
		WithTools("read", "pay").
		WithPolicy(workflow.Policy{Allow: []string{"read", "pay"}, Forbid: []string{"pay"}, RequireApproval: []string{"read"}, RequiredEvidence: []string{"read"}}).
		WithBudget(workflow.Budget{MaxIterations: 5, MaxToolCalls: 3, MaxDuration: clock.Duration(time.Minute), MaxTokens: 1000, MaxCostUSD: 0.5, MaxToolFailures: 2, MaxRepeatedCalls: 2, MaxInvalidActions: 2}).
		WithOnNeedsHuman("pause").WithApprovalTimeout(30 * time.Minute).WithOnTimeout("deny")
	wf.Switch("route", "investigate.output.stop_reason")
	wf.Parallel("both", "left").WithStepBranch("right").WithMaxConcurrent(2)
	wf.Task("left", "work")
	wf.Task("right", "work")
	wf.Map("each", "fetch.output.items").WithStep("item").WithMaxItems(50).WithMaxConcurrent(8)
	wf.Task("item", "work")
	wf.Approval("ask", "Pay {{input.order}}?").WithTimeout(time.Hour).WithOnTimeout("fail")
	wf.WaitEvent("paid", "payment.settled").WithTimeout(24 * time.Hour)
	wf.Sleep("cool", 5*time.Minute)
	wf.Terminate("done")
	wf.Fail("failed", "Stopped: {{investigate.output.stop_reason}}")

	wf.Edge("fetch", "poll")
	wf.Edge("poll", "draft")
	wf.Edge("draft", "investigate").When("long")
	wf.Edge("draft", "draft").When("short").MaxIterations(2)
	wf.Edge("investigate", "route")
	wf.Edge("route", "both").When("completed")
	wf.Edge("route", "failed").When("refused")
	wf.Edge("both", "each")
	wf.Edge("each", "ask")
	wf.Edge("ask", "paid").When("approved")
	wf.Edge("ask", "failed").When("denied")
	wf.Edge("paid", "cool")
	wf.Edge("cool", "done")
	return wf
}

// bdEveryTypeTOML is bdEveryType as a file.
const bdEveryTypeTOML = `
name = "every-type"
description = "Every step type."
deadline = "10m"
max_steps = 500
start = "fetch"

[models.m]
provider = "scripted"
script = [{ text = "ok" }]

[tools.read]
description = "Read."
handler = "orders.read"
input_schema = { type = "object" }

[tools.pay]
side_effect = true
mock = [{ output = { ok = true } }]

[[steps]]
id = "fetch"
type = "task"
handler = "orders.fetch"
timeout = "30s"
retry = { max_attempts = 3, backoff = "exponential", initial_delay = "1s", max_delay = "10s" }
input = "{{input.order}}"

[[steps]]
id = "poll"
type = "agent_loop"
handler = "orders.poll"
max_iterations = 20
max_duration = "5m"
loop_delay = "2s"

[[steps]]
id = "draft"
type = "llm"
model = "m"
prompt = "Write about {{fetch.output.title}}."
instructions = "Be brief."
output_schema = { type = "object" }
output_repairs = 0
branch = "kind"

[[steps]]
id = "investigate"
type = "agent"
model = "m"
goal = "Investigate {{input.order}}."
instructions = "Never pay."
tools = ["read", "pay"]
policy = { allow = ["read", "pay"], forbid = ["pay"], require_approval = ["read"], required_evidence = ["read"] }
budget = { max_iterations = 5, max_tool_calls = 3, max_duration = "1m", max_tokens = 1000, max_cost_usd = 0.5, max_tool_failures = 2, max_repeated_calls = 2, max_invalid_actions = 2 }
on_needs_human = "pause"
approval_timeout = "30m"
on_timeout = "deny"

[[steps]]
id = "route"
type = "switch"
expr = "investigate.output.stop_reason"

[[steps]]
id = "both"
type = "parallel"
branches = ["left", "right"]
max_concurrent = 2

[[steps]]
id = "left"
type = "task"
handler = "work"

[[steps]]
id = "right"
type = "task"
handler = "work"

[[steps]]
id = "each"
type = "map"
items = "fetch.output.items"
step = "item"
max_items = 50
max_concurrent = 8

[[steps]]
id = "item"
type = "task"
handler = "work"

[[steps]]
id = "ask"
type = "approval"
prompt = "Pay {{input.order}}?"
timeout = "1h"
on_timeout = "fail"

[[steps]]
id = "paid"
type = "wait_event"
event = "payment.settled"
timeout = "24h"

[[steps]]
id = "cool"
type = "sleep"
duration = "5m"

[[steps]]
id = "done"
type = "terminate"

[[steps]]
id = "failed"
type = "fail"
message = "Stopped: {{investigate.output.stop_reason}}"

[[edges]]
from = "fetch"
to = "poll"
[[edges]]
from = "poll"
to = "draft"
[[edges]]
from = "draft"
to = "investigate"
when = "long"
[[edges]]
from = "draft"
to = "draft"
when = "short"
max_iterations = 2
[[edges]]
from = "investigate"
to = "route"
[[edges]]
from = "route"
to = "both"
when = "completed"
[[edges]]
from = "route"
to = "failed"
when = "refused"
[[edges]]
from = "both"
to = "each"
[[edges]]
from = "each"
to = "ask"
[[edges]]
from = "ask"
to = "paid"
when = "approved"
[[edges]]
from = "ask"
to = "failed"
when = "denied"
[[edges]]
from = "paid"
to = "cool"
[[edges]]
from = "cool"
to = "done"
`

// TestBuilderEveryStepTypeEqualsTOML covers every step type and every builder method against
// the same workflow written as a file.
func TestBuilderEveryStepTypeEqualsTOML(t *testing.T) {
	built, err := bdEveryType().Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	loaded := eqParse(t, "every-type", bdEveryTypeTOML)
	eqSame(t, built, loaded)

	// Spot checks of what the builder wrote.
	if s := built.StepByID("draft"); s.OutputRepairs == nil || *s.OutputRepairs != 0 {
		t.Errorf("WithOutputRepairs(0) was not kept as an explicit 0: %v", s.OutputRepairs)
	}
	if s := built.StepByID("cool"); s.Duration != clock.Duration(5*time.Minute) {
		t.Errorf("sleep duration = %v", s.Duration)
	}
	if s := built.StepByID("both"); !reflect.DeepEqual(s.Branches, []workflow.Branch{{Step: "left"}, {Step: "right"}}) {
		t.Errorf("branches = %+v", s.Branches)
	}
}

// TestBuildNormalizes: Build fills in the defaults.
func TestBuildNormalizes(t *testing.T) {
	wf := workflow.New("defaults").Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"[]"}]`)})
	wf.LLM("list", "m").WithPrompt("List {{input.topic}}")
	wf.Map("each", "list.output").WithStep("work").WithMaxItems(3)
	wf.Task("work", "work")
	wf.Edge("list", "each")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	if def.Deadline != workflow.DefaultDeadline || def.MaxSteps != workflow.DefaultMaxSteps || def.Start != "list" {
		t.Errorf("top-level defaults: deadline %v, max_steps %d, start %q", def.Deadline, def.MaxSteps, def.Start)
	}
	if r := def.StepByID("list").OutputRepairs; r == nil || *r != workflow.DefaultOutputRepairs {
		t.Errorf("output_repairs = %v", r)
	}
	if c := def.StepByID("each").MaxConcurrent; c != workflow.DefaultMapConcurrent {
		t.Errorf("map max_concurrent = %d", c)
	}
	if def.Source != nil {
		t.Errorf("a built definition has no source, got %+v", def.Source)
	}
}

// TestBuildReportsEveryProblem: Build reports all problems at once, as typed Problems.
func TestBuildReportsEveryProblem(t *testing.T) {
	wf := workflow.New("Bad Name").
		Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"ok"}]`)})
	wf.LLM("gen", "nope").WithPrompt("Write {{ghost.output}}") // unknown model, unknown step in a template
	wf.AgentLoop("loop", "h")                                  // no max_iterations
	wf.Map("each", "gen.output").WithStep("work")              // no max_items
	wf.Task("work", "w")
	wf.Switch("route", "")                           // no expr
	wf.Task("gen", "dup")                            // duplicate id
	wf.Approval("ask", "ok?").WithOnTimeout("maybe") // bad on_timeout
	// An unknown tool, a bad on_needs_human and on_timeout, a negative approval_timeout:
	wf.Agent("agent", "m").WithGoal("go").WithTools("missing-tool").
		WithOnNeedsHuman("ask").WithOnTimeout("never").WithApprovalTimeout(-time.Second)
	wf.Edge("gen", "loop")
	wf.Edge("loop", "each")
	wf.Edge("each", "gen")                     // a cycle without a loop edge
	wf.Edge("each", "nowhere")                 // dangling
	wf.Edge("loop", "route").MaxIterations(-1) // bad bound
	wf.Start("gen")
	def, err := wf.Build()
	if def != nil {
		t.Errorf("Build returned a definition with its problems: %+v", def)
	}
	ps := bdProblems(t, err)
	got := bdCodes(ps)
	for _, want := range []string{
		"E_BAD_NAME name",
		"E_UNKNOWN_MODEL steps[0].model",
		"E_TEMPLATE steps[0].prompt",
		"E_MISSING_KEY steps[1].max_iterations",
		"E_MISSING_KEY steps[2].max_items",
		"E_MISSING_KEY steps[4].expr",
		"E_DUPLICATE_ID steps[5].id",
		"E_BAD_VALUE steps[6].on_timeout",
		"E_UNKNOWN_TOOL steps[7].tools[0]",
		"E_BAD_VALUE steps[7].on_needs_human",
		"E_BAD_VALUE steps[7].on_timeout",
		"E_BAD_DURATION steps[7].approval_timeout",
		"E_DANGLING_EDGE edges[3].to",
		"E_BAD_BOUND edges[4].max_iterations",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("missing %q in\n%v", want, ps)
		}
	}
	if !ps.Has(workflow.ECycle) {
		t.Errorf("no E_CYCLE in\n%v", ps)
	}
	// As an error, Problems reads as every problem, one per line.
	if err.Error() != ps.Error() {
		t.Errorf("err.Error() = %q", err.Error())
	}
}

// TestBuildInvalidRawJSON: raw JSON that does not parse is a problem naming its key, not a
// failure of CanonicalJSON later.
func TestBuildInvalidRawJSON(t *testing.T) {
	wf := workflow.New("raw").
		Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text": "ok"`)}).
		Tool("t", workflow.ToolDef{Handler: "h", InputSchema: json.RawMessage(`{} {}`), Mock: json.RawMessage(`nope`)})
	wf.LLM("a", "m").WithPrompt("p").WithOutputSchema(json.RawMessage(`{"type":}`))
	_, err := wf.Build()
	got := bdCodes(bdProblems(t, err))
	for _, want := range []string{"E_TYPE models.m.script", "E_TYPE tools.t.input_schema", "E_TYPE tools.t.mock", "E_TYPE steps[0].output_schema"} {
		if !slices.Contains(got, want) {
			t.Errorf("missing %q in %q", want, got)
		}
	}
}

// TestBuildCanonicalizesRawJSON: whitespace, key order and number spelling in raw JSON do not
// change the hash.
func TestBuildCanonicalizesRawJSON(t *testing.T) {
	build := func(schema string) string {
		wf := workflow.New("raw").Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"ok"}]`)})
		wf.LLM("a", "m").WithPrompt("p").WithOutputSchema(json.RawMessage(schema))
		def, err := wf.Build()
		if err != nil {
			t.Fatal(err)
		}
		h, _ := def.Hash()
		return h
	}
	a := build(`{"type":"object","properties":{"n":{"type":"integer","maximum":10}}}`)
	b := build("{\n  \"properties\": {\"n\": {\"maximum\": 10.0, \"type\": \"integer\"}},\n  \"type\": \"object\"\n}")
	if a != b {
		t.Errorf("hashes differ: %s, %s", a, b)
	}
	if c := build(`{"type":"object","properties":{"n":{"type":"integer","maximum":11}}}`); c == a {
		t.Error("a different schema hashed the same")
	}
}

// TestBuildIsASnapshot: a built definition does not change when the builder, or the values
// given to it, change afterwards; building twice gives equal, independent definitions.
func TestBuildIsASnapshot(t *testing.T) {
	allow := []string{"read"}
	wf := workflow.New("snap").
		Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"ok"}]`)}).
		Tool("read", workflow.ToolDef{Handler: "h"})
	agent := wf.Agent("a", "m").WithGoal("go").WithTools("read").WithPolicy(workflow.Policy{Allow: allow})
	first, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	h1, _ := first.Hash()
	second, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, second) {
		t.Fatal("two builds differ")
	}
	second.Steps[0].Policy.Allow[0] = "changed"
	second.Models["m"] = workflow.ModelDef{}

	allow[0] = "mutated"
	agent.WithGoal("another goal").WithTimeout(time.Second)
	wf.Terminate("done")
	wf.Edge("a", "done")
	wf.Description("changed")

	if h, _ := first.Hash(); h != h1 {
		t.Fatal("the first definition changed after it was built")
	}
	if first.Steps[0].Policy.Allow[0] != "read" || first.Models["m"].Provider != "scripted" {
		t.Fatal("the definitions share memory")
	}
}

// TestBuilderRedeclaring: declaring a model or tool twice keeps the last declaration.
func TestBuilderRedeclaring(t *testing.T) {
	wf := workflow.New("again").
		Model("m", workflow.ModelDef{Provider: "openai", Model: "first"}).
		Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"ok"}]`)})
	wf.LLM("a", "m").WithPrompt("p")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	if m := def.Models["m"]; m.Provider != "scripted" || m.Model != "" {
		t.Fatalf("model m = %+v", m)
	}
}

// TestBuildWithOptions: handlers are checked when given, and sub-workflow files resolve against
// BaseDir.
func TestBuildWithOptions(t *testing.T) {
	dir := t.TempDir()
	sub := "name = \"sub\"\n[[steps]]\nid = \"only\"\ntype = \"terminate\"\n"
	if err := os.WriteFile(filepath.Join(dir, "sub.toml"), []byte(sub), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(opts workflow.Options) error {
		wf := workflow.New("parent")
		wf.Task("work", "known")
		wf.Call("child", "sub.toml")
		wf.Parallel("fan").WithWorkflowBranch("sub.toml")
		wf.Map("each", "work.output.items").WithWorkflow("sub.toml").WithMaxItems(3)
		wf.Edge("work", "child")
		wf.Edge("child", "fan")
		wf.Edge("fan", "each")
		_, err := wf.BuildWith(opts)
		return err
	}
	if err := build(workflow.Options{BaseDir: dir, Handlers: []string{"known"}}); err != nil {
		t.Fatalf("valid with BaseDir and handlers: %v", err)
	}
	ps := bdProblems(t, build(workflow.Options{BaseDir: dir, Handlers: []string{"other"}}))
	if !slices.Equal(bdCodes(ps), []string{"E_UNKNOWN_HANDLER steps[0].handler"}) {
		t.Errorf("unknown handler: %v", ps)
	}
	ps = bdProblems(t, build(workflow.Options{BaseDir: filepath.Join(dir, "elsewhere")}))
	if !ps.Has(workflow.EWorkflowFile) {
		t.Errorf("a missing sub-workflow file is not reported: %v", ps)
	}
}

// TestBuilderEdges: When and MaxIterations write the edge; edges keep declaration order.
func TestBuilderEdges(t *testing.T) {
	wf := workflow.New("edges").Start("a")
	wf.Task("a", "h").WithBranch("verdict")
	wf.Task("b", "h")
	wf.Terminate("c")
	e := wf.Edge("a", "b")
	if e.When("retry").MaxIterations(3) != e {
		t.Fatal("edge methods do not return their builder")
	}
	wf.Edge("b", "a")
	wf.Edge("a", "c").When("retry")
	wf.Edge("a", "c").When("ok")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	want := []workflow.Edge{
		{From: "a", To: "b", When: "retry", MaxIterations: 3},
		{From: "b", To: "a"},
		{From: "a", To: "c", When: "retry"},
		{From: "a", To: "c", When: "ok"},
	}
	if !reflect.DeepEqual(def.Edges, want) {
		t.Fatalf("edges = %+v", def.Edges)
	}
	if !def.Edges[0].IsLoop() || def.Edges[2].IsLoop() {
		t.Fatal("IsLoop")
	}
}

// TestBuildEmpty: a workflow without steps is reported, not built.
func TestBuildEmpty(t *testing.T) {
	_, err := workflow.New("empty").Build()
	if ps := bdProblems(t, err); !slices.Contains(bdCodes(ps), "E_MISSING_KEY steps") {
		t.Fatalf("problems: %v", ps)
	}
}
