package workflow

import (
	"fmt"
	"slices"
)

// The bound analysis answers, for every template or path that reads <step>.output, whether that
// output is surely there when the reading step is activated (E_UNBOUND_REF when it may not be,
// unless the template gives a default). It follows the engine's rules (package engine, "Edges"):
//
//   - Outputs are never removed, so what holds on a step's first activation holds on every later
//     one; the analysis is of the first pass, over the graph without loop edges.
//   - A step is activated when one of its incoming edges fired, after all of them are decided
//     (fired or dead): bound(T) is the intersection, over the arcs into T, of what each arc
//     guarantees. An edge from S without when = "error" fires only when S completed:
//     bound(S) + S, plus S's branches when S is a parallel step (it completes when they all
//     did). An "error" edge fires when S failed, with no output: bound(S) only. A branch or map
//     body starts while its parent runs: bound(parent) only.
//   - Fan-in: T waits for every incoming edge to be decided, so the source P of one of them
//     has surely completed before T when P was surely activated and cannot fail without ending
//     the run (it is steady): when a chain of plain edges (no when, not loops) through steady
//     steps leads to P from a steady step already in bound(T). P is added with bound(P), and
//     this is repeated until nothing is added.
//
// A step is steady when completing it fires every plain edge it has and failing it ends the
// run: it has no "error" edge and no loop edge without when (which holds its plain edges back
// while it is unspent), and it is not a branch or map body (whose own edges are never followed).

// boundGraph is the step graph as the bound analysis reads it.
type boundGraph struct {
	n     int
	in    [][]boundArc // the arcs into each step, loop edges left out
	order []int        // a topological order of the steps not on a cycle
	// steady: see above; completes: the branch steps a parallel step's completion implies;
	// sure: sureFrom's memory.
	steady    []bool
	completes [][]int
	sure      []valSet
}

// boundArc is an arc into a step: from step from, by edge edge (an index in Definition.Edges, or
// -1 for the link from a parent to its branch or body); error for an "error" edge, plain for an
// edge without when.
type boundArc struct {
	from, edge   int
	error, plain bool
}

// edgeWhenError is the label of a failed step: its "error" edges are the ones it takes.
const edgeWhenError = "error"

// checkBound reports every read (v.reads) of an output that may not be there yet.
func (v *validator) checkBound(start int, node []bool, adj [][]valArc) {
	if len(v.reads) == 0 {
		return
	}
	g := v.newBoundGraph(node, adj)
	bound := g.solve(start)
	for _, r := range v.reads {
		b := bound[r.step]
		if r.hasDefault || b == nil || (r.of != r.step && b.has(r.of)) {
			continue // a default covers it, the step is not on the first pass, or it is bound
		}
		v.reportUnbound(r)
	}
}

func (v *validator) newBoundGraph(node []bool, adj [][]valArc) *boundGraph {
	n := len(node)
	g := &boundGraph{n: n, in: make([][]boundArc, n), steady: make([]bool, n), completes: make([][]int, n), sure: make([]valSet, n)}
	child := make([]bool, n)
	for u := range n {
		g.steady[u] = node[u]
		for _, a := range adj[u] {
			if a.edge < 0 {
				child[a.to] = true
				if v.d.Steps[u].Type == Parallel {
					g.completes[u] = append(g.completes[u], a.to)
				}
			}
		}
	}
	for u := range n {
		for _, a := range adj[u] {
			var when string
			if a.edge >= 0 {
				when = v.d.Edges[a.edge].When
			}
			if when == edgeWhenError || (a.loop && when == "") || child[u] {
				g.steady[u] = false
			}
			if !a.loop {
				g.in[a.to] = append(g.in[a.to], boundArc{from: u, edge: a.edge, error: when == edgeWhenError, plain: a.edge >= 0 && when == ""})
			}
		}
	}
	g.order = valTopoOrder(node, adj)
	return g
}

// valTopoOrder orders the steps so that every non-loop arc goes forward (Kahn's algorithm);
// steps on or after a cycle are left out (E_CYCLE reports them).
func valTopoOrder(node []bool, adj [][]valArc) []int {
	indeg := valIndegrees(adj)
	var order []int
	for u := range node {
		if node[u] && indeg[u] == 0 {
			order = append(order, u)
		}
	}
	for k := 0; k < len(order); k++ {
		for _, a := range adj[order[k]] {
			if !a.loop {
				if indeg[a.to]--; indeg[a.to] == 0 {
					order = append(order, a.to)
				}
			}
		}
	}
	return order
}

// solve returns, for each step, the steps whose output is surely there when it is activated;
// nil for a step the first pass does not reach from start.
func (g *boundGraph) solve(start int) []valSet {
	bound := make([]valSet, g.n)
	bound[start] = newValSet(g.n) // nothing ran before the start step
	for _, u := range g.order {
		if u == start {
			continue
		}
		var b valSet
		for _, a := range g.in[u] {
			c := g.guarantee(a, bound)
			if b == nil {
				b = c
			} else {
				b.intersect(c)
			}
		}
		if b != nil && g.joins(u) {
			g.fanIn(u, b, bound)
		}
		bound[u] = b
	}
	return bound
}

// joins reports whether u waits for edges from more than one step (a branch or map body waits
// for none: its parent starts it).
func (g *boundGraph) joins(u int) bool {
	if slices.ContainsFunc(g.in[u], func(a boundArc) bool { return a.edge < 0 }) {
		return false
	}
	return slices.ContainsFunc(g.in[u], func(a boundArc) bool { return a.from != g.in[u][0].from })
}

// guarantee is what arc a guarantees when it activates its step: a new set.
func (g *boundGraph) guarantee(a boundArc, bound []valSet) valSet {
	c := newValSet(g.n)
	if b := bound[a.from]; b != nil { // else a step the first pass does not reach: only itself
		c.union(b)
	}
	if a.edge >= 0 && !a.error {
		g.addCompleted(c, a.from, bound)
	}
	return c
}

// addCompleted adds to c step p, which completed, and what its completion implies.
func (g *boundGraph) addCompleted(c valSet, p int, bound []valSet) {
	if b := bound[p]; b != nil {
		c.union(b)
	}
	c.with(p)
	for _, br := range g.completes[p] {
		c.with(br)
	}
}

// fanIn adds to b, the bound of step u, the sources of u's edges that surely completed before
// u, which waits for them: the steady ones that a steady step in b surely leads to.
func (g *boundGraph) fanIn(u int, b valSet, bound []valSet) {
	for added := true; added; {
		added = false
		for _, a := range g.in[u] {
			p := a.from
			if a.edge < 0 || b.has(p) || !g.steady[p] || !g.sureFrom(p).meets(b) {
				continue
			}
			g.addCompleted(b, p, bound)
			added = true
		}
	}
}

// sureFrom returns the steps whose completion surely leads to steady step x's: x, and those of
// every steady step with a plain edge to x. It is computed once per step, when first asked.
func (g *boundGraph) sureFrom(x int) valSet {
	if s := g.sure[x]; s != nil {
		return s
	}
	s := newValSet(g.n).with(x)
	g.sure[x] = s // an arc back to x would be a cycle, which order leaves out: no recursion on x
	for _, a := range g.in[x] {
		if a.plain && g.steady[a.from] {
			s.union(g.sureFrom(a.from))
		}
	}
	return s
}

// reportUnbound reports read r, with the fix that fits it.
func (v *validator) reportUnbound(r stepRead) {
	of := v.d.Steps[r.of].ID
	var hint string
	switch r.what {
	case "template":
		hint = fmt.Sprintf("give the template a default, {{%s ?? \"...\"}}", r.path)
	case "items":
		hint = "read it where " + of + " has always run before (items take no default)"
	default: // expr, or an input written as a bare path
		hint = fmt.Sprintf("write it with a default, {{%s ?? \"...\"}}", r.path)
	}
	what := r.path
	if r.what == "template" {
		what = "{{" + r.path + "}}"
	}
	where := valLastPart(r.key)
	switch {
	case r.of == r.step:
		v.add(EUnboundRef, r.key, "step %s reads %s in %s, its own output, which its first activation does not have: %s", r.name, what, where, hint)
	case slices.Contains(v.d.Steps[r.of].Children(), v.d.Steps[r.step].ID):
		v.add(EUnboundRef, r.key, "step %s reads %s in %s, but it runs as a branch of step %s, which has no output until its branches end: %s", r.name, what, where, of, hint)
	default:
		v.add(EUnboundRef, r.key, "step %s reads %s in %s, but step %s may not have run by then (a path from start skips it, or this is the first pass of a loop): %s", r.name, what, where, of, hint)
	}
}

// valSet is a set of step indexes.
type valSet []uint64

func newValSet(n int) valSet       { return make(valSet, (n+63)/64) }
func (s valSet) with(i int) valSet { s[i/64] |= 1 << (i % 64); return s }
func (s valSet) has(i int) bool    { return s[i/64]&(1<<(i%64)) != 0 }
func (s valSet) intersect(o valSet) {
	for i := range s {
		s[i] &= o[i]
	}
}
func (s valSet) meets(o valSet) bool {
	for i := range s {
		if s[i]&o[i] != 0 {
			return true
		}
	}
	return false
}
func (s valSet) union(o valSet) {
	for i := range s {
		s[i] |= o[i]
	}
}
