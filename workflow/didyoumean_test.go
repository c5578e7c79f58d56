package workflow_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// TestDidYouMean: a step, model or tool name that nearly spells a declared one is reported with
// it; a name near nothing is reported without a guess.
func TestDidYouMean(t *testing.T) {
	const base = `name = "wf"
start = "%START%"

[models.writer]
provider = "scripted"
script = [{ text = "ok" }]

[tools.read_order]
description = "Read an order."
mock = [{ result = "{}" }]

[[steps]]
id = "investigate"
type = "agent"
model = "%MODEL%"
goal = "Find out."
tools = ["%TOOL%"]

[[steps]]
id = "done"
type = "terminate"

[[edges]]
from = "investigate"
to = "%TO%"
`
	for _, tc := range []struct {
		name, start, model, tool, to string
		want                         string
	}{
		{"model", "investigate", "writr", "read_order", "done", `step "investigate" uses model "writr", which is not declared in [models]: did you mean writer?`},
		{"tool", "investigate", "writer", "read_ordr", "done", `step "investigate" names tool "read_ordr" in tools, which is not declared in [tools]: did you mean read_order?`},
		{"edge", "investigate", "writer", "read_order", "dnoe", `edge 1 goes to "dnoe", which is not a step of this workflow: did you mean done?`},
		{"start", "investigat", "writer", "read_order", "done", `the start step "investigat" is not a step of this workflow: did you mean investigate?`},
		{"nothing near", "investigate", "summarizer", "read_order", "done", `step "investigate" uses model "summarizer", which is not declared in [models]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.NewReplacer("%START%", tc.start, "%MODEL%", tc.model, "%TOOL%", tc.tool, "%TO%", tc.to).Replace(base)
			_, ps := workflow.LoadAndValidate(writeTemp(t, text), workflow.Options{})
			var msgs []string
			for _, p := range ps {
				msgs = append(msgs, p.Message)
			}
			if !slices.Contains(msgs, tc.want) {
				t.Errorf("problems:\n%s\nwant first: %s", strings.Join(msgs, "\n"), tc.want)
			}
		})
	}
}
