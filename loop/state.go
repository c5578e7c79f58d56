package loop

import (
	"time"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/trace"
)

// State is everything a run carries between iterations. It is plain data that marshals to JSON,
// so a run can be saved after any iteration and resumed later, in another process, with the same
// outcome. The loop owns it: callers read it, and only change it to resume a run.
type State struct {
	RunID     string          `json:"run_id"`
	Goal      string          `json:"goal"`
	StartedAt time.Time       `json:"started_at"`
	Messages  []model.Message `json:"messages"`

	Iteration  int         `json:"iteration"`   // model calls that produced a proposal
	ModelCalls int         `json:"model_calls"` // every model call, failed ones included
	ToolCalls  int         `json:"tool_calls"`  // executed tool calls
	Usage      model.Usage `json:"usage"`
	CostUSD    float64     `json:"cost_usd"`

	InvalidStreak    int `json:"invalid_streak"`     // invalid proposals in a row
	ModelErrorStreak int `json:"model_error_streak"` // failed model calls in a row
	// TruncatedStreak counts the replies in a row cut off at their output limit; OutputCap is
	// the reply cap the next model call asks for after one (0: the provider's own).
	TruncatedStreak int   `json:"truncated_streak,omitempty"`
	OutputCap       int64 `json:"output_cap,omitempty"`

	// Per tool: executions so far, successful ones, retryable failures in a row, decided approvals.
	Executed     map[string]int `json:"executed,omitempty"`
	Succeeded    map[string]int `json:"succeeded,omitempty"`
	FailureRun   map[string]int `json:"failure_run,omitempty"`
	Approvals    map[string]int `json:"approvals,omitempty"`
	CallProposed map[uint64]int `json:"call_proposed,omitempty"` // by hash of tool and canonical arguments

	// Totals for metrics.
	Proposals         int `json:"proposals"`          // answers and tool calls proposed
	InvalidActions    int `json:"invalid_actions"`    // proposals rejected by validation
	RepeatedProposals int `json:"repeated_proposals"` // tool calls identical to an earlier one

	// Pending holds the calls waiting for a human decision when the loop stopped with needs_human
	// for that reason; PendingTurn is the whole turn they belong to, not yet acted on; Settled
	// says what was already decided about its other calls (Run.ActOnDecisions acts on the turn).
	Pending     []PendingCall   `json:"pending,omitempty"`
	PendingTurn *model.Proposal `json:"pending_turn,omitempty"`
	Settled     []SettledCall   `json:"settled,omitempty"`
	// Children holds the calls of PendingTurn that wait for their child runs (Config.ChildTools):
	// the run has not stopped, and goes on with Run.ActOnChildren.
	Children []PendingCall `json:"children,omitempty"`

	// WaitingSince is when the run stopped with needs_human, on the loop's clock; Waited adds up
	// the time it waited for humans before going on (ActOnDecisions, ResumeWithMessage). The
	// wall-clock budget does not count that time: it bounds the loop's own work, and a human
	// may take hours to decide.
	WaitingSince time.Time     `json:"waiting_since,omitzero"`
	Waited       time.Duration `json:"waited,omitempty"`

	// Context is what the context policy (Config.Context) sends of Messages, which it never
	// changes: the conversation stays append-only, and only this view of it moves forward.
	Context ContextView `json:"context,omitzero"`

	StopReason StopReason `json:"stop_reason,omitempty"`
	Detail     string     `json:"detail,omitempty"`
	Answer     string     `json:"answer,omitempty"`
}

// PendingCall is a call waiting for approval.
type PendingCall struct {
	Iteration int            `json:"iteration"`
	Index     int            `json:"index"`
	Call      model.ToolCall `json:"call"`
}

// SettledCall is a call of PendingTurn (by Index) that does not wait for a human: rejected by
// validation (Rejected is why), or decided by the Approver before the turn stopped (Approved,
// or Denied with Message), which was counted in Approvals then. Calls of the turn in neither
// Pending nor Settled need no approval.
type SettledCall struct {
	Index    int    `json:"index"`
	Rejected string `json:"rejected,omitempty"`
	Approved bool   `json:"approved,omitempty"`
	Denied   bool   `json:"denied,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Stopped reports whether the run has ended.
func (s *State) Stopped() bool { return s.StopReason != "" }

// Result is how a run ended: the stop reason always, with a one-sentence detail, the answer when
// it completed, the final state and the full trace.
type Result struct {
	StopReason StopReason
	Detail     string
	Answer     string
	State      *State
	Trace      []trace.Event
}

func newState(runID, goal string, now time.Time) *State {
	s := &State{
		RunID:     runID,
		Goal:      goal,
		StartedAt: now,
		Messages:  []model.Message{{Role: model.RoleUser, Content: goal}},
	}
	s.ensureMaps()
	return s
}

// ensureMaps makes a state decoded from JSON (where empty maps are omitted) usable.
func (s *State) ensureMaps() {
	if s.Executed == nil {
		s.Executed = map[string]int{}
	}
	if s.Succeeded == nil {
		s.Succeeded = map[string]int{}
	}
	if s.FailureRun == nil {
		s.FailureRun = map[string]int{}
	}
	if s.Approvals == nil {
		s.Approvals = map[string]int{}
	}
	if s.CallProposed == nil {
		s.CallProposed = map[uint64]int{}
	}
}
