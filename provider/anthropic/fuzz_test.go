package anthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/anthropic"
)

// bodyTransport answers every request with one body, as JSON or as an event stream.
type bodyTransport struct {
	body   []byte
	stream bool
}

func (t bodyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ct := "application/json"
	if t.stream {
		ct = "text/event-stream"
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(t.body)), Request: req}, nil
}

// FuzzReply feeds arbitrary reply bodies, plain and streamed, to the provider: it never panics,
// and it returns either a usable proposal or an error with a message.
func FuzzReply(f *testing.F) {
	f.Add([]byte("{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"t\",\"input\":{\"a\":1}}],\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}"), false)
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":1}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), true)
	f.Add([]byte(`{}`), false)
	f.Add([]byte("data: {\"x\n\n"), true)
	f.Fuzz(func(t *testing.T, body []byte, stream bool) {
		srv := "http://fuzz.invalid"
		m, err := anthropic.New(provider.Config{Model: "m", BaseURL: srv, APIKey: "k", Stream: stream,
			HTTPClient: &http.Client{Transport: bodyTransport{body: body, stream: stream}}})
		if err != nil {
			t.Fatal(err)
		}
		req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}},
			Tools: []model.ToolDef{{Name: "t", InputSchema: json.RawMessage(`{"type":"object"}`)}}}
		resp, err := m.Generate(context.Background(), req)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error with no message")
			}
			return
		}
		switch resp.Proposal.Kind {
		case model.KindAnswer, model.KindToolCalls, model.KindRefuse, model.KindEscalate:
		default:
			t.Fatalf("unknown proposal kind %q", resp.Proposal.Kind)
		}
		if resp.Proposal.Kind == model.KindToolCalls && len(resp.Proposal.Calls) == 0 {
			t.Fatal("a tool-calls proposal without calls")
		}
	})
}
