package agent

import (
	"context"
	"iter"
	"slices"
)

// Sequential runs its sub-agents once, in order. It ends completed after the last one, or with
// whatever ends a sub-agent early (an escalation to an enclosing loop, an error, a budget).
type Sequential struct {
	name string
	subs []Agent
}

// NewSequential returns a Sequential agent named name running subs in order.
func NewSequential(name string, subs ...Agent) *Sequential {
	return &Sequential{name: name, subs: slices.Clone(subs)}
}

// Name returns the agent's name.
func (a *Sequential) Name() string { return a.name }

// SubAgents returns the sub-agents in order.
func (a *Sequential) SubAgents() []Agent { return slices.Clone(a.subs) }

// Run runs the agent as the root of a composition: see Run.
func (a *Sequential) Run(ctx context.Context, s *Session) iter.Seq2[Event, error] {
	return Run(ctx, a, s)
}

// Loop runs its sub-agents in order, again and again: at most MaxIterations times, or, when
// MaxIterations is 0, until an escalation ends it. Either way the run's Budget bounds it, so a
// loop is never unbounded.
type Loop struct {
	name          string
	maxIterations int
	subs          []Agent
}

// NewLoop returns a Loop agent named name running subs in order at most maxIterations times
// (0: until an escalation or a budget ends it).
func NewLoop(name string, maxIterations int, subs ...Agent) *Loop {
	return &Loop{name: name, maxIterations: maxIterations, subs: slices.Clone(subs)}
}

// Name returns the agent's name.
func (a *Loop) Name() string { return a.name }

// MaxIterations returns the loop's bound on its iterations (0: none of its own).
func (a *Loop) MaxIterations() int { return a.maxIterations }

// SubAgents returns the sub-agents in order.
func (a *Loop) SubAgents() []Agent { return slices.Clone(a.subs) }

// Run runs the agent as the root of a composition: see Run.
func (a *Loop) Run(ctx context.Context, s *Session) iter.Seq2[Event, error] {
	return Run(ctx, a, s)
}

// Parallel runs its sub-agents (branches) concurrently. Each branch sees the state as it was
// when the Parallel began plus its own writes; when every branch has ended, their writes are
// merged into the state in declaration order, so that a later branch's write of a key wins
// whatever the timing. Events interleave as they happen, each with its author.
type Parallel struct {
	name string
	subs []Agent
}

// NewParallel returns a Parallel agent named name running subs concurrently.
func NewParallel(name string, subs ...Agent) *Parallel {
	return &Parallel{name: name, subs: slices.Clone(subs)}
}

// Name returns the agent's name.
func (a *Parallel) Name() string { return a.name }

// SubAgents returns the branches in declaration order.
func (a *Parallel) SubAgents() []Agent { return slices.Clone(a.subs) }

// Run runs the agent as the root of a composition: see Run.
func (a *Parallel) Run(ctx context.Context, s *Session) iter.Seq2[Event, error] {
	return Run(ctx, a, s)
}
