// Package model defines what the loop asks of a language model: a Request (instructions, the
// conversation, the tools on offer) in, a Response (one Proposal plus usage and cost) out. It also
// provides the scripted model that evals and tests use.
//
// It owns the conversation and proposal types and the classification of model errors. It must not
// decide anything about budgets, policy or validation: that is the loop's job.
package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/reins-run/reins/protocol"
)

// Role says who wrote a message.
type Role string

// Roles of conversation messages.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// ToolCall is one tool invocation the model proposed.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Message is one entry of the conversation. Tool-role messages answer exactly one [ToolCall], named
// by CallID; IsError marks a call that failed or was not executed.
type Message struct {
	Role    Role       `json:"role"`
	Content string     `json:"content,omitempty"`
	Calls   []ToolCall `json:"tool_calls,omitempty"`
	CallID  string     `json:"call_id,omitempty"`
	Name    string     `json:"name,omitempty"`
	IsError bool       `json:"is_error,omitempty"`
}

// ToolDef describes a tool to the model.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Request is what the loop sends for one model call.
type Request struct {
	Instructions string
	Messages     []Message
	Tools        []ToolDef
	// ToolChoice is "" or "auto" (the model decides), "none" (no tool calls), "required" (at
	// least one tool call) or the name of the one tool the model must call.
	ToolChoice string
	// Seq is the number of model calls made earlier in this run, failed ones included. A real
	// provider ignores it; the scripted model uses it to pick its turn, which keeps it stateless
	// and lets a run resume from saved state.
	Seq int
	// OnDelta, when set, asks a provider that can stream to do so and to report each piece of
	// the reply as it arrives. Generate still returns the complete Response.
	OnDelta func(Delta)
	// MaxOutputTokens, when above 0, caps the reply: a provider sends the smaller of it and its
	// own cap (the loop sets it to what the token and cost budgets leave).
	MaxOutputTokens int64
	// RaiseOutputTokens, when above a provider's own cap, asks for a reply cap of this many
	// tokens, up to the model's output limit: the loop sets it when it asks again after a reply
	// that was cut off at its cap. MaxOutputTokens still caps it.
	RaiseOutputTokens int64
}

// Delta is one streamed piece of a reply: answer text, or a piece of a tool call. The first
// delta of a call carries its CallID and CallName; later ones only its CallIndex.
type Delta struct {
	Text      string `json:"text,omitempty"`
	CallIndex int    `json:"call_index,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	CallName  string `json:"call_name,omitempty"`
	Arguments string `json:"arguments,omitempty"` // a fragment of the call's JSON arguments
}

// Kind is the kind of a proposal.
type Kind string

// Proposal kinds.
const (
	KindAnswer    Kind = "answer"
	KindToolCalls Kind = "tool_calls"
	KindEscalate  Kind = "escalate"
	KindRefuse    Kind = "refuse"
)

// Proposal is what the model wants to happen next.
type Proposal struct {
	Kind   Kind       `json:"kind"`
	Text   string     `json:"text,omitempty"`   // the answer (KindAnswer) or text accompanying calls
	Calls  []ToolCall `json:"calls,omitempty"`  // KindToolCalls: one or more calls, in order
	Reason string     `json:"reason,omitempty"` // KindEscalate, KindRefuse
}

// Usage counts the tokens of one model call.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Total is input plus output tokens.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// Response is the result of one successful model call.
type Response struct {
	Proposal Proposal
	Usage    Usage
	CostUSD  float64
	// Model is the model the provider says produced the reply; it may differ from the one
	// requested (an alias resolved to a dated version). Empty when the provider did not say.
	Model string
	// FinishReason is why the reply ended, in the provider's own words ("stop", "length",
	// "end_turn", "max_tokens", ...). Empty when the provider did not say.
	FinishReason string
	// Truncated reports that the reply ended on its output-token limit: its text or tool calls
	// may be cut off, so the loop never takes it as a final answer nor runs its calls.
	Truncated bool
}

// Model proposes the next step of a loop. Implementations must be safe for use by several runs at
// once. The caller treats the returned Response as read-only, so an implementation may return a
// shared value. Streaming providers deliver deltas through their own options and still return the
// complete Response here.
type Model interface {
	Generate(ctx context.Context, req *Request) (*Response, error)
}

// Func adapts a function to the Model interface.
type Func func(ctx context.Context, req *Request) (*Response, error)

// Generate calls f.
func (f Func) Generate(ctx context.Context, req *Request) (*Response, error) { return f(ctx, req) }

// Error is a failed model call. Retryable errors (rate limits, overload, dropped connections) are
// retried by the loop; others stop it with stop reason failed.
type Error struct {
	Message   string
	Retryable bool
	// Status is the HTTP status of the provider's reply, 0 when there was none.
	Status int
	// RetryAfter is how long the provider asked to wait before trying again (Retry-After);
	// the loop waits at least this long before its retry.
	RetryAfter time.Duration
	Err        error // the underlying error, if any
}

func (e *Error) Error() string {
	kind := "non-retryable"
	if e.Retryable {
		kind = "retryable"
	}
	if e.Err != nil && e.Message == "" {
		return fmt.Sprintf("model call failed (%s): %v", kind, e.Err)
	}
	return fmt.Sprintf("model call failed (%s): %s", kind, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// IsRetryable reports whether err is a model error worth retrying. Errors that are not *Error
// are treated as not retryable: an unknown failure is not assumed to be transient.
func IsRetryable(err error) bool {
	var me *Error
	return errors.As(err, &me) && me.Retryable
}

// Pricing is implemented by models that know what their tokens cost, so that the loop can keep
// a call within a cost budget: US dollars per input token and per output token, and whether the
// model has a price at all.
type Pricing interface {
	TokenPrices() (input, output float64, ok bool)
}

// WithPricing returns wrapper, a model that calls inner (counting, limiting or scrubbing its
// calls), with inner's prices when inner has them: a wrapper that dropped them would let the
// loop no longer hold a call within a cost budget.
func WithPricing(wrapper, inner Model) Model {
	if p, ok := inner.(Pricing); ok {
		return priced{Model: wrapper, Pricing: p}
	}
	return wrapper
}

// priced is a wrapper with the prices of the model it wraps.
type priced struct {
	Model
	Pricing
}

// perMessageTokens is what EstimateInputTokens adds for each message, tool definition and call:
// the framing a provider adds around them.
const perMessageTokens = 4

// EstimateInputTokens estimates the input tokens of req, before it is sent: a quarter of the
// bytes of its instructions, messages (content, calls, their arguments, names) and tool
// definitions (name, description, schema), rounded up, plus 4 for each message, call and tool
// definition. It is deterministic and needs no tokenizer; for English text and JSON it is
// within a few tens of percent of what providers count. The loop uses it to refuse a call whose
// input alone would pass a budget, and to cap the reply to what remains: the error of this
// estimate is all a budget can be passed by (docs/loop.md).
func EstimateInputTokens(req *Request) int64 {
	n := len(req.Instructions)
	count := 0
	for i := range req.Messages {
		m := &req.Messages[i]
		n += len(m.Content) + len(m.Name) + len(m.CallID) + len(m.Role)
		count++
		for j := range m.Calls {
			c := &m.Calls[j]
			n += len(c.ID) + len(c.Name) + len(c.Arguments)
			count++
		}
	}
	for i := range req.Tools {
		t := &req.Tools[i]
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
		count++
	}
	return int64((n+3)/4) + int64(count*perMessageTokens)
}

// AddCost adds two costs in US dollars, rounded to a billionth of a cent: [protocol.AddCost],
// the one rounding of every sum of costs.
func AddCost(a, b float64) float64 { return protocol.AddCost(a, b) }
