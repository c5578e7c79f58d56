package workflow_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/workflow"
)

func ptr[T any](v T) *T { return &v }

func dur(s string) clock.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return clock.Duration(d)
}

// fullWant is testdata/full.toml as a literal: every step type, every key.
var fullWant = &workflow.Definition{
	Name:        "everything",
	Description: "Every step type and every key.",
	Deadline:    dur("10m"),
	MaxSteps:    500,
	Start:       "fetch",
	Models: map[string]workflow.ModelDef{
		"writer": {
			Provider:  "openai",
			Model:     "gpt-4.1-mini",
			BaseURL:   "http://localhost:8080/v1",
			APIKeyEnv: "OPENAI_API_KEY",
			Cassette:  "writer.cassette",
		},
		"fake": {
			Provider: "scripted",
			Script:   json.RawMessage(`[{"reply":"hello","tokens":12},{"tool_calls":[{"args":{"order_id":"A1"},"name":"read_order"}]}]`),
		},
	},
	Tools: map[string]workflow.ToolDef{
		"read_order": {
			Description: "Read an order by id.",
			InputSchema: json.RawMessage(`{"properties":{"order_id":{"type":"string"}},"required":["order_id"],"type":"object"}`),
			SideEffect:  false,
			Handler:     "orders.read",
			Mock:        json.RawMessage(`[{"output":{"status":"delivered"}}]`),
		},
		"refund_order": {MCP: "orders"},
	},
	MCP: map[string]workflow.MCPDef{
		"orders": {Command: []string{"orders-mcp", "--db", "orders.db"}},
		"search": {URL: "http://127.0.0.1:9000/mcp"},
	},
	Steps: []workflow.Step{
		{
			ID: "fetch", Type: workflow.Task, Handler: "orders.fetch", Timeout: dur("30s"),
			Retry: &workflow.Retry{MaxAttempts: 3, Backoff: "exponential", InitialDelay: dur("1s"), MaxDelay: dur("10s")},
			Input: "{{input.order}}", Branch: "status",
		},
		{ID: "poll", Type: workflow.AgentLoop, Handler: "orders.poll", MaxIterations: 20, MaxDuration: dur("5m"), LoopDelay: dur("2s")},
		{
			ID: "draft", Type: workflow.LLM, Model: "writer", Prompt: "Write about {{fetch.output.title}}.",
			Instructions: "Be brief.", OutputSchema: json.RawMessage(`{"required":["text"],"type":"object"}`), OutputRepairs: ptr(0), Stream: true,
		},
		{
			ID: "resolve", Type: workflow.Agent, Model: "fake", Instructions: "Resolve the ticket.",
			Goal: "Resolve {{input.ticket}}", Tools: []string{"read_order"},
			Policy:       &workflow.Policy{Allow: []string{"read_order"}, Forbid: []string{"refund"}, RequireApproval: []string{"cancel"}, RequiredEvidence: []string{"read_order"}, Approvers: []string{"role:support"}},
			OnNeedsHuman: "pause", ApprovalTimeout: dur("15m"), OnTimeout: "fail", Stream: true,
			Session: "{{input.customer}}", SessionTTL: dur("72h"),
			Context: &workflow.Context{MaxTokens: 60000, Strategy: loop.Summarize, KeepLast: 6, Summarizer: "writer"},
			Budget: &workflow.Budget{
				MaxIterations: 8, MaxToolCalls: 12, MaxDuration: dur("2m"), MaxTokens: 100000, MaxCostUSD: 0.5,
				MaxToolFailures: 3, MaxRepeatedCalls: 2, MaxInvalidActions: 4,
			},
		},
		{ID: "route", Type: workflow.Switch, Expr: "resolve.output.kind"},
		{ID: "fan", Type: workflow.Parallel, Branches: []workflow.Branch{{Step: "a"}, {Workflow: "sub.toml"}}, MaxConcurrent: 2},
		{ID: "each", Type: workflow.Map, Items: "fetch.output.lines", Step: "a", Workflow: "line.toml", MaxItems: 100, MaxConcurrent: 4},
		{ID: "sub", Type: workflow.Call, Workflow: "child.toml"},
		{ID: "ask", Type: workflow.Approval, Prompt: "Refund {{input.amount}}?", OnTimeout: "deny", Timeout: dur("1h"), Approvers: []string{"alice", "role:finance"}},
		{ID: "hear", Type: workflow.WaitEvent, Event: "paid", Timeout: dur("24h")},
		{ID: "nap", Type: workflow.Sleep, Duration: dur("90s")},
		{ID: "done", Type: workflow.Terminate},
		{ID: "oops", Type: workflow.Fail, Message: "gave up"},
		{ID: "a", Type: workflow.Task, Handler: "a.run"},
	},
	Edges: []workflow.Edge{
		{From: "fetch", To: "poll"},
		{From: "draft", To: "fetch", When: "retry", MaxIterations: 3},
	},
}

func readFull(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "full.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// sameDefinition compares two definitions, Source aside, and shows both as JSON when they differ.
func sameDefinition(t *testing.T, got, want *workflow.Definition) {
	t.Helper()
	if got == nil {
		t.Fatal("got a nil definition")
	}
	g := *got
	g.Source = nil
	if !reflect.DeepEqual(&g, want) {
		gj, _ := json.MarshalIndent(&g, "", "  ")
		wj, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("definition differs\ngot:  %s\nwant: %s", gj, wj)
	}
}

func TestParseFullFile(t *testing.T) {
	// Make sure the fixture really exercises every step type and every key of each.
	data := readFull(t)
	for _, typ := range workflow.StepTypes {
		if !strings.Contains(string(data), `type = "`+string(typ)+`"`) {
			t.Errorf("testdata/full.toml has no %s step", typ)
		}
	}
	got, problems := workflow.Parse("full.toml", data)
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	sameDefinition(t, got, fullWant)
	for _, s := range got.Steps {
		for _, k := range workflow.KeysOf[s.Type] {
			if _, ok := got.Source.Lines["steps["+indexOf(got, s.ID)+"]."+k]; !ok && s.ID != "a" {
				t.Errorf("step %s (%s) does not set its key %s in the fixture", s.ID, s.Type, k)
			}
		}
	}
	// The canonical form works on a parsed definition.
	if _, err := got.Hash(); err != nil {
		t.Errorf("Hash: %v", err)
	}
}

func indexOf(d *workflow.Definition, id string) string {
	for i, s := range d.Steps {
		if s.ID == id {
			return itoa(i)
		}
	}
	return "?"
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestParseSourceLines(t *testing.T) {
	def, problems := workflow.Parse("dir/full.toml", readFull(t))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	if def.Source == nil || def.Source.File != "dir/full.toml" {
		t.Fatalf("Source = %+v, want File dir/full.toml", def.Source)
	}
	for key, want := range map[string]int{
		"name":                                   2,
		"description":                            3,
		"deadline":                               4,
		"max_steps":                              5,
		"start":                                  6,
		"models":                                 8,
		"models.writer":                          8,
		"models.writer.provider":                 9,
		"models.writer.cassette":                 13,
		"models.fake":                            15,
		"models.fake.script":                     17,
		"models.fake.script[0]":                  18,
		"models.fake.script[1].tool_calls[0]":    19,
		"tools":                                  22,
		"tools.read_order":                       22,
		"tools.read_order.input_schema":          24,
		"tools.read_order.side_effect":           25,
		"tools.read_order.mock[0].output":        27,
		"tools.read_order.mock[0].output.status": 27,
		"steps":                                  29,
		"steps[0]":                               29,
		"steps[0].id":                            30,
		"steps[0].type":                          31,
		"steps[0].handler":                       32,
		"steps[0].retry":                         34,
		"steps[0].retry.max_delay":               34,
		"steps[0].branch":                        36,
		"steps[1]":                               38,
		"steps[1].loop_delay":                    44,
		"steps[2].output_repairs":                53,
		"steps[3]":                               55,
		"steps[3].policy.forbid[0]":              62,
		"steps[3].on_needs_human":                63,
		"steps[3].approval_timeout":              64,
		"steps[3].budget":                        70, // [steps.budget] belongs to the last [[steps]]
		"steps[3].budget.max_cost_usd":           75,
		"steps[5].branches[1].workflow":          86,
		"steps[13]":                              131,
		"steps[13].handler":                      134,
		"edges":                                  136,
		"edges[0]":                               136,
		"edges[0].to":                            138,
		"edges[1]":                               140,
		"edges[1].from":                          141,
		"edges[1].max_iterations":                144,
		"steps[8].approvers":                     108,
		"mcp.orders.command":                     147,
		"mcp.search.url":                         150,
		"tools.refund_order.mcp":                 153,
	} {
		if got := def.Source.Lines[key]; got != want {
			t.Errorf("Lines[%q] = %d, want %d", key, got, want)
		}
	}
	// Line falls back to the enclosing key.
	if got := def.Source.Line("steps[1].max_items"); got != 38 {
		t.Errorf(`Line("steps[1].max_items") = %d, want 38`, got)
	}
}

// want is an expected problem: exact code, line and key, and a part of the message.
type want struct {
	code workflow.Code
	line int
	key  string
	msg  string
}

func checkProblems(t *testing.T, file string, got workflow.Problems, wants []want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Errorf("got %d problems, want %d:\n%v", len(got), len(wants), got)
	}
	for i := 0; i < len(got) && i < len(wants); i++ {
		g, w := got[i], wants[i]
		if g.Code != w.code || g.Line != w.line || g.Key != w.key || g.File != file || !strings.Contains(g.Message, w.msg) {
			t.Errorf("problem %d = %s\nwant %s:%d: %s %s: …%s…", i, g, file, w.line, w.code, w.key, w.msg)
		}
	}
}

func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []want
	}{{
		name: "unknown top-level key",
		src:  "name = \"x\"\nnmae = \"y\"\n",
		want: []want{{workflow.EUnknownKey, 2, "nmae", "unknown key nmae at the top level (it takes: name, description, deadline, max_steps, start, concurrency, input_schema, models, tools, mcp, steps, edges, triggers); did you mean name?"}},
	}, {
		name: "unknown top-level table",
		src:  "name = \"x\"\n\n[settings]\nx = 1\n",
		want: []want{{workflow.EUnknownKey, 3, "settings", "unknown key settings at the top level"}},
	}, {
		name: "key of another step type",
		src:  "[[steps]]\nid = \"a\"\ntype = \"llm\"\nhandler = \"x\"\n",
		want: []want{{workflow.EUnknownKey, 4, "steps[0].handler", "key handler is not a key of llm steps (it takes: model, prompt, instructions, output_schema, output_repairs, stream, id, type, timeout, retry, input, branch)"}},
	}, {
		name: "key of no step type",
		src:  "[[steps]]\nid = \"a\"\ntype = \"task\"\nhandlr = \"x\"\n",
		want: []want{{workflow.EUnknownKey, 4, "steps[0].handlr", "unknown key handlr in this task step (it takes: handler, id, type, timeout, retry, input, branch); did you mean handler?"}},
	}, {
		name: "terminate takes only the common keys",
		src:  "[[steps]]\nid = \"end\"\ntype = \"terminate\"\nmessage = \"bye\"\n",
		want: []want{{workflow.EUnknownKey, 4, "steps[0].message", "key message is not a key of terminate steps (it takes: id, type, timeout, retry, input, branch)"}},
	}, {
		name: "an agent's keys of humans in the loop",
		src:  "[[steps]]\nid = \"a\"\ntype = \"agent\"\non_needs_human = true\napproval_timeout = \"soon\"\non_timeout = 1\n",
		want: []want{
			{workflow.EType, 4, "steps[0].on_needs_human", "expected a string, got a boolean"},
			{workflow.EBadDuration, 5, "steps[0].approval_timeout", `"soon" is not a duration`},
			{workflow.EType, 6, "steps[0].on_timeout", "expected a string, got an integer"},
		},
	}, {
		name: "approval_timeout is an agent's key",
		src:  "[[steps]]\nid = \"a\"\ntype = \"approval\"\napproval_timeout = \"1h\"\n",
		want: []want{{workflow.EUnknownKey, 4, "steps[0].approval_timeout", "key approval_timeout is not a key of approval steps (it takes: prompt, on_timeout, approvers, id, type, timeout, retry, input, branch)"}},
	}, {
		name: "unknown step type",
		src:  "[[steps]]\nid = \"a\"\ntype = \"lmm\"\nmodel = \"m\"\nfoo = 1\n",
		want: []want{
			{workflow.EUnknownType, 3, "steps[0].type", `unknown step type "lmm" (the types are: task, agent_loop, llm, agent, switch, parallel, map, call, approval, wait_event, sleep, terminate, fail)`},
			{workflow.EUnknownKey, 5, "steps[0].foo", "unknown key foo in a step (it takes: id, type, timeout, retry, input, branch, handler, max_iterations"},
		},
	}, {
		name: "wrong types",
		src: `name = 3
max_steps = "10"
description = ["a"]

[[steps]]
id = 7
type = "agent"
tools = ["a", 2]
budget = { max_tokens = 1.5, max_cost_usd = "cheap" }

[[steps]]
id = "b"
type = 4

[[edges]]
from = "a"
to = 3
max_iterations = 2.0
`,
		want: []want{
			{workflow.EType, 1, "name", "expected a string, got an integer"},
			{workflow.EType, 2, "max_steps", "expected an integer, got a string"},
			{workflow.EType, 3, "description", "expected a string, got an array"},
			{workflow.EType, 6, "steps[0].id", "expected a string, got an integer"},
			{workflow.EType, 8, "steps[0].tools[1]", "expected a string, got an integer"},
			{workflow.EType, 9, "steps[0].budget.max_tokens", "expected an integer, got a float"},
			{workflow.EType, 9, "steps[0].budget.max_cost_usd", "expected a number, got a string"},
			{workflow.EType, 13, "steps[1].type", "expected a string, got an integer"},
			{workflow.EType, 17, "edges[0].to", "expected a string, got an integer"},
			{workflow.EType, 18, "edges[0].max_iterations", "expected an integer, got a float"},
		},
	}, {
		name: "bad durations",
		src: `deadline = "10 minutes"

[[steps]]
id = "a"
type = "agent_loop"
timeout = "-5s"
retry = { initial_delay = "soon", max_delay = 10 }
max_duration = "1y"
loop_delay = ""

[[steps]]
id = "b"
type = "agent"
budget = { max_duration = "forever" }

[[steps]]
id = "c"
type = "sleep"
duration = "5"
`,
		want: []want{
			{workflow.EBadDuration, 1, "deadline", `"10 minutes" is not a duration`},
			{workflow.EBadDuration, 6, "steps[0].timeout", `duration "-5s" is negative`},
			{workflow.EBadDuration, 7, "steps[0].retry.initial_delay", `"soon" is not a duration`},
			{workflow.EType, 7, "steps[0].retry.max_delay", `expected a duration string such as "30s", got an integer`},
			{workflow.EBadDuration, 8, "steps[0].max_duration", `"1y" is not a duration`},
			{workflow.EBadDuration, 9, "steps[0].loop_delay", `"" is not a duration`},
			{workflow.EBadDuration, 14, "steps[1].budget.max_duration", `"forever" is not a duration`},
			{workflow.EBadDuration, 19, "steps[2].duration", `"5" is not a duration`},
		},
	}, {
		name: "unknown keys at every level",
		src: `[models.writer]
provider = "openai"
temperature = 0.2

[tools.read]
handler = "r"
schema = {}

[[steps]]
id = "a"
type = "agent"
retry = { max_attempts = 2, jitter = true }
policy = { allow = ["read"], deny = ["x"] }
budget = { max_steps = 3 }

[[edges]]
from = "a"
to = "b"
label = "x"
`,
		want: []want{
			{workflow.EUnknownKey, 3, "models.writer.temperature", "unknown key temperature in models.writer (it takes: provider, model, base_url, api_key_env, script, cassette)"},
			{workflow.EUnknownKey, 7, "tools.read.schema", "unknown key schema in tools.read (it takes: description, input_schema, side_effect, handler, mock, mcp, agent, workflow, timeout)"},
			{workflow.EUnknownKey, 12, "steps[0].retry.jitter", "unknown key jitter in retry (it takes: max_attempts, backoff, initial_delay, max_delay)"},
			{workflow.EUnknownKey, 13, "steps[0].policy.deny", "unknown key deny in policy (it takes: allow, forbid, require_approval, required_evidence, approvers)"},
			{workflow.EUnknownKey, 14, "steps[0].budget.max_steps", "unknown key max_steps in budget (it takes: max_iterations, max_tool_calls"},
			{workflow.EUnknownKey, 19, "edges[0].label", "unknown key label in an edge (it takes: from, to, when, max_iterations)"},
		},
	}, {
		name: "context keys",
		src: `[[steps]]
id = "a"
type = "agent"
context = { max_tokens = "many", strategy = 3, keep_last = 1.5, summarizer = ["m"], keep = 2 }

[[steps]]
id = "b"
type = "agent"
context = 60000
`,
		want: []want{
			{workflow.EType, 4, "steps[0].context.max_tokens", "expected an integer, got a string"},
			{workflow.EType, 4, "steps[0].context.strategy", "expected a string, got an integer"},
			{workflow.EType, 4, "steps[0].context.keep_last", "expected an integer, got a float"},
			{workflow.EType, 4, "steps[0].context.summarizer", "expected a string, got an array"},
			{workflow.EUnknownKey, 4, "steps[0].context.keep", "unknown key keep in context (it takes: max_tokens, strategy, keep_last, summarizer)"},
			{workflow.EType, 9, "steps[1].context", "expected a table { max_tokens, strategy, keep_last, summarizer }, got an integer"},
		},
	}, {
		name: "wrong shapes of tables and arrays",
		src: `steps = "all"
edges = [1]
models = { writer = "gpt" }

[tools.t]
input_schema = "object"
mock = [
  { output = 1 },
  "two",
  { output = nan },
]
`,
		want: []want{
			{workflow.EType, 1, "steps", "expected an array of tables ([[steps]]), got a string"},
			{workflow.EType, 2, "edges[0]", "expected a table, got an integer"},
			{workflow.EType, 3, "models.writer", "expected a table ([models.writer]), got a string"},
			{workflow.EType, 6, "tools.t.input_schema", "expected a table, got a string"},
			{workflow.EType, 9, "tools.t.mock[1]", "expected a table, got a string"},
		},
	}, {
		name: "every TOML type named",
		src: `name = 1979-05-27
description = 07:32:00
start = 1979-05-27T07:32:00
max_steps = 1979-05-27T07:32:00Z

[tools.t]
side_effect = "yes"
description = true
handler = { name = "h" }
`,
		want: []want{
			{workflow.EType, 1, "name", "expected a string, got a date"},
			{workflow.EType, 2, "description", "expected a string, got a time"},
			{workflow.EType, 3, "start", "expected a string, got a date-time"},
			{workflow.EType, 4, "max_steps", "expected an integer, got a date-time"},
			{workflow.EType, 7, "tools.t.side_effect", "expected a boolean, got a string"},
			{workflow.EType, 8, "tools.t.description", "expected a string, got a boolean"},
			{workflow.EType, 9, "tools.t.handler", "expected a string, got a table"},
		},
	}, {
		name: "keys that are not bare are quoted",
		src:  "\"my key\" = 1\n\"\" = 2\n\n[models.\"gpt.4\"]\nprovder = \"openai\"\n",
		want: []want{
			{workflow.EUnknownKey, 1, `"my key"`, `unknown key "my key" at the top level`},
			{workflow.EUnknownKey, 2, `""`, `unknown key "" at the top level`},
			{workflow.EUnknownKey, 5, `models."gpt.4".provder`, `unknown key provder in models."gpt.4" (it takes: provider,`},
		},
	}, {
		name: "nan in a JSON value",
		src:  "[tools.t]\nmock = [\n  { output = { status = \"ok\", score = nan } },\n]\n",
		want: []want{{workflow.EType, 3, "tools.t.mock[0].output.score", "JSON has no nan or inf"}},
	}, {
		name: "model script must be an array of tables",
		src:  "[models.m]\nprovider = \"scripted\"\nscript = { reply = \"hi\" }\n",
		want: []want{{workflow.EType, 3, "models.m.script", "expected an array of tables ([ { ... }, ... ]), got a table"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			wants := tc.want
			def, problems := workflow.Parse("wf.toml", []byte(tc.src))
			if def == nil {
				t.Fatalf("nil definition for TOML that parses; problems: %v", problems)
			}
			if def.Source == nil || def.Source.File != "wf.toml" {
				t.Errorf("Source = %+v", def.Source)
			}
			checkProblems(t, "wf.toml", problems, wants)
		})
	}
}

func TestParseKeepsWhatItCanDecode(t *testing.T) {
	src := `name = "partial"
max_steps = "many"

[[steps]]
id = "a"
type = "llm"
handler = "not.mine"
prompt = "hi"
output_repairs = 1

[[steps]]
id = "b"
type = "nope"
handler = "h"

[[edges]]
from = "a"
to = 2
`
	def, problems := workflow.Parse("wf.toml", []byte(src))
	if len(problems) != 4 {
		t.Errorf("problems: %v", problems)
	}
	sameDefinition(t, def, &workflow.Definition{
		Name: "partial",
		Steps: []workflow.Step{
			// The key of another type is left out; the rest is decoded.
			{ID: "a", Type: workflow.LLM, Prompt: "hi", OutputRepairs: ptr(1)},
			// An unknown type is kept as written, and its keys are decoded.
			{ID: "b", Type: "nope", Handler: "h"},
		},
		Edges: []workflow.Edge{{From: "a"}},
	})
}

func TestParseKeepsIndexes(t *testing.T) {
	// A wrong item stays in place as a zero value, so that steps[i] in the definition is
	// steps[i] in the file.
	src := "steps = [ \"x\", { id = \"b\", type = \"task\" } ]\nedges = [ 3, { from = \"b\", to = \"b\" } ]\n"
	def, problems := workflow.Parse("wf.toml", []byte(src))
	checkProblems(t, "wf.toml", problems, []want{
		{workflow.EType, 1, "steps[0]", "expected a table, got a string"},
		{workflow.EType, 2, "edges[0]", "expected a table, got an integer"},
	})
	sameDefinition(t, def, &workflow.Definition{
		Steps: []workflow.Step{{}, {ID: "b", Type: workflow.Task}},
		Edges: []workflow.Edge{{}, {From: "b", To: "b"}},
	})
	if got := def.Source.Lines["steps[1].type"]; got != 1 {
		t.Errorf("steps[1].type line = %d, want 1", got)
	}
}

func TestParseBranches(t *testing.T) {
	src := `[[steps]]
id = "fan"
type = "parallel"
branches = [
  "a",
  { workflow = "sub.toml" },
  3,
  {},
  { step = "x" },
  { workflow = 5 },
  ["nested"],
  "b",
]
`
	def, problems := workflow.Parse("wf.toml", []byte(src))
	checkProblems(t, "wf.toml", problems, []want{
		{workflow.EType, 7, "steps[0].branches[2]", `expected a step id or a table { workflow = "file.toml" }, got an integer`},
		{workflow.EType, 8, "steps[0].branches[3]", `expected a step id or a table { workflow = "file.toml" }, got a table without workflow`},
		{workflow.EUnknownKey, 9, "steps[0].branches[4].step", "unknown key step in a branch (it takes: workflow)"},
		{workflow.EType, 10, "steps[0].branches[5].workflow", "expected a string, got an integer"},
		{workflow.EType, 11, "steps[0].branches[6]", "got an array"},
	})
	wantBranches := []workflow.Branch{{Step: "a"}, {Workflow: "sub.toml"}, {}, {}, {}, {}, {}, {Step: "b"}}
	if def == nil || !reflect.DeepEqual(def.Steps[0].Branches, wantBranches) {
		t.Errorf("branches = %+v, want %+v", def.Steps[0].Branches, wantBranches)
	}

	_, problems = workflow.Parse("wf.toml", []byte("[[steps]]\nid = \"fan\"\ntype = \"parallel\"\nbranches = \"a\"\n"))
	checkProblems(t, "wf.toml", problems, []want{
		{workflow.EType, 4, "steps[0].branches", `expected an array of branches (a step id or a table { workflow = "file.toml" }), got a string`},
	})
}

func TestParseDurations(t *testing.T) {
	// Each place a duration goes, with a good and a bad value.
	places := []struct {
		key  string // as the problem names it
		file func(v string) string
		get  func(d *workflow.Definition) clock.Duration
	}{
		{"deadline", func(v string) string { return "deadline = " + v + "\n" }, func(d *workflow.Definition) clock.Duration { return d.Deadline }},
		{"steps[0].timeout", func(v string) string { return "[[steps]]\nid = \"a\"\ntype = \"task\"\ntimeout = " + v + "\n" },
			func(d *workflow.Definition) clock.Duration { return d.Steps[0].Timeout }},
		{"steps[0].retry.initial_delay", func(v string) string {
			return "[[steps]]\nid = \"a\"\ntype = \"task\"\n[steps.retry]\ninitial_delay = " + v + "\n"
		},
			func(d *workflow.Definition) clock.Duration { return d.Steps[0].Retry.InitialDelay }},
		{"steps[0].retry.max_delay", func(v string) string { return "[[steps]]\nid = \"a\"\ntype = \"task\"\nretry.max_delay = " + v + "\n" },
			func(d *workflow.Definition) clock.Duration { return d.Steps[0].Retry.MaxDelay }},
		{"steps[0].max_duration", func(v string) string {
			return "[[steps]]\nid = \"a\"\ntype = \"agent_loop\"\nmax_duration = " + v + "\n"
		},
			func(d *workflow.Definition) clock.Duration { return d.Steps[0].MaxDuration }},
		{"steps[0].loop_delay", func(v string) string { return "[[steps]]\nid = \"a\"\ntype = \"agent_loop\"\nloop_delay = " + v + "\n" },
			func(d *workflow.Definition) clock.Duration { return d.Steps[0].LoopDelay }},
		{"steps[0].duration", func(v string) string { return "[[steps]]\nid = \"a\"\ntype = \"sleep\"\nduration = " + v + "\n" },
			func(d *workflow.Definition) clock.Duration { return d.Steps[0].Duration }},
		{"steps[0].budget.max_duration", func(v string) string {
			return "[[steps]]\nid = \"a\"\ntype = \"agent\"\nbudget = { max_duration = " + v + " }\n"
		},
			func(d *workflow.Definition) clock.Duration { return d.Steps[0].Budget.MaxDuration }},
	}
	values := []struct {
		toml string
		want clock.Duration
		code workflow.Code // "" when the value is good
	}{
		{`"30s"`, dur("30s"), ""},
		{`"1h30m"`, dur("90m"), ""},
		{`"500ms"`, dur("500ms"), ""},
		{`"0s"`, 0, ""},
		{`"-1s"`, 0, workflow.EBadDuration},
		{`"30"`, 0, workflow.EBadDuration},
		{`""`, 0, workflow.EBadDuration},
		{`"2 days"`, 0, workflow.EBadDuration},
		{`30`, 0, workflow.EType},
		{`1.5`, 0, workflow.EType},
	}
	for _, p := range places {
		for _, v := range values {
			t.Run(p.key+"="+v.toml, func(t *testing.T) {
				src := p.file(v.toml)
				def, problems := workflow.Parse("d.toml", []byte(src))
				if def == nil {
					t.Fatalf("nil definition: %v", problems)
				}
				line := strings.Count(src, "\n") // the value is on the last line
				if v.code == "" {
					if len(problems) != 0 {
						t.Fatalf("problems: %v", problems)
					}
					if got := p.get(def); got != v.want {
						t.Errorf("duration = %v, want %v", got, v.want)
					}
					return
				}
				checkProblems(t, "d.toml", problems, []want{{v.code, line, p.key, ""}})
			})
		}
	}
}

func TestParseSyntaxErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		msg       string
	}{
		{"missing value", "name = \"x\"\nstart = \n", 2, "invalid TOML at column"},
		{"missing equals", "name \"x\"\n", 1, "expected '=' after key"},
		{"duplicate key", "[[steps]]\nid = \"a\"\nid = \"b\"\n", 3, "already defined"},
		{"duplicate table", "[models.m]\nprovider = \"openai\"\n\n[models.m]\nmodel = \"x\"\n", 4, "already exists"},
		{"unterminated string", "name = \"x\n", 1, ""},
		{"unclosed array", "[[steps]]\nid = \"a\"\ntools = [\"a\",\n", 3, "array is incomplete"},
		{"integer overflow", "max_steps = 99999999999999999999\n", 1, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def, problems := workflow.Parse("bad.toml", []byte(tc.src))
			if def != nil {
				t.Errorf("definition = %+v, want nil on a syntax error", def)
			}
			checkProblems(t, "bad.toml", problems, []want{{workflow.EParse, tc.line, "", tc.msg}})
		})
	}
}

func TestParseLeavesMeaningToTheValidator(t *testing.T) {
	// Duplicate ids, dangling edges, unknown references, bad bounds and values outside their set
	// are the validator's: Parse takes the file as written, and does not fill in defaults.
	src := `name = "Not A Name!"

[[steps]]
id = "a"
type = "llm"
model = "missing"

[[steps]]
id = "a"
type = "agent_loop"
max_iterations = -1
retry = { backoff = "random" }

[[edges]]
from = "a"
to = "nowhere"
max_iterations = 0
`
	def, problems := workflow.Parse("wf.toml", []byte(src))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	if def.Deadline != 0 || def.MaxSteps != 0 || def.Start != "" || def.Steps[0].OutputRepairs != nil {
		t.Errorf("Parse applied defaults: %+v", def)
	}
	if def.Steps[1].MaxIterations != -1 || def.Steps[1].Retry.Backoff != "random" {
		t.Errorf("steps[1] = %+v", def.Steps[1])
	}
}

func TestParseSchemasAsJSON(t *testing.T) {
	// Any TOML value inside a schema or a mock becomes JSON: dates and times as strings.
	src := `[tools.t]
input_schema = { type = "object", examples = [ { when = 1979-05-27T07:32:00Z, day = 1979-05-27, at = 07:32:00, local = 1979-05-27T07:32:00 } ], minimum = -1.5, big = 9007199254740993, flag = true }
mock = []
`
	def, problems := workflow.Parse("wf.toml", []byte(src))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	tool := def.Tools["t"]
	wantSchema := `{"big":9007199254740993,"examples":[{"at":"07:32:00","day":"1979-05-27","local":"1979-05-27T07:32:00","when":"1979-05-27T07:32:00Z"}],"flag":true,"minimum":-1.5,"type":"object"}`
	if string(tool.InputSchema) != wantSchema {
		t.Errorf("input_schema = %s\nwant %s", tool.InputSchema, wantSchema)
	}
	if string(tool.Mock) != "[]" {
		t.Errorf("mock = %s, want []", tool.Mock)
	}
}

func TestParseEmptyFile(t *testing.T) {
	def, problems := workflow.Parse("empty.toml", nil)
	if len(problems) != 0 || def == nil {
		t.Fatalf("Parse(empty) = %v, %v", def, problems)
	}
	sameDefinition(t, def, &workflow.Definition{})
}

func TestParseProblemsInFileOrder(t *testing.T) {
	src := `[[steps]]
type = "task"
id = 1
bogus = true

[[edges]]
to = 2

[models.m]
provider = 3
name = "late"
`
	_, problems := workflow.Parse("wf.toml", []byte(src))
	checkProblems(t, "wf.toml", problems, []want{
		{workflow.EType, 3, "steps[0].id", ""},
		{workflow.EUnknownKey, 4, "steps[0].bogus", ""},
		{workflow.EType, 7, "edges[0].to", ""},
		{workflow.EType, 10, "models.m.provider", ""},
		{workflow.EUnknownKey, 11, "models.m.name", ""},
	})
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()

	t.Run("valid file", func(t *testing.T) {
		path := filepath.Join("testdata", "full.toml")
		def, problems := workflow.Load(path)
		if len(problems) != 0 {
			t.Fatalf("problems: %v", problems)
		}
		sameDefinition(t, def, fullWant)
		if def.Source.File != path {
			t.Errorf("Source.File = %q, want %q", def.Source.File, path)
		}
	})

	t.Run("not normalized", func(t *testing.T) {
		path := filepath.Join(dir, "min.toml")
		if err := os.WriteFile(path, []byte("name = \"min\"\n[[steps]]\nid = \"only\"\ntype = \"llm\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		def, problems := workflow.Load(path)
		if len(problems) != 0 {
			t.Fatalf("problems: %v", problems)
		}
		sameDefinition(t, def, &workflow.Definition{Name: "min", Steps: []workflow.Step{{ID: "only", Type: workflow.LLM}}})
	})

	t.Run("problems name the path", func(t *testing.T) {
		path := filepath.Join(dir, "bad.toml")
		if err := os.WriteFile(path, []byte("name = \"x\"\nfoo = 1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		def, problems := workflow.Load(path)
		if def == nil {
			t.Error("nil definition")
		}
		checkProblems(t, path, problems, []want{{workflow.EUnknownKey, 2, "foo", "unknown key foo"}})
	})

	t.Run("unreadable file", func(t *testing.T) {
		path := filepath.Join(dir, "missing.toml")
		def, problems := workflow.Load(path)
		if def != nil {
			t.Errorf("definition = %+v, want nil", def)
		}
		checkProblems(t, path, problems, []want{{workflow.EParse, 0, "", "cannot read the workflow file: no such file or directory"}})
	})
}
