package workflow_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// tResearch is a workflow whose agent "lead" has two tools that run as sub-runs: the agent
// "researcher" (a step no edge reaches) and the sub-workflow file summary.toml.
const tResearch = `name = "research"

[models.m]
provider = "scripted"
script = [{ text = "done" }]

[tools.research]
description = "Research a question and return a short report."
input_schema = { type = "object", properties = { question = { type = "string" } }, required = ["question"] }
agent = "researcher"

[tools.summarize]
description = "Summarize a text."
workflow = "summary.toml"

[tools.lookup]
mock = [{ output = { ok = true } }]

[[steps]]
id = "lead"
type = "agent"
model = "m"
goal = "Answer {{input.q}}."
tools = ["research", "summarize"]

[[steps]]
id = "researcher"
type = "agent"
model = "m"
goal = "Research {{input.question}}."
tools = ["lookup"]

[[steps]]
id = "report"
type = "terminate"

[[edges]]
from = "lead"
to = "report"
`

const tSummary = `name = "summary"

[[steps]]
id = "end"
type = "terminate"
`

// tLoad writes files into a temporary directory and loads and validates main.toml there.
func tLoad(t *testing.T, files map[string]string) (*workflow.Definition, workflow.Problems) {
	t.Helper()
	dir := t.TempDir()
	vWrite(t, dir, files)
	return workflow.LoadAndValidate(filepath.Join(dir, "main.toml"), workflow.Options{})
}

func TestToolsThatRunChildrenAreValid(t *testing.T) {
	d, ps := tLoad(t, map[string]string{"main.toml": tResearch, "summary.toml": tSummary})
	vSame(t, ps)
	if got := d.Tools["research"]; got.Agent != "researcher" || !got.RunsChild() {
		t.Errorf("tools.research = %+v", got)
	}
	if got := d.Tools["summarize"]; got.Workflow != "summary.toml" || !got.RunsChild() {
		t.Errorf("tools.summarize = %+v", got)
	}
	if d.Tools["lookup"].RunsChild() {
		t.Errorf("a mocked tool runs no child")
	}
	// The step an agent tool runs is neither a root nor unreachable: lead is the start.
	if d.Start != "lead" || !slices.Equal(d.Roots(), []string{"lead"}) {
		t.Errorf("start %q, roots %v; want lead", d.Start, d.Roots())
	}
	if got := d.ToolAgents(); !slices.Equal(got, []string{"researcher"}) {
		t.Errorf("ToolAgents = %v", got)
	}
}

func TestToolsThatRunChildrenProblems(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(tResearch, old) {
			panic("no " + old)
		}
		return strings.Replace(tResearch, old, new, 1)
	}
	tests := []struct {
		name  string
		main  string
		want  []string
		words string // in the last problem's message
	}{
		{"agent and workflow", edit(`agent = "researcher"`, `agent = "researcher"`+"\nworkflow = \"summary.toml\""),
			[]string{"E_BAD_VALUE tools.research.workflow"}, "sets both agent and workflow"},
		{"agent and handler", edit(`agent = "researcher"`, `agent = "researcher"`+"\nhandler = \"h\""),
			[]string{"E_BAD_VALUE tools.research.handler"}, `runs agent researcher as a child and also names handler "h"`},
		{"workflow and mock", edit(`workflow = "summary.toml"`, `workflow = "summary.toml"`+"\nmock = [{ output = 1 }]"),
			[]string{"E_BAD_VALUE tools.summarize.mock"}, "is also mocked"},
		{"agent and mcp", edit(`agent = "researcher"`, `agent = "researcher"`+"\nmcp = \"orders\""),
			[]string{"E_BAD_VALUE tools.research.mcp"}, `MCP server "orders"`},
		{"unknown step", edit(`agent = "researcher"`, `agent = "nobody"`),
			[]string{"E_NO_START start", "E_UNKNOWN_STEP tools.research.agent"}, `runs agent "nobody", which is not a step of this workflow`},
		{"not an agent step", edit(`agent = "researcher"`, `agent = "report"`),
			[]string{"E_NO_START start", "E_BAD_VALUE tools.research.agent"}, `runs step "report", which is a terminate step`},
		{"a step with an edge", edit("[[edges]]\nfrom = \"lead\"\nto = \"report\"\n", "[[edges]]\nfrom = \"lead\"\nto = \"report\"\n\n[[edges]]\nfrom = \"researcher\"\nto = \"report\"\n"),
			[]string{"E_BAD_VALUE tools.research.agent"}, `runs step "researcher", which has an edge to report`},
		{"itself", edit(`tools = ["lookup"]`, `tools = ["lookup", "research"]`),
			[]string{"E_RECURSION tools.research.agent"}, "researcher (tool research) → researcher"},
		{"a read of an output", edit(`goal = "Research {{input.question}}."`, `goal = "Research {{lead.output.answer}}."`),
			[]string{"E_UNBOUND_REF steps[1].goal"}, "runs as an agent tool, in a run of its own"},
		{"missing file", edit(`workflow = "summary.toml"`, `workflow = "nowhere.toml"`),
			[]string{"E_WORKFLOW_FILE tools.summarize.workflow"}, "cannot be read"},
		{"outside", edit(`workflow = "summary.toml"`, `workflow = "../summary.toml"`),
			[]string{"E_PATH_OUTSIDE tools.summarize.workflow"}, "leaves the workflow's directory"},
		{"back to itself", edit(`workflow = "summary.toml"`, `workflow = "main.toml"`),
			[]string{"E_RECURSION tools.summarize.workflow"}, "main.toml → main.toml"},
		{"neither", edit(`workflow = "summary.toml"`, ``),
			[]string{"E_MISSING_KEY tools.summarize"}, "neither a handler, a mock, an MCP server, an agent nor a workflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ps := tLoad(t, map[string]string{"main.toml": tt.main, "summary.toml": tSummary})
			vSame(t, ps, tt.want...)
			last := ps[len(ps)-1]
			if !strings.Contains(last.Message, tt.words) {
				t.Errorf("message %q, want %q in it", last.Message, tt.words)
			}
			if last.File == "" || last.Line == 0 {
				t.Errorf("problem %v has no file and line", last)
			}
		})
	}
}

// Agents that call each other through their tools: every tool on the cycle is reported, with
// the chain.
func TestToolAgentsCallingEachOther(t *testing.T) {
	d := &workflow.Definition{
		Name:   "pingpong",
		Models: map[string]workflow.ModelDef{"m": {Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)}},
		Tools: map[string]workflow.ToolDef{
			"ask_a": {Agent: "a"},
			"ask_b": {Agent: "b"},
		},
		Steps: []workflow.Step{
			{ID: "lead", Type: workflow.Agent, Model: "m", Goal: "g", Tools: []string{"ask_a"}},
			{ID: "a", Type: workflow.Agent, Model: "m", Goal: "g", Tools: []string{"ask_b"}},
			{ID: "b", Type: workflow.Agent, Model: "m", Goal: "g", Tools: []string{"ask_a"}},
		},
	}
	ps := workflow.Validate(d, workflow.Options{})
	vSame(t, ps, "E_RECURSION tools.ask_a.agent", "E_RECURSION tools.ask_b.agent")
	if want := "a (tool ask_b) → b (tool ask_a) → a"; !strings.Contains(ps[0].Message, want) {
		t.Errorf("message %q, want %q", ps[0].Message, want)
	}
}

// The workflow of an agent tool's sub-runs: the step and the agents its tools run, with what
// they use, and nothing else of the parent.
func TestAgentDefinition(t *testing.T) {
	d, ps := tLoad(t, map[string]string{"main.toml": tResearch, "summary.toml": tSummary})
	vSame(t, ps)
	sub, err := d.AgentDefinition("researcher")
	if err != nil {
		t.Fatal(err)
	}
	if sub.Name != "research-researcher" || sub.Start != "researcher" || len(sub.Steps) != 1 || len(sub.Edges) != 0 {
		t.Errorf("definition %s starts at %s with %d steps and %d edges", sub.Name, sub.Start, len(sub.Steps), len(sub.Edges))
	}
	if got := slices.Sorted(func(yield func(string) bool) {
		for k := range sub.Tools {
			yield(k)
		}
	}); !slices.Equal(got, []string{"lookup"}) {
		t.Errorf("tools %v, want the step's own", got)
	}
	if _, ok := sub.Models["m"]; !ok || sub.Deadline != d.Deadline {
		t.Errorf("models %v, deadline %s", sub.Models, sub.Deadline)
	}
	if ps := workflow.Validate(sub, workflow.Options{}); len(ps) > 0 {
		t.Errorf("the derived workflow is not valid: %v", ps)
	}
	// An agent whose tools run agents takes them along, as steps that only run as children.
	lead, err := d.AgentDefinition("lead")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range lead.Steps {
		ids = append(ids, s.ID)
	}
	if !slices.Equal(ids, []string{"lead", "researcher"}) || !slices.Equal(lead.Roots(), []string{"lead"}) {
		t.Errorf("steps %v, roots %v", ids, lead.Roots())
	}
	if _, err := d.AgentDefinition("report"); err == nil {
		t.Errorf("a terminate step made an agent workflow")
	}
}

// A tool that runs a child is the same definition from the builder and from TOML.
func TestChildToolsBuilderEqualsTOML(t *testing.T) {
	d, ps := tLoad(t, map[string]string{"main.toml": tResearch, "summary.toml": tSummary})
	vSame(t, ps)
	b := workflow.New("research")
	b.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"done"}]`)})
	b.Tool("research", workflow.ToolDef{Description: "Research a question and return a short report.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`), Agent: "researcher"})
	b.Tool("summarize", workflow.ToolDef{Description: "Summarize a text.", Workflow: "summary.toml"})
	b.Tool("lookup", workflow.ToolDef{Mock: json.RawMessage(`[{"output":{"ok":true}}]`)})
	b.Agent("lead", "m").WithGoal("Answer {{input.q}}.").WithTools("research", "summarize")
	b.Agent("researcher", "m").WithGoal("Research {{input.question}}.").WithTools("lookup")
	b.Terminate("report")
	b.Edge("lead", "report")
	built, err := b.BuildWith(workflow.Options{BaseDir: filepath.Dir(d.Source.File)})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := d.CanonicalJSON()
	got, _ := built.CanonicalJSON()
	if string(got) != string(want) {
		t.Errorf("builder:\n%s\nTOML:\n%s", got, want)
	}
}

// The graph draws what an agent's tools run as dashed edges from the agent, labelled with the
// tool.
func TestGraphOfChildTools(t *testing.T) {
	d, ps := tLoad(t, map[string]string{"main.toml": tResearch, "summary.toml": tSummary})
	vSame(t, ps)
	m := workflow.Mermaid(d)
	for _, want := range []string{`s0 -.->|"tool research"| s1`, `s0 -.->|"tool summarize"| f0`, `f0[["workflow: summary.toml"]]`} {
		if !strings.Contains(m, want) {
			t.Errorf("mermaid has no %s:\n%s", want, m)
		}
	}
	if dot := workflow.Dot(d); !strings.Contains(dot, `label="tool research"`) {
		t.Errorf("dot has no tool edge:\n%s", dot)
	}
}
