package workflow_test

import (
	"slices"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/workflow"
)

// asking is a definition that asks, for the bound under test, for n (or d, a tool's timeout),
// and for every other bound for what its cap allows at least.
func asking(key string, n int, d time.Duration) *workflow.Definition {
	def := &workflow.Definition{Name: "wf", MaxSteps: 1, Tools: map[string]workflow.ToolDef{}}
	switch key {
	case "max_steps":
		def.MaxSteps = n
	case "steps[0].max_iterations":
		def.Steps = []workflow.Step{{ID: "l", Type: workflow.AgentLoop, MaxIterations: n}}
	case "edges[0].max_iterations":
		def.Edges = []workflow.Edge{{From: "b", To: "a", MaxIterations: n}}
	case "tools.t.timeout":
		def.Tools["t"] = workflow.ToolDef{Timeout: clock.Duration(d)}
	}
	return def
}

// TestBoundsZeroMeansDefault: a field of Bounds at 0 caps at the default of a server whose
// operator sets none, a negative one caps nothing, a positive one caps at itself.
func TestBoundsZeroMeansDefault(t *testing.T) {
	const huge = 1 << 31
	for _, tc := range []struct {
		name   string
		bounds workflow.Bounds
		key    string
		asked  int
		askedD time.Duration
		over   bool
	}{
		{"steps 0: the default allowed", workflow.Bounds{}, "max_steps", workflow.DefaultBoundSteps, 0, false},
		{"steps 0: past the default refused", workflow.Bounds{}, "max_steps", workflow.DefaultBoundSteps + 1, 0, true},
		{"steps negative: no cap", workflow.Bounds{Steps: -1}, "max_steps", huge, 0, false},
		{"steps set: its cap", workflow.Bounds{Steps: 50}, "max_steps", 51, 0, true},
		{"agent 0: the default allowed", workflow.Bounds{}, "steps[0].max_iterations", workflow.DefaultBoundAgentIterations, 0, false},
		{"agent 0: past the default refused", workflow.Bounds{}, "steps[0].max_iterations", workflow.DefaultBoundAgentIterations + 1, 0, true},
		{"agent negative: no cap", workflow.Bounds{AgentIterations: -1}, "steps[0].max_iterations", huge, 0, false},
		{"agent set: its cap", workflow.Bounds{AgentIterations: 5}, "steps[0].max_iterations", 6, 0, true},
		{"loop 0: the default allowed", workflow.Bounds{}, "edges[0].max_iterations", workflow.DefaultBoundLoopIterations, 0, false},
		{"loop 0: past the default refused", workflow.Bounds{}, "edges[0].max_iterations", workflow.DefaultBoundLoopIterations + 1, 0, true},
		{"loop negative: no cap", workflow.Bounds{LoopIterations: -1}, "edges[0].max_iterations", huge, 0, false},
		{"loop set: its cap", workflow.Bounds{LoopIterations: 3}, "edges[0].max_iterations", 4, 0, true},
		{"tool timeout 0: the default allowed", workflow.Bounds{}, "tools.t.timeout", 0, workflow.DefaultBoundToolTimeout, false},
		{"tool timeout 0: past the default refused", workflow.Bounds{}, "tools.t.timeout", 0, workflow.DefaultBoundToolTimeout + time.Second, true},
		{"tool timeout negative: no cap", workflow.Bounds{ToolTimeout: -1}, "tools.t.timeout", 0, 1000 * time.Hour, false},
		{"tool timeout set: its cap", workflow.Bounds{ToolTimeout: time.Minute}, "tools.t.timeout", 0, 2 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := workflow.CheckBounds(asking(tc.key, tc.asked, tc.askedD), tc.bounds)
			over := slices.ContainsFunc(ps, func(p workflow.Problem) bool { return p.Code == workflow.EOverLimit && p.Key == tc.key })
			if over != tc.over || len(ps) > 1 {
				t.Errorf("CheckBounds: %v; want a problem at %s: %t, and none elsewhere", ps, tc.key, tc.over)
			}
		})
	}
}
