package telemetry

import (
	"testing"

	"github.com/reins-run/reins/model"
)

// TestOutputFinish: an output message's finish_reason is the conventions' word for the
// provider's reason, the provider's own where the conventions have none, and what the reply is
// when the provider said nothing; a reply cut off at its limit is length whatever was said.
func TestOutputFinish(t *testing.T) {
	answer, calls := model.Proposal{Kind: model.KindAnswer}, model.Proposal{Kind: model.KindToolCalls}
	for _, c := range []struct {
		resp model.Response
		want string
	}{
		{model.Response{Proposal: answer, FinishReason: "stop"}, "stop"},
		{model.Response{Proposal: answer, FinishReason: "end_turn"}, "stop"},
		{model.Response{Proposal: answer, FinishReason: "stop_sequence"}, "stop"},
		{model.Response{Proposal: answer, FinishReason: "length", Truncated: true}, "length"},
		{model.Response{Proposal: answer, FinishReason: "max_tokens", Truncated: true}, "length"},
		{model.Response{Proposal: answer, Truncated: true}, "length"},
		{model.Response{Proposal: calls, FinishReason: "tool_calls"}, "tool_call"},
		{model.Response{Proposal: calls, FinishReason: "tool_use"}, "tool_call"},
		{model.Response{Proposal: answer, FinishReason: "content_filter"}, "content_filter"},
		{model.Response{Proposal: model.Proposal{Kind: model.KindRefuse}, FinishReason: "refusal"}, "content_filter"},
		{model.Response{Proposal: answer, FinishReason: "pause_turn"}, "pause_turn"},
		{model.Response{Proposal: answer}, "stop"},
		{model.Response{Proposal: calls}, "tool_call"},
	} {
		if got := outputFinish(&c.resp); got != c.want {
			t.Errorf("outputFinish(%+v) = %q, want %q", c.resp, got, c.want)
		}
	}
}
