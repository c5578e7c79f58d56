package workflow

import (
	"fmt"
	"strings"
)

// The graph export draws a definition as it is declared: every step a node labelled with its id
// and type, every edge labelled with its branch label, loop edges drawn thick and labelled with
// their bound, parallel branches, map bodies and the agents and workflows an agent's tools run
// as dashed edges from their parent, sub-workflow files as nodes of their own, and the start
// step marked by an entry node.
//
// Node names in the output are generated (s0, s1, ... in step order; f0, f1, ... for workflow
// files; x0, x1, ... for references to steps that do not exist), so any step id renders: ids only
// ever appear inside quoted, escaped labels. The output depends only on the definition, never on
// map iteration order, so it can be committed and diffed.

// graphNode is one node to draw.
type graphNode struct {
	name  string   // generated node name
	lines []string // label lines, unescaped
	shape nodeShape
	class string // "", "done" (terminate), "failed" (fail), "file", "missing"
	start bool   // the start step
}

// graphEdge is one edge to draw.
type graphEdge struct {
	from, to string // generated node names
	label    string // unescaped; "" for none
	style    edgeStyle
	branch   int // a parallel branch's number, from 1; 0 for any other edge
}

type nodeShape int

const (
	shapeBox        nodeShape = iota // work: task, agent_loop, llm, agent
	shapeDiamond                     // switch
	shapeFanout                      // parallel, map
	shapeSubroutine                  // call, workflow files
	shapeWait                        // approval, wait_event, sleep
	shapeEnd                         // terminate, fail
	shapeMissing                     // a reference to an unknown step
)

type edgeStyle int

const (
	edgePlain edgeStyle = iota // an edge of the workflow
	edgeLoop                   // a loop edge (max_iterations)
	edgeChild                  // a parallel branch or a map body
	edgeEntry                  // from the entry marker to the start step
)

// graph is the drawing of a definition, shared by Mermaid and Dot.
type graph struct {
	title string
	nodes []graphNode
	edges []graphEdge
	start string // generated name of the start step, "" when there is none
}

// buildGraph lays out d. It tolerates invalid definitions: unknown steps become "missing" nodes.
func buildGraph(d *Definition) *graph {
	g := &graph{title: d.Name}
	names := map[string]string{} // step id -> node name (the first step with that id)
	for i, s := range d.Steps {
		name := fmt.Sprintf("s%d", i)
		if _, dup := names[s.ID]; !dup {
			names[s.ID] = name
		}
		n := graphNode{name: name, lines: []string{s.ID, stepSummary(s)}, shape: shapeOf(s.Type)}
		if s.ID == d.Start && d.Start != "" && g.start == "" {
			n.start = true
			g.start = name
		}
		switch s.Type {
		case Terminate:
			n.class = "done"
		case Fail:
			n.class = "failed"
		}
		g.nodes = append(g.nodes, n)
	}
	missing := map[string]string{}
	ref := func(id string) string {
		if n, ok := names[id]; ok {
			return n
		}
		if n, ok := missing[id]; ok {
			return n
		}
		n := fmt.Sprintf("x%d", len(missing))
		missing[id] = n
		g.nodes = append(g.nodes, graphNode{name: n, lines: []string{id, "unknown step"}, shape: shapeMissing, class: "missing"})
		return n
	}
	files := map[string]string{}
	file := func(path string) string {
		if n, ok := files[path]; ok {
			return n
		}
		n := fmt.Sprintf("f%d", len(files))
		files[path] = n
		g.nodes = append(g.nodes, graphNode{name: n, lines: []string{"workflow: " + path}, shape: shapeSubroutine, class: "file"})
		return n
	}
	if g.start != "" {
		g.edges = append(g.edges, graphEdge{from: "entry", to: g.start, style: edgeEntry})
	}
	// Children first, in step order: they are part of their parent, not of the edge list.
	for i, s := range d.Steps {
		parent := fmt.Sprintf("s%d", i)
		switch s.Type {
		case Parallel:
			for j, b := range s.Branches {
				label := fmt.Sprintf("branch %d", j+1)
				switch {
				case b.Workflow != "":
					g.edges = append(g.edges, graphEdge{from: parent, to: file(b.Workflow), label: label, style: edgeChild, branch: j + 1})
				case b.Step != "":
					g.edges = append(g.edges, graphEdge{from: parent, to: ref(b.Step), label: label, style: edgeChild, branch: j + 1})
				}
			}
		case Map:
			label := "each item"
			if s.MaxItems > 0 {
				label = fmt.Sprintf("each item (≤ %d)", s.MaxItems)
			}
			if s.Step != "" {
				g.edges = append(g.edges, graphEdge{from: parent, to: ref(s.Step), label: label, style: edgeChild})
			}
			if s.Workflow != "" {
				g.edges = append(g.edges, graphEdge{from: parent, to: file(s.Workflow), label: label, style: edgeChild})
			}
		case Agent:
			for _, name := range s.Tools {
				switch t := d.Tools[name]; {
				case t.Agent != "":
					g.edges = append(g.edges, graphEdge{from: parent, to: ref(t.Agent), label: "tool " + name, style: edgeChild})
				case t.Workflow != "":
					g.edges = append(g.edges, graphEdge{from: parent, to: file(t.Workflow), label: "tool " + name, style: edgeChild})
				}
			}
		}
	}
	for _, e := range d.Edges {
		ge := graphEdge{from: ref(e.From), to: ref(e.To), label: e.When}
		if e.IsLoop() {
			ge.style = edgeLoop
			bound := fmt.Sprintf("loop ≤ %d", e.MaxIterations)
			if e.When == "" {
				ge.label = bound
			} else {
				ge.label = e.When + " (" + bound + ")"
			}
		}
		g.edges = append(g.edges, ge)
	}
	return g
}

// stepSummary is the second label line of a step: its type and what it runs.
func stepSummary(s Step) string {
	t := string(s.Type)
	with := func(detail string) string {
		if detail == "" {
			return t
		}
		return t + ": " + detail
	}
	switch s.Type {
	case Task:
		return with(s.Handler)
	case AgentLoop:
		if s.MaxIterations > 0 {
			return with(fmt.Sprintf("%s (≤ %d)", s.Handler, s.MaxIterations))
		}
		return with(s.Handler)
	case LLM, Agent:
		return with(s.Model)
	case Switch:
		return with(s.Expr)
	case Map:
		return with(s.Items)
	case Call:
		return with(s.Workflow)
	case WaitEvent:
		return with(s.Event)
	case Sleep:
		if s.Duration != 0 {
			return with(s.Duration.String())
		}
	}
	return t
}

func shapeOf(t StepType) nodeShape {
	switch t {
	case Switch:
		return shapeDiamond
	case Parallel, Map:
		return shapeFanout
	case Call:
		return shapeSubroutine
	case Approval, WaitEvent, Sleep:
		return shapeWait
	case Terminate, Fail:
		return shapeEnd
	case Task, AgentLoop, LLM, Agent:
		return shapeBox
	}
	return shapeBox
}

// Mermaid renders d as a Mermaid flowchart (https://mermaid.js.org). Loop edges are thick (==>),
// parallel branches and map bodies dashed (-.->), the start step is reached from a small "start"
// circle and drawn with a thick border.
func Mermaid(d *Definition) string {
	g := buildGraph(d)
	var b strings.Builder
	fmt.Fprintf(&b, "%%%% workflow %s\n", oneLine(g.title))
	b.WriteString("flowchart TD\n")
	if g.start != "" {
		b.WriteString("    entry((\"start\"))\n")
	}
	for _, n := range g.nodes {
		label := make([]string, len(n.lines))
		for i, l := range n.lines {
			label[i] = mermaidEscape(l)
		}
		text := `"` + strings.Join(label, "<br/>") + `"`
		var open, close string
		switch n.shape {
		case shapeDiamond:
			open, close = "{", "}"
		case shapeFanout:
			open, close = "[/", "/]"
		case shapeSubroutine:
			open, close = "[[", "]]"
		case shapeWait:
			open, close = "{{", "}}"
		case shapeEnd:
			open, close = "([", "])"
		case shapeMissing:
			open, close = ">", "]"
		default:
			open, close = "[", "]"
		}
		fmt.Fprintf(&b, "    %s%s%s%s", n.name, open, text, close)
		if n.class != "" {
			b.WriteString(":::" + n.class)
		}
		b.WriteString("\n")
	}
	if g.start != "" {
		fmt.Fprintf(&b, "    style %s stroke-width:3px\n", g.start)
	}
	for _, e := range g.edges {
		var arrow string
		switch e.style {
		case edgeLoop:
			arrow = "==>"
		case edgeChild:
			arrow = "-.->"
		default:
			arrow = "-->"
		}
		from := e.from
		if e.label == "" {
			fmt.Fprintf(&b, "    %s %s %s\n", from, arrow, e.to)
		} else {
			fmt.Fprintf(&b, "    %s %s|\"%s\"| %s\n", from, arrow, mermaidEscape(e.label), e.to)
		}
	}
	used := map[string]bool{}
	for _, n := range g.nodes {
		used[n.class] = true
	}
	for _, c := range mermaidClasses {
		if used[c.name] {
			fmt.Fprintf(&b, "    classDef %s %s\n", c.name, c.style)
		}
	}
	return b.String()
}

// mermaidClasses are the node classes of the Mermaid output, in the order they are defined.
var mermaidClasses = []struct{ name, style string }{
	{"done", "fill:#e8f5e9"},
	{"failed", "fill:#ffebee"},
	{"file", "stroke-dasharray:4 2"},
	{"missing", "fill:#fff3e0,stroke-dasharray:2 2"},
}

// mermaidEscape makes s safe inside a double-quoted Mermaid label: the characters that end or
// reinterpret a label become Mermaid entity codes (#quot; and friends), line breaks become <br/>.
func mermaidEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '#':
			b.WriteString("#35;")
		case '"':
			b.WriteString("#quot;")
		case '&':
			b.WriteString("#amp;")
		case '<':
			b.WriteString("#lt;")
		case '>':
			b.WriteString("#gt;")
		case '`':
			b.WriteString("#96;")
		case '|':
			b.WriteString("#124;")
		case '\n':
			b.WriteString("<br/>")
		case '\r', '\t':
			b.WriteString(" ")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Dot renders d as a Graphviz digraph. Loop edges are bold, parallel branches and map bodies
// dashed, the start step has a thick border and is reached from a small "start" point.
func Dot(d *Definition) string {
	g := buildGraph(d)
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote(g.title))
	b.WriteString("  rankdir=TB;\n")
	b.WriteString("  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n")
	b.WriteString("  edge [fontname=\"Helvetica\", fontsize=10];\n")
	if g.start != "" {
		b.WriteString("  entry [label=\"start\", shape=circle, style=filled, fillcolor=black, fontcolor=white, fontsize=8, width=0.4, fixedsize=true];\n")
	}
	for _, n := range g.nodes {
		attrs := []string{"label=" + dotQuote(strings.Join(n.lines, "\n"))}
		switch n.shape {
		case shapeDiamond:
			attrs = append(attrs, "shape=diamond", `style=""`)
		case shapeFanout:
			attrs = append(attrs, "shape=parallelogram", `style=""`)
		case shapeSubroutine:
			if n.class == "file" {
				attrs = append(attrs, "shape=box", "peripheries=2", "style=dashed")
			} else {
				attrs = append(attrs, "shape=box", "peripheries=2", `style=""`)
			}
		case shapeWait:
			attrs = append(attrs, "shape=hexagon", `style=""`)
		case shapeEnd:
			fill := "#e8f5e9"
			if n.class == "failed" {
				fill = "#ffebee"
			}
			attrs = append(attrs, `style="rounded,filled"`, "fillcolor="+dotQuote(fill))
		case shapeMissing:
			attrs = append(attrs, "style=dotted")
		}
		if n.start {
			attrs = append(attrs, "penwidth=2.5")
		}
		fmt.Fprintf(&b, "  %s [%s];\n", n.name, strings.Join(attrs, ", "))
	}
	for _, e := range g.edges {
		var attrs []string
		if e.label != "" {
			attrs = append(attrs, "label="+dotQuote(e.label))
		}
		switch e.style {
		case edgeLoop:
			attrs = append(attrs, "style=bold", "color=\"#1565c0\"", "constraint=false")
		case edgeChild:
			attrs = append(attrs, "style=dashed", "arrowhead=empty")
		}
		if len(attrs) == 0 {
			fmt.Fprintf(&b, "  %s -> %s;\n", e.from, e.to)
		} else {
			fmt.Fprintf(&b, "  %s -> %s [%s];\n", e.from, e.to, strings.Join(attrs, ", "))
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// dotQuote returns s as a DOT double-quoted string: backslashes and quotes escaped, line breaks
// written as \n (a centred line break in a label).
func dotQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\r', '\t':
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// oneLine flattens s for a single-line comment.
func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}
