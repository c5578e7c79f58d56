package workflow

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/reins-run/reins/internal/defaults"
	"github.com/reins-run/reins/loop"
)

// EOverLimit: a workflow asks for more than a server's operator allows a run (a loop edge's or
// an agent's iterations, max_steps, a tool's timeout): the problem names the operator's key and
// its cap.
const EOverLimit Code = "E_OVER_LIMIT"

// Bounds are the caps a server's operator puts on what a submitted workflow may ask for
// (the operator's [limits]). A field at 0 takes its default, the cap of a server whose
// operator sets none ([DefaultBoundLoopIterations] and the others: operator.Default has the
// same); a negative field leaves that cap out. A workflow may ask for less, never more.
type Bounds struct {
	// LoopIterations caps a loop edge's max_iterations (limits.max_loop_iterations).
	LoopIterations int
	// AgentIterations caps an agent_loop step's max_iterations and an agent step's
	// budget.max_iterations, the default of 10 when it leaves it out (limits.max_agent_iterations).
	AgentIterations int
	// Steps caps max_steps, the default of 10000 when the workflow leaves it out
	// (limits.max_steps).
	Steps int
	// ToolTimeout caps a tool's timeout (limits.max_tool_timeout).
	ToolTimeout time.Duration
}

// The caps a field of Bounds left at 0 takes: generous for a workflow written by hand, finite
// for one written to grow (docs/reference/server.md, [limits]).
const (
	DefaultBoundLoopIterations  = 1000
	DefaultBoundAgentIterations = 1000000
	DefaultBoundSteps           = 100000
	DefaultBoundToolTimeout     = time.Hour
)

// withDefaults is b with each field at 0 its default and each negative one 0 (no cap).
func (b Bounds) withDefaults() Bounds {
	b.LoopIterations = defaults.OrNone(b.LoopIterations, DefaultBoundLoopIterations)
	b.AgentIterations = defaults.OrNone(b.AgentIterations, DefaultBoundAgentIterations)
	b.Steps = defaults.OrNone(b.Steps, DefaultBoundSteps)
	b.ToolTimeout = defaults.OrNone(b.ToolTimeout, DefaultBoundToolTimeout)
	return b
}

// CheckBounds reports what d asks for beyond b (E_OVER_LIMIT), one problem per key, each naming
// the operator's key and its cap (a field of b at 0 is its default, a negative one no cap). Values a workflow leaves out count as their defaults: a cap
// below a default refuses the workflows that rely on it, which must then state a lower value.
func CheckBounds(d *Definition, b Bounds) Problems {
	b = b.withDefaults()
	var ps Problems
	over := func(key string, asked, limit int, what, opKey, fix string) {
		if limit <= 0 || asked <= limit {
			return
		}
		p := Problem{Code: EOverLimit, Key: key, Message: fmt.Sprintf("%s asks for %d, more than the server's limits.%s of %d: %s", what, asked, opKey, limit, fix)}
		if d.Source != nil {
			p.File, p.Line = d.Source.File, d.Source.Line(key)
		}
		ps = append(ps, p)
	}
	steps := d.MaxSteps
	if steps == 0 {
		steps = DefaultMaxSteps
	}
	over("max_steps", steps, b.Steps, "the workflow's max_steps", "max_steps", "set a lower max_steps")
	for i, s := range d.Steps {
		switch s.Type {
		case AgentLoop:
			over(valStepKey(i, "max_iterations"), s.MaxIterations, b.AgentIterations, "agent_loop step "+s.ID+"'s max_iterations", "max_agent_iterations", "lower its max_iterations")
		case Agent:
			n := loop.DefaultBudget().MaxIterations
			if s.Budget != nil && s.Budget.MaxIterations > 0 {
				n = s.Budget.MaxIterations
			}
			over(valStepKey(i, "budget.max_iterations"), n, b.AgentIterations, "agent step "+s.ID+"'s budget.max_iterations", "max_agent_iterations", "set a lower budget.max_iterations")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.Tools)) {
		key := "tools." + name + ".timeout"
		if t := d.Tools[name].Timeout.Std(); b.ToolTimeout > 0 && t > b.ToolTimeout {
			p := Problem{Code: EOverLimit, Key: key, Message: fmt.Sprintf("tool %s's timeout asks for %s, more than the server's limits.max_tool_timeout of %s: set a lower timeout", name, t, b.ToolTimeout)}
			if d.Source != nil {
				p.File, p.Line = d.Source.File, d.Source.Line(key)
			}
			ps = append(ps, p)
		}
	}
	for i, e := range d.Edges {
		if e.IsLoop() {
			over(fmt.Sprintf("edges[%d].max_iterations", i), e.MaxIterations, b.LoopIterations, fmt.Sprintf("the loop edge %s → %s", e.From, e.To), "max_loop_iterations", "lower its max_iterations")
		}
	}
	return ps
}
