package workflow

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/reins-run/reins/loop"
)

// EOverLimit: a workflow asks for more than a server's operator allows a run (a loop edge's or
// an agent's iterations, max_steps, a tool's timeout): the problem names the operator's key and
// its cap.
const EOverLimit Code = "E_OVER_LIMIT"

// Bounds are the caps a server's operator puts on what a submitted workflow may ask for
// (the operator's [limits]); 0 leaves a cap out. A workflow may ask for less, never more.
type Bounds struct {
	// LoopIterations caps a loop edge's max_iterations (limits.max_loop_iterations).
	LoopIterations int
	// AgentIterations caps an agent_loop step's max_iterations and an agent step's
	// budget.max_iterations, the default of 10 when it leaves it out (limits.max_agent_iterations).
	AgentIterations int
	// Steps caps max_steps, the default of 10000 when the workflow leaves it out
	// (limits.max_steps).
	Steps int
	// ToolTimeout caps a tool's timeout (limits.max_tool_timeout); 0: no cap.
	ToolTimeout time.Duration
}

// CheckBounds reports what d asks for beyond b (E_OVER_LIMIT), one problem per key, each naming
// the operator's key and its cap. Values a workflow leaves out count as their defaults: a cap
// below a default refuses the workflows that rely on it, which must then state a lower value.
func CheckBounds(d *Definition, b Bounds) Problems {
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
