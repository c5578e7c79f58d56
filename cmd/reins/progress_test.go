package main

import (
	"strings"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// TestProgressOrder feeds runProgress the saves of a run's record and its answers in the orders
// a reader can meet them (the record is watched apart from the events) and checks that a step's
// running line comes before its iterations, once per activation, and never after its end.
func TestProgressOrder(t *testing.T) {
	def, ps := workflow.Parse("wf.toml", []byte(`name = "wf"
[[steps]]
id = "a"
type = "agent_loop"
handler = "h"
max_iterations = 5
`))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	save := func(status protocol.StepStatus, activation int, usage protocol.Usage) *client.Record {
		return &client.Record{Run: &engine.Run{Steps: map[string]*engine.StepRun{
			"a": {Status: status, Activation: activation, Usage: usage},
		}}}
	}
	answer := func(activation, iteration int) *protocol.Event {
		return &protocol.Event{Type: protocol.EvContinued, Step: "a", Item: -1, Activation: activation, Iteration: iteration}
	}
	spent := protocol.Usage{ToolCalls: 1}
	type input struct {
		rec *client.Record
		ev  *protocol.Event
	}
	for _, tc := range []struct {
		name string
		in   []input
		want []string
	}{
		{"save first", []input{{rec: save(protocol.StepRunning, 0, protocol.Usage{})}, {ev: answer(0, 1)}},
			[]string{"a                    running", "a                    iteration 1 continued"}},
		{"answer first", []input{{ev: answer(0, 1)}, {rec: save(protocol.StepRunning, 0, spent)}},
			[]string{"a                    running", "a                    iteration 1 continued"}},
		{"pending save, then answer", []input{{rec: save(protocol.StepPending, 0, protocol.Usage{})}, {ev: answer(0, 1)}},
			[]string{"a                    running", "a                    iteration 1 continued"}},
		{"end seen before the last answer", []input{{rec: save(protocol.StepCompleted, 0, spent)}, {ev: answer(0, 1)}},
			[]string{"a                    completed tools=1", "a                    iteration 1 continued"}},
		{"a second activation", []input{
			{rec: save(protocol.StepCompleted, 0, spent)}, {ev: answer(1, 1)}, {rec: save(protocol.StepRunning, 1, spent)},
		}, []string{"a                    completed tools=1", "a                    running", "a                    iteration 1 continued"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			p := newProgress(&out, def, false)
			for _, in := range tc.in {
				if in.rec != nil {
					p.update(in.rec)
				} else {
					p.event(in.ev)
				}
			}
			got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("progress:\n%s\nwant:\n%s", out.String(), strings.Join(tc.want, "\n"))
			}
		})
	}
}
