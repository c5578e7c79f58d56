package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/tool"
)

// barrier lets n parties through only once all n have arrived.
type barrier struct {
	mu      sync.Mutex
	arrived int
	n       int
	all     chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, all: make(chan struct{})} }

// wait returns nil once every party has arrived, or ctx's error if that never happens.
func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return nil
	case <-ctx.Done():
		return errors.New("the other tool call never started: the calls did not run concurrently")
	}
}

// TestLoop runs the loop against a local server: the first reply proposes two tool calls, which
// must run concurrently (each blocks until both have started), and the second request must carry
// both results in call order; the second reply answers.
func TestLoop(t *testing.T) {
	srv := newServer(t,
		jsonReply(http.StatusOK, completion(`{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_order","type":"function","function":{"name":"get_order","arguments":"{\"id\":\"42\"}"}},
			{"id":"call_policy","type":"function","function":{"name":"get_policy","arguments":"{\"topic\": \"refunds\"}"}}]}`, 100, 30)),
		jsonReply(http.StatusOK, completion(`{"role":"assistant","content":"Order 42 is paid and can be refunded within 30 days."}`, 160, 15)),
	)
	m := newModel(t, provider.Config{BaseURL: srv.BaseURL(), Prices: provider.Prices{"gpt-test": {InputPerMTok: 1, OutputPerMTok: 1}}})

	// The guard: if the calls ran one after the other, the first would wait here until the
	// test context ends, and the run would not complete.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	both := newBarrier(2)
	object := json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"topic":{"type":"string"}}}`)
	getOrder := tool.New(tool.Spec{Name: "get_order", Description: "Fetch an order.", InputSchema: object},
		func(ctx context.Context, args json.RawMessage, _ string) (json.RawMessage, error) {
			if err := both.wait(ctx); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"id": "42", "status": "paid"}`), nil
		})
	getPolicy := tool.New(tool.Spec{Name: "get_policy", Description: "Read a policy.", InputSchema: object},
		func(ctx context.Context, args json.RawMessage, _ string) (json.RawMessage, error) {
			if err := both.wait(ctx); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"refund_days": 30}`), nil
		})
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{getOrder, getPolicy}, Instructions: "You handle refunds."})
	if err != nil {
		t.Fatalf("loop.New: %v", err)
	}

	res := c.Run(ctx, "run-1", "Can order 42 be refunded?")
	if res.StopReason != loop.Completed {
		t.Fatalf("stop reason %s (%s), want completed", res.StopReason, res.Detail)
	}
	if res.Answer != "Order 42 is paid and can be refunded within 30 days." {
		t.Errorf("answer = %q", res.Answer)
	}
	if res.State.Usage.InputTokens != 260 || res.State.Usage.OutputTokens != 45 || res.State.CostUSD != 305/1e6 {
		t.Errorf("usage %+v, cost %v: want 260 in, 45 out, $0.000305", res.State.Usage, res.State.CostUSD)
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(reqs))
	}
	jsonEqual(t, "first request's messages", reqs[0].Body["messages"], `[
		{"role": "system", "content": "You handle refunds."},
		{"role": "user", "content": "Can order 42 be refunded?"}
	]`)
	jsonEqual(t, "second request's messages", reqs[1].Body["messages"], `[
		{"role": "system", "content": "You handle refunds."},
		{"role": "user", "content": "Can order 42 be refunded?"},
		{"role": "assistant", "tool_calls": [
			{"id": "call_order", "type": "function", "function": {"name": "get_order", "arguments": "{\"id\":\"42\"}"}},
			{"id": "call_policy", "type": "function", "function": {"name": "get_policy", "arguments": "{\"topic\": \"refunds\"}"}}
		]},
		{"role": "tool", "tool_call_id": "call_order", "content": "{\"id\":\"42\",\"status\":\"paid\"}"},
		{"role": "tool", "tool_call_id": "call_policy", "content": "{\"refund_days\":30}"}
	]`)
	for i, r := range reqs {
		jsonEqual(t, "tools offered", r.Body["tools"], `[
			{"type": "function", "function": {"name": "get_order", "description": "Fetch an order.", "parameters": {"type":"object","properties":{"id":{"type":"string"},"topic":{"type":"string"}}}}},
			{"type": "function", "function": {"name": "get_policy", "description": "Read a policy.", "parameters": {"type":"object","properties":{"id":{"type":"string"},"topic":{"type":"string"}}}}}
		]`)
		if t.Failed() {
			t.Logf("request %d", i)
		}
	}
}
