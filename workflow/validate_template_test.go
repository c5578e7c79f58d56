package workflow_test

import (
	"testing"

	"github.com/reins-run/reins/workflow"
)

func TestReadsInput(t *testing.T) {
	tests := []struct {
		name            string
		steps           []workflow.Step
		step, key, path string
		conc            *workflow.Concurrency
	}{
		{"no template", []workflow.Step{{ID: "a", Type: workflow.Terminate, Input: "plain text"}}, "", "", "", nil},
		{"prompt", []workflow.Step{{ID: "a", Type: workflow.LLM, Prompt: "Sell {{input.product}}"}}, "a", "prompt", "input.product", nil},
		{"bare path input", []workflow.Step{{ID: "a", Type: workflow.Task, Input: "input.order"}}, "a", "input", "input.order", nil},
		{"whole-template expr", []workflow.Step{{ID: "s", Type: workflow.Switch, Expr: "{{input.kind}}"}}, "s", "expr", "input.kind", nil},
		{"items", []workflow.Step{{ID: "m", Type: workflow.Map, Items: "input.list"}}, "m", "items", "input.list", nil},
		{"a step's output only", []workflow.Step{{ID: "a", Type: workflow.Task}, {ID: "b", Type: workflow.LLM, Goal: "{{a.output}}"}}, "", "", "", nil},
		{"the first in step order", []workflow.Step{{ID: "a", Type: workflow.Task, Message: "{{a.output}}"}, {ID: "b", Type: workflow.Agent, Goal: "{{input}}"}}, "b", "goal", "input", nil},
		{"a malformed template is passed over", []workflow.Step{{ID: "a", Type: workflow.LLM, Prompt: "{{input.x"}}, "", "", "", nil},
		// The concurrency key is rendered at the start, before any step.
		{"the concurrency key first", []workflow.Step{{ID: "a", Type: workflow.LLM, Prompt: "{{input.x}}"}}, "", "concurrency.key", "input.customer",
			&workflow.Concurrency{Key: "c-{{input.customer}}", Limit: 1}},
		{"a concurrency key with a default renders without input", []workflow.Step{{ID: "a", Type: workflow.LLM, Prompt: "{{input.x}}"}}, "a", "prompt", "input.x",
			&workflow.Concurrency{Key: `{{input.customer ?? "anon"}}`, Limit: 1}},
		{"a constant concurrency key", []workflow.Step{{ID: "a", Type: workflow.Task}}, "", "", "", &workflow.Concurrency{Key: "all", Limit: 2}},
	}
	for _, tc := range tests {
		def := &workflow.Definition{Name: "t", Steps: tc.steps, Concurrency: tc.conc}
		step, key, path, ok := def.ReadsInput()
		if ok != (tc.path != "") || step != tc.step || key != tc.key || path != tc.path {
			t.Errorf("%s: ReadsInput = %q, %q, %q, %v; want %q, %q, %q", tc.name, step, key, path, ok, tc.step, tc.key, tc.path)
		}
	}
}
