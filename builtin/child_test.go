package builtin_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/protocol"
)

// leadWorkflow is an agent "lead" whose tools are the agent "researcher" (research) and the
// sub-workflow summary.toml (summarize), besides a mocked read_order; budget is lead's.
func leadWorkflow(script, budget string) string {
	return `name = "lead"
[models.m]
provider = "scripted"
script = ` + script + `

[tools.research]
description = "Research a question."
input_schema = { type = "object", properties = { question = { type = "string" } }, required = ["question"] }
agent = "researcher"

[tools.summarize]
description = "Summarize a text."
workflow = "summary.toml"

[tools.read_order]
mock = [{ output = { status = "delivered" } }]

[[steps]]
id = "lead"
type = "agent"
model = "m"
goal = "Answer the question."
tools = ["research", "summarize", "read_order"]
budget = ` + budget + `

[[steps]]
id = "researcher"
type = "agent"
model = "m"
goal = "Research {{input.question}}."
`
}

const researchTurn = `{ tool_calls = [{ id = "r1", name = "research", arguments = { question = "why?" } }, { id = "s1", name = "summarize", arguments = { text = "long" } }, { id = "o1", name = "read_order", arguments = {} }], usage = { input_tokens = 100, output_tokens = 10 }, cost_usd = 0.01 }`

// childResumed is the task of the paused iteration dispatched again with the sub-runs' results.
func childResumed(paused *fakeTask, results ...protocol.ChildResult) *fakeTask {
	ft := resumedTask(paused)
	ft.task.ChildResults = results
	return ft
}

// An iteration whose turn calls agent and workflow tools waits for their sub-runs; the task
// dispatched again with their results acts on the turn: each result is its call's, the other
// calls run, and what the sub-runs spent is this task's usage and counts in the loop's budgets.
func TestAgentToolCallsRunAsSubRuns(t *testing.T) {
	researcher := protocol.ChildResult{CallID: "r1", RunID: "run1/lead/1/1/r1", Status: protocol.RunCompleted, StopReason: "completed",
		Output: json.RawMessage(`{"stop_reason":"completed","detail":"d","answer":"because"}`),
		Usage:  &protocol.Usage{ModelCalls: 2, InputTokens: 500, OutputTokens: 50, CostUSD: 0.2}}
	summary := protocol.ChildResult{CallID: "s1", RunID: "run1/lead/1/1/s1", Status: protocol.RunCompleted, Output: json.RawMessage(`"short"`)}
	for _, tc := range []struct {
		name     string
		budget   string
		results  []protocol.ChildResult
		research string // the result the model sees
		summary  string
		answer   string // the resumed task's answer
		stop     string
	}{
		{name: "both completed", budget: `{}`, results: []protocol.ChildResult{researcher, summary},
			research: `{"stop_reason":"completed","detail":"d","answer":"because"}`, summary: `"short"`, answer: "continue"},
		{name: "the agent stopped short, the workflow failed", budget: `{}`,
			results: []protocol.ChildResult{
				func() protocol.ChildResult {
					r := researcher
					r.StopReason, r.StopDetail = "max_iterations", "the iteration budget of 10 ran out"
					return r
				}(),
				{CallID: "s1", RunID: "run1/lead/1/1/s1", Status: protocol.RunFailed, Error: "step end failed: boom"}},
			research: "error: the agent researcher (run run1/lead/1/1/r1) stopped with max_iterations: the iteration budget of 10 ran out",
			summary:  "error: the sub-workflow summary.toml (run run1/lead/1/1/s1) ended failed: step end failed: boom", answer: "continue"},
		{name: "the sub-runs' tokens spend the budget", budget: `{ max_tokens = 600 }`, results: []protocol.ChildResult{researcher, summary},
			research: `{"stop_reason":"completed","detail":"d","answer":"because"}`, summary: `"short"`, answer: "complete", stop: "max_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, hash := bundleOf(t, leadWorkflow(script(researchTurn, answer), tc.budget), "")
			h := newHandlers(t, builtin.Config{})
			paused := newTask(b, hash, "lead", 1, `{"q":1}`)
			if err := h.Agent(paused); err != nil {
				t.Fatal(err)
			}
			if paused.answer != "wait" || len(paused.pending) != 2 {
				t.Fatalf("answer %s with %+v; want waiting for two sub-runs", paused.answer, paused.pending)
			}
			want := []protocol.PendingCall{
				{CallID: "r1", Tool: "research", Arguments: json.RawMessage(`{"question":"why?"}`), Child: &protocol.ChildCall{Agent: "researcher"}},
				{CallID: "s1", Tool: "summarize", Arguments: json.RawMessage(`{"text":"long"}`), Child: &protocol.ChildCall{Workflow: "summary.toml"}},
			}
			if got, w := jsonOf(t, paused.pending), jsonOf(t, want); got != w {
				t.Fatalf("pending %s, want %s", got, w)
			}
			if st := state(t, paused.saved); st.ToolCalls != 0 || !st.AwaitingChildren() || st.Stopped() {
				t.Fatalf("checkpoint: %d tool calls, children %v, stop %q; want the turn waiting whole", st.ToolCalls, st.Children, st.StopReason)
			}
			subRuns := map[string]bool{}
			for _, c := range paused.records[0].Calls {
				subRuns[c.ID] = c.SubRun
			}
			if !subRuns["r1"] || !subRuns["s1"] || subRuns["o1"] {
				t.Errorf("the waiting iteration's record marks sub-runs %v; want r1 and s1, not o1", subRuns)
			}

			ft := childResumed(paused, tc.results...)
			if err := h.Agent(ft); err != nil {
				t.Fatal(err)
			}
			if ft.answer != tc.answer || ft.stopReason != tc.stop {
				t.Fatalf("resumed: answer %s stop %q (%v); want %s %q", ft.answer, ft.stopReason, ft.err, tc.answer, tc.stop)
			}
			st := state(t, ft.saved)
			if got := toolResult(t, st, "r1"); got != tc.research {
				t.Errorf("research result %q, want %q", got, tc.research)
			}
			if got := toolResult(t, st, "s1"); got != tc.summary {
				t.Errorf("summarize result %q, want %q", got, tc.summary)
			}
			if got := toolResult(t, st, "o1"); got != `{"status":"delivered"}` {
				t.Errorf("read_order result %q: the other calls run once the sub-runs ended", got)
			}
			if u := ft.usage; u.InputTokens != 500 || u.OutputTokens != 50 || u.CostUSD != 0.2 || u.ModelCalls != 0 || u.ToolCalls != 3 {
				t.Errorf("the resumed task's usage %+v; want the sub-runs' tokens and cost, three tool calls, no model call", u)
			}
			if st.Usage.InputTokens != 600 {
				t.Errorf("the loop's usage %+v, want its own and the sub-runs'", st.Usage)
			}

			// The same resumed task delivered again after it checkpointed answers from it.
			again := *ft
			again.checkpoint, again.saved, again.answers, again.answer, again.usage = ft.saved, nil, 0, "", protocol.Usage{}
			if err := h.Agent(&again); err != nil || again.answer != tc.answer || again.saved != nil {
				t.Fatalf("redelivered: %v, answer %s, wrote %s; want the same answer without acting", err, again.answer, again.saved)
			}
		})
	}
}

// A call that needs approval comes first: the task dispatched again with the decision waits
// for the sub-run, and a delivery of it again waits again without acting twice.
func TestAgentToolAfterApproval(t *testing.T) {
	wf := strings.Replace(leadWorkflow(script(researchTurn, answer), `{}`), `tools = ["research", "summarize", "read_order"]`,
		"tools = [\"research\", \"summarize\", \"read_order\"]\npolicy = { require_approval = [\"read_order\"] }", 1)
	b, hash := bundleOf(t, wf, "")
	h := newHandlers(t, builtin.Config{})
	paused := newTask(b, hash, "lead", 1, `{}`)
	if err := h.Agent(paused); err != nil || paused.answer != "wait" || len(paused.pending) != 1 || paused.pending[0].Child != nil {
		t.Fatalf("%v: answer %s, pending %+v; want read_order waiting for a human", err, paused.answer, paused.pending)
	}
	decided := resumedTask(paused, protocol.Decision{CallID: "o1", Approve: true})
	if err := h.Agent(decided); err != nil || decided.answer != "wait" || len(decided.pending) != 2 || decided.pending[0].Child == nil {
		t.Fatalf("%v: answer %s, pending %+v; want the sub-runs", err, decided.answer, decided.pending)
	}
	again := *decided
	again.checkpoint = decided.saved
	again.answers, again.answer, again.saved, again.pending = 0, "", nil, nil
	if err := h.Agent(&again); err != nil || again.answer != "wait" || len(again.pending) != 2 || again.saved != nil {
		t.Fatalf("redelivered: %v, answer %s, pending %d, wrote %s", err, again.answer, len(again.pending), again.saved)
	}
	if st := state(t, decided.saved); st.Approvals["read_order"] != 1 || st.ToolCalls != 0 {
		t.Errorf("approvals %v, tool calls %d: the decision counted once, nothing ran yet", st.Approvals, st.ToolCalls)
	}
}

// A resumed task with results whose checkpoint waits for no sub-run fails for good.
func TestAgentChildResultsWithoutChildren(t *testing.T) {
	b, hash := bundleOf(t, leadWorkflow(script(answer), `{}`), "")
	h := newHandlers(t, builtin.Config{})
	ft := newTask(b, hash, "lead", 2, `{}`)
	ft.task.Resume = 1
	ft.task.ChildResults = []protocol.ChildResult{{CallID: "r1", Status: protocol.RunCompleted}}
	st, _ := json.Marshal(loop.State{RunID: "run1/lead", Iteration: 1})
	ft.checkpoint = st
	if err := h.Agent(ft); err != nil || ft.answer != "fail_permanent" || !strings.Contains(ft.err.Error(), "has no calls waiting for them") {
		t.Fatalf("%v: answer %s (%v)", err, ft.answer, ft.err)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
