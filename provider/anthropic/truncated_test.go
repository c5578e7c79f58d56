package anthropic_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
)

// TestStopReason: the Response says which model the server named, why the reply ended in the
// server's words, and whether it ended on a limit (stop_reason "max_tokens", or the model's
// context window filling up), with the text or the calls as far as they came; streamed and not
// (generateBoth), the Response is the same.
func TestStopReason(t *testing.T) {
	const served = "claude-sonnet-4-5-20250929" // the server resolves the requested alias
	for _, tc := range []struct {
		name     string
		reply    reply
		want     model.Proposal
		truncate bool
	}{
		{
			name:     "text cut off at max_tokens",
			reply:    reply{Blocks: []block{text("The refund is justified because the or")}, Stop: "max_tokens"},
			want:     model.Proposal{Kind: model.KindAnswer, Text: "The refund is justified because the or"},
			truncate: true,
		},
		{
			// Streamed, the input is cut where the limit fell; whole, the API sends what it
			// could parse of it.
			name: "tool call cut off at max_tokens",
			reply: reply{Blocks: []block{text("Refunding."), {Type: "tool_use", ID: "toolu_1", Name: "issue_refund",
				Input: `{"order_id":"O-1"}`, Pieces: []string{`{"order_id"`, `:"O-1"}`}}}, Stop: "max_tokens"},
			want: model.Proposal{Kind: model.KindToolCalls, Text: "Refunding.",
				Calls: []model.ToolCall{{ID: "toolu_1", Name: "issue_refund", Arguments: json.RawMessage(`{"order_id":"O-1"}`)}}},
			truncate: true,
		},
		{
			name:     "the context window filled up",
			reply:    reply{Blocks: []block{text("In summ")}, Stop: "model_context_window_exceeded"},
			want:     model.Proposal{Kind: model.KindAnswer, Text: "In summ"},
			truncate: true,
		},
		{
			name:  "answer ended by the model",
			reply: reply{Blocks: []block{text("Refund.")}, Stop: "end_turn"},
			want:  model.Proposal{Kind: model.KindAnswer, Text: "Refund."},
		},
		{
			name:  "tool call ended by the model",
			reply: reply{Blocks: []block{toolUse("toolu_1", "read_order", `{}`)}, Stop: "tool_use"},
			want:  model.Proposal{Kind: model.KindToolCalls, Calls: []model.ToolCall{{ID: "toolu_1", Name: "read_order", Arguments: json.RawMessage(`{}`)}}},
		},
		{
			name:  "stop sequence",
			reply: reply{Blocks: []block{text("Done")}, Stop: "stop_sequence"},
			want:  model.Proposal{Kind: model.KindAnswer, Text: "Done"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.reply.Model, tc.reply.In, tc.reply.Out = served, 20, 16
			got := generateBoth(t, tc.reply, nil)
			want := model.Response{Proposal: tc.want, Usage: model.Usage{InputTokens: 20, OutputTokens: 16},
				Model: served, FinishReason: tc.reply.Stop, Truncated: tc.truncate}
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("response\n got %+v\nwant %+v", *got, want)
			}
		})
	}
}

// TestRaisedReplyCap: a call that asks again after a cut-off reply (RaiseOutputTokens) is sent
// a larger max_tokens, up to the model's output limit and within the budgets' cap.
func TestRaisedReplyCap(t *testing.T) {
	for _, tc := range []struct {
		name          string
		model         string
		raise, budget int64
		want          float64
	}{
		{"no raise: the client's cap", "claude-haiku-4-5", 0, 0, 4096},
		{"raised within the limit", "claude-haiku-4-5", 8192, 0, 8192},
		{"raised to the model's limit", "claude-3-5-haiku-latest", 20000, 0, 8192},
		{"raised, the budget caps it", "claude-sonnet-4-5", 8192, 6000, 6000},
		{"a model whose limit is unknown is not raised", testModel, 8192, 0, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, answer(reply{Blocks: []block{text("ok")}, Stop: "end_turn", In: 1, Out: 1}))
			cfg := s.config()
			cfg.Model = tc.model
			req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}},
				RaiseOutputTokens: tc.raise, MaxOutputTokens: tc.budget}
			if _, err := s.model(cfg).Generate(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if got := s.requests()[0].Body["max_tokens"]; got != tc.want {
				t.Errorf("max_tokens %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLoopAsksAgainAfterACutReply runs the loop against a local server whose first reply is cut
// off at max_tokens: its text is not taken as the answer, the second request asks for twice the
// cut reply's tokens, and the whole answer that follows completes the run.
func TestLoopAsksAgainAfterACutReply(t *testing.T) {
	s := newServer(t,
		answer(reply{Blocks: []block{text("The refund is justified because the or")}, Stop: "max_tokens", In: 30, Out: 4096}),
		answer(reply{Blocks: []block{text("The refund is justified: the order arrived 9 days late.")}, Stop: "end_turn", In: 4200, Out: 14}),
	)
	cfg := s.config()
	cfg.Model = "claude-sonnet-4-5"
	c, err := loop.New(loop.Config{Model: s.model(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "run-cut", "Refund O-1?")
	if res.StopReason != loop.Completed || res.Answer != "The refund is justified: the order arrived 9 days late." {
		t.Fatalf("stop %s (%s), answer %q; want completed with the whole answer", res.StopReason, res.Detail, res.Answer)
	}
	reqs := s.requests()
	if reqs[0].Body["max_tokens"] != float64(4096) || reqs[1].Body["max_tokens"] != float64(8192) {
		t.Errorf("max_tokens %v then %v, want 4096 then 8192", reqs[0].Body["max_tokens"], reqs[1].Body["max_tokens"])
	}
}
