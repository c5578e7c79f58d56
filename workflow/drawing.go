package workflow

// Drawing is a definition's graph as data, for a program that draws it itself (the console):
// the same nodes and edges as Mermaid and Dot, with each step node naming its step.
type Drawing struct {
	// Start is the node of the start step ("" when there is none).
	Start string        `json:"start"`
	Nodes []DrawingNode `json:"nodes"`
	Edges []DrawingEdge `json:"edges"`
}

// DrawingNode is one node: a step (Step is its id), a workflow file, or a reference to a step
// that does not exist.
type DrawingNode struct {
	ID    string   `json:"id"`             // s0, s1, ... in step order; f0, ... files; x0, ... missing steps
	Step  string   `json:"step,omitempty"` // the step's id; "" for a file or a missing step
	Type  string   `json:"type,omitempty"` // the step's type
	Lines []string `json:"lines"`          // the label, a line each: id, then what it runs
	Class string   `json:"class,omitempty"`
}

// DrawingEdge is one edge: Kind "edge" (of the workflow), "loop" (a loop edge, Label naming its
// bound) or "child" (a parallel branch, a map body, an agent's tool run as a sub-run).
type DrawingEdge struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Label string `json:"label,omitempty"`
	Kind  string `json:"kind"`
	// Branch numbers the child edges of a parallel step from 1, in the order of its branches:
	// a run keeps branch N's step under the key PARENT#(N-1), which is how the console colours
	// each branch's node with its own status. 0 on every other edge.
	Branch int `json:"branch,omitempty"`
}

// Draw returns the drawing of d; it tolerates invalid definitions as Mermaid does.
func Draw(d *Definition) Drawing {
	g := buildGraph(d)
	dr := Drawing{Start: g.start, Nodes: make([]DrawingNode, 0, len(g.nodes)), Edges: make([]DrawingEdge, 0, len(g.edges))}
	for i, n := range g.nodes {
		dn := DrawingNode{ID: n.name, Lines: n.lines, Class: n.class}
		if i < len(d.Steps) {
			dn.Step, dn.Type = d.Steps[i].ID, string(d.Steps[i].Type)
		}
		dr.Nodes = append(dr.Nodes, dn)
	}
	for _, e := range g.edges {
		kind := "edge"
		switch e.style {
		case edgeEntry:
			continue // Start says it
		case edgeLoop:
			kind = "loop"
		case edgeChild:
			kind = "child"
		}
		dr.Edges = append(dr.Edges, DrawingEdge{From: e.from, To: e.to, Label: e.label, Kind: kind, Branch: e.branch})
	}
	return dr
}
