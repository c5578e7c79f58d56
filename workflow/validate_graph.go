package workflow

import (
	"strconv"
	"strings"
)

// valMaxCycles bounds the cycles reported for one definition: past it, one more problem says how
// many back edges were left out, so that a pathological graph cannot make validation quadratic.
const valMaxCycles = 100

// valArc is an arc of the step graph: an edge, or the link from a parallel step to a branch
// step or from a map step to its body step (never a loop).
type valArc struct {
	to   int
	loop bool
	edge int // the index of the edge in Definition.Edges; -1 for a link to a branch or body
}

// checkGraph reports cycles that do not pass through a loop edge and steps unreachable from
// the step at index start (-1: none could be determined, reachability is not checked). Nodes
// are the first declarations of step ids; references to unknown steps are left out (they are
// reported on their own).
func (v *validator) checkGraph(start int) {
	d := v.d
	n := len(d.Steps)
	node := make([]bool, n) // the first declaration of a non-empty id
	for _, i := range v.ids {
		node[i] = true
	}
	adj := make([][]valArc, n)
	link := func(from, to string, loop bool, edge int) {
		i, ok1 := v.ids[from]
		j, ok2 := v.ids[to]
		if ok1 && ok2 {
			adj[i] = append(adj[i], valArc{to: j, loop: loop, edge: edge})
		}
	}
	for k, e := range d.Edges {
		link(e.From, e.To, e.IsLoop(), k)
	}
	for i := range d.Steps {
		s := &d.Steps[i]
		if !node[i] {
			continue
		}
		// As in Roots: branches of any step (only parallel steps may have them, which is
		// reported on its own), the body of a map step.
		for _, c := range s.Children() {
			link(s.ID, c, false, -1)
		}
	}
	v.checkCycles(node, adj)
	if start >= 0 {
		v.checkReachable(start, node, adj, v.toolArcs())
		v.checkBound(start, node, adj)
	}
}

// valIndegrees counts the edges into each step, loop edges left out.
func valIndegrees(adj [][]valArc) []int {
	indeg := make([]int, len(adj))
	for u := range adj {
		for _, a := range adj[u] {
			if !a.loop {
				indeg[a.to]++
			}
		}
	}
	return indeg
}

// checkCycles runs Kahn's algorithm over the graph without loop edges; the steps it cannot
// remove lie on or after a cycle. A depth-first search among them finds a cycle for each back
// edge, reported once each, in edge order from its earliest-declared step.
func (v *validator) checkCycles(node []bool, adj [][]valArc) {
	n := len(node)
	indeg := valIndegrees(adj)
	queue := make([]int, 0, n)
	for u := range n {
		if node[u] && indeg[u] == 0 {
			queue = append(queue, u)
		}
	}
	removed := 0
	for len(queue) > 0 {
		u := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		removed++
		for _, a := range adj[u] {
			if a.loop {
				continue
			}
			if indeg[a.to]--; indeg[a.to] == 0 {
				queue = append(queue, a.to)
			}
		}
	}
	if removed == len(v.ids) {
		return
	}

	// Depth-first search over the remaining steps (indeg > 0), without loop edges.
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, n)
	pos := make([]int, n) // index in path of a grey step
	type frame struct{ u, next int }
	var (
		stack    []frame
		path     []int
		seen     = map[string]bool{}
		reported = 0
		omitted  = 0
		firstOff = -1
	)
	for root := range n {
		if !node[root] || indeg[root] == 0 || color[root] != white {
			continue
		}
		color[root] = grey
		pos[root] = 0
		path = append(path[:0], root)
		stack = append(stack[:0], frame{u: root})
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			if f.next == len(adj[f.u]) {
				color[f.u] = black
				stack = stack[:len(stack)-1]
				path = path[:len(path)-1]
				continue
			}
			a := adj[f.u][f.next]
			f.next++
			if a.loop || indeg[a.to] == 0 {
				continue
			}
			switch color[a.to] {
			case white:
				color[a.to] = grey
				pos[a.to] = len(path)
				path = append(path, a.to)
				stack = append(stack, frame{u: a.to})
			case grey:
				if reported == valMaxCycles {
					omitted++
					if firstOff < 0 {
						firstOff = a.to
					}
					continue
				}
				if v.reportCycle(path[pos[a.to]:], seen) {
					reported++
				}
			}
		}
	}
	if omitted > 0 {
		v.add(ECycle, valStepKey(firstOff, ""), "%d more edges close cycles that do not pass through a loop edge (not listed: fix the cycles above and validate again)", omitted)
	}
}

// reportCycle reports the cycle through steps cyc (in edge order, the last one leading back to
// the first) unless the same cycle was reported already; it says whether it reported it.
func (v *validator) reportCycle(cyc []int, seen map[string]bool) bool {
	first := 0
	for k, u := range cyc {
		if u < cyc[first] {
			first = k
		}
	}
	order := make([]int, 0, len(cyc)+1)
	order = append(order, cyc[first:]...)
	order = append(order, cyc[:first]...)
	var sig strings.Builder
	for _, u := range order {
		sig.WriteString(strconv.Itoa(u))
		sig.WriteByte(',')
	}
	if seen[sig.String()] {
		return false
	}
	seen[sig.String()] = true
	names := make([]string, 0, len(order)+1)
	for _, u := range order {
		names = append(names, v.d.Steps[u].ID)
	}
	names = append(names, names[0])
	v.add(ECycle, valStepKey(order[0], ""), "steps %s form a cycle that does not pass through a loop edge: make one of its edges a loop edge with max_iterations", strings.Join(names, " → "))
	return true
}

// checkReachable reports the steps that no path from start reaches, following every edge (loop
// edges included), from parallel and map steps to their branch and body steps, and from agent
// steps to the steps their agent tools run (tools).
func (v *validator) checkReachable(start int, node []bool, adj [][]valArc, tools [][]int) {
	reached := make([]bool, len(node))
	reached[start] = true
	queue := []int{start}
	visit := func(to int) {
		if !reached[to] {
			reached[to] = true
			queue = append(queue, to)
		}
	}
	for len(queue) > 0 {
		u := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, a := range adj[u] {
			visit(a.to)
		}
		for _, to := range tools[u] {
			visit(to)
		}
	}
	startID := v.d.Steps[start].ID
	for i := range node {
		if node[i] && !reached[i] {
			v.add(EUnreachable, valStepKey(i, ""), "step %q is not reachable from the start step %q: connect it with an edge or remove it", v.d.Steps[i].ID, startID)
		}
	}
}
