// Package tool defines what a tool is to reins: a Spec (name, description, JSON Schema of its
// input, side-effect class, approval flag) and a Call that takes validated JSON arguments and an
// idempotency key. It also provides argument validation against the schema and the mocked tools
// of eval fixtures.
//
// It owns tool contracts and tool errors. It must not know about budgets, policy or the loop's
// state: the loop decides whether a call may run, a tool only runs it.
package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Spec describes a tool.
type Spec struct {
	Name        string
	Description string
	// InputSchema is a JSON Schema (draft 2020-12) for the arguments. Nil means any JSON object.
	InputSchema json.RawMessage
	// SideEffect marks tools that change the world (write) rather than read it. Side-effecting
	// calls must honour the idempotency key. The durable engine's agent steps also record their
	// results (package builtin), so that a call its iteration repeats after a crash returns the
	// recorded result instead of running again.
	SideEffect bool
	// NeedsApproval makes every call of this tool wait for a human decision, whatever the policy.
	NeedsApproval bool
}

// Tool is something the loop can call. Call receives arguments that already passed the schema,
// and an idempotency key that is the same every time the loop retries or replays this very call
// (same run, iteration and call index): a side-effecting tool uses it to do its work at most once.
type Tool interface {
	Spec() Spec
	Call(ctx context.Context, args json.RawMessage, idempotencyKey string) (json.RawMessage, error)
}

// Error is a failed tool call. A retryable error is shown to the model as an observation and the
// loop goes on; a non-retryable one stops the loop with stop reason tool_failure.
type Error struct {
	Message   string
	Retryable bool
	Err       error
}

func (e *Error) Error() string {
	if e.Message == "" && e.Err != nil {
		return e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// IsRetryable reports whether a tool error lets the loop continue. A plain error (not *Error) is
// treated as retryable: it becomes an observation the model can react to, and the loop's
// max_tool_failures budget still bounds how often that can happen.
func IsRetryable(err error) bool {
	var te *Error
	if errors.As(err, &te) {
		return te.Retryable
	}
	return true
}

// Info describes the call in progress; the loop puts it in the context passed to Call.
type Info struct {
	RunID     string
	Iteration int // 1-based loop iteration
	Index     int // position of the call in the model's turn
	Seq       int // how many calls of this tool executed earlier in the run
	Key       string
	CallID    string // the model's id of the call
}

type infoKey struct{}

// WithInfo returns a context carrying info.
func WithInfo(ctx context.Context, info *Info) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

// InfoFrom returns the call info in ctx, or nil outside a loop.
func InfoFrom(ctx context.Context) *Info {
	info, _ := ctx.Value(infoKey{}).(*Info)
	return info
}

// New adapts a function on raw JSON to a Tool with the given spec. For typed arguments and a
// generated schema, use Func.
func New(spec Spec, fn func(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error)) Tool {
	return funcTool{spec: spec, fn: fn}
}

type funcTool struct {
	spec Spec
	fn   func(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error)
}

func (f funcTool) Spec() Spec { return f.spec }
func (f funcTool) Call(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
	return f.fn(ctx, args, key)
}

// SafeCall calls t and turns a panic into a non-retryable *Error, so that a broken tool stops the
// loop with tool_failure instead of crashing the process.
func SafeCall(ctx context.Context, t Tool, args json.RawMessage, key string) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &Error{Message: fmt.Sprintf("tool %s panicked: %v", t.Spec().Name, r)}
		}
	}()
	return t.Call(ctx, args, key)
}
