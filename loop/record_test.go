package loop_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/trace"
)

// Each iteration's record says what the model proposed, what validation and the humans decided
// about each call and why, what the calls returned, what the model call cost, and the stop.
func TestRecordOfEachIteration(t *testing.T) {
	w := newWorld(t, setup{
		tools: []toolDef{
			mockTool("read_order", orderSchema, output(`{"status":"delivered"}`)),
			mockTool("issue_refund", ""),
		},
		policy: loop.Policy{RequireApproval: []string{"issue_refund"}},
		turns: []model.Turn{
			withCost(withUsage(callsTurn(tc("read_order", `{"order_id":"O-1"}`), tc("read_order", `{"order_id":""}`)), 100, 20), 0.002),
			answerTurn("  "),
			callsTurn(tc("issue_refund", `{"order_id":"O-1"}`)),
		},
	}, t0)
	run := w.ctrl.Start("r1", "refund O-1?")
	ctx := context.Background()

	m := run.Mark()
	run.Step(ctx)
	first := run.Record(m)
	if first.Iteration != 1 || first.ModelCalls != 1 || first.InputTokens != 100 || first.OutputTokens != 20 || first.CostUSD != 0.002 {
		t.Errorf("iteration 1's usage: %+v", first)
	}
	if p := first.Proposal; p == nil || p.Kind != string(model.KindToolCalls) {
		t.Fatalf("iteration 1's proposal: %+v", p)
	}
	if len(first.Calls) != 2 {
		t.Fatalf("iteration 1 records %d calls, want 2: %+v", len(first.Calls), first.Calls)
	}
	ok, bad := first.Calls[0], first.Calls[1]
	if ok.Tool != "read_order" || ok.Arguments != `{"order_id":"O-1"}` || ok.Decision != trace.DecisionAccept ||
		!ok.Executed || ok.Output != `{"status":"delivered"}` || ok.OutputBytes != len(ok.Output) || ok.Key == "" {
		t.Errorf("the valid call's record: %+v", ok)
	}
	if bad.Decision != trace.DecisionInvalid || !strings.Contains(bad.Reason, "arguments of read_order rejected") || bad.Executed || bad.Output == "" {
		t.Errorf("the invalid call's record: %+v", bad)
	}
	if len(first.Events) == 0 || first.Events[0].Type != trace.IterationStart {
		t.Errorf("iteration 1's events: %v", first.Events)
	}

	m = run.Mark()
	run.Step(ctx)
	second := run.Record(m)
	if p := second.Proposal; p == nil || p.Kind != string(model.KindAnswer) || p.Decision != trace.DecisionInvalid || p.Why != "the answer is empty" {
		t.Errorf("iteration 2's proposal: %+v", p)
	}
	if len(second.Messages) != 1 || !strings.Contains(second.Messages[0], "your answer was not accepted") {
		t.Errorf("iteration 2's messages to the model: %q", second.Messages)
	}

	m = run.Mark()
	if !run.Step(ctx) || run.State().StopReason != loop.NeedsHuman {
		t.Fatalf("iteration 3 stopped %q, want needs_human", run.State().StopReason)
	}
	waiting := run.Record(m)
	if c := waiting.Calls; len(c) != 1 || c[0].Decision != trace.DecisionApprove || c[0].Approval != "pending" || c[0].Executed {
		t.Errorf("the call waiting for approval: %+v", c)
	}
	if waiting.StopReason != string(loop.NeedsHuman) || waiting.StopDetail == "" {
		t.Errorf("iteration 3's stop: %q %q", waiting.StopReason, waiting.StopDetail)
	}

	// The part that acts on the decision: no model call, the human's decision and who took it,
	// and the call's arguments from the proposal of the earlier part.
	m = run.Mark()
	id := run.State().Pending[0].Call.ID
	if err := run.ActOnDecisions(ctx, map[string]loop.Decision{id: {Approve: true, By: "alice"}}); err != nil {
		t.Fatal(err)
	}
	acted := run.Record(m)
	if acted.Proposal != nil || acted.ModelCalls != 0 {
		t.Errorf("the part acting on decisions records a model call: %+v", acted)
	}
	if c := acted.Calls; len(c) != 1 || c[0].Approval != "approved" || c[0].By != "alice" || !c[0].Executed || c[0].Arguments != `{"order_id":"O-1"}` {
		t.Errorf("the approved call's record: %+v", c)
	}
}

// Recorded tells what the conversation alone says of the last iteration: for one whose answer
// was lost after its checkpoint.
func TestRecordedFromTheConversation(t *testing.T) {
	w := newWorld(t, setup{
		tools: []toolDef{mockTool("read_order", orderSchema, output(`{"status":"delivered"}`))},
		turns: []model.Turn{callsTurn(tc("read_order", `{"order_id":"O-1"}`)), answerTurn("done")},
	}, t0)
	run := w.ctrl.Start("r1", "goal")
	run.Step(context.Background())
	from := len(run.State().Messages)
	run.Step(context.Background())
	data, err := json.Marshal(run.State())
	if err != nil {
		t.Fatal(err)
	}
	var st loop.State
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	rec := loop.Recorded(&st, from)
	if !rec.Recovered || rec.Iteration != 2 || rec.Proposal == nil || rec.Proposal.Text != "done" || rec.StopReason != string(loop.Completed) || len(rec.Events) != 0 {
		t.Errorf("Recorded = %+v", rec)
	}
	first := loop.Recorded(&st, 1)
	if len(first.Calls) != 1 || first.Calls[0].Output != `{"status":"delivered"}` || first.Calls[0].Arguments != `{"order_id":"O-1"}` {
		t.Errorf("Recorded from message 1: %+v", first.Calls)
	}
	if out := loop.Recorded(&st, 99); out.Proposal != nil || len(out.Calls) != 0 {
		t.Errorf("Recorded past the conversation: %+v", out)
	}
}
