// Package trace defines the typed events that record what a loop did, iteration by iteration, and
// the Sink interface that receives them as they happen.
//
// It owns the event vocabulary (the type strings are stable: fixtures name them, see
// docs/reference/eval-fixtures.md) and nothing else. The event and the record of an iteration
// travel with a worker's answer, so their types are package protocol's, named here by aliases:
// it imports protocol and must not import the loop, models or tools.
package trace

import "github.com/reins-run/reins/protocol"

// Type is the kind of a trace event ([protocol.TraceType]). The string values are stable:
// fixtures name them.
type Type = protocol.TraceType

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

// Event is one thing that happened in a loop's iteration: its fields, and which of them each
// Type carries, are [protocol.TraceEvent]'s, since an answer carries the events of its iteration's
// record ([Iteration]) to the engine.
type Event = protocol.TraceEvent

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
