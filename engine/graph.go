package engine

import "github.com/reins-run/reins/workflow"

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
}

func newGraph(def *workflow.Definition) *graph {
	g := &graph{
		def:       def,
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
