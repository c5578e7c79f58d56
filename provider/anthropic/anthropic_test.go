package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/anthropic"
)

// decode parses a JSON literal for comparison with a decoded request body.
func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON in test: %v\n%s", err, s)
	}
	return v
}

func assertJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	if w := decode(t, want); !reflect.DeepEqual(got, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, mustJSON(got), mustJSON(w))
	}
}

func TestNew(t *testing.T) {
	if _, err := anthropic.New(provider.Config{APIKey: "k"}); err == nil {
		t.Error("New without a model name: no error")
	}
	if _, err := anthropic.New(provider.Config{Model: testModel}); err == nil {
		t.Error("New without an API key or base URL: no error")
	}
	if _, err := anthropic.New(provider.Config{Model: testModel, BaseURL: "http://127.0.0.1:1"}); err != nil {
		t.Errorf("New with a base URL and no key: %v", err)
	}
	if _, err := anthropic.New(provider.Config{Model: testModel, APIKey: "k"}); err != nil {
		t.Errorf("New with a key: %v", err)
	}
}

// conversation is a turn of three calls answered by the loop: one success, one call whose
// arguments were not JSON (stored by the loop as a JSON string) and one with no arguments.
var conversation = []model.Message{
	{Role: model.RoleUser, Content: "Is the refund for O-1 justified?"},
	{Role: model.RoleAssistant, Content: "Let me look.", Calls: []model.ToolCall{
		{ID: "toolu_1", Name: "read_order", Arguments: json.RawMessage(`{"order_id": "O-1"}`)},
		{ID: "toolu_2", Name: "read_order", Arguments: json.RawMessage(`"{\"order_id\": "`)},
		{ID: "toolu_3", Name: "list_orders"},
	}},
	{Role: model.RoleTool, CallID: "toolu_1", Name: "read_order", Content: `{"status":"delivered","late_days":4}`},
	{Role: model.RoleTool, CallID: "toolu_2", Name: "read_order", Content: "arguments of read_order rejected: not valid JSON", IsError: true},
	{Role: model.RoleTool, CallID: "toolu_3", Name: "list_orders", Content: `["O-1"]`},
	{Role: model.RoleAssistant, Content: "It is."},
	{Role: model.RoleUser, Content: "reins: your answer was not accepted: call read_order first"},
}

const wantMessages = `[
 {"role":"user","content":[{"type":"text","text":"Is the refund for O-1 justified?"}]},
 {"role":"assistant","content":[
   {"type":"text","text":"Let me look."},
   {"type":"tool_use","id":"toolu_1","name":"read_order","input":{"order_id":"O-1"}},
   {"type":"tool_use","id":"toolu_2","name":"read_order","input":{}},
   {"type":"tool_use","id":"toolu_3","name":"list_orders","input":{}}]},
 {"role":"user","content":[
   {"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"{\"status\":\"delivered\",\"late_days\":4}"}]},
   {"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"arguments of read_order rejected: not valid JSON"}]},
   {"type":"tool_result","tool_use_id":"toolu_3","content":[{"type":"text","text":"[\"O-1\"]"}]}]},
 {"role":"assistant","content":[{"type":"text","text":"It is."}]},
 {"role":"user","content":[{"type":"text","text":"reins: your answer was not accepted: call read_order first"}]}
]`

var tools = []model.ToolDef{
	{Name: "read_order", Description: "Read an order by id.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":false}`)},
	{Name: "list_orders"},
}

const wantTools = `[
 {"name":"read_order","description":"Read an order by id.",
  "input_schema":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":false}},
 {"name":"list_orders","input_schema":{"type":"object","properties":{}}}
]`

func TestRequestShape(t *testing.T) {
	cases := []struct {
		name       string
		choice     string
		wantChoice string // "" when tool_choice must be absent
		onDelta    bool
		cfgStream  bool
		maxTokens  int
	}{
		{name: "no choice", choice: ""},
		{name: "auto", choice: "auto", wantChoice: `{"type":"auto"}`, onDelta: true},
		{name: "required", choice: "required", wantChoice: `{"type":"any"}`, cfgStream: true, maxTokens: 1000},
		{name: "none", choice: "none", wantChoice: `{"type":"none"}`},
		{name: "one tool", choice: "read_order", wantChoice: `{"type":"tool","name":"read_order"}`, onDelta: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, answer(reply{Blocks: []block{text("ok")}, Stop: "end_turn", In: 1, Out: 1}))
			cfg := s.config()
			cfg.Stream = tc.cfgStream
			cfg.MaxOutputTokens = tc.maxTokens
			req := &model.Request{Instructions: "You check refunds.", Messages: conversation, Tools: tools, ToolChoice: tc.choice}
			if tc.onDelta {
				req.OnDelta = func(model.Delta) {}
			}
			resp, err := s.model(cfg).Generate(context.Background(), req)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if resp.Proposal.Text != "ok" {
				t.Errorf("answer %q, want ok", resp.Proposal.Text)
			}
			reqs := s.requests()
			if len(reqs) != 1 {
				t.Fatalf("server saw %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if got := r.Header.Get("X-Api-Key"); got != "test-key" {
				t.Errorf("x-api-key %q, want test-key", got)
			}
			if r.Header.Get("Anthropic-Version") == "" {
				t.Error("no anthropic-version header")
			}
			b := r.Body
			if b["model"] != testModel {
				t.Errorf("model %v, want %s", b["model"], testModel)
			}
			wantMax := float64(4096)
			if tc.maxTokens != 0 {
				wantMax = float64(tc.maxTokens)
			}
			if b["max_tokens"] != wantMax {
				t.Errorf("max_tokens %v, want %v", b["max_tokens"], wantMax)
			}
			wantStream := tc.onDelta || tc.cfgStream
			if got, _ := b["stream"].(bool); got != wantStream {
				t.Errorf("stream %v, want %v", b["stream"], wantStream)
			}
			assertJSON(t, "system", b["system"], `[{"type":"text","text":"You check refunds."}]`)
			assertJSON(t, "messages", b["messages"], wantMessages)
			assertJSON(t, "tools", b["tools"], wantTools)
			if tc.wantChoice == "" {
				if c, ok := b["tool_choice"]; ok {
					t.Errorf("tool_choice %v sent, want none", mustJSON(c))
				}
			} else {
				assertJSON(t, "tool_choice", b["tool_choice"], tc.wantChoice)
			}
		})
	}
}

// TestMinimalRequest checks that what is not set is not sent.
func TestMinimalRequest(t *testing.T) {
	s := newServer(t, answer(reply{Blocks: []block{text("hi")}, Stop: "end_turn"}))
	_, err := s.model(s.config()).Generate(context.Background(), &model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: "hello"}}, ToolChoice: "required"})
	if err != nil {
		t.Fatal(err)
	}
	b := s.requests()[0].Body
	for _, k := range []string{"system", "tools", "tool_choice", "stream"} {
		if v, ok := b[k]; ok {
			t.Errorf("%s sent (%s), want it absent", k, mustJSON(v))
		}
	}
	assertJSON(t, "messages", b["messages"], `[{"role":"user","content":[{"type":"text","text":"hello"}]}]`)
}

// TestMergedTurns: consecutive messages of one role become one message, since the API wants
// turns to alternate; an assistant message with nothing to say is left out.
func TestMergedTurns(t *testing.T) {
	s := newServer(t, answer(reply{Blocks: []block{text("hi")}, Stop: "end_turn"}))
	_, err := s.model(s.config()).Generate(context.Background(), &model.Request{Messages: []model.Message{
		{Role: model.RoleUser, Content: "go"},
		{Role: model.RoleAssistant},
		{Role: model.RoleUser, Content: "reins: your answer was not accepted: the answer is empty"},
		{Role: model.RoleAssistant, Calls: []model.ToolCall{{ID: "toolu_1", Name: "list_orders", Arguments: json.RawMessage(`{}`)}}},
		{Role: model.RoleTool, CallID: "toolu_1", Name: "list_orders"},
		{Role: model.RoleUser, Content: "and now?"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "messages", s.requests()[0].Body["messages"], `[
		{"role":"user","content":[{"type":"text","text":"go"},{"type":"text","text":"reins: your answer was not accepted: the answer is empty"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"list_orders","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1"},{"type":"text","text":"and now?"}]}]`)
}

// TestLargeMaxTokensStreams: the SDK refuses a non-streaming call whose max_tokens could take
// over ten minutes, so such a call streams even without a delta callback.
func TestLargeMaxTokensStreams(t *testing.T) {
	s := newServer(t, answer(reply{Blocks: []block{text("ok")}, Stop: "end_turn"}))
	cfg := s.config()
	cfg.MaxOutputTokens = 64000
	resp, err := s.model(cfg).Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}})
	if err != nil {
		t.Fatal(err)
	}
	if b := s.requests()[0].Body; b["stream"] != true || b["max_tokens"] != float64(64000) {
		t.Errorf("stream %v max_tokens %v, want true 64000", b["stream"], b["max_tokens"])
	}
	if resp.Proposal.Text != "ok" {
		t.Errorf("answer %q", resp.Proposal.Text)
	}
}

func TestPairing(t *testing.T) {
	call := func(ids ...string) model.Message {
		m := model.Message{Role: model.RoleAssistant}
		for _, id := range ids {
			m.Calls = append(m.Calls, model.ToolCall{ID: id, Name: "read_order", Arguments: json.RawMessage(`{}`)})
		}
		return m
	}
	result := func(id string) model.Message { return model.Message{Role: model.RoleTool, CallID: id, Content: "x"} }
	user := model.Message{Role: model.RoleUser, Content: "go"}
	cases := []struct {
		name string
		conv []model.Message
		id   string // the call id the error must name
	}{
		{"missing result", []model.Message{user, call("toolu_a", "toolu_b"), result("toolu_a")}, "toolu_b"},
		{"no results at all", []model.Message{user, call("toolu_a"), user}, "toolu_a"},
		{"result answers another call", []model.Message{user, call("toolu_a"), result("toolu_x")}, "toolu_x"},
		{"orphan result", []model.Message{user, result("toolu_z")}, "toolu_z"},
		{"result after a user message", []model.Message{user, call("toolu_a"), user, result("toolu_a")}, "toolu_a"},
		{"result answered twice", []model.Message{user, call("toolu_a"), result("toolu_a"), result("toolu_a")}, "toolu_a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			_, err := s.model(s.config()).Generate(context.Background(), &model.Request{Messages: tc.conv})
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T), want *model.Error", err, err)
			}
			t.Log(me)
			if me.Retryable {
				t.Errorf("retryable error %v, want non-retryable", me)
			}
			if !strings.Contains(me.Error(), tc.id) {
				t.Errorf("error %q does not name the call %s", me, tc.id)
			}
			if n := len(s.requests()); n != 0 {
				t.Errorf("server saw %d requests, want none", n)
			}
		})
	}
}

// generateBoth asks for r without and with streaming and checks both give the same Response.
func generateBoth(t *testing.T, r reply, cfg func(*provider.Config)) *model.Response {
	t.Helper()
	s := newServer(t, answer(r), answer(r))
	c := s.config()
	if cfg != nil {
		cfg(&c)
	}
	m := s.model(c)
	req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}}
	whole, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	req.OnDelta = func(model.Delta) {}
	streamed, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate, streaming: %v", err)
	}
	if !reflect.DeepEqual(whole, streamed) {
		t.Errorf("streamed response differs from the whole one:\nwhole    %+v\nstreamed %+v", whole, streamed)
	}
	return whole
}

func TestReplies(t *testing.T) {
	cases := []struct {
		name  string
		reply reply
		want  model.Proposal
	}{
		{
			name:  "text",
			reply: reply{Blocks: []block{text("The refund "), text("is justified.")}, Stop: "end_turn"},
			want:  model.Proposal{Kind: model.KindAnswer, Text: "The refund is justified."},
		},
		{
			name: "several tool calls",
			reply: reply{Blocks: []block{
				text("Checking both."),
				toolUse("toolu_01", "read_order", `{"order_id": "O-1"}`),
				toolUse("toolu_02", "read_order", `{"order_id":"O-2","fields":["status","late_days"]}`),
				toolUse("toolu_03", "list_orders", ``),
			}, Stop: "tool_use"},
			want: model.Proposal{Kind: model.KindToolCalls, Text: "Checking both.", Calls: []model.ToolCall{
				{ID: "toolu_01", Name: "read_order", Arguments: json.RawMessage(`{"order_id":"O-1"}`)},
				{ID: "toolu_02", Name: "read_order", Arguments: json.RawMessage(`{"order_id":"O-2","fields":["status","late_days"]}`)},
				{ID: "toolu_03", Name: "list_orders", Arguments: json.RawMessage(`{}`)},
			}},
		},
		{
			name:  "refusal",
			reply: reply{Blocks: []block{text("I can't help with that.")}, Stop: "refusal"},
			want:  model.Proposal{Kind: model.KindRefuse, Reason: "I can't help with that."},
		},
		{
			name:  "refusal without text",
			reply: reply{Stop: "refusal"},
			want:  model.Proposal{Kind: model.KindRefuse, Reason: "refusal"},
		},
		{
			// A refused turn is not acted on, even if it began a call.
			name:  "refusal after a call began",
			reply: reply{Blocks: []block{text("Reading."), toolUse("toolu_01", "delete_account", `{}`)}, Stop: "refusal"},
			want:  model.Proposal{Kind: model.KindRefuse, Reason: "Reading."},
		},
		{
			name:  "cut off at max_tokens",
			reply: reply{Blocks: []block{text("The refund is")}, Stop: "max_tokens"},
			want:  model.Proposal{Kind: model.KindAnswer, Text: "The refund is"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := generateBoth(t, tc.reply, nil)
			if !reflect.DeepEqual(resp.Proposal, tc.want) {
				t.Errorf("proposal\n got %+v\nwant %+v", resp.Proposal, tc.want)
			}
		})
	}
}

func TestUsageAndCost(t *testing.T) {
	r := reply{Blocks: []block{text("ok")}, Stop: "end_turn", In: 1000, CacheWrite: 200, CacheRead: 300, Out: 500}
	resp := generateBoth(t, r, func(c *provider.Config) {
		c.Prices = provider.Prices{"claude-test": {InputPerMTok: 3, OutputPerMTok: 15}}
	})
	if want := (model.Usage{InputTokens: 1500, OutputTokens: 500}); resp.Usage != want {
		t.Errorf("usage %+v, want %+v", resp.Usage, want)
	}
	if want := (1500*3.0 + 500*15.0) / 1e6; resp.CostUSD != want {
		t.Errorf("cost %v, want %v", resp.CostUSD, want)
	}
	// A model without a price costs nothing.
	resp = generateBoth(t, r, nil)
	if resp.CostUSD != 0 {
		t.Errorf("cost %v without a price, want 0", resp.CostUSD)
	}
}

// TestMalformedStreamedInput: streamed input that does not form JSON reaches the loop as it was
// sent (the SDK's Accumulate would replace it with {}), so the loop rejects the call.
func TestMalformedStreamedInput(t *testing.T) {
	r := reply{Blocks: []block{
		toolUse("toolu_ok", "read_order", `{"order_id":"O-1"}`),
		{Type: "tool_use", ID: "toolu_bad", Name: "read_order", Pieces: []string{`{"order_id": `, `"O-`, `1"`}},
	}, Stop: "max_tokens"}
	s := newServer(t, answer(r))
	var deltas []string
	resp, err := s.model(s.config()).Generate(context.Background(), &model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: "go"}},
		OnDelta: func(d model.Delta) {
			if d.CallIndex == 1 {
				deltas = append(deltas, d.Arguments)
			}
		},
	})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	want := []model.ToolCall{
		{ID: "toolu_ok", Name: "read_order", Arguments: json.RawMessage(`{"order_id":"O-1"}`)},
		{ID: "toolu_bad", Name: "read_order", Arguments: json.RawMessage(`{"order_id": "O-1"`)},
	}
	if resp.Proposal.Kind != model.KindToolCalls || !reflect.DeepEqual(resp.Proposal.Calls, want) {
		t.Errorf("proposal %+v, want tool calls %+v", resp.Proposal, want)
	}
	if got := strings.Join(deltas, ""); got != `{"order_id": "O-1"` {
		t.Errorf("argument deltas of the second call %q", got)
	}
}

func TestStreamingDeltas(t *testing.T) {
	r := reply{Blocks: []block{
		text("Checking both orders."),
		toolUse("toolu_01", "read_order", `{"order_id":"O-1"}`),
		toolUse("toolu_02", "read_order", `{"order_id":"O-2"}`),
	}, Stop: "tool_use", In: 10, Out: 20}
	s := newServer(t, answer(r), answer(r))
	m := s.model(s.config())
	var got []model.Delta
	req := &model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: "go"}},
		OnDelta:  func(d model.Delta) { got = append(got, d) },
	}
	streamed, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	want := []model.Delta{
		{Text: "Checki"}, {Text: "ng bot"}, {Text: "h orde"}, {Text: "rs."},
		{CallIndex: 0, CallID: "toolu_01", CallName: "read_order"},
		{CallIndex: 0, Arguments: `{"order`}, {CallIndex: 0, Arguments: `_id":"O`}, {CallIndex: 0, Arguments: `-1"}`},
		{CallIndex: 1, CallID: "toolu_02", CallName: "read_order"},
		{CallIndex: 1, Arguments: `{"order`}, {CallIndex: 1, Arguments: `_id":"O`}, {CallIndex: 1, Arguments: `-2"}`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("deltas\n got %+v\nwant %+v", got, want)
	}
	// The response is what the deltas add up to, and what the whole reply gives.
	var txt string
	args := map[int]string{}
	for _, d := range got {
		txt += d.Text
		args[d.CallIndex] += d.Arguments
	}
	if streamed.Proposal.Text != txt {
		t.Errorf("text %q, deltas add up to %q", streamed.Proposal.Text, txt)
	}
	for i, c := range streamed.Proposal.Calls {
		if string(c.Arguments) != args[i] {
			t.Errorf("call %d arguments %s, deltas add up to %s", i, c.Arguments, args[i])
		}
	}
	req.OnDelta = nil
	whole, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if !reflect.DeepEqual(whole, streamed) {
		t.Errorf("streamed %+v\nwhole %+v", streamed, whole)
	}
}

func TestConcurrentGenerate(t *testing.T) {
	const n = 8
	r := reply{Blocks: []block{text("ok")}, Stop: "end_turn"}
	hs := make([]handler, n)
	for i := range hs {
		hs[i] = answer(r)
	}
	s := newServer(t, hs...)
	m := s.model(s.config())
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}}
			if i%2 == 0 {
				req.OnDelta = func(model.Delta) {}
			}
			resp, err := m.Generate(context.Background(), req)
			if err == nil && resp.Proposal.Text != "ok" {
				err = errors.New("answer " + resp.Proposal.Text)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// modelError asserts err is a *model.Error and returns it.
func modelError(t *testing.T, err error) *model.Error {
	t.Helper()
	var me *model.Error
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T), want *model.Error", err, err)
	}
	return me
}

func TestHTTPErrors(t *testing.T) {
	cases := []struct {
		name       string
		status     int
		header     http.Header
		errType    string
		message    string
		retryable  bool
		retryAfter time.Duration
	}{
		{"rate limited", 429, http.Header{"Retry-After": {"7"}}, "rate_limit_error", "Number of requests has exceeded your rate limit", true, 7 * time.Second},
		{"overloaded", 529, nil, "overloaded_error", "Overloaded", true, 0},
		{"server error", 500, nil, "api_error", "Internal server error", true, 0},
		{"bad request", 400, nil, "invalid_request_error", "max_tokens: 0 is below the minimum of 1", false, 0},
		{"unauthorized", 401, nil, "authentication_error", "invalid x-api-key", false, 0},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			name := tc.name
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				s := newServer(t, fail(tc.status, tc.header, tc.errType, tc.message))
				cfg := s.config()
				cfg.Stream = stream
				_, err := s.model(cfg).Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}})
				me := modelError(t, err)
				t.Log(me)
				if me.Retryable != tc.retryable || me.Status != tc.status || me.RetryAfter != tc.retryAfter {
					t.Errorf("got retryable %v status %d retry-after %v, want %v %d %v (%v)",
						me.Retryable, me.Status, me.RetryAfter, tc.retryable, tc.status, tc.retryAfter, me)
				}
				if !strings.Contains(me.Error(), tc.message) || !strings.Contains(me.Error(), fmt.Sprint("HTTP ", tc.status)) {
					t.Errorf("error %q lacks the status or the server's message %q", me, tc.message)
				}
				if strings.Contains(me.Error(), "test-key") {
					t.Errorf("error %q shows the API key", me)
				}
				if n := len(s.requests()); n != 1 {
					t.Errorf("server saw %d requests, want exactly 1 (no SDK retries)", n)
				}
			})
		}
	}
}

func TestStreamErrorEvent(t *testing.T) {
	start := reply{}.events()[0]
	cases := []struct {
		errType   string
		retryable bool
	}{
		{"overloaded_error", true},
		{"api_error", true},
		{"some_new_error", true},
		{"invalid_request_error", false},
	}
	for _, tc := range cases {
		t.Run(tc.errType, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				writeEvents(w, []string{start, sse("error", `{"type":"error","error":{"type":"`+tc.errType+`","message":"Something happened"}}`)})
			})
			cfg := s.config()
			cfg.Stream = true
			_, err := s.model(cfg).Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}})
			me := modelError(t, err)
			t.Log(me)
			if me.Retryable != tc.retryable {
				t.Errorf("retryable %v, want %v (%v)", me.Retryable, tc.retryable, me)
			}
			if !strings.Contains(me.Error(), "Something happened") || !strings.Contains(me.Error(), tc.errType) {
				t.Errorf("error %q lacks the event's type or message", me)
			}
		})
	}
}

func TestDroppedStream(t *testing.T) {
	r := reply{Blocks: []block{text("The refund is justified.")}, Stop: "end_turn"}
	evs := r.events()
	partial := evs[:4] // message_start, ping, content_block_start, one text delta
	cases := []struct {
		name string
		h    handler
	}{
		{"connection closed", func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			writeEvents(w, partial)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
		}},
		{"ended without message_stop", func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			writeEvents(w, evs[:len(evs)-1])
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.h)
			var got []model.Delta
			_, err := s.model(s.config()).Generate(context.Background(), &model.Request{
				Messages: []model.Message{{Role: model.RoleUser, Content: "go"}},
				OnDelta:  func(d model.Delta) { got = append(got, d) },
			})
			me := modelError(t, err)
			t.Log(me)
			if !me.Retryable {
				t.Errorf("error %v not retryable", me)
			}
			if len(got) == 0 {
				t.Error("no delta reached OnDelta before the drop")
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	block := func(w http.ResponseWriter, r *http.Request, _ map[string]any) { <-r.Context().Done() }
	stall := func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		writeEvents(w, reply{}.events()[:2])
		<-r.Context().Done()
	}
	cases := []struct {
		name   string
		h      handler
		stream bool
	}{
		{"no reply", block, false},
		{"no reply/stream", block, true},
		{"stream stalls", stall, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.h)
			cfg := s.config()
			cfg.Timeout = 100 * time.Millisecond
			cfg.Stream = tc.stream
			_, err := s.model(cfg).Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}})
			me := modelError(t, err)
			t.Log(me)
			if !me.Retryable || !strings.Contains(me.Error(), "no complete reply within") {
				t.Errorf("error %v, want a retryable 'no complete reply within'", me)
			}
		})
	}
}

func TestCallerCancel(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "stream"}[stream], func(t *testing.T) {
			started := make(chan struct{})
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				if body["stream"] == true {
					writeEvents(w, reply{}.events()[:2])
				}
				close(started)
				<-r.Context().Done()
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				<-started
				cancel()
			}()
			cfg := s.config()
			cfg.Stream = stream
			_, err := s.model(cfg).Generate(ctx, &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error %v, want context.Canceled", err)
			}
		})
	}
}

// TestUnreachable: a refused connection is a retryable transport error.
func TestUnreachable(t *testing.T) {
	s := newServer(t)
	cfg := s.config()
	s.srv.Close()
	_, err := s.model(cfg).Generate(context.Background(), &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}})
	if me := modelError(t, err); !me.Retryable || me.Status != 0 {
		t.Errorf("error %v: retryable %v status %d, want retryable with no status", me, me.Retryable, me.Status)
	}
}

// TestReplyCap: the request's MaxOutputTokens is sent as max_tokens when below the client's.
func TestReplyCap(t *testing.T) {
	s := newServer(t, answer(reply{Blocks: []block{text("ok")}, Stop: "end_turn", In: 1, Out: 1}))
	cfg := s.config()
	cfg.Model, cfg.MaxOutputTokens = "claude-haiku-4-5", 300
	m := s.model(cfg)
	req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}, MaxOutputTokens: 42}
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := s.requests()[0].Body["max_tokens"]; got != float64(42) {
		t.Errorf("max_tokens %v, want 42", got)
	}
	if in, out, ok := model.Model(m).(model.Pricing).TokenPrices(); !ok || math.Abs(in*1e6-1) > 1e-9 || math.Abs(out*1e6-5) > 1e-9 {
		t.Errorf("TokenPrices = %g, %g, %v; want claude-haiku-4-5's list prices per token", in, out, ok)
	}
}
