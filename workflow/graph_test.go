package workflow_test

import (
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
	"gonum.org/v1/gonum/graph/formats/dot"
	"gonum.org/v1/gonum/graph/formats/dot/ast"
)

// grLoopFanout is a small workflow with every kind of edge: a start step, a loop edge, a labelled
// edge, parallel branches (a step and a file), a map body, a call and end steps.
func grLoopFanout() *workflow.Definition {
	return &workflow.Definition{
		Name:  "shapes",
		Start: "gen",
		Steps: []workflow.Step{
			{ID: "gen", Type: workflow.LLM, Model: "writer"},
			{ID: "check", Type: workflow.Switch, Expr: "gen.output.verdict"},
			{ID: "fan", Type: workflow.Parallel, Branches: []workflow.Branch{{Step: "left"}, {Workflow: "right.toml"}}},
			{ID: "left", Type: workflow.Task, Handler: "work"},
			{ID: "each", Type: workflow.Map, Items: "gen.output.items", Step: "item", MaxItems: 20},
			{ID: "item", Type: workflow.AgentLoop, Handler: "loop", MaxIterations: 5},
			{ID: "sub", Type: workflow.Call, Workflow: "review.toml"},
			{ID: "ask", Type: workflow.Approval, Prompt: "ok?"},
			{ID: "done", Type: workflow.Terminate},
			{ID: "no", Type: workflow.Fail, Message: "no"},
		},
		Edges: []workflow.Edge{
			{From: "gen", To: "check"},
			{From: "check", To: "gen", When: "retry", MaxIterations: 3},
			{From: "check", To: "fan", When: "ok"},
			{From: "fan", To: "each"},
			{From: "each", To: "sub"},
			{From: "sub", To: "ask"},
			{From: "ask", To: "done", When: "approved"},
			{From: "ask", To: "no", When: "denied"},
			{From: "ask", To: "ask", MaxIterations: 2},
		},
	}
}

func grHas(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains("\n"+out, "\n"+l+"\n") {
			t.Errorf("missing line %q in\n%s", l, out)
		}
	}
}

func TestMermaid(t *testing.T) {
	out := workflow.Mermaid(grLoopFanout())
	if !strings.HasPrefix(out, "%% workflow shapes\nflowchart TD\n") {
		t.Errorf("header:\n%s", out)
	}
	grHas(t, out,
		`    entry(("start"))`,
		`    s0["gen<br/>llm: writer"]`,
		`    s1{"check<br/>switch: gen.output.verdict"}`,
		`    s2[/"fan<br/>parallel"/]`,
		`    s3["left<br/>task: work"]`,
		`    s4[/"each<br/>map: gen.output.items"/]`,
		`    s5["item<br/>agent_loop: loop (≤ 5)"]`,
		`    s6[["sub<br/>call: review.toml"]]`,
		`    s7{{"ask<br/>approval"}}`,
		`    s8(["done<br/>terminate"]):::done`,
		`    s9(["no<br/>fail"]):::failed`,
		`    f0[["workflow: right.toml"]]:::file`,
		// the start step
		`    style s0 stroke-width:3px`,
		`    entry --> s0`,
		// plain, labelled and loop edges
		`    s0 --> s1`,
		`    s1 ==>|"retry (loop ≤ 3)"| s0`,
		`    s1 -->|"ok"| s2`,
		`    s7 ==>|"loop ≤ 2"| s7`,
		`    s7 -->|"approved"| s8`,
		// parallel branches and map bodies, dashed from their parent
		`    s2 -.->|"branch 1"| s3`,
		`    s2 -.->|"branch 2"| f0`,
		`    s4 -.->|"each item (≤ 20)"| s5`,
		`    classDef done fill:#e8f5e9`,
		`    classDef file stroke-dasharray:4 2`,
	)
	if strings.Contains(out, "classDef missing") {
		t.Error("a class no node uses is defined")
	}
}

func TestDot(t *testing.T) {
	out := workflow.Dot(grLoopFanout())
	if !strings.HasPrefix(out, "digraph \"shapes\" {\n") || !strings.HasSuffix(out, "\n}\n") {
		t.Errorf("not a digraph:\n%s", out)
	}
	grHas(t, out,
		`  s0 [label="gen\nllm: writer", penwidth=2.5];`,
		`  s1 [label="check\nswitch: gen.output.verdict", shape=diamond, style=""];`,
		`  s6 [label="sub\ncall: review.toml", shape=box, peripheries=2, style=""];`,
		`  f0 [label="workflow: right.toml", shape=box, peripheries=2, style=dashed];`,
		`  entry -> s0;`,
		`  s0 -> s1;`,
		`  s1 -> s0 [label="retry (loop ≤ 3)", style=bold, color="#1565c0", constraint=false];`,
		`  s1 -> s2 [label="ok"];`,
		`  s2 -> s3 [label="branch 1", style=dashed, arrowhead=empty];`,
		`  s4 -> s5 [label="each item (≤ 20)", style=dashed, arrowhead=empty];`,
	)
	grDotWellFormed(t, out)
}

// TestGraphIsDeterministic: the same definition draws the same text, whatever the map order of
// its models and tools.
func TestGraphIsDeterministic(t *testing.T) {
	for _, name := range exNames {
		def := exLoad(t, name)
		m, d := workflow.Mermaid(def), workflow.Dot(def)
		for range 20 {
			again := exLoad(t, name)
			if workflow.Mermaid(again) != m || workflow.Dot(again) != d {
				t.Fatalf("%s: the graph changed between two loads", name)
			}
		}
	}
}

// grAwkward has ids and values with every character that means something in Mermaid or dot.
func grAwkward() *workflow.Definition {
	return &workflow.Definition{
		Name:  "awk\"ward\nname",
		Start: "end",
		Steps: []workflow.Step{
			{ID: "end", Type: workflow.Task, Handler: "h\"<x>&#y|z`"},
			{ID: `a"b`, Type: workflow.Switch, Expr: `p\q`},
			{ID: "graph", Type: workflow.Parallel, Branches: []workflow.Branch{{Step: "style"}, {Workflow: `sub "x".toml`}}},
			{ID: "style", Type: workflow.Map, Items: "input.xs", Step: "class", MaxItems: 5},
			{ID: "class", Type: workflow.Call, Workflow: `c\d.toml`},
			{ID: "subgraph", Type: workflow.Sleep, Duration: 5e9},
			{ID: "-->", Type: workflow.Terminate},
			{ID: "s0", Type: workflow.Fail, Message: "m"},
			{ID: "entry", Type: workflow.WaitEvent, Event: "e;v]"},
		},
		Edges: []workflow.Edge{
			{From: "end", To: `a"b`, When: `x"|y`},
			{From: `a"b`, To: "end", When: "]\n[", MaxIterations: 2},
			{From: "ghost", To: "graph", When: "a;b"},
			{From: "graph", To: "-->"},
			{From: "s0", To: "entry"},
		},
	}
}

// TestGraphEscapesEverything: ids and values only ever appear inside quoted, escaped labels;
// node names are generated, so no id can collide with them or with a keyword.
func TestGraphEscapesEverything(t *testing.T) {
	d := grAwkward()
	m := workflow.Mermaid(d)
	grHas(t, m,
		`%% workflow awk"ward name`,
		`    s0["end<br/>task: h#quot;#lt;x#gt;#amp;#35;y#124;z#96;"]`,
		`    s1{"a#quot;b<br/>switch: p\q"}`,
		`    s6(["--#gt;<br/>terminate"]):::done`,
		`    s7(["s0<br/>fail"]):::failed`,
		`    s8{{"entry<br/>wait_event: e;v]"}}`,
		`    f0[["workflow: sub #quot;x#quot;.toml"]]:::file`,
		`    x0>"ghost<br/>unknown step"]:::missing`,
		`    s0 -->|"x#quot;#124;y"| s1`,
		`    s1 ==>|"]<br/>[ (loop ≤ 2)"| s0`,
		`    x0 -->|"a;b"| s2`,
		`    s7 --> s8`,
	)
	// Every quote outside the comment opens or closes a label.
	for _, l := range strings.Split(m, "\n") {
		if !strings.HasPrefix(l, "%%") && strings.Count(l, `"`)%2 != 0 {
			t.Errorf("unbalanced quotes: %s", l)
		}
	}

	d2 := workflow.Dot(d)
	grHas(t, d2,
		`digraph "awk\"ward\nname" {`,
		`  s0 [label="end\ntask: h\"<x>&#y|z`+"`"+`", penwidth=2.5];`,
		`  s1 [label="a\"b\nswitch: p\\q", shape=diamond, style=""];`,
		`  s4 [label="class\ncall: c\\d.toml", shape=box, peripheries=2, style=""];`,
		`  x0 [label="ghost\nunknown step", style=dotted];`,
		`  s1 -> s0 [label="]\n[ (loop ≤ 2)", style=bold, color="#1565c0", constraint=false];`,
	)
	grDotWellFormed(t, d2)
}

// TestGraphWithoutStart: no start, no entry marker.
func TestGraphWithoutStart(t *testing.T) {
	d := &workflow.Definition{Name: "x", Steps: []workflow.Step{{ID: "a", Type: workflow.Terminate}, {ID: "b", Type: workflow.Terminate}}}
	if m := workflow.Mermaid(d); strings.Contains(m, "entry") || strings.Contains(m, "stroke-width") {
		t.Errorf("a start is marked:\n%s", m)
	}
	if out := workflow.Dot(d); strings.Contains(out, "entry") || strings.Contains(out, "penwidth") {
		t.Errorf("a start is marked:\n%s", out)
	}
}

// grDotWellFormed checks the dot text with a small tokenizer: quoted strings closed, brackets and
// braces balanced, every statement ended. When Graphviz is installed, dot itself must accept it.
func grDotWellFormed(t *testing.T, src string) {
	t.Helper()
	depth, brackets := 0, 0
	inQuote, escaped := false, false
	for i, r := range src {
		switch {
		case inQuote && escaped:
			escaped = false
		case inQuote && r == '\\':
			escaped = true
		case inQuote && r == '"':
			inQuote = false
		case inQuote:
			if r == '\n' {
				t.Fatalf("a line break inside a quoted string at byte %d", i)
			}
		case r == '"':
			inQuote = true
		case r == '{':
			depth++
		case r == '}':
			depth--
		case r == '[':
			brackets++
		case r == ']':
			brackets--
		}
		if depth < 0 || brackets < 0 {
			t.Fatalf("unbalanced at byte %d", i)
		}
	}
	if inQuote || depth != 0 || brackets != 0 {
		t.Fatalf("unbalanced dot: quote %v, braces %d, brackets %d", inQuote, depth, brackets)
	}
	// A DOT parser is the judge of the syntax (gonum's, the DOT grammar of Graphviz): no
	// external program is needed. Every edge joins nodes the graph declares.
	file, err := dot.ParseString(src)
	if err != nil {
		t.Fatalf("the DOT parser rejects the graph: %v\n%s", err, src)
	}
	if len(file.Graphs) != 1 || !file.Graphs[0].Directed {
		t.Fatalf("want one digraph, got %d graphs", len(file.Graphs))
	}
	declared := map[string]bool{}
	var edges []*ast.EdgeStmt
	for _, stmt := range file.Graphs[0].Stmts {
		switch st := stmt.(type) {
		case *ast.NodeStmt:
			declared[st.Node.ID] = true
		case *ast.EdgeStmt:
			edges = append(edges, st)
		}
	}
	for _, e := range edges {
		for _, v := range []ast.Vertex{e.From, e.To.Vertex} {
			if n, ok := v.(*ast.Node); ok && !declared[n.ID] {
				t.Errorf("edge %s joins node %s, which the graph does not declare", e, n.ID)
			}
		}
	}
}
