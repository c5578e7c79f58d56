package loop_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
)

// A provider's Retry-After makes the loop's retry wait longer than its own backoff, on its clock.
func TestRetryAfterIsHonoured(t *testing.T) {
	clk := clock.NewVirtual(t0)
	var calls []time.Time
	m := model.Func(func(_ context.Context, req *model.Request) (*model.Response, error) {
		calls = append(calls, clk.Now())
		if req.Seq == 0 {
			return nil, &model.Error{Message: "rate limited", Retryable: true, Status: 429, RetryAfter: 7 * time.Second}
		}
		return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "ok"}}, nil
	})
	c, err := loop.New(loop.Config{Model: m, Clock: clk, RetryBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "r", "goal")
	if res.StopReason != loop.Completed || len(calls) != 2 {
		t.Fatalf("stop %s (%s) after %d calls", res.StopReason, res.Detail, len(calls))
	}
	if waited := calls[1].Sub(calls[0]); waited != 7*time.Second {
		t.Fatalf("waited %s before the retry, want the server's 7s", waited)
	}
}

// A Retry-After beyond the wall-clock budget ends the run with timeout rather than overrunning.
func TestRetryAfterBeyondTheBudget(t *testing.T) {
	m := model.Func(func(context.Context, *model.Request) (*model.Response, error) {
		return nil, &model.Error{Message: "overloaded", Retryable: true, RetryAfter: time.Hour}
	})
	c, err := loop.New(loop.Config{Model: m, Clock: clock.NewVirtual(t0), Budget: loop.Budget{MaxDuration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if res := c.Run(context.Background(), "r", "goal"); res.StopReason != loop.Timeout {
		t.Fatalf("stop %s (%s), want timeout", res.StopReason, res.Detail)
	}
}

func TestLongToolOutputIsTruncatedVisibly(t *testing.T) {
	big := `"` + strings.Repeat("é", 600) + `"` // 1202 bytes of JSON, two-byte runes
	dump := tool.New(tool.Spec{Name: "dump"}, func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
		return json.RawMessage(big), nil
	})
	m, err := model.NewScripted([]model.Turn{callsTurn(tc("dump", `{}`)), answerTurn("done")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{dump}, Clock: clock.NewVirtual(t0), MaxToolOutput: 101})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "r", "goal")
	var result string
	for _, msg := range res.State.Messages {
		if msg.Role == model.RoleTool {
			result = msg.Content
		}
	}
	head, marker, ok := strings.Cut(result, "\n…[reins: output truncated: ")
	if !ok || marker != "showing 101 of 1202 bytes]" {
		t.Fatalf("result %q lacks the truncation marker", result)
	}
	if len(head) != 101 || !utf8.ValidString(head) {
		t.Fatalf("kept %d bytes (valid UTF-8: %v), want 101 cut at a rune boundary", len(head), utf8.ValidString(head))
	}
}

// Streamed deltas reach Config.OnDelta tagged with their iteration; the tool choice reaches the
// model with every request.
func TestDeltasAndToolChoiceReachTheModel(t *testing.T) {
	var choices []string
	m := model.Func(func(_ context.Context, req *model.Request) (*model.Response, error) {
		choices = append(choices, req.ToolChoice)
		if req.OnDelta == nil {
			t.Fatal("no delta callback in the request")
		}
		req.OnDelta(model.Delta{Text: "thinking " + string(rune('0'+req.Seq))})
		if req.Seq == 0 {
			return &model.Response{Proposal: model.Proposal{Kind: model.KindToolCalls, Calls: []model.ToolCall{{ID: "c", Name: "noop", Arguments: json.RawMessage(`{}`)}}}}, nil
		}
		return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "done"}}, nil
	})
	noop := tool.New(tool.Spec{Name: "noop"}, func(context.Context, json.RawMessage, string) (json.RawMessage, error) { return nil, nil })
	var got []string
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{noop}, Clock: clock.NewVirtual(t0), ToolChoice: "required",
		OnDelta: func(iter int, d model.Delta) { got = append(got, string(rune('0'+iter))+":"+d.Text) }})
	if err != nil {
		t.Fatal(err)
	}
	if res := c.Run(context.Background(), "r", "goal"); res.StopReason != loop.Completed {
		t.Fatalf("stop %s (%s)", res.StopReason, res.Detail)
	}
	if strings.Join(got, "|") != "1:thinking 0|2:thinking 1" {
		t.Errorf("deltas %v", got)
	}
	if strings.Join(choices, ",") != "required,required" {
		t.Errorf("tool choices %v", choices)
	}
}
