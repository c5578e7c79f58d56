package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/reins-run/reins/clock"
)

// Turn is one scripted model reply, in the format of the eval fixture `model` list: exactly one of
// Text, ToolCalls, Escalate, Refuse or Error, with optional usage, cost and latency, and a text
// or tool calls marked as cut off at the output limit (Truncated).
type Turn struct {
	Text      *string         `json:"text,omitempty"`
	ToolCalls []ToolCall      `json:"tool_calls,omitempty"`
	Escalate  *string         `json:"escalate,omitempty"`
	Refuse    *string         `json:"refuse,omitempty"`
	Error     *string         `json:"error,omitempty"`
	Retryable *bool           `json:"retryable,omitempty"` // with Error; default true
	Usage     *Usage          `json:"usage,omitempty"`
	CostUSD   float64         `json:"cost_usd,omitempty"`
	Latency   *clock.Duration `json:"latency,omitempty"`
	// Truncated scripts a reply cut off at its output limit (with Text or ToolCalls), as a
	// provider reports one (OpenAI's finish_reason "length", Anthropic's stop_reason
	// "max_tokens"); its usage's output_tokens is the cap it was cut at.
	Truncated bool `json:"truncated,omitempty"`
}

// ErrBadTurn is wrapped by [Turn.Validate] errors.
var ErrBadTurn = errors.New("invalid scripted turn")

// Validate reports what is wrong with a turn, if anything.
func (t *Turn) Validate() error {
	kinds := 0
	for _, set := range []bool{t.Text != nil, t.ToolCalls != nil, t.Escalate != nil, t.Refuse != nil, t.Error != nil} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return fmt.Errorf("%w: exactly one of text, tool_calls, escalate, refuse or error is required, found %d", ErrBadTurn, kinds)
	}
	if t.ToolCalls != nil && len(t.ToolCalls) == 0 {
		return fmt.Errorf("%w: tool_calls is empty", ErrBadTurn)
	}
	for i, c := range t.ToolCalls {
		if c.Name == "" {
			return fmt.Errorf("%w: tool_calls[%d] has no name", ErrBadTurn, i)
		}
	}
	if t.Truncated && t.Text == nil && t.ToolCalls == nil {
		return fmt.Errorf("%w: truncated is only allowed with text or tool_calls", ErrBadTurn)
	}
	if t.Retryable != nil && t.Error == nil {
		return fmt.Errorf("%w: retryable is only allowed with error", ErrBadTurn)
	}
	return nil
}

// Scripted is a model that replays a fixed list of turns, one per model call, chosen by
// [Request.Seq]. When the script is exhausted it escalates with reason "script_exhausted". Latency is
// spent on Clock (a virtual clock in evals), so a slow scripted reply costs no real time there.
type Scripted struct {
	Turns []Turn
	Clock clock.Clock
	resp  []Response // precomputed replies, so Generate allocates nothing per call
}

// NewScripted checks every turn and returns a scripted model that replays them.
func NewScripted(turns []Turn, clk clock.Clock) (*Scripted, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	s := &Scripted{Turns: turns, Clock: clk, resp: make([]Response, len(turns))}
	for i := range turns {
		if err := turns[i].Validate(); err != nil {
			return nil, fmt.Errorf("turn %d: %w", i, err)
		}
		s.resp[i] = turns[i].response(i)
	}
	return s, nil
}

// response precomputes the reply of turn i, filling in call ids and empty argument objects.
func (t *Turn) response(i int) Response {
	var r Response
	if t.Usage != nil {
		r.Usage = *t.Usage
	}
	r.CostUSD = t.CostUSD
	r.Truncated = t.Truncated
	switch {
	case t.Text != nil:
		r.Proposal = Proposal{Kind: KindAnswer, Text: *t.Text}
	case t.Escalate != nil:
		r.Proposal = Proposal{Kind: KindEscalate, Reason: *t.Escalate}
	case t.Refuse != nil:
		r.Proposal = Proposal{Kind: KindRefuse, Reason: *t.Refuse}
	case t.ToolCalls != nil:
		calls := make([]ToolCall, len(t.ToolCalls))
		for j, c := range t.ToolCalls {
			if c.ID == "" {
				c.ID = "call_" + strconv.Itoa(i) + "_" + strconv.Itoa(j)
			}
			c.Arguments = compactArgs(c.Arguments)
			calls[j] = c
		}
		r.Proposal = Proposal{Kind: KindToolCalls, Calls: calls}
	}
	return r
}

// Generate returns the turn for req.Seq after its latency has passed on the clock. With
// req.OnDelta set, it first reports the reply in pieces, as a streaming provider would: its
// text in up to three deltas, each tool call in one. Its output
// tokens are at most req.MaxOutputTokens, as a provider's would be.
func (s *Scripted) Generate(ctx context.Context, req *Request) (*Response, error) {
	if req.Seq >= len(s.Turns) {
		return &Response{Proposal: Proposal{Kind: KindEscalate, Reason: "script_exhausted"}}, nil
	}
	t := &s.Turns[req.Seq]
	if t.Latency != nil {
		if err := s.Clock.Sleep(ctx, t.Latency.Std()); err != nil {
			return nil, err
		}
	}
	if t.Error != nil {
		return nil, &Error{Message: *t.Error, Retryable: t.Retryable == nil || *t.Retryable}
	}
	r := &s.resp[req.Seq]
	if req.OnDelta != nil {
		streamScripted(r, req.OnDelta)
	}
	if req.MaxOutputTokens > 0 && r.Usage.OutputTokens > req.MaxOutputTokens {
		// As a provider would: the reply stops at the cap (its text is kept as scripted).
		capped := *r
		capped.Usage.OutputTokens = req.MaxOutputTokens
		return &capped, nil
	}
	return r, nil
}

// scriptedPieces is how many deltas a scripted reply's text is streamed in, at most.
const scriptedPieces = 3

// streamScripted reports reply r to on as a provider that streams would: its text in a few
// pieces (cut between characters), then each tool call in one piece.
func streamScripted(r *Response, on func(Delta)) {
	text := r.Proposal.Text
	size := max((len(text)+scriptedPieces-1)/scriptedPieces, 1)
	for len(text) > 0 {
		n := min(size, len(text))
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n++
		}
		on(Delta{Text: text[:n]})
		text = text[n:]
	}
	for i, c := range r.Proposal.Calls {
		on(Delta{CallIndex: i, CallID: c.ID, CallName: c.Name, Arguments: string(c.Arguments)})
	}
}

// compactArgs writes scripted arguments the way a provider sends them: compact JSON, with `{}`
// for absent or null arguments. Invalid JSON is kept as it is, for the loop to reject.
func compactArgs(args json.RawMessage) json.RawMessage {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return json.RawMessage("{}")
	}
	var buf bytes.Buffer
	if json.Compact(&buf, trimmed) != nil {
		return args
	}
	return buf.Bytes()
}
