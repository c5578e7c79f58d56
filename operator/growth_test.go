package operator_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/workflow"
)

// TestGrowthLimits: the growth keys of [limits] load, each left out keeps its default, and a
// configuration without [limits] has the defaults.
func TestGrowthLimits(t *testing.T) {
	if got := operator.Default().Limits.Growth; got != operator.DefaultGrowth() || got.MaxLoopIterations != 1000 || got.MaxEventsPerRun != 10000000 {
		t.Fatalf("defaults: %+v", got)
	}
	cfg, err := operator.Parse("ops.toml", []byte("[limits]\nmax_loop_iterations = 50\nmax_signals_per_run = 3\nmax_input_bytes = \"1MiB\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := operator.DefaultGrowth()
	want.MaxLoopIterations, want.MaxSignalsPerRun = 50, 3
	if cfg.Limits.Growth != want || cfg.Limits.MaxInputBytes != 1<<20 {
		t.Fatalf("limits %+v, want growth %+v", cfg.Limits, want)
	}
	cfg, err = operator.Parse("ops.toml", []byte("[principals.a]\ntoken_env = \"T\"\nroles = [\"viewer\"]\n"))
	if err != nil || cfg.Limits.Growth != operator.DefaultGrowth() {
		t.Fatalf("without [limits]: %+v (%v)", cfg.Limits.Growth, err)
	}
}

// TestGrowthLimitProblems: each bad growth key is one problem naming the file, line and key,
// never its value.
func TestGrowthLimitProblems(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"zero", "[limits]\nmax_loop_iterations = 0\n", "bad.toml:2: key limits.max_loop_iterations: want a whole number from 1 to 2147483648 (leave the key out for the default of 1000)"},
		{"negative", "[limits]\nmax_events_per_run = -5\n", "bad.toml:2: key limits.max_events_per_run: want a whole number from 1 to 2147483648 (leave the key out for the default of 10000000)"},
		{"too large", "[limits]\nmax_steps = 9999999999\n", "bad.toml:2: key limits.max_steps: want a whole number from 1 to 2147483648 (leave the key out for the default of 100000)"},
		{"a string", "[limits]\nmax_agent_iterations = \"lots-and-lots\"\n", "bad.toml:2: key limits.max_agent_iterations: want a whole number from 1 to 2147483648"},
		{"a float", "[limits]\nmax_signals_per_run = 1.5\n", "bad.toml:2: key limits.max_signals_per_run: want a whole number from 1 to 2147483648"},
		{"unknown", "[limits]\nmax_loops = 5\n", "bad.toml:2: key limits.max_loops: unknown key (known: max_input_bytes, max_output_bytes, max_loop_iterations, max_agent_iterations, max_steps, max_signals_per_run, max_events_per_run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := operator.Parse("bad.toml", []byte(tc.file))
			var ps operator.Problems
			if !errors.As(err, &ps) || len(ps) != 1 || !strings.HasPrefix(ps[0].String(), tc.want) {
				t.Fatalf("Parse = %v\nwant one problem beginning %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "lots-and-lots") {
				t.Fatalf("the problem quotes the file's value: %v", err)
			}
		})
	}
}

// TestCheckWorkflowGrowth: a workflow asking for more than the operator's growth limits is
// refused (E_OVER_LIMIT), one problem per key naming the operator's key and its cap; one
// within them, or asking for less, passes.
func TestCheckWorkflowGrowth(t *testing.T) {
	cfg, err := operator.Parse("ops.toml", []byte("[limits]\nmax_loop_iterations = 100\nmax_agent_iterations = 20\nmax_steps = 5000\n"))
	if err != nil {
		t.Fatal(err)
	}
	def, ps := workflow.Parse("wf.toml", []byte(`name = "wf"
max_steps = 2000000000
[models.m]
provider = "scripted"
script = [{ text = "hi" }]
[[steps]]
id = "a"
type = "agent_loop"
handler = "h"
max_iterations = 21
[[steps]]
id = "b"
type = "agent"
model = "m"
goal = "g"
budget = { max_iterations = 1000000 }
[[steps]]
id = "c"
type = "agent"
model = "m"
goal = "g"
[[edges]]
from = "a"
to = "b"
[[edges]]
from = "b"
to = "c"
[[edges]]
from = "c"
to = "a"
when = "again"
max_iterations = 2000000000
`))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	want := []string{
		"wf.toml:2: E_OVER_LIMIT max_steps: the workflow's max_steps asks for 2000000000, more than the server's limits.max_steps of 5000: set a lower max_steps",
		"wf.toml:10: E_OVER_LIMIT steps[0].max_iterations: agent_loop step a's max_iterations asks for 21, more than the server's limits.max_agent_iterations of 20: lower its max_iterations",
		"wf.toml:16: E_OVER_LIMIT steps[1].budget.max_iterations: agent step b's budget.max_iterations asks for 1000000, more than the server's limits.max_agent_iterations of 20: set a lower budget.max_iterations",
		"wf.toml:32: E_OVER_LIMIT edges[2].max_iterations: the loop edge c → a asks for 2000000000, more than the server's limits.max_loop_iterations of 100: lower its max_iterations",
	}
	got := operator.CheckWorkflow(cfg, def)
	if len(got) != len(want) {
		t.Fatalf("problems:\n%v\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	for i, w := range want {
		if got[i].String() != w {
			t.Errorf("problem %d:\n%s\nwant\n%s", i, got[i], w)
		}
	}
	// Asking for the caps, or less, passes; an agent without a budget gets 10 iterations.
	def.MaxSteps, def.Steps[0].MaxIterations, def.Steps[1].Budget.MaxIterations, def.Edges[2].MaxIterations = 5000, 20, 3, 100
	if ps := operator.CheckWorkflow(cfg, def); len(ps) > 0 {
		t.Fatalf("within the limits: %v", ps)
	}
	cfg.Limits.Growth.MaxAgentIterations = 5 // below the default an agent without a budget gets
	def.Steps[0].MaxIterations, def.Steps[1].Budget.MaxIterations = 5, 5
	if ps := operator.CheckWorkflow(cfg, def); len(ps) != 1 || ps[0].Key != "steps[2].budget.max_iterations" || !strings.Contains(ps[0].Message, "asks for 10") {
		t.Fatalf("an agent with the default budget under a cap of 5: %v", ps)
	}
}
