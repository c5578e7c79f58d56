package workflow_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/workflow"
)

// vBase is a small valid workflow: generate, check, retry at most 3 times, done.
func vBase() *workflow.Definition {
	return &workflow.Definition{
		Name:  "demo",
		Start: "gen", // gen has an incoming loop edge, so it is not a root
		Models: map[string]workflow.ModelDef{
			"writer": {Provider: "scripted", Script: json.RawMessage(`[{"text":"ok"}]`)},
		},
		Tools: map[string]workflow.ToolDef{
			"read":   {Handler: "orders.read"},
			"refund": {Mock: json.RawMessage(`[{"output":{"ok":true}}]`)},
		},
		Steps: []workflow.Step{
			{ID: "gen", Type: workflow.LLM, Model: "writer", Prompt: "Write about {{input.topic}}"},
			{ID: "check", Type: workflow.Switch, Expr: "gen.output.label"},
			{ID: "done", Type: workflow.Terminate},
		},
		Edges: []workflow.Edge{
			{From: "gen", To: "check"},
			{From: "check", To: "gen", When: "retry", MaxIterations: 3},
			{From: "check", To: "done", When: "ok"},
		},
	}
}

// vCodes renders problems as "CODE key", in order.
func vCodes(ps workflow.Problems) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p.Code) + " " + p.Key
	}
	return out
}

func vSame(t *testing.T, got workflow.Problems, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if g := vCodes(got); !slices.Equal(g, want) {
		t.Fatalf("problems:\n  got  %q\n  want %q\nfull:\n%v", g, want, got)
	}
}

func TestValidateBaseIsValid(t *testing.T) {
	vSame(t, workflow.Validate(vBase(), workflow.Options{}))
	vSame(t, workflow.Validate(vBase(), workflow.Options{Handlers: []string{"orders.read"}}))
}

func TestValidateEachCode(t *testing.T) {
	set := func(i int, f func(s *workflow.Step)) func(d *workflow.Definition) {
		return func(d *workflow.Definition) { f(&d.Steps[i]) }
	}
	// asDone replaces the terminate step "done" (steps[2], reached from check on "ok").
	asDone := func(s workflow.Step) func(d *workflow.Definition) {
		return func(d *workflow.Definition) { s.ID = "done"; d.Steps[2] = s }
	}
	// asContext makes done an agent step with context policy c.
	asContext := func(c workflow.Context) func(d *workflow.Definition) {
		return asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", Context: &c})
	}
	addStep := func(s workflow.Step) func(d *workflow.Definition) {
		return func(d *workflow.Definition) { d.Steps = append(d.Steps, s) }
	}
	addEdge := func(e workflow.Edge) func(d *workflow.Definition) {
		return func(d *workflow.Definition) { d.Edges = append(d.Edges, e) }
	}
	// asMap makes done a map step, over a body step of its own (steps[3]) unless s names one.
	asMap := func(s workflow.Step) func(d *workflow.Definition) {
		return func(d *workflow.Definition) {
			s.ID, s.Type = "done", workflow.Map
			if s.Step == "" && s.Workflow == "" {
				s.Step = "body"
			}
			d.Steps[2] = s
			if s.Step == "body" {
				d.Steps = append(d.Steps, workflow.Step{ID: "body", Type: workflow.Terminate})
			}
		}
	}
	dir := t.TempDir()
	vWrite(t, dir, map[string]string{"x.toml": vLeaf})
	model := func(name string, m workflow.ModelDef) func(d *workflow.Definition) {
		return func(d *workflow.Definition) { d.Models[name] = m }
	}
	tests := []struct {
		name     string
		mutate   func(d *workflow.Definition)
		opts     workflow.Options
		code     workflow.Code
		key      string
		mentions string
	}{
		// Names and ids.
		{"no name", func(d *workflow.Definition) { d.Name = "" }, workflow.Options{}, workflow.EMissingKey, "name", "name"},
		{"bad name", func(d *workflow.Definition) { d.Name = "Demo Flow" }, workflow.Options{}, workflow.EBadName, "name", "Demo Flow"},
		{"bad step id", func(d *workflow.Definition) { d.Steps[2].ID = "do ne"; d.Edges[2].To = "do ne" }, workflow.Options{}, workflow.EBadName, "steps[2].id", "do ne"},
		{"no step id", (addStep(workflow.Step{Type: workflow.Terminate})), workflow.Options{}, workflow.EMissingKey, "steps[3].id", "id"},
		{"no steps", func(d *workflow.Definition) { d.Start, d.Steps, d.Edges = "", nil, nil }, workflow.Options{}, workflow.EMissingKey, "steps", "no steps"},
		{"duplicate id", addStep(workflow.Step{ID: "done", Type: workflow.Terminate}), workflow.Options{}, workflow.EDuplicateID, "steps[3].id", "done"},

		// Types and their keys.
		{"no type", set(2, func(s *workflow.Step) { s.Type = "" }), workflow.Options{}, workflow.EMissingKey, "steps[2].type", "done"},
		{"unknown type", set(2, func(s *workflow.Step) { s.Type = "teleport" }), workflow.Options{}, workflow.EUnknownType, "steps[2].type", "teleport"},
		{"key of another type", set(2, func(s *workflow.Step) { s.Handler = "x" }), workflow.Options{}, workflow.EUnknownKey, "steps[2].handler", "handler"},
		{"task handler", asDone(workflow.Step{Type: workflow.Task}), workflow.Options{}, workflow.EMissingKey, "steps[2].handler", "done"},
		{"agent_loop handler", asDone(workflow.Step{Type: workflow.AgentLoop, MaxIterations: 3}), workflow.Options{}, workflow.EMissingKey, "steps[2].handler", "done"},
		{"agent_loop max_iterations", asDone(workflow.Step{Type: workflow.AgentLoop, Handler: "h"}), workflow.Options{}, workflow.EMissingKey, "steps[2].max_iterations", "max_iterations"},
		{"llm model", set(0, func(s *workflow.Step) { s.Model = "" }), workflow.Options{}, workflow.EMissingKey, "steps[0].model", "gen"},
		{"llm prompt", set(0, func(s *workflow.Step) { s.Prompt = "" }), workflow.Options{}, workflow.EMissingKey, "steps[0].prompt", "gen"},
		{"agent model", asDone(workflow.Step{Type: workflow.Agent, Goal: "g"}), workflow.Options{}, workflow.EMissingKey, "steps[2].model", "done"},
		{"agent goal", asDone(workflow.Step{Type: workflow.Agent, Model: "writer"}), workflow.Options{}, workflow.EMissingKey, "steps[2].goal", "goal"},
		{"switch expr", set(1, func(s *workflow.Step) { s.Expr = "" }), workflow.Options{}, workflow.EMissingKey, "steps[1].expr", "check"},
		{"parallel branches", asDone(workflow.Step{Type: workflow.Parallel}), workflow.Options{}, workflow.EMissingKey, "steps[2].branches", "branch"},
		{"map items", asMap(workflow.Step{MaxItems: 3}), workflow.Options{}, workflow.EMissingKey, "steps[2].items", "items"},
		{"map max_items", asMap(workflow.Step{Items: "gen.output.list"}), workflow.Options{}, workflow.EMissingKey, "steps[2].max_items", "max_items"},
		{"map body", asDone(workflow.Step{Type: workflow.Map, Items: "gen.output.list", MaxItems: 3}), workflow.Options{}, workflow.EMissingKey, "steps[2].step", "done"},
		{"map both bodies", asMap(workflow.Step{Items: "input.list", MaxItems: 3, Step: "body", Workflow: "x.toml"}), workflow.Options{BaseDir: dir}, workflow.EBadValue, "steps[2].workflow", "both"},
		{"call workflow", asDone(workflow.Step{Type: workflow.Call}), workflow.Options{}, workflow.EMissingKey, "steps[2].workflow", "done"},
		{"wait_event event", asDone(workflow.Step{Type: workflow.WaitEvent}), workflow.Options{}, workflow.EMissingKey, "steps[2].event", "event"},
		{"sleep duration", asDone(workflow.Step{Type: workflow.Sleep}), workflow.Options{}, workflow.EMissingKey, "steps[2].duration", "duration"},
		{"fail message", asDone(workflow.Step{Type: workflow.Fail}), workflow.Options{}, workflow.EMissingKey, "steps[2].message", "message"},
		{"approval prompt", asDone(workflow.Step{Type: workflow.Approval}), workflow.Options{}, workflow.EMissingKey, "steps[2].prompt", "prompt"},

		// Bounds and values.
		{"agent_loop max_iterations <= 0", asDone(workflow.Step{Type: workflow.AgentLoop, Handler: "h", MaxIterations: -1}), workflow.Options{}, workflow.EBadBound, "steps[2].max_iterations", "-1"},
		{"loop edge max_iterations < 0", func(d *workflow.Definition) { d.Edges[1].MaxIterations = -2 }, workflow.Options{}, workflow.EBadBound, "edges[1].max_iterations", "check → gen"},
		{"max_items <= 0", asMap(workflow.Step{Items: "gen.output.list", MaxItems: -4}), workflow.Options{}, workflow.EBadBound, "steps[2].max_items", "-4"},
		{"max_concurrent < 0", asMap(workflow.Step{Items: "gen.output.list", MaxItems: 4, MaxConcurrent: -1}), workflow.Options{}, workflow.EBadBound, "steps[2].max_concurrent", "max_concurrent"},
		{"max_steps < 0", func(d *workflow.Definition) { d.MaxSteps = -1 }, workflow.Options{}, workflow.EBadBound, "max_steps", "max_steps"},
		{"retry max_attempts < 1", set(0, func(s *workflow.Step) { s.Retry = &workflow.Retry{Backoff: "fixed"} }), workflow.Options{}, workflow.EBadBound, "steps[0].retry.max_attempts", "gen"},
		{"output_repairs < 0", set(0, func(s *workflow.Step) { n := -1; s.OutputRepairs = &n }), workflow.Options{}, workflow.EBadBound, "steps[0].output_repairs", "gen"},
		{"budget < 0", asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", Budget: &workflow.Budget{MaxToolCalls: -1}}), workflow.Options{}, workflow.EBadBound, "steps[2].budget.max_tool_calls", "max_tool_calls"},
		{"context without max_tokens", asContext(workflow.Context{Strategy: loop.DropOldest}), workflow.Options{}, workflow.EMissingKey, "steps[2].context.max_tokens", "without max_tokens"},
		{"context max_tokens < 0", asContext(workflow.Context{MaxTokens: -1}), workflow.Options{}, workflow.EBadBound, "steps[2].context.max_tokens", "context.max_tokens -1: it must be positive"},
		{"context keep_last < 0", asContext(workflow.Context{MaxTokens: 100, KeepLast: -2}), workflow.Options{}, workflow.EBadBound, "steps[2].context.keep_last", "keep_last -2"},
		{"context strategy", asContext(workflow.Context{MaxTokens: 100, Strategy: "forget"}), workflow.Options{}, workflow.EBadValue, "steps[2].context.strategy", `"drop_oldest", "truncate_tool_results" or "summarize"`},
		{"summarize without a summarizer", asContext(workflow.Context{MaxTokens: 100, Strategy: loop.Summarize}), workflow.Options{}, workflow.EMissingKey, "steps[2].context.summarizer", "names no summarizer"},
		{"a summarizer without summarize", asContext(workflow.Context{MaxTokens: 100, Summarizer: "writer"}), workflow.Options{}, workflow.EBadValue, "steps[2].context.summarizer", `only strategy "summarize" uses (its strategy is drop_oldest)`},
		{"unknown summarizer", asContext(workflow.Context{MaxTokens: 100, Strategy: loop.Summarize, Summarizer: "ghost"}), workflow.Options{}, workflow.EUnknownModel, "steps[2].context.summarizer", `model "ghost" as its summarizer`},
		{"instructions over context.max_tokens", asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", Instructions: strings.Repeat("Be careful. ", 20), Context: &workflow.Context{MaxTokens: 50}}), workflow.Options{}, workflow.EBadBound, "steps[2].context.max_tokens", "its instructions alone come to about 60 input tokens"},
		{"context on an llm step", set(0, func(s *workflow.Step) { s.Context = &workflow.Context{MaxTokens: 100} }), workflow.Options{}, workflow.EUnknownKey, "steps[0].context", "llm steps do not take"},
		{"backoff", set(0, func(s *workflow.Step) { s.Retry = &workflow.Retry{MaxAttempts: 2, Backoff: "random"} }), workflow.Options{}, workflow.EBadValue, "steps[0].retry.backoff", "random"},
		{"on_timeout", asDone(workflow.Step{Type: workflow.Approval, Prompt: "ok?", OnTimeout: "maybe"}), workflow.Options{}, workflow.EBadValue, "steps[2].on_timeout", "maybe"},
		{"agent on_timeout", asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", OnTimeout: "later"}), workflow.Options{}, workflow.EBadValue, "steps[2].on_timeout", `agent step "done" has on_timeout "later": it must be "deny" or "fail"`},
		{"on_needs_human", asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", OnNeedsHuman: "wait"}), workflow.Options{}, workflow.EBadValue, "steps[2].on_needs_human", `"complete" or "pause"`},
		{"approval_timeout < 0", asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", ApprovalTimeout: -1e9}), workflow.Options{}, workflow.EBadDuration, "steps[2].approval_timeout", "negative approval_timeout"},
		{"approval_timeout on a task", asDone(workflow.Step{Type: workflow.Task, Handler: "h", ApprovalTimeout: 1e9}), workflow.Options{}, workflow.EUnknownKey, "steps[2].approval_timeout", "task steps do not take"},
		{"on_needs_human on an approval", asDone(workflow.Step{Type: workflow.Approval, Prompt: "ok?", OnNeedsHuman: "pause"}), workflow.Options{}, workflow.EUnknownKey, "steps[2].on_needs_human", "approval steps do not take"},
		{"provider", model("writer", workflow.ModelDef{Provider: "Gemini Pro"}), workflow.Options{}, workflow.EBadValue, "models.writer.provider", "Gemini Pro"},
		{"no provider", model("writer", workflow.ModelDef{}), workflow.Options{}, workflow.EMissingKey, "models.writer.provider", "writer"},
		{"scripted without script", model("writer", workflow.ModelDef{Provider: "scripted"}), workflow.Options{}, workflow.EMissingKey, "models.writer.script", "writer"},
		{"replay without cassette", model("writer", workflow.ModelDef{Provider: "replay"}), workflow.Options{}, workflow.EMissingKey, "models.writer.cassette", "writer"},
		{"negative timeout", set(0, func(s *workflow.Step) { s.Timeout = -1e9 }), workflow.Options{}, workflow.EBadDuration, "steps[0].timeout", "gen"},

		// References.
		{"edge to unknown step", addEdge(workflow.Edge{From: "check", To: "nowhere", When: "lost"}), workflow.Options{}, workflow.EDanglingEdge, "edges[3].to", "nowhere"},
		{"edge from unknown step", addEdge(workflow.Edge{From: "ghost", To: "done"}), workflow.Options{}, workflow.EDanglingEdge, "edges[3].from", "ghost"},
		{"edge without from", addEdge(workflow.Edge{To: "done"}), workflow.Options{}, workflow.EMissingKey, "edges[3].from", "from"},
		{"edge without to", addEdge(workflow.Edge{From: "done"}), workflow.Options{}, workflow.EMissingKey, "edges[3].to", "to"},
		{"unknown start", func(d *workflow.Definition) { d.Start = "ghost" }, workflow.Options{}, workflow.EUnknownStep, "start", "ghost"},
		{"unknown branch step", asDone(workflow.Step{Type: workflow.Parallel, Branches: []workflow.Branch{{Step: "ghost"}}}), workflow.Options{}, workflow.EUnknownStep, "steps[2].branches[0]", "ghost"},
		{"unknown map step", asMap(workflow.Step{Items: "gen.output.list", MaxItems: 3, Step: "ghost"}), workflow.Options{}, workflow.EUnknownStep, "steps[2].step", "ghost"},
		{"no start", func(d *workflow.Definition) {
			d.Start, d.Edges = "", slices.Delete(d.Edges, 1, 2)
			d.Steps = append(d.Steps, workflow.Step{ID: "other", Type: workflow.Terminate})
		}, workflow.Options{}, workflow.ENoStart, "start", `"gen", "other"`},
		{"unknown model", set(0, func(s *workflow.Step) { s.Model = "ghost" }), workflow.Options{}, workflow.EUnknownModel, "steps[0].model", "ghost"},
		{"unknown tool", asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", Tools: []string{"read", "ghost"}}), workflow.Options{}, workflow.EUnknownTool, "steps[2].tools[1]", "ghost"},
		{"unknown allowed tool", asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", Policy: &workflow.Policy{Allow: []string{"ghost"}, Forbid: []string{"anything"}}}), workflow.Options{}, workflow.EUnknownTool, "steps[2].policy.allow[0]", "ghost"},
		{"unknown approval tool", asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", Policy: &workflow.Policy{RequireApproval: []string{"read", "ghost"}}}), workflow.Options{}, workflow.EUnknownTool, "steps[2].policy.require_approval[1]", "ghost"},
		{"unknown evidence tool", asDone(workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "g", Policy: &workflow.Policy{RequiredEvidence: []string{"ghost"}}}), workflow.Options{}, workflow.EUnknownTool, "steps[2].policy.required_evidence[0]", "ghost"},
		{"tool without handler or mock", func(d *workflow.Definition) { d.Tools["empty"] = workflow.ToolDef{Description: "nothing"} }, workflow.Options{}, workflow.EMissingKey, "tools.empty", "empty"},
		{"reserved handler", asDone(workflow.Step{Type: workflow.Task, Handler: "reins-agent"}), workflow.Options{}, workflow.EBadName, "steps[2].handler", "reserved"},
		{"handler with an empty part", asDone(workflow.Step{Type: workflow.AgentLoop, Handler: "llm..review", MaxIterations: 2}), workflow.Options{}, workflow.EBadName, "steps[2].handler", "llm..review"},
		{"handler with a space", asDone(workflow.Step{Type: workflow.Task, Handler: "llm review"}), workflow.Options{}, workflow.EBadName, "steps[2].handler", "whitespace"},
		{"unknown step handler", asDone(workflow.Step{Type: workflow.Task, Handler: "nobody"}), workflow.Options{Handlers: []string{"orders.read"}}, workflow.EUnknownHandler, "steps[2].handler", "nobody"},
		{"unknown tool handler", func(d *workflow.Definition) {}, workflow.Options{Handlers: []string{}}, workflow.EUnknownHandler, "tools.read.handler", "orders.read"},

		// The graph.
		{"cycle", func(d *workflow.Definition) { d.Edges[1].MaxIterations = 0 }, workflow.Options{}, workflow.ECycle, "steps[0]", "gen → check → gen"},
		{"unreachable", (addStep(workflow.Step{ID: "island", Type: workflow.Terminate})), workflow.Options{}, workflow.EUnreachable, "steps[3]", "island"},

		// Templates.
		{"template", set(0, func(s *workflow.Step) { s.Prompt = "Use {{ghost.output.text}}" }), workflow.Options{}, workflow.ETemplate, "steps[0].prompt", "ghost"},
	}
	seen := map[workflow.Code]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := vBase()
			tt.mutate(d)
			ps := workflow.Validate(d, tt.opts)
			vSame(t, ps, string(tt.code)+" "+tt.key)
			if !strings.Contains(ps[0].Message, tt.mentions) {
				t.Errorf("message %q does not mention %q", ps[0].Message, tt.mentions)
			}
			if ps[0].Message == "" || strings.Contains(ps[0].Message, "\n") {
				t.Errorf("message %q is not one sentence", ps[0].Message)
			}
		})
		seen[tt.code] = true
	}
	// The codes only a file or sub-workflows produce are covered by the tests below.
	for _, c := range []workflow.Code{workflow.EParse, workflow.EType, workflow.EDepth, workflow.ERecursion, workflow.EWorkflowFile} {
		seen[c] = true
	}
	for _, c := range vAllCodes {
		if !seen[c] {
			t.Errorf("no case for %s", c)
		}
	}
}

var vAllCodes = []workflow.Code{
	workflow.EParse, workflow.EUnknownKey, workflow.EType, workflow.EUnknownType, workflow.EMissingKey,
	workflow.EBadName, workflow.EBadValue, workflow.EBadDuration, workflow.EBadBound, workflow.EDuplicateID,
	workflow.EDanglingEdge, workflow.EUnknownStep, workflow.EUnknownModel, workflow.EUnknownTool,
	workflow.EUnknownHandler, workflow.ECycle, workflow.EUnreachable, workflow.ENoStart, workflow.ETemplate,
	workflow.EDepth, workflow.ERecursion, workflow.EWorkflowFile,
}

func TestValidateSetZeroBoundsFromSource(t *testing.T) {
	// A file that writes max_iterations = 0 or max_items = 0 sets a bad bound; the Go zero value
	// of a definition built in code is a missing key.
	d := &workflow.Definition{
		Name: "zero",
		Steps: []workflow.Step{
			{ID: "loop", Type: workflow.AgentLoop, Handler: "h"},
			{ID: "each", Type: workflow.Map, Items: "input.list", Step: "body"},
			{ID: "body", Type: workflow.Terminate},
		},
		Edges:  []workflow.Edge{{From: "loop", To: "each"}},
		Source: &workflow.Source{File: "zero.toml", Lines: map[string]int{"steps[0].max_iterations": 7, "steps[1].max_items": 12}},
	}
	ps := workflow.Validate(d, workflow.Options{})
	vSame(t, ps, "E_BAD_BOUND steps[0].max_iterations", "E_BAD_BOUND steps[1].max_items")
	if ps[0].File != "zero.toml" || ps[0].Line != 7 || ps[1].Line != 12 {
		t.Errorf("positions: %v", ps)
	}
	d.Source = nil
	vSame(t, workflow.Validate(d, workflow.Options{}), "E_MISSING_KEY steps[0].max_iterations", "E_MISSING_KEY steps[1].max_items")
}

func TestValidateReportsEverythingInOnePass(t *testing.T) {
	neg := -1
	d := &workflow.Definition{
		Name:     "Bad Name",
		MaxSteps: -5,
		Start:    "ghost",
		Models: map[string]workflow.ModelDef{
			"a": {Provider: "Gemini!"},
			"b": {Provider: "replay"},
		},
		Tools: map[string]workflow.ToolDef{"t": {}},
		Steps: []workflow.Step{
			{ID: "one", Type: workflow.LLM, Model: "nope", Prompt: "{{two.output}} and {{}}", OutputRepairs: &neg},
			{ID: "two", Type: workflow.Switch},
			{ID: "one", Type: workflow.Task},
			{ID: "bad id!", Type: "weird"},
			{ID: "loop", Type: workflow.AgentLoop, Handler: "h", MaxIterations: -3, Retry: &workflow.Retry{MaxAttempts: 0, Backoff: "sometimes"}},
			{ID: "m", Type: workflow.Map, Items: "nobody.output", Step: "ghost"},
			{ID: "ag", Type: workflow.Agent, Model: "a", Goal: "{{input.x", Tools: []string{"t", "u"}},
		},
		Edges: []workflow.Edge{
			{From: "one", To: "two"},
			{From: "two", To: "one"},
			{From: "two", To: "void"},
			{From: "loop", To: "loop", MaxIterations: -1},
		},
	}
	ps := workflow.Validate(d, workflow.Options{Handlers: []string{}})
	// Without lines (a definition built in code), problems sort by key.
	vSame(t, ps,
		"E_DANGLING_EDGE edges[2].to",
		"E_BAD_BOUND edges[3].max_iterations",
		"E_BAD_BOUND max_steps",
		"E_BAD_VALUE models.a.provider",
		"E_MISSING_KEY models.b.cassette",
		"E_BAD_NAME name",
		"E_UNKNOWN_STEP start",
		"E_CYCLE steps[0]",
		"E_UNKNOWN_MODEL steps[0].model",
		"E_BAD_BOUND steps[0].output_repairs",
		"E_TEMPLATE steps[0].prompt",
		"E_MISSING_KEY steps[1].expr",
		"E_MISSING_KEY steps[2].handler",
		"E_DUPLICATE_ID steps[2].id",
		"E_BAD_NAME steps[3].id",
		"E_UNKNOWN_TYPE steps[3].type",
		"E_UNKNOWN_HANDLER steps[4].handler",
		"E_BAD_BOUND steps[4].max_iterations",
		"E_BAD_VALUE steps[4].retry.backoff",
		"E_BAD_BOUND steps[4].retry.max_attempts",
		"E_TEMPLATE steps[5].items",
		"E_MISSING_KEY steps[5].max_items",
		"E_UNKNOWN_STEP steps[5].step",
		"E_TEMPLATE steps[6].goal",
		"E_UNKNOWN_TOOL steps[6].tools[1]",
		"E_MISSING_KEY tools.t",
	)
}

func TestValidateSortsByLineThenKey(t *testing.T) {
	d := vBase()
	d.Name = ""
	d.Steps[0].Model = "ghost"
	d.Steps[1].Expr = ""
	d.Source = &workflow.Source{File: "demo.toml", Lines: map[string]int{"steps[0]": 10, "steps[0].model": 12, "steps[1]": 20}}
	ps := workflow.Validate(d, workflow.Options{})
	vSame(t, ps, "E_MISSING_KEY name", "E_UNKNOWN_MODEL steps[0].model", "E_MISSING_KEY steps[1].expr")
	for i, line := range []int{0, 12, 20} {
		if ps[i].Line != line || ps[i].File != "demo.toml" {
			t.Errorf("problem %d at %s:%d, want demo.toml:%d", i, ps[i].File, ps[i].Line, line)
		}
	}
	// Without lines, numbers in keys sort as numbers.
	d = vBase()
	for i := range 12 {
		d.Steps = append(d.Steps, workflow.Step{ID: fmt.Sprintf("x%d", i), Type: workflow.Fail})
		d.Edges = append(d.Edges, workflow.Edge{From: "done", To: fmt.Sprintf("x%d", i)})
	}
	ps = workflow.Validate(d, workflow.Options{})
	if len(ps) != 12 || ps[0].Key != "steps[3].message" || ps[7].Key != "steps[10].message" {
		t.Errorf("order: %q", vCodes(ps))
	}
}

func vGraph(edges ...workflow.Edge) *workflow.Definition {
	d := &workflow.Definition{Name: "g", Start: "a"}
	seen := map[string]bool{}
	for _, e := range edges {
		for _, id := range []string{e.From, e.To} {
			if !seen[id] {
				seen[id] = true
				d.Steps = append(d.Steps, workflow.Step{ID: id, Type: workflow.Task, Handler: "h"})
			}
		}
	}
	d.Edges = edges
	return d
}

func TestValidateCycles(t *testing.T) {
	e := func(from, to string) workflow.Edge { return workflow.Edge{From: from, To: to} }
	loop := func(from, to string) workflow.Edge { return workflow.Edge{From: from, To: to, MaxIterations: 2} }

	d := vGraph(e("a", "b"), e("b", "c"), e("c", "d"), e("d", "b"))
	ps := workflow.Validate(d, workflow.Options{})
	vSame(t, ps, "E_CYCLE steps[1]")
	if want := "steps b → c → d → b form a cycle that does not pass through a loop edge"; !strings.Contains(ps[0].Message, want) {
		t.Errorf("message %q, want it to contain %q", ps[0].Message, want)
	}

	// Through a loop edge: not a cycle.
	vSame(t, workflow.Validate(vGraph(e("a", "b"), e("b", "c"), e("c", "d"), loop("d", "b")), workflow.Options{}))

	// A self-loop.
	ps = workflow.Validate(vGraph(e("a", "b"), e("b", "b")), workflow.Options{})
	vSame(t, ps, "E_CYCLE steps[1]")
	if !strings.Contains(ps[0].Message, "b → b") {
		t.Errorf("message %q", ps[0].Message)
	}

	// Two cycles sharing a step, one of them with two parallel edges: each reported once.
	d = vGraph(e("a", "b"), e("b", "a"), e("b", "a"), e("a", "c"), e("c", "a"))
	d.Edges[2].When = "other"
	ps = workflow.Validate(d, workflow.Options{})
	vSame(t, ps, "E_CYCLE steps[0]", "E_CYCLE steps[0]")
	msgs := []string{ps[0].Message, ps[1].Message}
	slices.Sort(msgs)
	if !strings.Contains(msgs[0], "a → b → a") || !strings.Contains(msgs[1], "a → c → a") {
		t.Errorf("messages %q", msgs)
	}

	// Two separate cycles, one of them behind a loop edge.
	d = vGraph(e("a", "b"), e("b", "c"), e("c", "b"), e("c", "d"), e("d", "e"), e("e", "d"), loop("e", "a"))
	ps = workflow.Validate(d, workflow.Options{})
	vSame(t, ps, "E_CYCLE steps[1]", "E_CYCLE steps[3]")
	if !strings.Contains(ps[0].Message, "b → c → b") || !strings.Contains(ps[1].Message, "d → e → d") {
		t.Errorf("messages %q / %q", ps[0].Message, ps[1].Message)
	}

	// A parallel branch or a map body counts as an edge from its parent.
	d = &workflow.Definition{
		Name: "fan",
		Steps: []workflow.Step{
			{ID: "p", Type: workflow.Parallel, Branches: []workflow.Branch{{Step: "w"}}},
			{ID: "w", Type: workflow.Task, Handler: "h"},
			{ID: "m", Type: workflow.Map, Items: "input.list", MaxItems: 3, Step: "body"},
			{ID: "body", Type: workflow.Task, Handler: "h"},
		},
		Edges: []workflow.Edge{{From: "w", To: "p"}, {From: "p", To: "m"}, {From: "body", To: "m"}},
		Start: "p",
	}
	ps = workflow.Validate(d, workflow.Options{})
	vSame(t, ps, "E_CYCLE steps[0]", "E_CYCLE steps[2]")
	if !strings.Contains(ps[0].Message, "p → w → p") || !strings.Contains(ps[1].Message, "m → body → m") {
		t.Errorf("messages %q / %q", ps[0].Message, ps[1].Message)
	}
}

func TestValidateReachability(t *testing.T) {
	d := &workflow.Definition{
		Name: "fan",
		Steps: []workflow.Step{
			{ID: "start", Type: workflow.Task, Handler: "h"},
			{ID: "p", Type: workflow.Parallel, Branches: []workflow.Branch{{Step: "b1"}, {Step: "b2"}}},
			{ID: "b1", Type: workflow.Task, Handler: "h"},
			{ID: "b2", Type: workflow.Task, Handler: "h"},
			{ID: "m", Type: workflow.Map, Items: "p.output", MaxItems: 10, Step: "body"},
			{ID: "body", Type: workflow.Task, Handler: "h"},
			{ID: "after", Type: workflow.Terminate},
			{ID: "retry", Type: workflow.Task, Handler: "h"},
		},
		Edges: []workflow.Edge{
			{From: "start", To: "p"},
			{From: "p", To: "m"},
			{From: "m", To: "after"},
		},
	}
	// No start is set: "start" and "retry" both have no incoming edge.
	ps := workflow.Validate(d, workflow.Options{})
	vSame(t, ps, "E_NO_START start")
	if !strings.Contains(ps[0].Message, `"start", "retry"`) {
		t.Errorf("message %q does not name the roots", ps[0].Message)
	}
	// With a start, branches and bodies are reached from their parent; retry is not reached.
	d.Start = "start"
	ps = workflow.Validate(d, workflow.Options{})
	vSame(t, ps, "E_UNREACHABLE steps[7]")
	if !strings.Contains(ps[0].Message, "retry") {
		t.Errorf("message %q", ps[0].Message)
	}
	// Only a loop edge leads there: still reachable.
	d.Edges = append(d.Edges, workflow.Edge{From: "after", To: "retry", MaxIterations: 1})
	vSame(t, workflow.Validate(d, workflow.Options{}))
	// The only root ("retry" now has an incoming edge) is the default start.
	d.Start = ""
	vSame(t, workflow.Validate(d, workflow.Options{}))
}

func TestValidateTemplates(t *testing.T) {
	type tc struct {
		text    string
		ok      bool
		unbound int // E_UNBOUND_REF problems: gen, the start step, reads outputs no step made yet
	}
	texts := []tc{
		{"plain text", true, 0},
		{"{{input}}", true, 0},
		{"{{ input.topic }} and {{input.a.b.0}}", true, 0},
		{"{{gen.output}}", true, 1},
		{"Use {{gen.output.text}} then {{check.output.label}}.", true, 2},
		{`Use {{gen.output.text ?? ""}} then {{check.output.label ?? "none"}}.`, true, 0},
		{`{{gen.output ?? {}}}`, false, 0},
		{"{{ghost.output}}", false, 0},
		{"{{gen}}", false, 0},
		{"{{gen.result}}", false, 0},
		{"{{}}", false, 0},
		{"{{   }}", false, 0},
		{"{{input.topic", false, 0},
		{"input.topic}}", false, 0},
		{"{{a {{input}}", false, 0},
		{"{{in put}}", false, 0},
		{"{{input..x}}", false, 0},
		{"{{input}} {{ghost.output}}", false, 0},
	}
	for _, field := range []string{"prompt", "instructions"} {
		for _, x := range texts {
			d := vBase()
			if field == "prompt" {
				d.Steps[0].Prompt = x.text
			} else {
				d.Steps[0].Instructions = x.text
			}
			ps := workflow.Validate(d, workflow.Options{})
			var want []string
			for range x.unbound {
				want = append(want, "E_UNBOUND_REF steps[0]."+field)
			}
			if !x.ok {
				want = append(want, "E_TEMPLATE steps[0]."+field)
			}
			vSame(t, ps, want...)
		}
	}
	// goal, message, input (templates and bare paths), expr and items.
	steps := []struct {
		step workflow.Step
		key  string
		ok   bool
	}{
		{workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "Answer {{input.q}} using {{gen.output}}"}, "", true},
		{workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "Answer {{done.output ?? null}}"}, "", true},
		{workflow.Step{Type: workflow.Agent, Model: "writer", Goal: "Answer {{nobody.output}}"}, "steps[2].goal", false},
		{workflow.Step{Type: workflow.Fail, Message: "failed: {{gen.output.error}}"}, "", true},
		{workflow.Step{Type: workflow.Fail, Message: "failed: {{gen.output.error}"}, "steps[2].message", false},
		{workflow.Step{Type: workflow.Approval, Prompt: "Refund {{input.amount}}?"}, "", true},
		{workflow.Step{Type: workflow.Approval, Prompt: "Refund {{amount}}?"}, "steps[2].prompt", false},
		{workflow.Step{Type: workflow.Terminate, Input: "gen.output.text"}, "", true},
		{workflow.Step{Type: workflow.Terminate, Input: "input"}, "", true},
		{workflow.Step{Type: workflow.Terminate, Input: "ghost.output"}, "steps[2].input", false},
		{workflow.Step{Type: workflow.Terminate, Input: "Summary: {{gen.output}}"}, "", true},
		{workflow.Step{Type: workflow.Terminate, Input: "Summary: {{ghost.output}}"}, "steps[2].input", false},
		{workflow.Step{Type: workflow.Terminate, Input: "some literal words"}, "", true},
		{workflow.Step{Type: workflow.Switch, Expr: "check.output.x"}, "", true},
		{workflow.Step{Type: workflow.Switch, Expr: "{{gen.output.label}}"}, "", true},
		{workflow.Step{Type: workflow.Switch, Expr: "ghost.output.label"}, "steps[2].expr", false},
		{workflow.Step{Type: workflow.Switch, Expr: "gen.label"}, "steps[2].expr", false},
		{workflow.Step{Type: workflow.Map, Items: "input.orders", MaxItems: 5, Workflow: "x.toml"}, "", true},
		{workflow.Step{Type: workflow.Map, Items: "orders", MaxItems: 5, Workflow: "x.toml"}, "steps[2].items", false},
		{workflow.Step{Type: workflow.Terminate, Branch: "anything.at.all"}, "", true}, // branch is not checked
	}
	dir := t.TempDir()
	vWrite(t, dir, map[string]string{"x.toml": vLeaf})
	for _, x := range steps {
		d := vBase()
		x.step.ID = "done"
		d.Steps[2] = x.step
		ps := workflow.Validate(d, workflow.Options{BaseDir: dir})
		if x.ok {
			vSame(t, ps)
		} else {
			vSame(t, ps, "E_TEMPLATE "+x.key)
		}
	}
}

// vWrite writes files under dir.
func vWrite(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// vCaller is a workflow file that calls another one.
func vCaller(name, target string) string {
	return fmt.Sprintf("name = %q\n\n[[steps]]\nid = \"c\"\ntype = \"call\"\nworkflow = %q\n", name, target)
}

const vLeaf = "name = \"leaf\"\n\n[[steps]]\nid = \"end\"\ntype = \"terminate\"\n"

func TestValidateSubWorkflowDepth(t *testing.T) {
	for _, depth := range []int{workflow.MaxCallDepth, workflow.MaxCallDepth + 1} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"main.toml": vCaller("main", "w1.toml")}
			for i := 1; i < depth; i++ {
				files[fmt.Sprintf("w%d.toml", i)] = vCaller(fmt.Sprintf("w%d", i), fmt.Sprintf("w%d.toml", i+1))
			}
			files[fmt.Sprintf("w%d.toml", depth)] = vLeaf
			vWrite(t, dir, files)
			d, ps := workflow.LoadAndValidate(filepath.Join(dir, "main.toml"), workflow.Options{})
			if depth <= workflow.MaxCallDepth {
				vSame(t, ps)
				if d == nil || d.Deadline != workflow.DefaultDeadline || d.Start != "c" {
					t.Errorf("the definition is not normalized: %+v", d)
				}
				return
			}
			vSame(t, ps, "E_DEPTH steps[0].workflow")
			if p := ps[0]; p.Line != 6 || !strings.HasSuffix(p.File, "main.toml") || !strings.Contains(p.Message, "main.toml → w1.toml → w2.toml") || !strings.Contains(p.Message, "w9.toml") {
				t.Errorf("problem %v", p)
			}
		})
	}
}

func TestValidateSubWorkflowRecursion(t *testing.T) {
	dir := t.TempDir()
	vWrite(t, dir, map[string]string{
		"self.toml": vCaller("self", "self.toml"),
		"a.toml":    vCaller("a", "sub/b.toml"),
		"sub/b.toml": "name = \"b\"\n\n[[steps]]\nid = \"p\"\ntype = \"parallel\"\n" +
			"branches = [ { workflow = \"../leaf.toml\" }, { workflow = \"../a.toml\" } ]\n",
		"leaf.toml": vLeaf,
		"main.toml": vCaller("main", "a.toml"),
	})
	_, ps := workflow.LoadAndValidate(filepath.Join(dir, "self.toml"), workflow.Options{})
	vSame(t, ps, "E_RECURSION steps[0].workflow")
	if !strings.Contains(ps[0].Message, "self.toml → self.toml") {
		t.Errorf("message %q", ps[0].Message)
	}

	_, ps = workflow.LoadAndValidate(filepath.Join(dir, "a.toml"), workflow.Options{})
	vSame(t, ps, "E_RECURSION steps[0].workflow")
	if want := "a.toml → " + filepath.Join("sub", "b.toml") + " → a.toml"; !strings.Contains(ps[0].Message, want) {
		t.Errorf("message %q, want %q", ps[0].Message, want)
	}

	_, ps = workflow.LoadAndValidate(filepath.Join(dir, "main.toml"), workflow.Options{})
	vSame(t, ps, "E_RECURSION steps[0].workflow")
	if want := "main.toml → a.toml → " + filepath.Join("sub", "b.toml") + " → a.toml"; !strings.Contains(ps[0].Message, want) {
		t.Errorf("message %q, want %q", ps[0].Message, want)
	}

	// From b, the top workflow: its branches leave its directory, and are not read.
	_, ps = workflow.LoadAndValidate(filepath.Join(dir, "sub", "b.toml"), workflow.Options{})
	vSame(t, ps, "E_PATH_OUTSIDE steps[0].branches[0].workflow", "E_PATH_OUTSIDE steps[0].branches[1].workflow")
}

func TestValidateSubWorkflowFiles(t *testing.T) {
	dir := t.TempDir()
	vWrite(t, dir, map[string]string{
		"missing.toml": vCaller("missing", "nowhere.toml"),
		"invalid.toml": vCaller("invalid", "broken.toml"),
		"broken.toml": "name = \"broken\"\n\n[[steps]]\nid = \"x\"\ntype = \"terminate\"\n\n" +
			"[[edges]]\nfrom = \"x\"\nto = \"y\"\n",
		"garbage.toml": vCaller("garbage", "notoml.toml"),
		"notoml.toml":  "this is = = not toml",
		"deep.toml":    vCaller("deep", "missing.toml"),
	})
	_, ps := workflow.LoadAndValidate(filepath.Join(dir, "missing.toml"), workflow.Options{})
	vSame(t, ps, "E_WORKFLOW_FILE steps[0].workflow")
	if !strings.Contains(ps[0].Message, "nowhere.toml") || ps[0].Line != 6 {
		t.Errorf("problem %v", ps[0])
	}

	_, ps = workflow.LoadAndValidate(filepath.Join(dir, "invalid.toml"), workflow.Options{})
	vSame(t, ps, "E_WORKFLOW_FILE steps[0].workflow")
	if !strings.Contains(ps[0].Message, "broken.toml") || !strings.Contains(ps[0].Message, "E_DANGLING_EDGE edges[0].to") {
		t.Errorf("message %q does not name the sub-problem", ps[0].Message)
	}

	_, ps = workflow.LoadAndValidate(filepath.Join(dir, "garbage.toml"), workflow.Options{})
	vSame(t, ps, "E_WORKFLOW_FILE steps[0].workflow")
	if !strings.Contains(ps[0].Message, "E_PARSE") {
		t.Errorf("message %q does not name the sub-problem", ps[0].Message)
	}

	// A missing file two levels down makes the file in between invalid.
	_, ps = workflow.LoadAndValidate(filepath.Join(dir, "deep.toml"), workflow.Options{})
	vSame(t, ps, "E_WORKFLOW_FILE steps[0].workflow")
	if !strings.Contains(ps[0].Message, "nowhere.toml") {
		t.Errorf("message %q", ps[0].Message)
	}

	// A missing top file is the loader's E_PARSE.
	d, ps := workflow.LoadAndValidate(filepath.Join(dir, "absent.toml"), workflow.Options{})
	if d != nil || !ps.Has(workflow.EParse) {
		t.Errorf("absent file: %v %v", d, ps)
	}
}

func TestValidateSubWorkflowsParsedOnce(t *testing.T) {
	// main fans out to left and right, which both call leaf, and a map also runs leaf.
	dir := t.TempDir()
	vWrite(t, dir, map[string]string{
		"left.toml":  vCaller("left", "leaf.toml"),
		"right.toml": vCaller("right", "./leaf.toml"),
		"leaf.toml":  vLeaf,
	})
	parsed := map[string]int{}
	opts := workflow.Options{
		BaseDir: dir,
		Parse: func(file string, data []byte) (*workflow.Definition, workflow.Problems) {
			parsed[filepath.Base(file)]++
			return workflow.Parse(file, data)
		},
	}
	d := &workflow.Definition{
		Name: "main",
		Steps: []workflow.Step{
			{ID: "fan", Type: workflow.Parallel, Branches: []workflow.Branch{{Workflow: "left.toml"}, {Workflow: "right.toml"}}},
			{ID: "each", Type: workflow.Map, Items: "fan.output", MaxItems: 2, Workflow: "leaf.toml"},
		},
		Edges: []workflow.Edge{{From: "fan", To: "each"}},
	}
	vSame(t, workflow.Validate(d, opts))
	if want := map[string]int{"left.toml": 1, "right.toml": 1, "leaf.toml": 1}; fmt.Sprint(parsed) != fmt.Sprint(want) {
		t.Errorf("parsed %v, want %v", parsed, want)
	}

	// A definition built in code resolves against BaseDir; a file missing there is reported.
	d.Steps[1].Workflow = "gone.toml"
	vSame(t, workflow.Validate(d, opts), "E_WORKFLOW_FILE steps[1].workflow")
}

func TestLoadAndValidateMergesProblems(t *testing.T) {
	dir := t.TempDir()
	vWrite(t, dir, map[string]string{"flow.toml": `name = "flow"

[[steps]]
id = "a"
type = "task"
handler = 3

[[steps]]
id = "b"
type = "teleport"

[[edges]]
from = "a"
to = "ghost"

[[edges]]
from = "a"
to = "b"
`})
	d, ps := workflow.LoadAndValidate(filepath.Join(dir, "flow.toml"), workflow.Options{})
	if d == nil {
		t.Fatal("no definition")
	}
	// The loader's E_TYPE is not followed by the validator's E_MISSING_KEY for the same key,
	// nor its E_UNKNOWN_TYPE by the validator's.
	vSame(t, ps, "E_TYPE steps[0].handler", "E_UNKNOWN_TYPE steps[1].type", "E_DANGLING_EDGE edges[0].to")
	if ps[2].Line != 14 {
		t.Errorf("line %d", ps[2].Line)
	}
}

// vGenerate builds an n-step workflow: a chain of llm, agent_loop, switch and task steps, with
// a loop edge back every 25 steps and templates naming earlier steps.
func vGenerate(n int) *workflow.Definition {
	d := &workflow.Definition{
		Name:   "generated",
		Start:  "s0",
		Models: map[string]workflow.ModelDef{"writer": {Provider: "scripted", Script: json.RawMessage(`[{"text":"ok"}]`)}},
	}
	for i := range n {
		s := workflow.Step{ID: fmt.Sprintf("s%d", i)}
		switch {
		case i%10 == 9:
			s.Type, s.Expr = workflow.Switch, fmt.Sprintf("s%d.output.label", i-1)
		case i%10 == 3:
			s.Type, s.Model, s.Prompt = workflow.LLM, "writer", fmt.Sprintf("Improve: {{s%d.output.text}}", i-1)
		case i%10 == 6:
			s.Type, s.Handler, s.MaxIterations = workflow.AgentLoop, "loop", 5
		default:
			s.Type, s.Handler = workflow.Task, "work"
			s.Retry = &workflow.Retry{MaxAttempts: 3, Backoff: "exponential"}
		}
		d.Steps = append(d.Steps, s)
	}
	for i := 0; i+1 < n; i++ {
		from, to := fmt.Sprintf("s%d", i), fmt.Sprintf("s%d", i+1)
		if i%10 == 9 {
			d.Edges = append(d.Edges, workflow.Edge{From: from, To: to, When: "yes"}, workflow.Edge{From: from, To: to, When: "no"})
			continue
		}
		d.Edges = append(d.Edges, workflow.Edge{From: from, To: to})
		if i%25 == 5 && i >= 5 {
			d.Edges = append(d.Edges, workflow.Edge{From: from, To: fmt.Sprintf("s%d", i-5), When: "retry", MaxIterations: 3})
		}
	}
	return d
}

func TestValidateLarge(t *testing.T) {
	// How long this takes is measured by BenchmarkValidate10000 and reins bench, not asserted.
	d := vGenerate(10000)
	ps := workflow.Validate(d, workflow.Options{Handlers: []string{"work", "loop"}})
	vSame(t, ps)

	// Every step on a cycle, every step unreachable: still linear, and cycles are capped.
	d = vGenerate(10000)
	for i := range d.Edges {
		d.Edges[i].MaxIterations = 0
	}
	d.Edges = append(d.Edges, workflow.Edge{From: "s9999", To: "s0"})
	ps = workflow.Validate(d, workflow.Options{})
	if !ps.Has(workflow.ECycle) || len(ps) > 200 {
		t.Errorf("%d problems", len(ps))
	}
}

func BenchmarkValidate10000(b *testing.B) {
	d := vGenerate(10000)
	b.ReportAllocs()
	for b.Loop() {
		if ps := workflow.Validate(d, workflow.Options{}); len(ps) > 0 {
			b.Fatal(ps)
		}
	}
}

// E_BAD_BRANCH_PATH: a branch or switch expr path that the output of the step it reads cannot
// have, by that step's output_schema (or an agent's output).
func TestValidateBranchPaths(t *testing.T) {
	verdict := `{"type":"object","properties":{"verdict":{"type":"string","enum":["accept","retry"]},"notes":{"type":"object","properties":{"lines":{"type":"array","items":{"type":"string"}}}}},"required":["verdict"],"additionalProperties":false}`
	base := func(schema string) *workflow.Definition {
		return &workflow.Definition{
			Name: "refine", Start: "gen",
			Models: map[string]workflow.ModelDef{"m": {Provider: "scripted", Script: json.RawMessage(`[{"text":"ok"}]`)}},
			Steps: []workflow.Step{
				{ID: "gen", Type: workflow.LLM, Model: "m", Prompt: "Write."},
				{ID: "judge", Type: workflow.LLM, Model: "m", Prompt: "Judge {{gen.output}}", OutputSchema: json.RawMessage(schema)},
				{ID: "route", Type: workflow.Switch, Expr: "judge.output.verdict"},
				{ID: "done", Type: workflow.Terminate},
			},
			Edges: []workflow.Edge{
				{From: "gen", To: "judge"}, {From: "judge", To: "route"},
				{From: "route", To: "gen", When: "retry", MaxIterations: 3}, {From: "route", To: "done", When: "accept"},
			},
		}
	}
	branch := func(path string) func(d *workflow.Definition) {
		return func(d *workflow.Definition) { d.Steps[1].Branch = path }
	}
	expr := func(e string) func(d *workflow.Definition) {
		return func(d *workflow.Definition) { d.Steps[2].Expr = e }
	}
	const badBranch, badExpr = "E_BAD_BRANCH_PATH steps[1].branch", "E_BAD_BRANCH_PATH steps[2].expr"
	for _, tc := range []struct {
		name   string
		schema string // judge's output_schema; "" for verdict
		change func(d *workflow.Definition)
		want   string // the problem, "" for none
		says   string
	}{
		{"valid", "", func(*workflow.Definition) {}, "", ""},
		{"a declared property", "", branch("verdict"), "", ""},
		{"a property additionalProperties false refuses", "", branch("verdit"), badBranch,
			`step "judge" has branch "verdit", but its output has no property "verdit": its schema allows only "notes", "verdict"`},
		{"a path into a string", "", branch("verdict.x"), badBranch, `at verdict is of type string, which has no "x" in it`},
		{"an index into items", "", branch("notes.lines.0"), "", ""},
		{"a key into an array", "", branch("notes.lines.first"), badBranch, `at notes.lines is an array, which has indexes (0, 1, ...), not "first"`},
		{"an undeclared property where the schema declares others", `{"type":"object","properties":{"verdict":{"type":"string"}}}`, branch("verdit"), badBranch,
			`its output has no property "verdit": its schema declares only "verdict" (set additionalProperties to allow others)`},
		{"additionalProperties true allows any", `{"type":"object","properties":{"verdict":{"type":"string"}},"additionalProperties":true}`, branch("extra.deep"), "", ""},
		{"additionalProperties as a schema is followed", `{"type":"object","additionalProperties":{"type":"integer"}}`, branch("score.x"), badBranch, `at score is of type integer, which has no "x" in it`},
		{"a schema without properties accepts any path", `{"type":"object"}`, branch("a.b.c"), "", ""},
		{"a schema that is not followed accepts any path", `{"anyOf":[{"type":"string"},{"type":"object"}]}`, branch("a.b"), "", ""},
		{"a nullable string", `{"type":"object","properties":{"verdict":{"type":"string"},"v":{"type":["string","null"]}}}`, branch("v.x"), badBranch, `at v is of type string or null`},
		{"prefixItems", `{"type":"array","prefixItems":[{"type":"object","properties":{"k":{"type":"string"}},"additionalProperties":false}]}`, func(d *workflow.Definition) {
			d.Steps[1].Branch, d.Steps[2].Expr = "0.j", "input.kind"
		}, badBranch, `at 0 has no property "j"`},
		{"a switch expr", "", expr("judge.output.score"), badExpr, `step "route" has expr "judge.output.score", but the output of step judge has no property "score"`},
		{"a switch expr as a template with a default", "", expr(`{{ judge.output.verdict ?? "retry" }}`), "", ""},
		{"a default does not excuse a path the schema cannot have", "", expr(`{{judge.output.verdit ?? "retry"}}`), badExpr, `has no property "verdit"`},
		{"the run input is not checked", "", expr("input.anything"), "", ""},
		{"an agent's output", "", func(d *workflow.Definition) {
			d.Steps[0] = workflow.Step{ID: "gen", Type: workflow.Agent, Model: "m", Goal: "g", Branch: "verdict"}
		}, "E_BAD_BRANCH_PATH steps[0].branch", `its schema allows only "answer", "detail", "stop_reason"`},
		{"an agent's stop reason", "", func(d *workflow.Definition) {
			d.Steps[0] = workflow.Step{ID: "gen", Type: workflow.Agent, Model: "m", Goal: "g", Branch: "stop_reason"}
		}, "", ""},
		{"an llm step without a schema is not checked", "", func(d *workflow.Definition) { d.Steps[0].Branch = "anything.at.all" }, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := tc.schema
			if schema == "" {
				schema = verdict
			}
			d := base(schema)
			tc.change(d)
			ps := workflow.Validate(d, workflow.Options{})
			if tc.want == "" {
				vSame(t, ps)
				return
			}
			vSame(t, ps, tc.want)
			if !strings.Contains(ps[0].Message, tc.says) {
				t.Errorf("message %q, want it to say %q", ps[0].Message, tc.says)
			}
		})
	}
}

// vFlow builds a definition of task steps from edges written "from>to", "from>to?label" (when)
// and "from>to*3" (a loop edge, max_iterations 3); its start is the first step named. Steps in
// parallel are parallel steps with those branches, steps in maps map steps with that body; reads
// gives steps their input template.
func vFlow(edges []string, parallel, maps, reads map[string]string) *workflow.Definition {
	d := &workflow.Definition{Name: "graph"}
	seen := map[string]bool{}
	add := func(id string) {
		if seen[id] {
			return
		}
		seen[id] = true
		s := workflow.Step{ID: id, Type: workflow.Task, Handler: "h", Input: reads[id]}
		if bs, ok := parallel[id]; ok {
			s = workflow.Step{ID: id, Type: workflow.Parallel, Input: reads[id]}
			for _, b := range strings.Split(bs, ",") {
				s.Branches = append(s.Branches, workflow.Branch{Step: b})
			}
		}
		if body, ok := maps[id]; ok {
			s = workflow.Step{ID: id, Type: workflow.Map, Input: reads[id], Items: "input.xs", MaxItems: 5, Step: body}
		}
		d.Steps = append(d.Steps, s)
	}
	for _, e := range edges {
		rest, loop, _ := strings.Cut(e, "*")
		rest, when, _ := strings.Cut(rest, "?")
		from, to, _ := strings.Cut(rest, ">")
		add(from)
		add(to)
		edge := workflow.Edge{From: from, To: to, When: when}
		if loop != "" {
			edge.MaxIterations, _ = strconv.Atoi(loop)
		}
		d.Edges = append(d.Edges, edge)
	}
	for _, bs := range parallel {
		for _, b := range strings.Split(bs, ",") {
			add(b)
		}
	}
	for _, b := range maps {
		add(b)
	}
	d.Start = d.Steps[0].ID
	return d
}

// E_UNBOUND_REF: a template or path that reads the output of a step that may not have run when
// the reading step runs, unless it gives a default (docs/workflows.md has the rule).
func TestValidateBoundReads(t *testing.T) {
	type m = map[string]string
	for _, tc := range []struct {
		name           string
		edges          []string
		parallel, map_ m
		reads          m        // step → its input template
		unbound        []string // the steps reported, in step order
		says           string   // in the first problem's message
	}{
		{"a chain", []string{"s>a", "a>b"}, nil, nil, m{"b": "{{s.output}} {{a.output.x}}"}, nil, ""},
		{"the first pass of a loop", []string{"gen>judge", "judge>gen?retry*3", "judge>done?accept"}, nil, nil,
			m{"gen": "Improve: {{judge.output.notes}}"}, []string{"gen"},
			`step "gen" reads {{judge.output.notes}} in input, but step judge may not have run by then (a path from start skips it, or this is the first pass of a loop): give the template a default, {{judge.output.notes ?? "..."}}`},
		{"with a default it may", []string{"gen>judge", "judge>gen?retry*3", "judge>done?accept"}, nil, nil,
			m{"gen": `Improve: {{judge.output.notes ?? "nothing yet"}}`}, nil, ""},
		{"after the loop", []string{"gen>judge", "judge>gen?retry*3", "judge>done?accept"}, nil, nil,
			m{"done": "{{gen.output}} {{judge.output}}"}, nil, ""},
		{"its own output", []string{"gen>judge", "judge>gen?retry*3"}, nil, nil,
			m{"gen": "Again: {{gen.output}}"}, []string{"gen"}, "its own output, which its first activation does not have"},
		{"a step a branch skips", []string{"s>x?fix", "s>done?ok", "x>done"}, nil, nil,
			m{"done": "{{s.output}} {{x.output}}"}, []string{"done"}, "step x may not have run by then"},
		{"fan-in waits for every source", []string{"s>a", "s>b", "a>j", "b>j"}, nil, nil,
			m{"j": "{{a.output}} {{b.output}} {{s.output}}"}, nil, ""},
		{"fan-in waits for the sources of its sources", []string{"s>a", "a>a2", "a2>j", "s>b", "b>j"}, nil, nil,
			m{"j": "{{a.output}} {{a2.output}} {{b.output}}"}, nil, ""},
		{"fan-in from a conditional source", []string{"s>a?x", "s>b", "a>j", "b>j"}, nil, nil,
			m{"j": "{{a.output}} {{b.output}}"}, []string{"j"}, "step a may not have run by then"},
		{"fan-in from a source that may fail on", []string{"s>a", "s>b", "a>j", "b>j", "a>h?error"}, nil, nil,
			m{"j": "{{a.output}} {{b.output}}"}, []string{"j"}, "step a may not have run by then"},
		{"an error edge hands on no output", []string{"s>a", "a>h?error", "a>ok"}, nil, nil,
			m{"h": "{{s.output}} {{a.output}}"}, []string{"h"}, "step a may not have run by then"},
		{"after a parallel step, its branches", []string{"s>p", "p>n"}, m{"p": "a,b"}, nil,
			m{"n": "{{a.output}} {{b.output}} {{p.output}}"}, nil, ""},
		{"a branch reads its parent", []string{"s>p", "p>n"}, m{"p": "a,b"}, nil,
			m{"a": "{{s.output}} {{p.output}}"}, []string{"a"}, "but it runs as a branch of step p, which has no output until its branches end"},
		{"a branch reads another", []string{"s>p", "p>n"}, m{"p": "a,b"}, nil,
			m{"a": "{{b.output}}"}, []string{"a"}, "step b may not have run by then"},
		{"a map body may run for no item", []string{"s>mp", "mp>n"}, nil, m{"mp": "body"},
			m{"n": "{{mp.output}} {{body.output}}"}, []string{"n"}, "step body may not have run by then"},
		{"a bare path", []string{"s>a", "s>b?x", "a>j?y"}, nil, nil,
			m{"j": "b.output"}, []string{"j"}, `write it with a default, {{b.output ?? "..."}}`},
		{"a step only a loop edge reaches is not checked", []string{"s>a", "a>r*2"}, nil, nil,
			m{"r": "{{a.output}}"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := vFlow(tc.edges, tc.parallel, tc.map_, tc.reads)
			ps := workflow.Validate(d, workflow.Options{})
			var got []string
			for _, p := range ps {
				if p.Code != workflow.EUnboundRef {
					t.Errorf("unexpected problem %v", p)
					continue
				}
				i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p.Key, "steps["), "].input"))
				got = append(got, d.Steps[i].ID)
			}
			if !slices.Equal(got, tc.unbound) {
				t.Fatalf("E_UNBOUND_REF at %q, want %q\n%v", got, tc.unbound, ps)
			}
			if tc.says != "" && !strings.Contains(ps[0].Message, tc.says) {
				t.Errorf("message %q, want it to say %q", ps[0].Message, tc.says)
			}
		})
	}
}

// Where a read is not a template: expr takes a default written as a template, items take none.
func TestValidateBoundPaths(t *testing.T) {
	base := func() *workflow.Definition {
		return vFlow([]string{"s>a?x", "s>r", "a>r"}, nil, nil, nil)
	}
	for _, tc := range []struct {
		name string
		step workflow.Step
		want []string
		says string
	}{
		{"an expr", workflow.Step{ID: "r", Type: workflow.Switch, Expr: "a.output.k"}, []string{"E_UNBOUND_REF steps[2].expr"}, `write it with a default, {{a.output.k ?? "..."}}`},
		{"an expr with a default", workflow.Step{ID: "r", Type: workflow.Switch, Expr: `{{a.output.k ?? "none"}}`}, nil, ""},
		{"a bare expr cannot take one", workflow.Step{ID: "r", Type: workflow.Switch, Expr: `a.output.k ?? "none"`}, []string{"E_TEMPLATE steps[2].expr"}, "is not a valid path"},
		{"items", workflow.Step{ID: "r", Type: workflow.Map, Items: "a.output.xs", MaxItems: 3, Step: "body"}, []string{"E_UNBOUND_REF steps[2].items"}, "read it where a has always run before (items take no default)"},
		{"items with a default", workflow.Step{ID: "r", Type: workflow.Map, Items: `{{a.output.xs ?? null}}`, MaxItems: 3, Step: "body"}, []string{"E_TEMPLATE steps[2].items"}, "which items cannot take"},
		{"an input with a default", workflow.Step{ID: "r", Type: workflow.Task, Handler: "h", Input: `{{a.output ?? 0}}`}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := base()
			d.Steps[2] = tc.step
			if tc.step.Type == workflow.Map {
				d.Steps = append(d.Steps, workflow.Step{ID: "body", Type: workflow.Task, Handler: "h"})
			}
			ps := workflow.Validate(d, workflow.Options{})
			vSame(t, ps, tc.want...)
			if tc.says != "" && !strings.Contains(ps[0].Message, tc.says) {
				t.Errorf("message %q, want it to say %q", ps[0].Message, tc.says)
			}
		})
	}
}

// A context policy that fits, and instructions that are a template, are only known at run time:
// no problem (the loop stops context_exhausted then if they do not fit).
func TestValidateContextAccepted(t *testing.T) {
	for _, c := range []workflow.Step{
		{Type: workflow.Agent, Model: "writer", Goal: "g", Context: &workflow.Context{MaxTokens: 60000}},
		{Type: workflow.Agent, Model: "writer", Goal: "g", Context: &workflow.Context{MaxTokens: 60000, Strategy: loop.Summarize, KeepLast: 6, Summarizer: "writer"}},
		{Type: workflow.Agent, Model: "writer", Goal: "g", Instructions: "{{input.rules}} " + strings.Repeat("Be careful. ", 20), Context: &workflow.Context{MaxTokens: 50, Strategy: loop.TruncateToolResults}},
	} {
		d := vBase()
		c.ID = "done"
		d.Steps[2] = c
		vSame(t, workflow.Validate(d, workflow.Options{}))
	}
}
