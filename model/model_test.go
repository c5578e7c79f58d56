package model_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/model"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// turns decodes a script in the fixture format, so the tests exercise the JSON keys too.
func turns(t *testing.T, script string) []model.Turn {
	t.Helper()
	var ts []model.Turn
	if err := json.Unmarshal([]byte(script), &ts); err != nil {
		t.Fatalf("decoding the script: %v", err)
	}
	return ts
}

func scripted(t *testing.T, script string, clk clock.Clock) *model.Scripted {
	t.Helper()
	s, err := model.NewScripted(turns(t, script), clk)
	if err != nil {
		t.Fatalf("NewScripted: %v", err)
	}
	return s
}

func TestScriptedReturnsTurnsBySeq(t *testing.T) {
	s := scripted(t, `[
		{"text": "zero", "usage": {"input_tokens": 10, "output_tokens": 2}, "cost_usd": 0.5},
		{"tool_calls": [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "id": "mine"}, {"name": "c", "arguments": null}]},
		{"escalate": "help"},
		{"refuse": "no"}
	]`, clock.NewVirtual(epoch))

	// Seq, not call order, picks the turn: ask out of order and twice.
	for _, seq := range []int{3, 0, 2, 1, 0} {
		resp, err := s.Generate(context.Background(), &model.Request{Seq: seq})
		if err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		p := resp.Proposal
		switch seq {
		case 0:
			if p.Kind != model.KindAnswer || p.Text != "zero" {
				t.Errorf("seq 0: proposal %+v, want answer \"zero\"", p)
			}
			if resp.Usage != (model.Usage{InputTokens: 10, OutputTokens: 2}) || resp.Usage.Total() != 12 || resp.CostUSD != 0.5 {
				t.Errorf("seq 0: usage %+v cost %v, want 10+2 tokens and 0.5", resp.Usage, resp.CostUSD)
			}
		case 1:
			if p.Kind != model.KindToolCalls || len(p.Calls) != 3 {
				t.Fatalf("seq 1: proposal %+v, want three tool calls", p)
			}
			want := []model.ToolCall{
				{ID: "call_1_0", Name: "a", Arguments: json.RawMessage(`{"x": 1}`)},
				{ID: "mine", Name: "b", Arguments: json.RawMessage(`{}`)},
				{ID: "call_1_2", Name: "c", Arguments: json.RawMessage(`{}`)},
			}
			for i, c := range p.Calls {
				// Arguments are compared as JSON values: the script's formatting is not promised.
				if c.ID != want[i].ID || c.Name != want[i].Name || compact(t, c.Arguments) != compact(t, want[i].Arguments) {
					t.Errorf("seq 1 call %d = {%s %s %s}, want {%s %s %s}", i, c.ID, c.Name, c.Arguments, want[i].ID, want[i].Name, want[i].Arguments)
				}
			}
			if resp.Usage.Total() != 0 || resp.CostUSD != 0 {
				t.Errorf("seq 1: usage %+v cost %v, want zero", resp.Usage, resp.CostUSD)
			}
		case 2:
			if p.Kind != model.KindEscalate || p.Reason != "help" {
				t.Errorf("seq 2: proposal %+v, want escalate \"help\"", p)
			}
		case 3:
			if p.Kind != model.KindRefuse || p.Reason != "no" {
				t.Errorf("seq 3: proposal %+v, want refuse \"no\"", p)
			}
		}
	}
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatalf("arguments %q are not valid JSON: %v", raw, err)
	}
	return buf.String()
}

func TestScriptedIDsUseTurnIndex(t *testing.T) {
	s := scripted(t, `[
		{"text": "first"},
		{"text": "second"},
		{"tool_calls": [{"name": "a"}, {"name": "a"}]}
	]`, nil)
	resp, err := s.Generate(context.Background(), &model.Request{Seq: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"call_2_0", "call_2_1"} {
		if got := resp.Proposal.Calls[i].ID; got != want {
			t.Errorf("call %d id = %q, want %q", i, got, want)
		}
	}
}

func TestScriptedExhausted(t *testing.T) {
	for _, script := range []string{`[]`, `[{"text": "only"}]`} {
		s := scripted(t, script, clock.NewVirtual(epoch))
		n := len(s.Turns)
		for _, seq := range []int{n, n + 1, n + 10} {
			resp, err := s.Generate(context.Background(), &model.Request{Seq: seq})
			if err != nil {
				t.Fatalf("script %s, seq %d: %v", script, seq, err)
			}
			if p := resp.Proposal; p.Kind != model.KindEscalate || p.Reason != "script_exhausted" {
				t.Errorf("script %s, seq %d: proposal %+v, want escalate script_exhausted", script, seq, p)
			}
		}
	}
}

func TestScriptedErrors(t *testing.T) {
	s := scripted(t, `[
		{"error": "rate limited"},
		{"error": "overloaded", "retryable": true},
		{"error": "bad request", "retryable": false}
	]`, clock.NewVirtual(epoch))
	for _, tc := range []struct {
		seq       int
		msg       string
		retryable bool
	}{
		{0, "rate limited", true},
		{1, "overloaded", true},
		{2, "bad request", false},
	} {
		resp, err := s.Generate(context.Background(), &model.Request{Seq: tc.seq})
		if resp != nil {
			t.Errorf("seq %d: response %+v alongside an error", tc.seq, resp)
		}
		var me *model.Error
		if !errors.As(err, &me) {
			t.Fatalf("seq %d: error %v (%T), want *model.Error", tc.seq, err, err)
		}
		if me.Message != tc.msg || me.Retryable != tc.retryable {
			t.Errorf("seq %d: error %+v, want message %q retryable %v", tc.seq, me, tc.msg, tc.retryable)
		}
		if model.IsRetryable(err) != tc.retryable {
			t.Errorf("seq %d: IsRetryable = %v, want %v", tc.seq, !tc.retryable, tc.retryable)
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("seq %d: Error() = %q, want it to contain %q", tc.seq, err, tc.msg)
		}
	}
}

func TestScriptedLatencyOnClock(t *testing.T) {
	v := clock.NewVirtual(epoch)
	s := scripted(t, `[
		{"text": "slow", "latency": "2s"},
		{"text": "fast"},
		{"error": "boom", "latency": "750ms"},
		{"tool_calls": [{"name": "a"}], "latency": "1h"}
	]`, v)
	var elapsed time.Duration
	for seq, latency := range []time.Duration{2 * time.Second, 0, 750 * time.Millisecond, time.Hour} {
		_, _ = s.Generate(context.Background(), &model.Request{Seq: seq})
		elapsed += latency
		if got := v.Now().Sub(epoch); got != elapsed {
			t.Fatalf("after seq %d the clock moved %v, want %v", seq, got, elapsed)
		}
	}
	// Past the end of the script nothing is spent.
	if _, err := s.Generate(context.Background(), &model.Request{Seq: 4}); err != nil {
		t.Fatal(err)
	}
	if got := v.Now().Sub(epoch); got != elapsed {
		t.Fatalf("an exhausted script moved the clock to %v, want %v", got, elapsed)
	}
}

func TestScriptedLatencyCancelled(t *testing.T) {
	v := clock.NewVirtual(epoch)
	s := scripted(t, `[{"text": "slow", "latency": "2s"}]`, v)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	resp, err := s.Generate(ctx, &model.Request{Seq: 0})
	if !errors.Is(err, context.Canceled) || resp != nil {
		t.Fatalf("Generate on a cancelled context = %v, %v; want nil, context.Canceled", resp, err)
	}
	if model.IsRetryable(err) {
		t.Error("a context error must not be retryable")
	}
}

func TestNewScriptedRejectsBadTurn(t *testing.T) {
	_, err := model.NewScripted(turns(t, `[{"text": "ok"}, {"text": "a", "refuse": "b"}]`), nil)
	if !errors.Is(err, model.ErrBadTurn) {
		t.Fatalf("NewScripted = %v, want an error wrapping ErrBadTurn", err)
	}
	if !strings.Contains(err.Error(), "turn 1") {
		t.Fatalf("error %q does not name turn 1", err)
	}
}

func TestTurnValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		turn    string
		wantErr string // substring; empty means valid
	}{
		{"text", `{"text": "hi"}`, ""},
		{"empty text is a valid turn", `{"text": ""}`, ""},
		{"tool calls", `{"tool_calls": [{"name": "a"}]}`, ""},
		{"escalate", `{"escalate": "why"}`, ""},
		{"refuse", `{"refuse": "why"}`, ""},
		{"error", `{"error": "e"}`, ""},
		{"error retryable false", `{"error": "e", "retryable": false}`, ""},
		{"with usage cost latency", `{"text": "x", "usage": {"input_tokens": 1}, "cost_usd": 0.1, "latency": "1s"}`, ""},
		{"no kind", `{}`, "found 0"},
		{"only usage", `{"usage": {"input_tokens": 1}}`, "found 0"},
		{"two kinds", `{"text": "a", "escalate": "b"}`, "found 2"},
		{"three kinds", `{"text": "a", "refuse": "b", "error": "c"}`, "found 3"},
		{"empty tool_calls", `{"tool_calls": []}`, "tool_calls is empty"},
		{"call without name", `{"tool_calls": [{"name": "a"}, {"arguments": {}}]}`, "tool_calls[1] has no name"},
		{"retryable without error", `{"text": "a", "retryable": true}`, "retryable is only allowed with error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var turn model.Turn
			if err := json.Unmarshal([]byte(tc.turn), &turn); err != nil {
				t.Fatal(err)
			}
			err := turn.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tc.turn, err)
				}
				return
			}
			if !errors.Is(err, model.ErrBadTurn) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate(%s) = %v, want ErrBadTurn containing %q", tc.turn, err, tc.wantErr)
			}
		})
	}
}

func TestIsRetryable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"retryable", &model.Error{Message: "429", Retryable: true}, true},
		{"non-retryable", &model.Error{Message: "400"}, false},
		{"wrapped retryable", fmt.Errorf("calling provider: %w", &model.Error{Retryable: true}), true},
		{"double wrapped retryable", fmt.Errorf("a: %w", fmt.Errorf("b: %w", &model.Error{Retryable: true})), true},
		{"wrapped non-retryable", fmt.Errorf("calling provider: %w", &model.Error{Retryable: false}), false},
		{"plain error", errors.New("connection reset"), false},
		{"context", context.DeadlineExceeded, false},
		{"wrapped with %v loses the type", fmt.Errorf("x: %v", &model.Error{Retryable: true}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := model.IsRetryable(tc.err); got != tc.want {
				t.Fatalf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestErrorMessageAndUnwrap(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	for _, tc := range []struct {
		err  *model.Error
		want string
	}{
		{&model.Error{Message: "rate limited", Retryable: true}, "model call failed (retryable): rate limited"},
		{&model.Error{Message: "bad request"}, "model call failed (non-retryable): bad request"},
		{&model.Error{Err: cause, Retryable: true}, "model call failed (retryable): " + cause.Error()},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	if err := error(&model.Error{Message: "x", Err: cause}); !errors.Is(err, cause) {
		t.Error("errors.Is does not see the underlying error through Unwrap")
	}
}

func TestFunc(t *testing.T) {
	var m model.Model = model.Func(func(_ context.Context, req *model.Request) (*model.Response, error) {
		return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: fmt.Sprint(req.Seq)}}, nil
	})
	resp, err := m.Generate(context.Background(), &model.Request{Seq: 7})
	if err != nil || resp.Proposal.Text != "7" {
		t.Fatalf("Func.Generate = %+v, %v", resp, err)
	}
}

func ExampleNewScripted() {
	var script []model.Turn
	_ = json.Unmarshal([]byte(`[
		{"tool_calls": [{"name": "read_order", "arguments": {"order_id": "O-104"}}], "latency": "2s"},
		{"text": "The refund is justified."}
	]`), &script)
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := model.NewScripted(script, clk)
	if err != nil {
		panic(err)
	}
	for seq := range 3 {
		resp, _ := m.Generate(context.Background(), &model.Request{Seq: seq})
		p := resp.Proposal
		switch p.Kind {
		case model.KindToolCalls:
			var args struct {
				OrderID string `json:"order_id"`
			}
			_ = json.Unmarshal(p.Calls[0].Arguments, &args)
			fmt.Println(p.Kind, p.Calls[0].ID, p.Calls[0].Name, args.OrderID)
		case model.KindAnswer:
			fmt.Println(p.Kind, p.Text)
		default:
			fmt.Println(p.Kind, p.Reason)
		}
	}
	fmt.Println("virtual time spent:", clk.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	// Output:
	// tool_calls call_0_0 read_order O-104
	// answer The refund is justified.
	// escalate script_exhausted
	// virtual time spent: 2s
}

// A Model must be safe for several runs at once; run with -race.
func TestScriptedConcurrentRuns(t *testing.T) {
	v := clock.NewVirtual(epoch)
	s := scripted(t, `[
		{"tool_calls": [{"name": "a"}], "latency": "1s"},
		{"text": "done", "latency": "250ms"}
	]`, v)
	const runs = 8
	errs := make(chan error, runs)
	for range runs {
		go func() {
			for seq := range 3 {
				resp, err := s.Generate(context.Background(), &model.Request{Seq: seq})
				if err != nil {
					errs <- err
					return
				}
				if want := []model.Kind{model.KindToolCalls, model.KindAnswer, model.KindEscalate}[seq]; resp.Proposal.Kind != want {
					errs <- fmt.Errorf("seq %d: kind %s, want %s", seq, resp.Proposal.Kind, want)
					return
				}
			}
			errs <- nil
		}()
	}
	for range runs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// A virtual clock adds concurrent waits up.
	if got, want := v.Now().Sub(epoch), runs*1250*time.Millisecond; got != want {
		t.Fatalf("clock moved %v, want %v", got, want)
	}
}

// Sums of costs print without binary noise.
func TestAddCost(t *testing.T) {
	sum := 0.0
	for _, c := range []float64{0.016, 0.03, 0.0001, 0.1, 0.2} {
		sum = model.AddCost(sum, c)
	}
	if got, _ := json.Marshal(sum); string(got) != "0.3461" {
		t.Errorf("the sum prints %s, want 0.3461", got)
	}
}

// TestScriptedStreams: with OnDelta, a scripted reply's text arrives in a few pieces that
// concatenate to it, and each tool call in one; the response is the same as without.
func TestScriptedStreams(t *testing.T) {
	text := "Héllo, wörld: a reply in pieces"
	turns := []model.Turn{{Text: &text}, {ToolCalls: []model.ToolCall{{Name: "read", Arguments: json.RawMessage(`{"a": 1}`)}}}, {Text: new(string)}}
	s, err := model.NewScripted(turns, nil)
	if err != nil {
		t.Fatal(err)
	}
	for seq, tc := range []struct{ pieces int }{{3}, {1}, {0}} {
		var got []model.Delta
		resp, err := s.Generate(context.Background(), &model.Request{Seq: seq, OnDelta: func(d model.Delta) { got = append(got, d) }})
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := s.Generate(context.Background(), &model.Request{Seq: seq})
		if !reflect.DeepEqual(resp, plain) {
			t.Errorf("turn %d: the response differs when streamed: %+v, %+v", seq, resp, plain)
		}
		if len(got) != tc.pieces {
			t.Errorf("turn %d: %d deltas, want %d: %+v", seq, len(got), tc.pieces, got)
		}
		var b strings.Builder
		for _, d := range got {
			if !utf8.ValidString(d.Text) {
				t.Errorf("turn %d: delta %q cuts a character", seq, d.Text)
			}
			b.WriteString(d.Text)
		}
		if b.String() != resp.Proposal.Text {
			t.Errorf("turn %d: deltas make %q, want %q", seq, b.String(), resp.Proposal.Text)
		}
		if seq == 1 && (got[0].CallName != "read" || got[0].CallID != "call_1_0" || got[0].Arguments != `{"a":1}`) {
			t.Errorf("the call's delta is %+v", got[0])
		}
	}
}

// pricedFunc is a model with prices.
type pricedFunc struct{ model.Func }

func (pricedFunc) TokenPrices() (float64, float64, bool) { return 2e-6, 8e-6, true }

// TestWithPricing: a wrapper of a model with prices has them, and calls the wrapper; a
// wrapper of a model without prices has none.
func TestWithPricing(t *testing.T) {
	inner := pricedFunc{model.Func(func(context.Context, *model.Request) (*model.Response, error) {
		return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "inner"}}, nil
	})}
	wrapper := model.Func(func(context.Context, *model.Request) (*model.Response, error) {
		return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "wrapper"}}, nil
	})
	m := model.WithPricing(wrapper, inner)
	p, ok := m.(model.Pricing)
	if !ok {
		t.Fatal("the wrapper of a priced model has no prices")
	}
	if in, out, ok := p.TokenPrices(); !ok || in != 2e-6 || out != 8e-6 {
		t.Errorf("prices %v %v %v, want the inner model's", in, out, ok)
	}
	if r, err := m.Generate(context.Background(), &model.Request{}); err != nil || r.Proposal.Text != "wrapper" {
		t.Errorf("Generate: %+v %v, want the wrapper's answer", r, err)
	}
	if _, ok := model.WithPricing(wrapper, wrapper).(model.Pricing); ok {
		t.Error("the wrapper of a model without prices has prices")
	}
}
