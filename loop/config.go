package loop

import (
	"context"
	"errors"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// StopReason says why a loop stopped. The strings are stable: fixtures and workflows' edges name
// them (docs/reference/eval-fixtures.md).
type StopReason string

// Stop reasons.
const (
	Completed     StopReason = "completed"
	Refused       StopReason = "refused"
	NeedsHuman    StopReason = "needs_human"
	ToolFailure   StopReason = "tool_failure"
	Failed        StopReason = "failed"
	NoProgress    StopReason = "no_progress"
	MaxIterations StopReason = "max_iterations"
	MaxToolCalls  StopReason = "max_tool_calls"
	MaxTokens     StopReason = "max_tokens"
	MaxCost       StopReason = "max_cost"
	Timeout       StopReason = "timeout"
	Cancelled     StopReason = "cancelled"
	// ContextExhausted: the context policy (Config.Context) cannot bring the next model call
	// under its max_tokens, even with everything it may leave out left out.
	ContextExhausted StopReason = "context_exhausted"
	// OutputTruncated: the model's reply was cut off at its output limit, and the loop could
	// not ask again with room enough (the budgets leave no more than the cut reply had, or the
	// replies were cut off maxTruncated times in a row). Not max_tokens, which says the token
	// budget is spent.
	OutputTruncated StopReason = "output_truncated"
)

// StopReasons lists every stop reason, in the order of docs/reference/eval-fixtures.md.
var StopReasons = []StopReason{Completed, Refused, NeedsHuman, ToolFailure, Failed, NoProgress,
	MaxIterations, MaxToolCalls, MaxTokens, MaxCost, Timeout, Cancelled, ContextExhausted, OutputTruncated}

// Budget holds the hard limits of a run. A zero field takes its default (see DefaultBudget);
// MaxTokens and MaxCostUSD are unlimited when zero.
type Budget struct {
	MaxIterations     int           // model calls that produced a proposal
	MaxToolCalls      int           // executed tool calls
	MaxDuration       time.Duration // wall clock from the start of the run, on the loop's clock
	MaxTokens         int64         // input plus output tokens
	MaxCostUSD        float64       // accumulated model cost
	MaxToolFailures   int           // retryable failures of one tool in a row before needs_human
	MaxRepeatedCalls  int           // proposals of the same tool with the same arguments in a run
	MaxInvalidActions int           // invalid proposals in a row before refused
}

// DefaultBudget returns the budget's defaults (docs/reference/eval-fixtures.md, "budget").
func DefaultBudget() Budget {
	return Budget{
		MaxIterations:     10,
		MaxToolCalls:      20,
		MaxDuration:       5 * time.Minute,
		MaxToolFailures:   3,
		MaxRepeatedCalls:  3,
		MaxInvalidActions: 3,
	}
}

func (b Budget) withDefaults() Budget {
	d := DefaultBudget()
	if b.MaxIterations <= 0 {
		b.MaxIterations = d.MaxIterations
	}
	if b.MaxToolCalls <= 0 {
		b.MaxToolCalls = d.MaxToolCalls
	}
	if b.MaxDuration <= 0 {
		b.MaxDuration = d.MaxDuration
	}
	if b.MaxToolFailures <= 0 {
		b.MaxToolFailures = d.MaxToolFailures
	}
	if b.MaxRepeatedCalls <= 0 {
		b.MaxRepeatedCalls = d.MaxRepeatedCalls
	}
	if b.MaxInvalidActions <= 0 {
		b.MaxInvalidActions = d.MaxInvalidActions
	}
	return b
}

// Policy says which tools the loop may call and under what conditions.
type Policy struct {
	// Allow lists the tools the model may call; nil means every declared tool.
	Allow []string
	// Forbid lists tools that must never execute: proposing one stops the loop with refused. A
	// forbidden name need not be declared (models invent tools).
	Forbid []string
	// RequireApproval lists tools whose calls wait for a human decision.
	RequireApproval []string
	// RequiredEvidence lists tools that must have executed successfully before an answer is
	// accepted.
	RequiredEvidence []string
}

// Decision is a human's answer to an approval request.
type Decision struct {
	Approve bool
	Message string // shown to the model as the call's result when denied
	By      string // who decided, for the record (the authenticated principal)
}

// ApprovalRequest describes a call waiting for a human decision.
type ApprovalRequest struct {
	RunID     string
	Iteration int
	CallIndex int
	Call      model.ToolCall
	// Seq is how many calls of this tool were decided earlier in the run, which lets a scripted
	// approver stay stateless across resumes.
	Seq int
}

// ErrNoDecision is returned by an Approver that has no decision for a call (yet). The loop then
// stops with needs_human and records the pending call.
var ErrNoDecision = errors.New("no approval decision available")

// Approver decides calls that need approval.
type Approver interface {
	Decide(ctx context.Context, req ApprovalRequest) (Decision, error)
}

// ToolOutcome is what happened to one executed call.
type ToolOutcome struct {
	Output   []byte
	Err      error
	Duration time.Duration
}

// Hooks are optional callbacks around the loop's work. BeforeTool and AfterTool run on the
// goroutine that executes the call, so they may run concurrently when a turn has several calls.
type Hooks struct {
	BeforeModel    func(ctx context.Context, req *model.Request)
	AfterModel     func(ctx context.Context, req *model.Request, resp *model.Response, err error)
	BeforeTool     func(ctx context.Context, info *tool.Info, call model.ToolCall)
	AfterTool      func(ctx context.Context, info *tool.Info, call model.ToolCall, out ToolOutcome)
	AfterIteration func(ctx context.Context, st *State)
}

// Config configures a Controller.
type Config struct {
	Model        model.Model // required
	Tools        []tool.Tool
	Instructions string
	Policy       Policy
	Budget       Budget
	Approver     Approver    // nil: every call that needs approval stops the loop with needs_human
	Clock        clock.Clock // nil: the real clock
	Sink         trace.Sink  // nil: events are only kept in the Result
	Hooks        Hooks
	// MaxConcurrentTools bounds how many calls of one turn run at once (default 4).
	MaxConcurrentTools int
	// ModelRetries is how many times a retryable model error is retried in a row before the loop
	// fails (default 2; negative means none).
	ModelRetries int
	// RetryBackoff is the first retry's delay, doubled for each further retry (default 200ms). A
	// model error's RetryAfter makes the wait longer, never shorter.
	RetryBackoff time.Duration
	// ToolChoice is passed to the model with every request (see model.Request.ToolChoice).
	ToolChoice string
	// OnDelta, when set, receives the streamed pieces of every model reply (see model.Delta).
	OnDelta func(iteration int, d model.Delta)
	// MaxToolOutput caps the bytes of one tool result shown to the model (default 32 KiB); a
	// longer result is cut with a visible marker saying how much was dropped.
	MaxToolOutput int
	// Context bounds the input tokens of each model call (see ContextPolicy); the zero value
	// sends the whole conversation every time.
	Context ContextPolicy
	// ChildTools names declared tools whose calls the loop does not execute: each runs as a
	// child run elsewhere (an agent or workflow tool of a durable agent step), and the turn
	// waits for their results (State.Children, Run.ActOnChildren).
	ChildTools []string
}
