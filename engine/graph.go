package engine

import (
	"sync"

	"github.com/reins-run/reins/workflow"
)

// graph indexes a definition for one decision: steps by id, edges by source and target.
type graph struct {
	def   *workflow.Definition
	steps map[string]*workflow.Step
	// out lists every edge from a step; in lists the non-loop edges into it. Both hold edge
	// indexes in declaration order.
	out map[string][]int
	in  map[string][]int
	// childOnly marks the steps that only ever run as a parallel branch, a map body or the
	// sub-run of an agent tool's call: no edge leads to them and they are not the start step. They get no StepRun of their own, and
	// their outgoing edges are dead from the start (a child's edges are never followed).
	childOnly map[string]bool
	// What it was built from (builtFrom).
	start   string
	stepsAt []workflow.Step
	edgesAt []workflow.Edge
}

// graphs keeps the graph of each definition decided lately: a shell decides every event of a
// run with the same definition (its bundle's, decoded once), and building the graph was seven
// allocations per decision. A definition is not changed once built; a graph is used again only
// while its definition's steps, edges and start are the ones it was built from (a definition
// changed in place gets a graph of its own), and the memo is emptied past graphsKept.
var graphs struct {
	m sync.Map // *workflow.Definition → *graph
	n sync.Mutex
	k int // entries stored since the last emptying
}

const graphsKept = 1024

// graphOf is newGraph(def), built once per definition.
func graphOf(def *workflow.Definition) *graph {
	if v, ok := graphs.m.Load(def); ok {
		if g := v.(*graph); g.builtFrom(def) {
			return g
		}
	}
	g := newGraph(def)
	graphs.n.Lock()
	if graphs.k++; graphs.k > graphsKept {
		graphs.m.Clear()
		graphs.k = 1
	}
	graphs.m.Store(def, g)
	graphs.n.Unlock()
	return g
}

// builtFrom reports whether g was built from def as it is now: the same start, and the same
// arrays of steps and edges.
func (g *graph) builtFrom(def *workflow.Definition) bool {
	return g.start == def.Start && len(g.stepsAt) == len(def.Steps) && len(g.edgesAt) == len(def.Edges) &&
		(len(def.Steps) == 0 || &g.stepsAt[0] == &def.Steps[0]) && (len(def.Edges) == 0 || &g.edgesAt[0] == &def.Edges[0])
}

func newGraph(def *workflow.Definition) *graph {
	g := &graph{
		def:       def,
		start:     def.Start,
		stepsAt:   def.Steps,
		edgesAt:   def.Edges,
		steps:     make(map[string]*workflow.Step, len(def.Steps)),
		out:       map[string][]int{},
		in:        map[string][]int{},
		childOnly: map[string]bool{},
	}
	for i := range def.Steps {
		s := &def.Steps[i]
		if _, dup := g.steps[s.ID]; !dup {
			g.steps[s.ID] = s
		}
	}
	incoming := map[string]bool{}
	for i, e := range def.Edges {
		g.out[e.From] = append(g.out[e.From], i)
		incoming[e.To] = true
		if !e.IsLoop() {
			g.in[e.To] = append(g.in[e.To], i)
		}
	}
	children := def.ToolAgents() // they run as the sub-runs of agent steps' calls
	for i := range def.Steps {
		children = append(children, def.Steps[i].Children()...)
	}
	for _, c := range children {
		if !incoming[c] && c != def.Start {
			g.childOnly[c] = true
		}
	}
	return g
}

// region lists the steps reachable from u through non-loop edges, u first: what a loop edge
// into u runs again.
func (g *graph) region(u string) []string {
	seen := map[string]bool{u: true}
	order := []string{u}
	for k := 0; k < len(order); k++ {
		for _, i := range g.out[order[k]] {
			e := g.def.Edges[i]
			if e.IsLoop() || seen[e.To] {
				continue
			}
			seen[e.To] = true
			order = append(order, e.To)
		}
	}
	return order
}

// dispatched reports whether steps of type t run as tasks on workers.
func dispatched(t workflow.StepType) bool {
	switch t {
	case workflow.Task, workflow.AgentLoop, workflow.LLM, workflow.Agent:
		return true
	}
	return false
}

// iterates reports whether steps of type t may ask for another iteration.
func iterates(t workflow.StepType) bool {
	return t == workflow.AgentLoop || t == workflow.Agent
}
