package agent

import (
	"fmt"
	"regexp"
)

// kind is what the runtime knows of an agent: a composite it steps through, or a leaf it calls.
type kind int

const (
	kindLeaf kind = iota
	kindSequential
	kindLoop
	kindParallel
)

func (k kind) String() string {
	return [...]string{"leaf", "sequential", "loop", "parallel"}[k]
}

// node is one agent of a compiled composition.
type node struct {
	agent   Agent
	kind    kind
	name    string
	path    string // root/…/name: names are unique, but paths say where an event comes from
	parent  *node
	subs    []*node
	maxIter int // loops
}

// tree is a compiled composition: its nodes by path and by name.
type tree struct {
	root   *node
	byPath map[string]*node
	byName map[string]*node
}

// validName is what a name may hold: names become parts of paths (joined by '/') and of loop run
// ids, so they stay plain.
var validName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Validate checks a composition: every agent has a valid name, unique in the composition, every
// composite has at least one sub-agent, and no loop has a negative MaxIterations. Run and Handler
// check the same; Validate lets a program fail at start.
func Validate(a Agent) error {
	_, err := compile(a)
	return err
}

// compile checks a and indexes its nodes.
func compile(a Agent) (*tree, error) {
	t := &tree{byPath: map[string]*node{}, byName: map[string]*node{}}
	root, err := t.add(a, nil)
	if err != nil {
		return nil, err
	}
	t.root = root
	return t, nil
}

// add compiles a under parent, depth first.
func (t *tree) add(a Agent, parent *node) (*node, error) {
	if a == nil {
		where := "the root"
		if parent != nil {
			where = fmt.Sprintf("a sub-agent of %q", parent.name)
		}
		return nil, fmt.Errorf("%w: %s is nil", ErrComposition, where)
	}
	n := &node{agent: a, name: a.Name(), parent: parent}
	if !validName.MatchString(n.name) {
		return nil, fmt.Errorf("%w: agent name %q is not valid: use letters, digits, '_', '-' and '.'", ErrComposition, n.name)
	}
	if _, dup := t.byName[n.name]; dup {
		return nil, fmt.Errorf("%w: two agents are named %q: names must be unique in a composition", ErrComposition, n.name)
	}
	n.path = n.name
	if parent != nil {
		n.path = parent.path + "/" + n.name
	}
	t.byName[n.name] = n
	t.byPath[n.path] = n
	var subs []Agent
	switch c := a.(type) {
	case *Sequential:
		n.kind, subs = kindSequential, c.subs
	case *Loop:
		n.kind, subs, n.maxIter = kindLoop, c.subs, c.maxIterations
		if c.maxIterations < 0 {
			return nil, fmt.Errorf("%w: loop %q has MaxIterations %d: want 0 (until an escalation) or more", ErrComposition, n.name, c.maxIterations)
		}
	case *Parallel:
		n.kind, subs = kindParallel, c.subs
	default:
		return n, nil
	}
	// An empty composite would let a loop iterate without running a leaf, which no turn budget
	// could bound.
	if len(subs) == 0 {
		return nil, fmt.Errorf("%w: %s agent %q has no sub-agents", ErrComposition, n.kind, n.name)
	}
	for _, sub := range subs {
		child, err := t.add(sub, n)
		if err != nil {
			return nil, err
		}
		n.subs = append(n.subs, child)
	}
	return n, nil
}

// innermostLoop is the closest Loop enclosing n, or nil when none does.
func (n *node) innermostLoop() *node {
	for p := n.parent; p != nil; p = p.parent {
		if p.kind == kindLoop {
			return p
		}
	}
	return nil
}

// encloses reports whether n is an ancestor of d.
func (n *node) encloses(d *node) bool {
	for p := d.parent; p != nil; p = p.parent {
		if p == n {
			return true
		}
	}
	return false
}

// target resolves the loop an escalation by leaf ends: the named one, or the innermost enclosing
// one; nil means the run itself (no loop encloses the leaf).
func (t *tree) target(leaf *node, name string) (*node, error) {
	if name == "" {
		return leaf.innermostLoop(), nil
	}
	n, ok := t.byName[name]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: agent %q escalated to %q, which is not an agent of this composition", ErrComposition, leaf.name, name)
	case n.kind != kindLoop:
		return nil, fmt.Errorf("%w: agent %q escalated to %q, which is a %s agent, not a loop", ErrComposition, leaf.name, name, n.kind)
	case !n.encloses(leaf):
		return nil, fmt.Errorf("%w: agent %q escalated to loop %q, which does not enclose it", ErrComposition, leaf.name, name)
	}
	return n, nil
}
