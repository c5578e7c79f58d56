package protocol

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// Iteration is the record of one iteration of a loop, or of one part of it: a durable agent
// step answers an iteration that waited for humans in two tasks (the proposal, then the action
// on the decisions), each of which records what it did. It says what the model proposed, what
// the loop decided about each call and why, what the calls returned, what it cost and how it
// ended; Events holds the iteration's trace events for anything the sections leave out.
// Package trace names it trace.Iteration, as it does the records it holds.
//
// Texts may be clipped (Clip) to keep a record small enough to travel with an answer: a
// clipped text says so at its end, and its *Ref field names where the whole text is kept.
type Iteration struct {
	Iteration int `json:"iteration"`
	// Proposal is what the model proposed; nil for a part that called no model (acting on the
	// humans' decisions).
	Proposal *ProposalRecord `json:"proposal,omitempty"`
	// Calls are the tool calls the part dealt with, in the order of the turn.
	Calls []CallRecord `json:"calls,omitempty"`
	// Messages are the user messages the loop added: a rejected answer's feedback, a human's
	// input.
	Messages []string `json:"messages,omitempty"`
	// Context says what the context policy did before the model call, one sentence each.
	Context []string `json:"context,omitempty"`

	ModelCalls   int           `json:"model_calls,omitempty"` // failed ones included
	InputTokens  int64         `json:"input_tokens,omitempty"`
	OutputTokens int64         `json:"output_tokens,omitempty"`
	CostUSD      float64       `json:"cost_usd,omitempty"`
	ModelTime    time.Duration `json:"model_ns,omitempty"` // time spent in model calls
	// Duration is the part's wall time, set by whoever ran it (the worker: the task's).
	Duration time.Duration `json:"duration_ns,omitempty"`

	// StopReason and StopDetail say why the loop stopped in this part, when it did.
	StopReason string `json:"stop_reason,omitempty"`
	StopDetail string `json:"stop_detail,omitempty"`

	Events []TraceEvent `json:"events,omitempty"`
	// Recovered marks a record rebuilt from the loop's checkpoint, because the answer that
	// carried the first one was lost: it has no trace events, usage or validation decisions.
	Recovered bool `json:"recovered,omitempty"`
}

// ProposalRecord is a model's proposal: its kind (answer, tool_calls, escalate, refuse), its
// text, the reason of an escalation or refusal, and for an answer the loop's decision on it;
// for a reply cut off at its output limit, of either kind, the decision truncated and why.
type ProposalRecord struct {
	Kind     string `json:"kind"`
	Text     string `json:"text,omitempty"`
	TextRef  string `json:"text_ref,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Decision string `json:"decision,omitempty"` // for an answer: accept or invalid; truncated
	Why      string `json:"why,omitempty"`      // the decision's reason
}

// CallRecord is one proposed tool call: its arguments, the loop's validation decision and
// why, the human's decision when it needed one, and its result.
type CallRecord struct {
	ID           string `json:"id"`
	Tool         string `json:"tool"`
	Arguments    string `json:"arguments,omitempty"` // JSON text
	ArgumentsRef string `json:"arguments_ref,omitempty"`

	// Decision is validation's: accept, invalid, forbid or approval_required; Reason says why.
	Decision string `json:"decision,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Approval is the human's decision (approved, denied, or pending while none is known), By
	// who took it, Message what they said.
	Approval string `json:"approval,omitempty"`
	By       string `json:"by,omitempty"`
	Message  string `json:"message,omitempty"`

	// SubRun is set for a call that waits for its sub-run (an agent or workflow tool): its
	// result comes in the record of the iteration's resume.
	SubRun bool `json:"sub_run,omitempty"`

	// Key is the call's idempotency key, set when it was about to execute.
	Key      string `json:"key,omitempty"`
	Executed bool   `json:"executed"`
	// Error is the failure of an executed call; Retryable says whether it may succeed later.
	Error     string `json:"error,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
	// Output is the result message the model was shown (an error's text for a failed or refused
	// call); OutputBytes its whole length, and OutputRef where it is kept whole when clipped.
	Output      string        `json:"output"`
	OutputBytes int           `json:"output_bytes"`
	OutputRef   string        `json:"output_ref,omitempty"`
	Duration    time.Duration `json:"duration_ns,omitempty"`
}

// TraceType is the kind of a [TraceEvent]; package trace names its values (its Type). The
// strings are stable: fixtures name them.
type TraceType string

// TraceEvent is one thing that happened in a loop's iteration, as package trace emits it (its
// Event) and an [Iteration] record keeps it. The payload fields that apply depend on Type, whose
// values package trace names:
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
type TraceEvent struct {
	Type      TraceType `json:"type"`
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

// Keep stores a whole text that Clip shortens and returns a reference to it, or an error.
type Keep func(text string) (ref string, err error)

// Clip shortens every proposal text, argument text and call output longer than max bytes to its
// first max bytes (at a rune boundary) and a marker saying how many bytes were left out. With
// keep, the whole text is stored first and its reference set (TextRef, ArgumentsRef,
// OutputRef); when keep fails, Clip stops there and returns its error, the record half
// clipped. It reports whether it clipped anything.
func (it *Iteration) Clip(max int, keep Keep) (bool, error) {
	clipped := false
	one := func(s, ref *string) error {
		if len(*s) <= max {
			return nil
		}
		if keep != nil && *ref == "" {
			r, err := keep(*s)
			if err != nil {
				return err
			}
			*ref = r
		}
		*s, clipped = ClipText(*s, max), true
		return nil
	}
	if p := it.Proposal; p != nil {
		if err := one(&p.Text, &p.TextRef); err != nil {
			return clipped, err
		}
	}
	for i := range it.Calls {
		c := &it.Calls[i]
		if err := one(&c.Arguments, &c.ArgumentsRef); err != nil {
			return clipped, err
		}
		if err := one(&c.Output, &c.OutputRef); err != nil {
			return clipped, err
		}
	}
	return clipped, nil
}

// ClipText returns s cut to at most max bytes at a rune boundary, followed by a marker saying
// how many bytes were left out; s itself when it is not longer than max.
func ClipText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "… [" + strconv.Itoa(len(s)-n) + " more bytes]"
}
