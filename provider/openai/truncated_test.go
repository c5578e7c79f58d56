package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/tool"
)

// servedChunk is a chunk of a completion that names the model the server answered with.
func servedChunk(modelName, choices string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":` + quote(modelName) + `,"choices":` + choices + `}`
}

// TestFinishReason: the Response says which model the server named, why the reply ended in the
// server's words, and whether it ended on its output limit (finish_reason "length"), with the
// text or the calls as far as they came; streamed and not, the Response is the same.
func TestFinishReason(t *testing.T) {
	const served = "gpt-4o-2024-08-06" // the server resolves the requested alias gpt-4o
	for _, tc := range []struct {
		name     string
		message  string   // the whole reply's message
		chunks   []string // the same reply streamed, before the finish and usage chunks
		finish   string
		want     model.Proposal
		truncate bool
	}{
		{
			name:    "text cut off at the limit",
			message: `{"role":"assistant","content":"The refund is justified because the or"}`,
			chunks: []string{servedChunk(served, `[{"index":0,"delta":{"role":"assistant","content":"The refund is "},"finish_reason":null}]`),
				servedChunk(served, `[{"index":0,"delta":{"content":"justified because the or"},"finish_reason":null}]`)},
			finish:   "length",
			want:     model.Proposal{Kind: model.KindAnswer, Text: "The refund is justified because the or"},
			truncate: true,
		},
		{
			name:    "tool call cut off at the limit",
			message: `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"issue_refund","arguments":"{\"order_id\":\"O-1"}}]}`,
			chunks: []string{servedChunk(served, `[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"issue_refund","arguments":"{\"order_id\""}}]},"finish_reason":null}]`),
				servedChunk(served, `[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":\"O-1"}}]},"finish_reason":null}]`)},
			finish:   "length",
			want:     model.Proposal{Kind: model.KindToolCalls, Calls: []model.ToolCall{{ID: "call_1", Name: "issue_refund", Arguments: json.RawMessage(`{"order_id":"O-1`)}}},
			truncate: true,
		},
		{
			name:    "answer ended by the model",
			message: `{"role":"assistant","content":"Refund."}`,
			chunks:  []string{servedChunk(served, `[{"index":0,"delta":{"role":"assistant","content":"Refund."},"finish_reason":null}]`)},
			finish:  "stop",
			want:    model.Proposal{Kind: model.KindAnswer, Text: "Refund."},
		},
		{
			name:    "tool call ended by the model",
			message: `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_order","arguments":"{}"}}]}`,
			chunks:  []string{servedChunk(served, `[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_order","arguments":"{}"}}]},"finish_reason":null}]`)},
			finish:  "tool_calls",
			want:    model.Proposal{Kind: model.KindToolCalls, Calls: []model.ToolCall{{ID: "call_1", Name: "read_order", Arguments: json.RawMessage(`{}`)}}},
		},
		{
			name:    "content filter",
			message: `{"role":"assistant","content":"I"}`,
			chunks:  []string{servedChunk(served, `[{"index":0,"delta":{"role":"assistant","content":"I"},"finish_reason":null}]`)},
			finish:  "content_filter",
			want:    model.Proposal{Kind: model.KindAnswer, Text: "I"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole := `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":` + quote(served) +
				`,"choices":[{"index":0,"message":` + tc.message + `,"logprobs":null,"finish_reason":` + quote(tc.finish) + `}],` +
				`"usage":{"prompt_tokens":20,"completion_tokens":16,"total_tokens":36}}`
			chunks := append(append([]string(nil), tc.chunks...),
				servedChunk(served, `[{"index":0,"delta":{},"finish_reason":`+quote(tc.finish)+`}]`),
				`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":`+quote(served)+`,"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":16,"total_tokens":36}}`)
			want := model.Response{Proposal: tc.want, Usage: model.Usage{InputTokens: 20, OutputTokens: 16},
				Model: served, FinishReason: tc.finish, Truncated: tc.truncate}
			for _, stream := range []bool{false, true} {
				srv := newServer(t, jsonReply(http.StatusOK, whole))
				if stream {
					srv = newServer(t, sseReply(chunks...))
				}
				m := newModel(t, provider.Config{Model: "gpt-4o", BaseURL: srv.BaseURL(), Prices: provider.Prices{"gpt-4o": {}}})
				req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
				if stream {
					req.OnDelta = func(model.Delta) {}
				}
				got, err := m.Generate(context.Background(), req)
				if err != nil {
					t.Fatalf("stream %v: Generate: %v", stream, err)
				}
				if !reflect.DeepEqual(*got, want) {
					t.Errorf("stream %v: response\n got %+v\nwant %+v", stream, *got, want)
				}
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
		limit         int
		raise, budget int64
		field         string
		want          float64
	}{
		{"no raise: the client's cap", "gpt-4o", 0, 0, 0, "max_tokens", 4096},
		{"raised within the limit", "gpt-4o", 0, 8192, 0, "max_tokens", 8192},
		{"raised to the model's limit", "gpt-4o-mini", 0, 100000, 0, "max_tokens", 16384},
		{"raised, the budget caps it", "gpt-4o", 0, 8192, 5000, "max_tokens", 5000},
		{"a model whose limit is unknown is not raised", "my-local-model", 0, 8192, 0, "max_tokens", 4096},
		{"a configured limit", "my-local-model", 6000, 8192, 0, "max_tokens", 6000},
		{"a reasoning model", "gpt-5-mini", 0, 20000, 0, "max_completion_tokens", 20000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, jsonReply(http.StatusOK, completion(`{"role":"assistant","content":"hi"}`, 1, 1)))
			m := newModel(t, provider.Config{Model: tc.model, BaseURL: srv.BaseURL(), OutputLimit: tc.limit})
			req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}},
				RaiseOutputTokens: tc.raise, MaxOutputTokens: tc.budget}
			if _, err := m.Generate(context.Background(), req); err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if got := srv.Requests()[0].Body[tc.field]; got != tc.want {
				t.Errorf("%s %v, want %v", tc.field, got, tc.want)
			}
		})
	}
}

// TestLoopAsksAgainAfterACutReply runs the loop against a local server whose first reply is cut
// off at max_tokens (finish_reason "length") in the middle of a side-effecting call, streamed:
// the call is not run, the second request asks for twice the cut reply's tokens and tells the
// model why, and the whole answer that follows completes the run.
func TestLoopAsksAgainAfterACutReply(t *testing.T) {
	srv := newServer(t,
		sseReply(roleChunk(), callStart(0, "call_1", "issue_refund", `{"order_id":"O-`), finishChunk("length"), usageChunk(40, 4096)),
		sseReply(roleChunk(), textChunk("No refund issued: "), textChunk("a person must confirm O-1."), finishChunk("stop"), usageChunk(4200, 12)),
	)
	m := newModel(t, provider.Config{Model: "gpt-4o", BaseURL: srv.BaseURL()})
	ran := 0
	refund := tool.New(tool.Spec{Name: "issue_refund", SideEffect: true, InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
			ran++
			return json.RawMessage(`{}`), nil
		})
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{refund}, OnDelta: func(int, model.Delta) {}})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "run-cut", "Refund O-1?")
	if res.StopReason != loop.Completed || res.Answer != "No refund issued: a person must confirm O-1." || ran != 0 {
		t.Fatalf("stop %s (%s), answer %q, the refund ran %d times; want completed, the whole answer, 0", res.StopReason, res.Detail, res.Answer, ran)
	}
	reqs := srv.Requests()
	if got := reqs[0].Body["max_tokens"]; got != float64(4096) {
		t.Errorf("first max_tokens %v, want the client's 4096", got)
	}
	if got := reqs[1].Body["max_tokens"]; got != float64(8192) {
		t.Errorf("second max_tokens %v, want 8192, twice the cut reply", got)
	}
	msgs, _ := reqs[1].Body["messages"].([]any)
	last, _ := msgs[len(msgs)-1].(map[string]any)
	if text, _ := last["content"].(string); last["role"] != "user" || !strings.Contains(text, "cut off at its output limit after 4096 output tokens") {
		t.Errorf("the second request ends with %v, want the model told why", last)
	}
}
