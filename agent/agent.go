package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/reins-run/reins/trace"
)

// Agent is one agent of a composition. Composites (Sequential, Loop, Parallel) are run by this
// package, which knows their structure and can resume them from a cursor; every other Agent is a
// leaf: one call of Run is one turn of it.
//
// A leaf's Run yields the events of its turn as they happen and ends; it yields a non-nil error
// (with a zero Event) when the turn failed, which ends the run. A leaf reads the state through s
// and changes it only by yielding state events (Write), so that every write is in the trace. The
// runtime sets Author (when empty), Path, Seq and Time of the events a leaf yields.
type Agent interface {
	Name() string
	Run(ctx context.Context, s *Session) iter.Seq2[Event, error]
}

// EventType is the kind of an Event. The strings are stable: they are written in checkpoints
// and traces.
type EventType string

// Event types. Start, Iteration and End are emitted by the runtime only; leaves yield the others.
const (
	EventStart     EventType = "start"     // an agent begins (a leaf: one turn)
	EventIteration EventType = "iteration" // a Loop begins iteration Iteration
	EventMessage   EventType = "message"   // a leaf said Text (an LLM agent: its answer)
	EventState     EventType = "state"     // a state write: Key takes Value
	EventEscalate  EventType = "escalate"  // a leaf escalated (Escalate)
	EventTrace     EventType = "trace"     // a loop controller event of an LLM agent (Trace)
	EventEnd       EventType = "end"       // an agent ended (End says why)
)

// Event is one thing that happened in a composition run. Which payload fields are set depends on
// Type (see the constants).
type Event struct {
	Seq       int             `json:"seq"`                 // 1-based position in the run
	Time      time.Time       `json:"time"`                // on the run's clock
	Author    string          `json:"author"`              // the agent's name
	Path      string          `json:"path"`                // the agent's place: root/…/name
	Type      EventType       `json:"type"`                // what happened: the payload fields it sets
	Iteration int             `json:"iteration,omitempty"` // iteration events
	Text      string          `json:"text,omitempty"`      // message events
	Key       string          `json:"key,omitempty"`       // state events
	Value     json.RawMessage `json:"value,omitempty"`     // state events: compact JSON
	Escalate  *Escalation     `json:"escalate,omitempty"`
	End       *End            `json:"end,omitempty"`
	Trace     *trace.Event    `json:"trace,omitempty"`
}

// Escalation asks to end a loop: by default the innermost Loop enclosing the leaf, or the Loop
// named by Target, which must enclose it.
type Escalation struct {
	Reason string `json:"reason"`
	Target string `json:"target,omitempty"`
}

// Reason says why an agent or a run ended. The strings are stable: they are the labels of a
// durable step.
type Reason string

// Reasons.
const (
	Completed     Reason = "completed"      // a leaf's turn, a Sequential or a Parallel ended normally
	Escalated     Reason = "escalated"      // an escalation ended it (End.By, End.Detail)
	MaxIterations Reason = "max_iterations" // a Loop ran its MaxIterations
	Failed        Reason = "failed"         // an error ended the run (Result.Err)
	Cancelled     Reason = "cancelled"      // the context was cancelled, or the caller stopped reading
	Timeout       Reason = "timeout"        // the wall-clock budget ran out, or the context's deadline passed
	MaxTurns      Reason = "max_turns"      // the run's turn budget ran out
	MaxTokens     Reason = "max_tokens"     // the run's token budget ran out
	MaxCost       Reason = "max_cost"       // the run's cost budget ran out
)

// End is how an agent ended: the reason, who escalated and to which loop, a one-sentence
// detail, and for a Loop the iterations it began.
type End struct {
	Reason     Reason `json:"reason"`
	By         string `json:"by,omitempty"`     // escalated: the leaf that escalated
	Target     string `json:"target,omitempty"` // escalated: the loop the escalation ends ("" for the run)
	Detail     string `json:"detail,omitempty"`
	Iterations int    `json:"iterations,omitempty"` // loops
}

// ErrComposition is wrapped by the errors of a composition that is not valid (names, empty
// composites, negative bounds) and of a run that broke its rules (an escalation to a loop that
// does not enclose the leaf, an event a leaf may not yield, a checkpoint that does not match).
// Running it again cannot help: a durable step fails for good.
var ErrComposition = errors.New("invalid composition")

// Say returns a message event.
func Say(text string) Event { return Event{Type: EventMessage, Text: text} }

// Write returns a state event: key takes value, encoded as JSON.
func Write(key string, value any) (Event, error) {
	raw, err := json.Marshal(value)
	if err != nil {
		return Event{}, fmt.Errorf("agent: state key %q: the value cannot be encoded as JSON: %w", key, err)
	}
	return Event{Type: EventState, Key: key, Value: raw}, nil
}

// Escalate returns an escalation event that ends the innermost loop enclosing the leaf.
func Escalate(reason string) Event {
	return Event{Type: EventEscalate, Escalate: &Escalation{Reason: reason}}
}

// EscalateTo returns an escalation event that ends the enclosing loop named target.
func EscalateTo(target, reason string) Event {
	return Event{Type: EventEscalate, Escalate: &Escalation{Reason: reason, Target: target}}
}
