package registry_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider/registry"
)

// Streams of each protocol: some text, then one tool call, then the end with usage.
const (
	openaiStream = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Checking\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"read_order\",\"arguments\":\"{\\\"order_id\\\":\"}}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"O-104\\\"}\"}}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n" +
		"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":9,\"total_tokens\":29}}\n\n" +
		"data: [DONE]\n\n"
	anthropicStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Checking\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read_order\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"order_id\\\":\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"O-104\\\"}\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func streamServer(t *testing.T, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, event := range strings.SplitAfter(body, "\n\n") {
			io.WriteString(w, event)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestStreamedRoundTrip records a streamed exchange of each provider through registry.Open with
// Record, then replays the cassette with no server: the same response (the model the server
// named, why the reply ended, whether it was cut off at its limit) and the same deltas.
func TestStreamedRoundTrip(t *testing.T) {
	// cut makes a stream end on the output limit, from a server that names a dated model.
	cut := func(stream string) string {
		return strings.NewReplacer(`"finish_reason":"tool_calls"`, `"finish_reason":"length"`,
			`"stop_reason":"tool_use"`, `"stop_reason":"max_tokens"`, `"model":"m"`, `"model":"m-2025"`).Replace(stream)
	}
	for _, tt := range []struct {
		name, model, stream, suffix string
		served, finish              string
		truncated                   bool
	}{
		{"openai", "openai:m", openaiStream, "/v1", "m", "tool_calls", false},
		{"anthropic", "anthropic:m", anthropicStream, "", "m", "tool_use", false},
		{"openai cut off", "openai:m", cut(openaiStream), "/v1", "m-2025", "length", true},
		{"anthropic cut off", "anthropic:m", cut(anthropicStream), "", "m-2025", "max_tokens", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := streamServer(t, tt.stream)
			path := filepath.Join(t.TempDir(), "c.json")
			req := func(deltas *[]model.Delta) *model.Request {
				return &model.Request{
					Messages: []model.Message{{Role: model.RoleUser, Content: "Decide on O-104."}},
					Tools:    []model.ToolDef{{Name: "read_order", InputSchema: json.RawMessage(`{"type":"object"}`)}},
					OnDelta:  func(d model.Delta) { *deltas = append(*deltas, d) },
				}
			}
			live, err := registry.Open(tt.model, registry.Options{BaseURL: srv.URL + tt.suffix, APIKey: "sk-secret", Record: path, Getenv: env(nil)})
			if err != nil {
				t.Fatal(err)
			}
			var liveDeltas []model.Delta
			want, err := live.Generate(context.Background(), req(&liveDeltas))
			if err != nil {
				t.Fatal(err)
			}
			if want.Proposal.Kind != model.KindToolCalls || len(want.Proposal.Calls) != 1 || want.Usage.OutputTokens != 9 {
				t.Fatalf("live response %+v", want)
			}
			srv.Close()

			replay, err := registry.Open("replay:"+path, registry.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var replayDeltas []model.Delta
			got, err := replay.Generate(context.Background(), req(&replayDeltas))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("replayed %+v, live %+v", got, want)
			}
			if got.Model != tt.served || got.FinishReason != tt.finish || got.Truncated != tt.truncated {
				t.Errorf("replayed model %q, finish reason %q, truncated %v; want %q, %q, %v",
					got.Model, got.FinishReason, got.Truncated, tt.served, tt.finish, tt.truncated)
			}
			if len(liveDeltas) == 0 || !reflect.DeepEqual(replayDeltas, liveDeltas) {
				t.Errorf("replayed deltas %+v, live %+v", replayDeltas, liveDeltas)
			}
		})
	}
}
