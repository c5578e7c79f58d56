package model_test

import (
	"context"
	"testing"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/model"
)

// TestScriptedTruncated: a turn scripted with "truncated" is a reply cut off at its output
// limit, text or tool calls, streamed or not; other turns are not.
func TestScriptedTruncated(t *testing.T) {
	s := scripted(t, `[
		{"text": "The refund is", "truncated": true, "usage": {"input_tokens": 10, "output_tokens": 400}},
		{"tool_calls": [{"name": "issue_refund", "arguments": {"order_id": "O-1"}}], "truncated": true},
		{"text": "The refund is justified."}
	]`, clock.NewVirtual(epoch))
	for _, tc := range []struct {
		seq    int
		stream bool
		want   bool
		kind   model.Kind
	}{
		{0, false, true, model.KindAnswer}, {0, true, true, model.KindAnswer},
		{1, false, true, model.KindToolCalls}, {1, true, true, model.KindToolCalls},
		{2, false, false, model.KindAnswer},
	} {
		req := &model.Request{Seq: tc.seq}
		if tc.stream {
			req.OnDelta = func(model.Delta) {}
		}
		resp, err := s.Generate(context.Background(), req)
		if err != nil {
			t.Fatalf("seq %d: %v", tc.seq, err)
		}
		if resp.Truncated != tc.want || resp.Proposal.Kind != tc.kind {
			t.Errorf("seq %d (stream %v): truncated %v, kind %s; want %v, %s", tc.seq, tc.stream, resp.Truncated, resp.Proposal.Kind, tc.want, tc.kind)
		}
	}
	if _, err := model.NewScripted([]model.Turn{{Refuse: new(string), Truncated: true}}, nil); err == nil {
		t.Error("a truncated refusal was accepted")
	}
}
