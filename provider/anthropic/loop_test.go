package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
)

// TestWithLoop runs the loop against a local server: the first reply proposes two calls, which
// run concurrently; their results go back in one user message, in call order; the second reply
// answers.
func TestWithLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "stream"}[stream], func(t *testing.T) {
			testWithLoop(t, stream)
		})
	}
}

func testWithLoop(t *testing.T, stream bool) {
	// Guards the barrier below: if the tools did not run concurrently, the first would wait
	// here until this context ends, and the run would not complete.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{}) // closed once both tools have started
	)
	barrier := func(ctx context.Context) error {
		mu.Lock()
		arrived++
		if arrived == 2 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return errors.New("the other tool never started: the calls did not run concurrently")
		}
	}
	schema := json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}`)
	readOrder := tool.New(tool.Spec{Name: "read_order", Description: "Read an order.", InputSchema: schema},
		func(ctx context.Context, args json.RawMessage, _ string) (json.RawMessage, error) {
			if err := barrier(ctx); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"order": "O-1", "late_days": 4}`), nil
		})
	readCustomer := tool.New(tool.Spec{Name: "read_customer", Description: "Read a customer.", InputSchema: schema},
		func(ctx context.Context, args json.RawMessage, _ string) (json.RawMessage, error) {
			if err := barrier(ctx); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"customer": "C-9", "tier": "gold"}`), nil
		})

	first := reply{Blocks: []block{
		text("Reading both."),
		toolUse("toolu_order", "read_order", `{"id":"O-1"}`),
		toolUse("toolu_customer", "read_customer", `{"id":"C-9"}`),
	}, Stop: "tool_use", In: 100, Out: 40}
	second := reply{Blocks: []block{text("The refund is justified: O-1 was 4 days late.")}, Stop: "end_turn", In: 200, Out: 20}
	s := newServer(t, answer(first), func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		msgs, _ := body["messages"].([]any)
		if len(msgs) != 3 {
			t.Errorf("second request has %d messages, want 3 (user, assistant, user): %s", len(msgs), mustJSON(msgs))
		} else {
			assertJSON(t, "tool results", msgs[2], `{"role":"user","content":[
				{"type":"tool_result","tool_use_id":"toolu_order","content":[{"type":"text","text":"{\"order\":\"O-1\",\"late_days\":4}"}]},
				{"type":"tool_result","tool_use_id":"toolu_customer","content":[{"type":"text","text":"{\"customer\":\"C-9\",\"tier\":\"gold\"}"}]}]}`)
		}
		answer(second)(w, r, body)
	})
	m := s.model(s.config())
	cfg := loop.Config{Model: m, Tools: []tool.Tool{readOrder, readCustomer}, Instructions: "You check refunds."}
	var deltas int
	if stream {
		cfg.OnDelta = func(int, model.Delta) { deltas++ }
	}
	c, err := loop.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(ctx, "run-1", "Is the refund for O-1 justified?")
	if res.StopReason != loop.Completed {
		t.Fatalf("stop reason %s (%s), want completed", res.StopReason, res.Detail)
	}
	if res.Answer != "The refund is justified: O-1 was 4 days late." {
		t.Errorf("answer %q", res.Answer)
	}
	if n := len(s.requests()); n != 2 {
		t.Errorf("server saw %d requests, want 2", n)
	}
	if want := (model.Usage{InputTokens: 300, OutputTokens: 60}); res.State.Usage != want {
		t.Errorf("usage %+v, want %+v", res.State.Usage, want)
	}
	if stream && deltas == 0 {
		t.Error("no deltas reached the loop's OnDelta")
	}
}
