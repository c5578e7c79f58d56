package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
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

// TestProgressLines: what a recorded iteration prints, each reason said once.
func TestProgressLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		it   trace.Iteration
		want []string
	}{
		{"escalate", trace.Iteration{Proposal: &trace.ProposalRecord{Kind: "escalate", Text: "[escalate] totals differ", Reason: "totals differ"}},
			[]string{"escalate: totals differ"}},
		{"refuse", trace.Iteration{Proposal: &trace.ProposalRecord{Kind: "refuse", Text: "[refuse] not allowed", Reason: "not allowed"}},
			[]string{"refuse: not allowed"}},
		{"answer", trace.Iteration{Proposal: &trace.ProposalRecord{Kind: "answer", Text: "Refund it.", Decision: trace.DecisionAccept}},
			[]string{"answer: Refund it."}},
		{"not executed", trace.Iteration{Calls: []trace.CallRecord{{Tool: "read_order", Arguments: `{}`, Decision: trace.DecisionAccept, Output: "not executed: no progress"}}},
			[]string{"read_order {} → not executed: no progress"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := progressLines(&tc.it); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("lines %q, want %q", got, tc.want)
			}
		})
	}
}

// TestProgressSaves: the lines of the saves of a record read in the order things happened,
// though the watch keeps only the last save: a parallel step ends after its branches, and a
// step that a loop edge ends and starts again shows its end before its next start.
func TestProgressSaves(t *testing.T) {
	def, ps := workflow.Parse("wf.toml", []byte(`name = "wf"
[[steps]]
id = "fan"
type = "parallel"
branches = ["a"]
[[steps]]
id = "a"
type = "llm"
model = "m"
prompt = "p"
[[steps]]
id = "gen"
type = "llm"
model = "m"
prompt = "p"
[[steps]]
id = "judge"
type = "llm"
model = "m"
prompt = "p"
branch = "verdict"
`))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	rec := func(steps map[string]*engine.StepRun) *client.Record {
		return &client.Record{Run: &engine.Run{Steps: steps}}
	}
	run := func(act int) *engine.StepRun { return &engine.StepRun{Status: protocol.StepRunning, Activation: act} }
	done := func(act int) *engine.StepRun { return &engine.StepRun{Status: protocol.StepCompleted, Activation: act} }
	pending := func(act int) *engine.StepRun { return &engine.StepRun{Status: protocol.StepPending, Activation: act} }
	for _, tc := range []struct {
		name string
		in   []any // *client.Record or *protocol.Event
		want []string
	}{
		{"parallel ends after its branches", []any{
			rec(map[string]*engine.StepRun{"fan": {Status: protocol.StepRunning, Activation: 1, Children: 1}, "fan#0": run(1)}),
			rec(map[string]*engine.StepRun{"fan": {Status: protocol.StepCompleted, Activation: 1, Children: 1}, "fan#0": done(1)}),
		}, []string{"fan                  running", "fan#0                running", "fan#0                completed", "fan                  completed"}},
		{"loop edge between two reads", []any{
			rec(map[string]*engine.StepRun{"gen": done(1), "judge": run(1)}),
			&protocol.Event{Type: protocol.EvFailed, Step: "judge", Item: -1, Activation: 1, Iteration: 1, Error: "bad"},
			&protocol.Event{Type: protocol.EvCompleted, Step: "judge", Item: -1, Activation: 1, Output: json.RawMessage(`{"verdict":"retry"}`)},
			rec(map[string]*engine.StepRun{"gen": run(2), "judge": pending(1)}),
		}, []string{"gen                  completed", "judge                running", "judge                iteration 1 failed: bad",
			"judge                completed label=retry", "gen                  running"}},
		{"whole activations between two reads", []any{
			rec(map[string]*engine.StepRun{"gen": done(1), "judge": run(1)}),
			&protocol.Event{Type: protocol.EvCompleted, Step: "judge", Item: -1, Activation: 1, Output: json.RawMessage(`{"verdict":"retry"}`)},
			&protocol.Event{Type: protocol.EvCompleted, Step: "gen", Item: -1, Activation: 2},
			&protocol.Event{Type: protocol.EvCompleted, Step: "judge", Item: -1, Activation: 2, Output: json.RawMessage(`{"verdict":"retry"}`)},
			rec(map[string]*engine.StepRun{"gen": run(3), "judge": pending(2)}),
		}, []string{"gen                  completed", "judge                running",
			"judge                completed label=retry", "gen                  running", "gen                  completed",
			"judge                running", "judge                completed label=retry",
			"gen                  running"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			p := newProgress(&out, def, false)
			for _, in := range tc.in {
				switch x := in.(type) {
				case *client.Record:
					p.update(x)
				case *protocol.Event:
					p.event(x)
				}
			}
			if got := strings.TrimSuffix(out.String(), "\n"); got != strings.Join(tc.want, "\n") {
				t.Errorf("progress:\n%s\nwant:\n%s", got, strings.Join(tc.want, "\n"))
			}
		})
	}
}
