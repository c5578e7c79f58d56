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

// cut marks a scripted turn as cut off at its output limit after out output tokens.
func cut(t model.Turn, in, out int64) model.Turn {
	t = withUsage(t, in, out)
	t.Truncated = true
	return t
}

// TestTruncatedReplies: a reply cut off at its output limit is never a final answer and its
// calls never run; the loop asks again with twice the cut reply's tokens as far as the budgets
// allow, or stops output_truncated when they leave no more than the cut reply had, or at the
// third cut reply in a row; a cut reply that spent a budget stops with that budget's reason.
func TestTruncatedReplies(t *testing.T) {
	refund := mockTool("issue_refund", `{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`, output(`{"ok":true}`))
	for _, tc := range []struct {
		name   string
		setup  setup
		want   loop.StopReason
		answer string
		// raises are the RaiseOutputTokens of the model calls after the first, in order.
		raises []int64
		detail string // a part of the stop detail
	}{
		{
			name: "cut text, then the whole answer",
			setup: setup{turns: []model.Turn{
				cut(answerTurn("The refund is justified because the or"), 300, 4096),
				withUsage(answerTurn("The refund is justified because the order arrived 9 days late."), 4500, 120),
			}},
			want: loop.Completed, answer: "The refund is justified because the order arrived 9 days late.",
			raises: []int64{8192},
		},
		{
			name: "cut tool calls are not run",
			setup: setup{tools: []toolDef{refund}, turns: []model.Turn{
				cut(callsTurn(tc("issue_refund", `{"order_id":"O-1"}`), tc("issue_refund", `{"order_id":"O-`)), 300, 1000),
				answerTurn("No refund issued: I need a person to confirm."),
			}},
			want: loop.Completed, answer: "No refund issued: I need a person to confirm.",
			raises: []int64{2000},
		},
		{
			name: "the raise is capped by the token budget",
			setup: setup{budget: loop.Budget{MaxTokens: 16000}, turns: []model.Turn{
				cut(answerTurn("Part"), 300, 4096),
				answerTurn("Whole."),
			}},
			// What the budget leaves after the cut reply and the next call's input: about
			// 16000 - 4396 - 4096 - the estimate of the rest, below 8192 (checked below).
			want: loop.Completed, answer: "Whole.", raises: []int64{-1},
		},
		{
			name: "no room left in the token budget",
			setup: setup{budget: loop.Budget{MaxTokens: 6000}, turns: []model.Turn{
				cut(answerTurn("The refund is justified because"), 1000, 4096),
				answerTurn("never asked"),
			}},
			want: loop.OutputTruncated, detail: "the token budget leaves no room to ask again",
		},
		{
			name: "less room than the cut reply had",
			setup: setup{budget: loop.Budget{MaxTokens: 12000}, turns: []model.Turn{
				cut(answerTurn("The refund is justified because"), 1000, 4096),
				answerTurn("never asked"),
			}},
			want: loop.OutputTruncated, detail: "no more than the cut reply had",
		},
		{
			name: "a cut call of a forbidden tool stops refused",
			setup: setup{tools: []toolDef{refund, mockTool("read_order", "", output(`{}`))}, policy: loop.Policy{Forbid: []string{"issue_refund"}},
				turns: []model.Turn{
					cut(callsTurn(tc("read_order", `{}`), tc("issue_refund", `{"order_id":"O-`)), 10, 100),
					answerTurn("never asked"),
				}},
			want: loop.Refused, detail: "forbidden tool issue_refund",
		},
		{
			name: "cut three times in a row",
			setup: setup{turns: []model.Turn{
				cut(answerTurn("A"), 10, 100), cut(answerTurn("AB"), 10, 200), cut(answerTurn("ABC"), 10, 200),
				answerTurn("never asked"),
			}},
			want: loop.OutputTruncated, raises: []int64{200, 400}, detail: "3 replies in a row were cut off",
		},
		{
			name: "a cut reply that spent the token budget stops max_tokens",
			setup: setup{budget: loop.Budget{MaxTokens: 1000}, turns: []model.Turn{
				cut(answerTurn("The refund"), 600, 400),
				answerTurn("never asked"),
			}},
			want: loop.MaxTokens,
		},
		{
			name: "a cut reply of unknown size is asked again at the provider's cap",
			setup: setup{turns: []model.Turn{
				{Text: sp("The ref"), Truncated: true},
				answerTurn("The refund is justified."),
			}},
			want: loop.Completed, answer: "The refund is justified.", raises: []int64{0},
		},
		{
			name: "the streak starts again after a whole reply",
			setup: setup{tools: []toolDef{mockTool("read_order", "", output(`{}`))}, turns: []model.Turn{
				cut(answerTurn("A"), 10, 100), cut(answerTurn("AB"), 10, 200),
				callsTurn(tc("read_order", `{}`)),
				cut(answerTurn("ABC"), 10, 100), answerTurn("Done."),
			}},
			want: loop.Completed, answer: "Done.", raises: []int64{200, 400, 0, 200},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.setup, t0)
			res := w.run(t, context.Background(), "run-cut", "Decide on order O-1.")
			if res.StopReason != tc.want || res.Answer != tc.answer {
				t.Fatalf("stop %s (%s), answer %q; want %s, %q\n%s", res.StopReason, res.Detail, res.Answer, tc.want, tc.answer, formatEvents(res.Trace))
			}
			if !strings.Contains(res.Detail, tc.detail) {
				t.Errorf("detail %q, want it to say %q", res.Detail, tc.detail)
			}
			if n := len(w.log.all()); n != 0 && tc.want != loop.Completed {
				t.Errorf("%d tool executions", n)
			}
			if n := w.log.count("issue_refund"); n != 0 {
				t.Errorf("a call of a cut-off reply ran %d times", n)
			}
			reqs := w.model.requests()
			var raises []int64
			for _, r := range reqs[1:] {
				raises = append(raises, r.RaiseOutputTokens)
				if r.RaiseOutputTokens > 0 && r.MaxOutputTokens > r.RaiseOutputTokens {
					t.Errorf("request cap %d above the raise %d", r.MaxOutputTokens, r.RaiseOutputTokens)
				}
			}
			if len(tc.raises) == 1 && tc.raises[0] == -1 {
				if r := reqs[1]; r.RaiseOutputTokens <= 4096 || r.RaiseOutputTokens >= 16000-4396-4096 || r.MaxOutputTokens != r.RaiseOutputTokens {
					t.Errorf("raise %d, cap %d; want the token budget's room, between the cut 4096 and %d", r.RaiseOutputTokens, r.MaxOutputTokens, 16000-4396-4096)
				}
				raises[0] = -1
			}
			if !equalInts(raises, tc.raises) {
				t.Errorf("raises %v, want %v", raises, tc.raises)
			}
			for _, e := range eventsOf(res.Trace, trace.Validation) {
				if e.Decision == trace.DecisionTruncated && !strings.Contains(e.Reason, "cut off at its output limit") {
					t.Errorf("validation reason %q", e.Reason)
				}
			}
			for _, e := range eventsOf(res.Trace, trace.ToolResult) {
				if e.Tool == "issue_refund" && e.Executed {
					t.Errorf("tool_result %+v: executed", e)
				}
			}
			if res.State.OutputCap != 0 && res.StopReason != loop.Completed {
				t.Errorf("output cap %d left in a stopped run", res.State.OutputCap)
			}
		})
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTruncatedRecord: the record of an iteration whose reply was cut off has the proposal with
// the decision truncated and why, its calls not executed, and the message the model is sent;
// the raised cap goes through a save and resume of the state.
func TestTruncatedRecord(t *testing.T) {
	w := newWorld(t, setup{tools: []toolDef{mockTool("issue_refund", "", output(`{}`))}, turns: []model.Turn{
		cut(callsTurn(tc("issue_refund", `{"order_id":"O-`)), 50, 512),
		answerTurn("Done."),
	}}, t0)
	r := w.ctrl.Start("run-rec", "Refund O-1?")
	m := r.Mark()
	if r.Step(context.Background()) {
		t.Fatalf("the run stopped at the cut reply: %s (%s)", r.State().StopReason, r.State().Detail)
	}
	rec := r.Record(m)
	p := rec.Proposal
	if p == nil || p.Kind != "tool_calls" || p.Decision != trace.DecisionTruncated || !strings.Contains(p.Why, "after 512 output tokens") {
		t.Fatalf("proposal record %+v, want tool_calls, truncated, and why", p)
	}
	if len(rec.Calls) != 1 || rec.Calls[0].Executed || !strings.HasPrefix(rec.Calls[0].Output, "not executed: the reply was cut off") {
		t.Errorf("call records %+v, want one not executed", rec.Calls)
	}
	if len(rec.Messages) != 1 || !strings.Contains(rec.Messages[0], "cut off at its output limit after 512 output tokens") {
		t.Errorf("messages %q, want the model told why", rec.Messages)
	}

	raw, err := json.Marshal(r.State())
	if err != nil {
		t.Fatal(err)
	}
	var st loop.State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if st.OutputCap != 1024 || st.TruncatedStreak != 1 {
		t.Fatalf("saved output cap %d, streak %d; want 1024, 1", st.OutputCap, st.TruncatedStreak)
	}
	r = w.ctrl.Resume(&st)
	if !r.Step(context.Background()) || r.State().StopReason != loop.Completed || r.State().Answer != "Done." {
		t.Fatalf("resumed run: %s (%s), answer %q", r.State().StopReason, r.State().Detail, r.State().Answer)
	}
	if reqs := w.model.requests(); reqs[1].RaiseOutputTokens != 1024 {
		t.Errorf("the resumed call asked for %d output tokens, want 1024", reqs[1].RaiseOutputTokens)
	}
	if st := r.State(); st.OutputCap != 0 || st.TruncatedStreak != 0 {
		t.Errorf("after a whole reply: output cap %d, streak %d; want 0, 0", st.OutputCap, st.TruncatedStreak)
	}
}
