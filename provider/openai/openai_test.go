package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/openai"
)

func newModel(t *testing.T, cfg provider.Config) *openai.Model {
	t.Helper()
	if cfg.Model == "" {
		cfg.Model = "gpt-test"
	}
	m, err := openai.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func TestNewChecksConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  provider.Config
		want string // part of the error, "" for none
	}{
		{"no model", provider.Config{APIKey: "sk-test"}, "no model name"},
		{"no key and no base URL", provider.Config{Model: "gpt-4.1-mini"}, "no API key"},
		{"relative base URL", provider.Config{Model: "m", BaseURL: "localhost/v1"}, "not an absolute URL"},
		{"key only", provider.Config{Model: "gpt-4.1-mini", APIKey: "sk-test"}, ""},
		{"local server without key", provider.Config{Model: "llama3", BaseURL: "http://127.0.0.1:1/v1"}, ""},
		{"replay client without key", provider.Config{Model: "m", HTTPClient: &http.Client{}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := openai.New(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.want == "" && m == nil:
				t.Fatal("New returned neither a model nor an error")
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("New error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// conversation exercises every message mapping: a turn with three calls (JSON arguments,
// arguments the model sent malformed, which the loop stores as a JSON string, and none), their
// results, and a plain assistant turn.
var conversation = []model.Message{
	{Role: model.RoleUser, Content: "Refund order 42."},
	{Role: model.RoleAssistant, Content: "Looking it up.", Calls: []model.ToolCall{
		{ID: "call_1", Name: "lookup", Arguments: json.RawMessage(`{"order": 42}`)},
		{ID: "call_2", Name: "lookup", Arguments: json.RawMessage(`"{\"order\": 4"`)},
		{ID: "call_3", Name: "clock"},
	}},
	{Role: model.RoleTool, CallID: "call_1", Name: "lookup", Content: `{"status":"paid"}`},
	{Role: model.RoleTool, CallID: "call_2", Name: "lookup", Content: "error: the arguments are not valid JSON", IsError: true},
	{Role: model.RoleTool, CallID: "call_3", Name: "clock", Content: `"12:00"`},
	{Role: model.RoleAssistant, Content: "It is paid."},
	{Role: model.RoleUser, Content: "Go on."},
}

const wantMessages = `[
	{"role": "system", "content": "You handle refunds."},
	{"role": "user", "content": "Refund order 42."},
	{"role": "assistant", "content": "Looking it up.", "tool_calls": [
		{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"order\": 42}"}},
		{"id": "call_2", "type": "function", "function": {"name": "lookup", "arguments": "{\"order\": 4"}},
		{"id": "call_3", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
	]},
	{"role": "tool", "tool_call_id": "call_1", "content": "{\"status\":\"paid\"}"},
	{"role": "tool", "tool_call_id": "call_2", "content": "error: the arguments are not valid JSON"},
	{"role": "tool", "tool_call_id": "call_3", "content": "\"12:00\""},
	{"role": "assistant", "content": "It is paid."},
	{"role": "user", "content": "Go on."}
]`

var tools = []model.ToolDef{
	{Name: "lookup", Description: "Find an order.", InputSchema: json.RawMessage(`{"type":"object","properties":{"order":{"type":"integer"}},"required":["order"]}`)},
	{Name: "clock"},
}

const wantTools = `[
	{"type": "function", "function": {"name": "lookup", "description": "Find an order.",
		"parameters": {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}}},
	{"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {}}}}
]`

func TestRequestShape(t *testing.T) {
	for _, tc := range []struct {
		name       string
		toolChoice string
		wantChoice string // JSON, "" when tool_choice must be absent
		stream     bool
	}{
		{name: "tool choice omitted"},
		{name: "tool choice auto", toolChoice: "auto", wantChoice: `"auto"`},
		{name: "tool choice none", toolChoice: "none", wantChoice: `"none"`},
		{name: "tool choice required", toolChoice: "required", wantChoice: `"required"`},
		{name: "tool choice named", toolChoice: "lookup", wantChoice: `{"type":"function","function":{"name":"lookup"}}`},
		{name: "streaming", toolChoice: "auto", wantChoice: `"auto"`, stream: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply := jsonReply(http.StatusOK, completion(`{"role":"assistant","content":"done"}`, 1, 1))
			if tc.stream {
				reply = sseReply(roleChunk(), textChunk("done"), finishChunk("stop"), usageChunk(1, 1))
			}
			srv := newServer(t, reply)
			m := newModel(t, provider.Config{BaseURL: srv.BaseURL(), APIKey: "sk-test", MaxOutputTokens: 321})
			req := &model.Request{Instructions: "You handle refunds.", Messages: conversation, Tools: tools, ToolChoice: tc.toolChoice}
			if tc.stream {
				req.OnDelta = func(model.Delta) {}
			}
			if _, err := m.Generate(context.Background(), req); err != nil {
				t.Fatalf("Generate: %v", err)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("server saw %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != http.MethodPost || r.Path != "/v1/chat/completions" {
				t.Errorf("request = %s %s, want POST /v1/chat/completions", r.Method, r.Path)
			}
			if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
				t.Errorf("Authorization = %q, want the key as a bearer token", got)
			}
			body := r.Body
			if body["model"] != "gpt-test" {
				t.Errorf("model = %v, want gpt-test", body["model"])
			}
			if body["max_tokens"] != 321.0 || body["max_completion_tokens"] != nil {
				t.Errorf("max_tokens = %v, max_completion_tokens = %v; want 321 and absent", body["max_tokens"], body["max_completion_tokens"])
			}
			jsonEqual(t, "messages", body["messages"], wantMessages)
			jsonEqual(t, "tools", body["tools"], wantTools)
			if choice, ok := body["tool_choice"]; tc.wantChoice == "" && ok {
				t.Errorf("tool_choice = %v, want it absent", choice)
			} else if tc.wantChoice != "" {
				jsonEqual(t, "tool_choice", choice, tc.wantChoice)
			}
			if tc.stream {
				if body["stream"] != true {
					t.Errorf("stream = %v, want true", body["stream"])
				}
				jsonEqual(t, "stream_options", body["stream_options"], `{"include_usage": true}`)
			} else if body["stream"] != nil || body["stream_options"] != nil {
				t.Errorf("stream = %v, stream_options = %v; want both absent", body["stream"], body["stream_options"])
			}
		})
	}
}

// redirect sends every request to srv, whatever host it was addressed to, and records that host.
type redirect struct {
	target *url.URL
	mu     sync.Mutex
	hosts  []string
}

func (rt *redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.hosts = append(rt.hosts, req.URL.Host)
	rt.mu.Unlock()
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = rt.target.Scheme, rt.target.Host
	return http.DefaultTransport.RoundTrip(req)
}

// TestOfficialAPI checks what goes to OpenAI's own API when no BaseURL is set: the request is
// addressed to api.openai.com (and carried to the local server by the HTTP client).
func TestOfficialAPI(t *testing.T) {
	srv := newServer(t, jsonReply(http.StatusOK, completion(`{"role":"assistant","content":"hi"}`, 1, 1)))
	target, _ := url.Parse(srv.URL)
	rt := &redirect{target: target}
	m := newModel(t, provider.Config{Model: "gpt-4.1-mini", APIKey: "sk-live", HTTPClient: &http.Client{Transport: rt}})
	if _, err := m.Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	r := srv.Requests()[0]
	if len(rt.hosts) != 1 || rt.hosts[0] != "api.openai.com" || r.Path != "/v1/chat/completions" {
		t.Errorf("request went to %v %s, want api.openai.com /v1/chat/completions", rt.hosts, r.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer sk-live" {
		t.Errorf("Authorization = %q, want Bearer sk-live", got)
	}
	jsonEqual(t, "messages", r.Body["messages"], `[{"role": "user", "content": "hi"}]`)
	if r.Body["tools"] != nil || r.Body["tool_choice"] != nil {
		t.Errorf("tools = %v, tool_choice = %v; want both absent without tools", r.Body["tools"], r.Body["tool_choice"])
	}
}

// TestMaxTokensField: OpenAI's reasoning models reject max_tokens and get max_completion_tokens;
// every other model gets max_tokens, which compatible servers read. Only the model name decides,
// so a recorded request and its replay against another base URL are the same.
func TestMaxTokensField(t *testing.T) {
	for _, tc := range []struct {
		model      string
		completion bool
	}{
		{"gpt-4.1-mini", false},
		{"gpt-4o", false},
		{"gpt-oss:20b", false},
		{"llama3.1:8b", false},
		{"Qwen/Qwen2.5-7B-Instruct", false},
		{"o1", true},
		{"o3-mini", true},
		{"o4-mini-2025-04-16", true},
		{"gpt-5", true},
		{"gpt-5-nano", true},
		{"gpt-5.1", true},
		{"openai/o3", true},
	} {
		t.Run(tc.model, func(t *testing.T) {
			srv := newServer(t, jsonReply(http.StatusOK, completion(`{"role":"assistant","content":"hi"}`, 1, 1)))
			m := newModel(t, provider.Config{Model: tc.model, BaseURL: srv.BaseURL(), MaxOutputTokens: 77})
			if _, err := m.Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}); err != nil {
				t.Fatalf("Generate: %v", err)
			}
			body := srv.Requests()[0].Body
			want, absent := "max_tokens", "max_completion_tokens"
			if tc.completion {
				want, absent = absent, want
			}
			if body[want] != 77.0 || body[absent] != nil {
				t.Errorf("%s = %v, %s = %v; want 77 and absent", want, body[want], absent, body[absent])
			}
		})
	}
}

func TestNoKeyNoAuthorization(t *testing.T) {
	srv := newServer(t, jsonReply(http.StatusOK, completion(`{"role":"assistant","content":"hi"}`, 1, 1)))
	m := newModel(t, provider.Config{BaseURL: srv.BaseURL()})
	if _, err := m.Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none without a key", got)
	}
}

func TestReplies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		model   string
		prices  provider.Prices
		message string
		in, out int
		want    model.Response
	}{
		{
			name:    "text answer",
			message: `{"role":"assistant","content":"Order 42 is refunded.","refusal":null}`,
			in:      12, out: 6,
			want: model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "Order 42 is refunded."},
				Usage: model.Usage{InputTokens: 12, OutputTokens: 6}, Model: "gpt-test", FinishReason: "stop"},
		},
		{
			name: "several tool calls in one turn",
			message: `{"role":"assistant","content":"Checking both.","tool_calls":[
				{"id":"call_b","type":"function","function":{"name":"lookup","arguments":"{\"order\":2}"}},
				{"id":"call_a","type":"function","function":{"name":"refund","arguments":"{\"order\":1}"}},
				{"id":"call_c","type":"function","function":{"name":"clock","arguments":""}}]}`,
			in: 30, out: 20,
			want: model.Response{Proposal: model.Proposal{Kind: model.KindToolCalls, Text: "Checking both.", Calls: []model.ToolCall{
				{ID: "call_b", Name: "lookup", Arguments: json.RawMessage(`{"order":2}`)},
				{ID: "call_a", Name: "refund", Arguments: json.RawMessage(`{"order":1}`)},
				{ID: "call_c", Name: "clock", Arguments: json.RawMessage(``)},
			}}, Usage: model.Usage{InputTokens: 30, OutputTokens: 20}, Model: "gpt-test", FinishReason: "stop"},
		},
		{
			name:    "malformed arguments passed through raw",
			message: `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"order\": 4"}}]}`,
			in:      5, out: 3,
			want: model.Response{Proposal: model.Proposal{Kind: model.KindToolCalls, Calls: []model.ToolCall{
				{ID: "call_1", Name: "lookup", Arguments: json.RawMessage(`{"order": 4`)},
			}}, Usage: model.Usage{InputTokens: 5, OutputTokens: 3}, Model: "gpt-test", FinishReason: "stop"},
		},
		{
			name:    "refusal",
			message: `{"role":"assistant","content":null,"refusal":"I can't help with that."}`,
			in:      8, out: 7,
			want: model.Response{Proposal: model.Proposal{Kind: model.KindRefuse, Reason: "I can't help with that."},
				Usage: model.Usage{InputTokens: 8, OutputTokens: 7}, Model: "gpt-test", FinishReason: "stop"},
		},
		{
			name:    "cost from a price override",
			prices:  provider.Prices{"gpt-test": {InputPerMTok: 2, OutputPerMTok: 8}},
			message: `{"role":"assistant","content":"ok"}`,
			in:      1000, out: 500,
			want: model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "ok"},
				Usage: model.Usage{InputTokens: 1000, OutputTokens: 500}, CostUSD: (1000*2.0 + 500*8.0) / 1e6, Model: "gpt-test", FinishReason: "stop"},
		},
		{
			name:    "cost from the default prices",
			model:   "gpt-4.1-mini-2025-04-14",
			message: `{"role":"assistant","content":"ok"}`,
			in:      1_000_000, out: 1_000_000,
			want: model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "ok"},
				Usage: model.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}, CostUSD: 0.40 + 1.60, Model: "gpt-test", FinishReason: "stop"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, jsonReply(http.StatusOK, completion(tc.message, tc.in, tc.out)))
			m := newModel(t, provider.Config{Model: tc.model, BaseURL: srv.BaseURL(), Prices: tc.prices})
			got, err := m.Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("response:\n got %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestNoChoices(t *testing.T) {
	srv := newServer(t, jsonReply(http.StatusOK, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-test","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1}}`))
	m := newModel(t, provider.Config{BaseURL: srv.BaseURL()})
	_, err := m.Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
	var me *model.Error
	if !errors.As(err, &me) || me.Retryable || !strings.Contains(me.Message, "no choices") {
		t.Fatalf("error = %v, want a non-retryable *model.Error about the missing choices", err)
	}
}

func TestUnknownRole(t *testing.T) {
	srv := newServer(t, jsonReply(http.StatusOK, completion(`{"role":"assistant","content":"hi"}`, 1, 1)))
	m := newModel(t, provider.Config{BaseURL: srv.BaseURL()})
	_, err := m.Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: "narrator", Content: "hi"}}})
	var me *model.Error
	if !errors.As(err, &me) || me.Retryable || !strings.Contains(me.Message, `"narrator"`) {
		t.Fatalf("error = %v, want a non-retryable *model.Error naming the role", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}

func TestStreaming(t *testing.T) {
	for _, tc := range []struct {
		name       string
		chunks     []string
		wantDeltas []model.Delta
		nonStream  string // the same reply, not streamed: the Response must be the same
	}{
		{
			name:   "text",
			chunks: []string{roleChunk(), textChunk("Order "), textChunk("42 is "), textChunk("refunded."), finishChunk("stop"), usageChunk(40, 9)},
			wantDeltas: []model.Delta{
				{Text: "Order "}, {Text: "42 is "}, {Text: "refunded."},
			},
			nonStream: completion(`{"role":"assistant","content":"Order 42 is refunded."}`, 40, 9),
		},
		{
			name: "usage chunk without an id",
			chunks: []string{roleChunk(), textChunk("Paid."), finishChunk("stop"),
				`{"object":"chat.completion.chunk","created":1700000000,"model":"gpt-test","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`},
			wantDeltas: []model.Delta{{Text: "Paid."}},
			nonStream:  completion(`{"role":"assistant","content":"Paid."}`, 7, 2),
		},
		{
			name: "tool calls",
			chunks: []string{
				roleChunk(),
				textChunk("Checking."),
				callStart(0, "call_a", "lookup", ""),
				callArgs(0, `{"order"`),
				callArgs(0, `: 1}`),
				callStart(1, "call_b", "refund", `{"or`),
				callArgs(1, `der": 2}`),
				finishChunk("tool_calls"),
				usageChunk(50, 25),
			},
			wantDeltas: []model.Delta{
				{Text: "Checking."},
				{CallIndex: 0, CallID: "call_a", CallName: "lookup"},
				{CallIndex: 0, Arguments: `{"order"`},
				{CallIndex: 0, Arguments: `: 1}`},
				{CallIndex: 1, CallID: "call_b", CallName: "refund", Arguments: `{"or`},
				{CallIndex: 1, Arguments: `der": 2}`},
			},
			nonStream: completionEnded(`{"role":"assistant","content":"Checking.","tool_calls":[
				{"id":"call_a","type":"function","function":{"name":"lookup","arguments":"{\"order\": 1}"}},
				{"id":"call_b","type":"function","function":{"name":"refund","arguments":"{\"order\": 2}"}}]}`, "tool_calls", 50, 25),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			streamed := newServer(t, sseReply(tc.chunks...))
			plain := newServer(t, jsonReply(http.StatusOK, tc.nonStream))
			prices := provider.Prices{"gpt-test": {InputPerMTok: 1, OutputPerMTok: 2}}
			req := func(on func(model.Delta)) *model.Request {
				return &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}, OnDelta: on}
			}

			var deltas []model.Delta // OnDelta is called on Generate's goroutine, in order
			got, err := newModel(t, provider.Config{BaseURL: streamed.BaseURL(), Prices: prices}).
				Generate(context.Background(), req(func(d model.Delta) { deltas = append(deltas, d) }))
			if err != nil {
				t.Fatalf("Generate (streaming): %v", err)
			}
			want, err := newModel(t, provider.Config{BaseURL: plain.BaseURL(), Prices: prices}).Generate(context.Background(), req(nil))
			if err != nil {
				t.Fatalf("Generate (not streaming): %v", err)
			}
			if !reflect.DeepEqual(deltas, tc.wantDeltas) {
				t.Errorf("deltas:\n got %+v\nwant %+v", deltas, tc.wantDeltas)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("streamed response differs from the plain one:\n got %+v\nwant %+v", *got, *want)
			}
			if got.Usage.InputTokens == 0 || got.CostUSD == 0 {
				t.Errorf("usage %+v, cost %v: want the final chunk's usage and its cost", got.Usage, got.CostUSD)
			}
			// Accumulating the deltas gives the response's text and calls.
			var text string
			var args []string
			for _, d := range deltas {
				text += d.Text
				if d.CallID != "" {
					args = append(args, "")
				}
				if d.Arguments != "" {
					args[d.CallIndex] += d.Arguments
				}
			}
			if text != got.Proposal.Text || len(args) != len(got.Proposal.Calls) {
				t.Fatalf("deltas accumulate to %q and %d calls, response has %q and %d", text, len(args), got.Proposal.Text, len(got.Proposal.Calls))
			}
			for i, a := range args {
				if a != string(got.Proposal.Calls[i].Arguments) {
					t.Errorf("call %d: deltas accumulate to %s, response has %s", i, a, got.Proposal.Calls[i].Arguments)
				}
			}
		})
	}
}

// TestStreamConfig: Config.Stream streams without a delta callback.
func TestStreamConfig(t *testing.T) {
	srv := newServer(t, sseReply(roleChunk(), textChunk("hi"), finishChunk("stop"), usageChunk(3, 1)))
	m := newModel(t, provider.Config{BaseURL: srv.BaseURL(), Stream: true})
	got, err := m.Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	want := model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "hi"}, Usage: model.Usage{InputTokens: 3, OutputTokens: 1},
		Model: "gpt-test", FinishReason: "stop"}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("response = %+v, want %+v", *got, want)
	}
	if srv.Requests()[0].Body["stream"] != true {
		t.Error("the request did not ask for a stream")
	}
}

func TestStatusErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reply     http.HandlerFunc
		stream    bool
		retryable bool
		status    int
		after     time.Duration
		message   []string // parts of the error message
	}{
		{
			name: "rate limited",
			reply: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "7")
				jsonReply(http.StatusTooManyRequests, `{"error":{"message":"Rate limit reached for gpt-test.","type":"requests","code":"rate_limit_exceeded"}}`)(w, r)
			},
			retryable: true, status: 429, after: 7 * time.Second,
			message: []string{"HTTP 429", "Rate limit reached for gpt-test."},
		},
		{
			name: "rate limited while streaming",
			reply: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After-Ms", "1500")
				jsonReply(http.StatusTooManyRequests, `{"error":{"message":"Slow down.","type":"requests"}}`)(w, r)
			},
			stream: true, retryable: true, status: 429, after: 1500 * time.Millisecond,
			message: []string{"HTTP 429", "Slow down."},
		},
		{
			name:      "server error",
			reply:     jsonReply(http.StatusInternalServerError, `{"error":{"message":"The server had an error.","type":"server_error"}}`),
			retryable: true, status: 500,
			message: []string{"HTTP 500", "The server had an error."},
		},
		{
			name: "overloaded, plain text body",
			reply: func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "upstream overloaded", http.StatusServiceUnavailable)
			},
			retryable: true, status: 503,
			message: []string{"HTTP 503", "upstream overloaded"},
		},
		{
			name:    "bad request",
			reply:   jsonReply(http.StatusBadRequest, `{"error":{"message":"Invalid schema for function 'lookup'.","type":"invalid_request_error","param":"tools[0]","code":"invalid_function_parameters"}}`),
			status:  400,
			message: []string{"HTTP 400 Bad Request", "Invalid schema for function 'lookup'."},
		},
		{
			name:   "bad key",
			reply:  jsonReply(http.StatusUnauthorized, `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}`),
			stream: true, status: 401,
			message: []string{"HTTP 401 Unauthorized", "Incorrect API key provided."},
		},
		{
			name:    "unknown model, Ollama's error shape",
			reply:   jsonReply(http.StatusNotFound, `{"error":"model \"llama9\" not found, try pulling it first"}`),
			status:  404,
			message: []string{"HTTP 404 Not Found", `model "llama9" not found, try pulling it first`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.reply)
			m := newModel(t, provider.Config{BaseURL: srv.BaseURL(), APIKey: "sk-secret-key", MaxRetries: 0})
			req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
			if tc.stream {
				req.OnDelta = func(model.Delta) { t.Error("OnDelta called for an error reply") }
			}
			_, err := m.Generate(context.Background(), req)
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("error = %v (%T), want a *model.Error", err, err)
			}
			if me.Retryable != tc.retryable || me.Status != tc.status || me.RetryAfter != tc.after {
				t.Errorf("retryable %v, status %d, retry after %v; want %v, %d, %v", me.Retryable, me.Status, me.RetryAfter, tc.retryable, tc.status, tc.after)
			}
			for _, part := range tc.message {
				if !strings.Contains(me.Message, part) {
					t.Errorf("message %q does not contain %q", me.Message, part)
				}
			}
			if strings.Contains(err.Error(), "sk-secret-key") {
				t.Errorf("error %q leaks the API key", err)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("server saw %d requests, want exactly 1 (the loop retries, not the SDK)", n)
			}
		})
	}
}

// hijackAfter writes the chunks of a stream, then drops the connection without finishing it.
func hijackAfter(t *testing.T, chunks ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeChunks(w, chunks...)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	}
}

func TestIncompleteStreams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reply   func(t *testing.T) http.HandlerFunc
		message string
	}{
		{"connection dropped mid-text", func(t *testing.T) http.HandlerFunc {
			return hijackAfter(t, roleChunk(), textChunk("Order 42 is"))
		}, "the reply stream broke off after 2 chunks"},
		{"connection dropped mid-call", func(t *testing.T) http.HandlerFunc {
			return hijackAfter(t, roleChunk(), callStart(0, "call_a", "refund", `{"order":`))
		}, "the reply stream broke off after 2 chunks"},
		{"stream closed cleanly without a finish", func(*testing.T) http.HandlerFunc {
			return func(w http.ResponseWriter, _ *http.Request) { writeChunks(w, roleChunk(), textChunk("Order 42 is")) }
		}, "ended before the model finished its reply"},
		{"stream closed with [DONE] but no finish", func(*testing.T) http.HandlerFunc {
			return sseReply(roleChunk(), textChunk("Order 42 is"))
		}, "ended before the model finished its reply"},
		{"error event mid-stream", func(*testing.T) http.HandlerFunc {
			return sseReply(roleChunk(), textChunk("Order"), `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`)
		}, "error in the middle of the reply stream: The server had an error while processing your request."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.reply(t))
			m := newModel(t, provider.Config{BaseURL: srv.BaseURL()})
			var deltas int
			resp, err := m.Generate(context.Background(), &model.Request{
				Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}},
				OnDelta:  func(model.Delta) { deltas++ },
			})
			if err == nil {
				t.Fatalf("Generate returned %+v, want an error for an unfinished reply", resp.Proposal)
			}
			var me *model.Error
			if !errors.As(err, &me) || !me.Retryable || me.Status != 0 || !strings.Contains(me.Message, tc.message) {
				t.Fatalf("error = %v, want a retryable *model.Error without a status saying %q", err, tc.message)
			}
			if deltas == 0 {
				t.Error("no delta arrived before the stream broke")
			}
		})
	}
}

// blockUntilGone answers nothing until the client goes away (or release is closed), signalling
// on started (when not nil) once the request has arrived; with chunks, it first streams them.
func blockUntilGone(started chan<- struct{}, release <-chan struct{}, chunks ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if len(chunks) > 0 {
			writeChunks(w, chunks...)
		}
		if started != nil {
			started <- struct{}{}
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
}

// stallingServer is a server whose handler blocks (see blockUntilGone). Its handler is released
// when the test ends, before the server's Close, which waits for handlers to return.
func stallingServer(t *testing.T, started chan<- struct{}, chunks ...string) *server {
	release := make(chan struct{})
	srv := newServer(t, blockUntilGone(started, release, chunks...))
	t.Cleanup(func() { close(release) }) // cleanups run last-registered first
	return srv
}

func TestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string // streamed before the server stalls; none: no reply at all
	}{
		{name: "no reply"},
		{name: "stream stalls", chunks: []string{roleChunk(), textChunk("Order")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := stallingServer(t, nil, tc.chunks...)
			m := newModel(t, provider.Config{BaseURL: srv.BaseURL(), Timeout: 100 * time.Millisecond})
			req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
			if len(tc.chunks) > 0 {
				req.OnDelta = func(model.Delta) {}
			}
			_, err := m.Generate(context.Background(), req)
			var me *model.Error
			if !errors.As(err, &me) || !me.Retryable || !strings.Contains(me.Message, "no complete reply within 100ms") {
				t.Fatalf("error = %v, want a retryable \"no complete reply within 100ms\"", err)
			}
			if errors.Is(err, context.Canceled) {
				t.Error("the call's own timeout is reported as a cancellation")
			}
		})
	}
}

func TestCallerCancels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
	}{
		{name: "waiting for the reply"},
		{name: "during the stream", chunks: []string{roleChunk(), textChunk("Order")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{}, 1)
			srv := stallingServer(t, started, tc.chunks...)
			m := newModel(t, provider.Config{BaseURL: srv.BaseURL()})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
			if len(tc.chunks) > 0 {
				req.OnDelta = func(model.Delta) {}
			}
			done := make(chan error, 1)
			go func() {
				_, err := m.Generate(ctx, req)
				done <- err
			}()
			<-started
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("error = %v, want context.Canceled as is", err)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	srv := newServer(t, jsonReply(http.StatusOK, "{}"))
	base := srv.BaseURL()
	srv.Close() // nothing listens there any more
	m := newModel(t, provider.Config{BaseURL: base})
	_, err := m.Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
	var me *model.Error
	if !errors.As(err, &me) || !me.Retryable {
		t.Fatalf("error = %v, want a retryable *model.Error", err)
	}
}

// TestConcurrentUse runs several calls at once on one Model (run with -race).
func TestConcurrentUse(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if streamRequested(r) {
			sseReply(roleChunk(), textChunk("hi"), finishChunk("stop"), usageChunk(2, 1))(w, r)
			return
		}
		jsonReply(http.StatusOK, completion(`{"role":"assistant","content":"hi"}`, 2, 1))(w, r)
	})
	m := newModel(t, provider.Config{BaseURL: srv.BaseURL()})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: fmt.Sprint("call ", i)}}}
			if i%2 == 0 {
				req.OnDelta = func(model.Delta) {}
			}
			resp, err := m.Generate(context.Background(), req)
			if err == nil && resp.Proposal.Text != "hi" {
				err = fmt.Errorf("call %d: text %q", i, resp.Proposal.Text)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := len(srv.Requests()); n != 8 {
		t.Errorf("server saw %d requests, want 8", n)
	}
}

// TestReplyCap: a request's MaxOutputTokens (what the loop's budgets leave) is sent when it is
// below the client's cap; the client's cap otherwise. The model prices its tokens from the
// client's table (model.Pricing), so that the loop can cap a reply by cost.
func TestReplyCap(t *testing.T) {
	for _, tc := range []struct {
		request int64
		want    float64
	}{{0, 300}, {120, 120}, {5000, 300}} {
		srv := newServer(t, jsonReply(http.StatusOK, completion(`{"role":"assistant","content":"hi"}`, 1, 1)))
		m := newModel(t, provider.Config{Model: "gpt-4.1-mini", BaseURL: srv.BaseURL(), MaxOutputTokens: 300})
		req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}, MaxOutputTokens: tc.request}
		if _, err := m.Generate(context.Background(), req); err != nil {
			t.Fatalf("Generate: %v", err)
		}
		if got := srv.Requests()[0].Body["max_tokens"]; got != tc.want {
			t.Errorf("request cap %d: max_tokens %v, want %v", tc.request, got, tc.want)
		}
	}
	m := newModel(t, provider.Config{Model: "gpt-4.1-mini", APIKey: "k"})
	in, out, ok := model.Model(m).(model.Pricing).TokenPrices()
	if !ok || math.Abs(in*1e6-0.40) > 1e-9 || math.Abs(out*1e6-1.60) > 1e-9 {
		t.Errorf("TokenPrices = %g, %g, %v; want gpt-4.1-mini's list prices per token", in, out, ok)
	}
}
