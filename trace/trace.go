// Package trace defines the typed events that record what a loop did, iteration by iteration, and
// the Sink interface that receives them as they happen.
//
// It owns the event vocabulary (the type strings are stable: fixtures name them, see
// docs/reference/eval-fixtures.md) and nothing else: it must not import the loop, models or tools.
package trace

import (
	"time"
)

// Type is the kind of a trace event. The string values are stable: fixtures name them.
type Type string

// Event types, in the order of docs/reference/eval-fixtures.md. Context comes only with a
// context policy.
const (
	IterationStart Type = "iteration_start" // an iteration begins (budgets were checked and passed)
	ModelCall      Type = "model_call"      // a model call returned, successfully or not
	Proposal       Type = "proposal"        // the model proposed an answer, tool calls, an escalation or a refusal
	Validation     Type = "validation"      // the controller decided on one part of a proposal
	Approval       Type = "approval"        // a human decision on a call (or its absence)
	ToolCall       Type = "tool_call"       // a validated call is about to execute
	ToolResult     Type = "tool_result"     // the result message of a call, executed or not
	Stop           Type = "stop"            // the loop stopped; StopReason says why
	// Context: the context policy changed what the next model call is sent (messages left
	// out, tool results truncated, a summary).
	Context Type = "context"
)

// Validation decisions carried in Event.Decision for Validation events.
const (
	DecisionAccept  = "accept"  // the part is valid and will be acted on
	DecisionInvalid = "invalid" // rejected; the error is fed back to the model
	DecisionForbid  = "forbid"  // a forbidden tool: the loop stops with refused
	DecisionApprove = "approval_required"
	// DecisionTruncated is a reins extension: the reply was cut off at its output limit, so no
	// part of it is acted on (Reason says at how many tokens, and what the loop does next).
	DecisionTruncated = "truncated"
)

// Event is one thing that happened in a run. The payload fields that apply depend on Type:
//
//   - iteration_start: nothing beyond the header.
//   - model_call: Duration, InputTokens, OutputTokens, CostUSD; Error and Retryable when it failed.
//   - proposal: Proposal (answer, tool_calls, escalate, refuse), Calls, Reason for escalate/refuse.
//   - validation: Decision, Reason, and Tool/CallID for a tool call (empty for an answer, and
//     for a reply cut off at its output limit: truncated, whatever its kind).
//   - approval: Tool, CallID, Decision (approved, denied, pending), Reason (the human's message),
//     By (who decided, when known).
//   - tool_call: Tool, CallID, Key (the idempotency key).
//   - tool_result: Tool, CallID, Executed, Error and Retryable when the call failed, Duration.
//   - stop: StopReason and Reason (the detail).
//   - context: Decision (the strategy that acted: drop_oldest, truncate_tool_results or
//     summarize; drop_oldest when the loop fell back to it after a summarizer failed), Reason
//     (one sentence: what was left out or truncated, the request's input tokens before and
//     after, the limit, a summarizer's failure). When a summarizer was called: its Duration,
//     InputTokens, OutputTokens and CostUSD, as a model_call carries them (so that summing the
//     events' tokens and cost still gives what the run spent), and Error when it failed.
//
// A flat struct rather than an interface payload keeps emitting an event free of allocations.
type Event struct {
	Type      Type      `json:"type"`
	RunID     string    `json:"run_id"`
	Iteration int       `json:"iteration"`
	Time      time.Time `json:"time"`

	Proposal     string        `json:"proposal,omitempty"`
	Calls        int           `json:"calls,omitempty"`
	Tool         string        `json:"tool,omitempty"`
	CallID       string        `json:"call_id,omitempty"`
	Key          string        `json:"key,omitempty"`
	Decision     string        `json:"decision,omitempty"`
	By           string        `json:"by,omitempty"`
	Reason       string        `json:"reason,omitempty"`
	Executed     bool          `json:"executed,omitempty"`
	Error        string        `json:"error,omitempty"`
	Retryable    bool          `json:"retryable,omitempty"`
	StopReason   string        `json:"stop_reason,omitempty"`
	InputTokens  int64         `json:"input_tokens,omitempty"`
	OutputTokens int64         `json:"output_tokens,omitempty"`
	CostUSD      float64       `json:"cost_usd,omitempty"`
	Duration     time.Duration `json:"duration_ns,omitempty"`
}

// Sink receives events as they happen. Emit is called from the loop's goroutine, in order; it
// must not block for long, since the loop waits for it.
type Sink interface {
	Emit(Event)
}

// SinkFunc adapts a function to the Sink interface.
type SinkFunc func(Event)

// Emit calls f(e).
func (f SinkFunc) Emit(e Event) { f(e) }

// Has reports whether events contains at least one event of type t.
func Has(events []Event, t Type) bool {
	for i := range events {
		if events[i].Type == t {
			return true
		}
	}
	return false
}
