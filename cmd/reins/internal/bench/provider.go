package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/anthropic"
	"github.com/reins-run/reins/provider/openai"
)

// Canned replies of each protocol: one tool call with usage, the shape of a typical agent turn.
const (
	openaiReply    = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_order","arguments":"{\"order_id\":\"O-104\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":120,"completion_tokens":18,"total_tokens":138}}`
	anthropicReply = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_1","name":"read_order","input":{"order_id":"O-104"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":120,"output_tokens":18}}`
)

// benchRequest is a three-message conversation with one tool, as an agent's second turn sends.
func benchRequest() *model.Request {
	return &model.Request{
		Instructions: "You investigate refunds.",
		Messages: []model.Message{
			{Role: model.RoleUser, Content: "Decide whether refund evidence is sufficient for order O-104."},
			{Role: model.RoleAssistant, Calls: []model.ToolCall{{ID: "call_0", Name: "read_order", Arguments: json.RawMessage(`{"order_id":"O-104"}`)}}},
			{Role: model.RoleTool, CallID: "call_0", Name: "read_order", Content: `{"status":"delivered","late_days":4}`},
		},
		Tools: []model.ToolDef{{Name: "read_order", Description: "Read an order by id.", InputSchema: noopSchema}},
	}
}

// canned is a local HTTP server on 127.0.0.1 (net/http/httptest's job, without linking it into
// the reins binary).
type canned struct {
	URL string
	srv *http.Server
}

func (c *canned) Close() { _ = c.srv.Close() }

// cannedServer answers every POST with reply, on 127.0.0.1.
func cannedServer(reply string) *canned {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("bench: listen on 127.0.0.1: %v", err))
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, reply)
	})}
	go func() { _ = srv.Serve(l) }()
	return &canned{URL: "http://" + l.Addr().String(), srv: srv}
}

// OpenAICall measures one model call through the OpenAI provider against a local server:
// request build, the official SDK, loopback HTTP, and parsing into a proposal.
func OpenAICall(b B) {
	srv := cannedServer(openaiReply)
	defer srv.Close()
	m, err := openai.New(provider.Config{Model: "gpt-4.1-mini", BaseURL: srv.URL + "/v1", APIKey: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	providerCall(b, m)
}

// AnthropicCall is OpenAICall for the Anthropic provider.
func AnthropicCall(b B) {
	srv := cannedServer(anthropicReply)
	defer srv.Close()
	m, err := anthropic.New(provider.Config{Model: "claude-sonnet-4-5", BaseURL: srv.URL, APIKey: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	providerCall(b, m)
}

func providerCall(b B, m model.Model) {
	ctx := context.Background()
	req := benchRequest()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.Loops() {
		resp, err := m.Generate(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Proposal.Calls) != 1 {
			b.Fatalf("proposal %+v, want one tool call", resp.Proposal)
		}
	}
}

// HTTPPost is the floor of a provider call: the same size of request posted with net/http to the
// same kind of local server and its reply read, with no SDK and no parsing.
func HTTPPost(b B) {
	srv := cannedServer(openaiReply)
	defer srv.Close()
	body := []byte(`{"model":"gpt-4.1-mini","messages":[{"role":"system","content":"You investigate refunds."},{"role":"user","content":"Decide whether refund evidence is sufficient for order O-104."},{"role":"assistant","tool_calls":[{"id":"call_0","type":"function","function":{"name":"read_order","arguments":"{\"order_id\":\"O-104\"}"}}]},{"role":"tool","tool_call_id":"call_0","content":"{\"status\":\"delivered\",\"late_days\":4}"}],"tools":[{"type":"function","function":{"name":"read_order","description":"Read an order by id.","parameters":{"type":"object","properties":{"order_id":{"type":"string","minLength":1}},"required":["order_id"]}}}]}`)
	client := &http.Client{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.Loops() {
		resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
