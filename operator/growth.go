package operator

import "github.com/reins-run/reins/workflow"

// Growth bounds how far a run may grow on a server (the [limits] keys below): what a
// submitted workflow may ask for, refused at registration and again when a run starts
// ([workflow.EOverLimit]), and what a run may take while it runs, which the engine enforces
// (package engine: the shell gives every run they start its limits). A workflow may ask for less, never more.
// A field at 0 takes its default ([DefaultGrowth]) and a negative one leaves that bound out, in
// the submission check ([workflow.Bounds]) and in the engine (runner.Config.Limits) alike.
type Growth struct {
	// MaxLoopIterations caps a loop edge's max_iterations (max_loop_iterations).
	MaxLoopIterations int
	// MaxAgentIterations caps an agent_loop step's max_iterations and an agent step's
	// budget.max_iterations (max_agent_iterations).
	MaxAgentIterations int
	// MaxSteps caps a workflow's max_steps (max_steps).
	MaxSteps int
	// MaxSignalsPerRun is the most signals a run takes; later ones are refused
	// (max_signals_per_run).
	MaxSignalsPerRun int
	// MaxEventsPerRun is the most events a run takes: the run that reaches it ends failed
	// with E_MAX_EVENTS (max_events_per_run).
	MaxEventsPerRun int
}

// Defaults of the growth limits: generous for a workflow written by hand, finite for one
// written to grow. An agent_loop that watches something with a loop_delay may run for days,
// an iteration (and a few events) at a time: its bounds are the largest.
const (
	DefaultMaxLoopIterations  = workflow.DefaultBoundLoopIterations
	DefaultMaxAgentIterations = workflow.DefaultBoundAgentIterations
	DefaultMaxSteps           = workflow.DefaultBoundSteps
	DefaultMaxSignalsPerRun   = 1000
	DefaultMaxEventsPerRun    = 10000000
)

// DefaultGrowth returns the growth limits of a server whose operator sets none.
func DefaultGrowth() Growth {
	return Growth{MaxLoopIterations: DefaultMaxLoopIterations, MaxAgentIterations: DefaultMaxAgentIterations,
		MaxSteps: DefaultMaxSteps, MaxSignalsPerRun: DefaultMaxSignalsPerRun, MaxEventsPerRun: DefaultMaxEventsPerRun}
}

// growthKeys are the [limits] keys of Growth, in the order problems name them.
var growthKeys = []string{"max_loop_iterations", "max_agent_iterations", "max_steps", "max_signals_per_run", "max_events_per_run"}

// maxGrowth is the largest value a growth limit takes: a run's counters are ints of JSON.
const maxGrowth = 1 << 31

// growth reads the growth keys of [limits] table t at key into g: whole numbers from 1.
func (l *loader) growth(key string, t map[string]any, g *Growth) {
	dst := map[string]*int{"max_loop_iterations": &g.MaxLoopIterations, "max_agent_iterations": &g.MaxAgentIterations,
		"max_steps": &g.MaxSteps, "max_signals_per_run": &g.MaxSignalsPerRun, "max_events_per_run": &g.MaxEventsPerRun}
	for _, k := range growthKeys {
		switch x := t[k].(type) {
		case nil:
		case int64:
			if x <= 0 || x > maxGrowth {
				l.add(key+"."+k, "want a whole number from 1 to %d (leave the key out for the default of %d)", maxGrowth, defaultOf(k))
			} else {
				*dst[k] = int(x)
			}
		default:
			l.add(key+"."+k, "want a whole number from 1 to %d", maxGrowth)
		}
	}
}

// defaultOf is the default of the growth key k.
func defaultOf(k string) int {
	d := DefaultGrowth()
	return map[string]int{"max_loop_iterations": d.MaxLoopIterations, "max_agent_iterations": d.MaxAgentIterations,
		"max_steps": d.MaxSteps, "max_signals_per_run": d.MaxSignalsPerRun, "max_events_per_run": d.MaxEventsPerRun}[k]
}

// Bounds are the caps of g on what a submitted workflow asks for ([CheckWorkflow]).
func (g Growth) Bounds() workflow.Bounds {
	return workflow.Bounds{LoopIterations: g.MaxLoopIterations, AgentIterations: g.MaxAgentIterations, Steps: g.MaxSteps}
}
