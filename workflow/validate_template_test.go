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
	}{
		{"no template", []workflow.Step{{ID: "a", Type: workflow.Terminate, Input: "plain text"}}, "", "", ""},
		{"prompt", []workflow.Step{{ID: "a", Type: workflow.LLM, Prompt: "Sell {{input.product}}"}}, "a", "prompt", "input.product"},
		{"bare path input", []workflow.Step{{ID: "a", Type: workflow.Task, Input: "input.order"}}, "a", "input", "input.order"},
		{"whole-template expr", []workflow.Step{{ID: "s", Type: workflow.Switch, Expr: "{{input.kind}}"}}, "s", "expr", "input.kind"},
		{"items", []workflow.Step{{ID: "m", Type: workflow.Map, Items: "input.list"}}, "m", "items", "input.list"},
		{"a step's output only", []workflow.Step{{ID: "a", Type: workflow.Task}, {ID: "b", Type: workflow.LLM, Goal: "{{a.output}}"}}, "", "", ""},
		{"the first in step order", []workflow.Step{{ID: "a", Type: workflow.Task, Message: "{{a.output}}"}, {ID: "b", Type: workflow.Agent, Goal: "{{input}}"}}, "b", "goal", "input"},
		{"a malformed template is passed over", []workflow.Step{{ID: "a", Type: workflow.LLM, Prompt: "{{input.x"}}, "", "", ""},
	}
	for _, tc := range tests {
		def := &workflow.Definition{Name: "t", Steps: tc.steps}
		step, key, path, ok := def.ReadsInput()
		if ok != (tc.path != "") || step != tc.step || key != tc.key || path != tc.path {
			t.Errorf("%s: ReadsInput = %q, %q, %q, %v; want %q, %q, %q", tc.name, step, key, path, ok, tc.step, tc.key, tc.path)
		}
	}
}
