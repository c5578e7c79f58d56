package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/openai"
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
	f.Add([]byte("{\"id\":\"c\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\",\"function\":{\"name\":\"t\",\"arguments\":\"{\\\"a\\\":1}\"}}]},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}"), false)
	f.Add([]byte("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"), true)
	f.Add([]byte(`{}`), false)
	f.Add([]byte("data: {\"x\n\n"), true)
	f.Fuzz(func(t *testing.T, body []byte, stream bool) {
		srv := "http://fuzz.invalid"
		m, err := openai.New(provider.Config{Model: "m", BaseURL: srv + "/v1", APIKey: "k", Stream: stream,
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
