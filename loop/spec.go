package loop

import (
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/model"
)

// PolicySpec is a Policy as files write it: the `policy` of an eval fixture and of a workflow's
// agent step (docs/reference/eval-fixtures.md, docs/reference/workflow-file.md).
type PolicySpec struct {
	Allow            []string `json:"allow,omitempty"`
	Forbid           []string `json:"forbid,omitempty"`
	RequireApproval  []string `json:"require_approval,omitempty"`
	RequiredEvidence []string `json:"required_evidence,omitempty"`
	// Approvers names who may decide the calls that need approval in a durable run: principals
	// ("alice") or roles ("role:finance"); empty means any principal who may approve. The loop
	// itself never reads it: its decisions come from an Approver.
	Approvers []string `json:"approvers,omitempty"`
}

// Policy is the spec as the controller takes it.
func (p PolicySpec) Policy() Policy {
	return Policy{Allow: p.Allow, Forbid: p.Forbid, RequireApproval: p.RequireApproval, RequiredEvidence: p.RequiredEvidence}
}

// BudgetSpec is a Budget as files write it: durations as strings ("30s"), and an absent or zero
// value meaning the default (DefaultBudget).
type BudgetSpec struct {
	MaxIterations     int            `json:"max_iterations,omitempty"`
	MaxToolCalls      int            `json:"max_tool_calls,omitempty"`
	MaxDuration       clock.Duration `json:"max_duration,omitempty"`
	MaxTokens         int64          `json:"max_tokens,omitempty"`
	MaxCostUSD        float64        `json:"max_cost_usd,omitempty"`
	MaxToolFailures   int            `json:"max_tool_failures,omitempty"`
	MaxRepeatedCalls  int            `json:"max_repeated_calls,omitempty"`
	MaxInvalidActions int            `json:"max_invalid_actions,omitempty"`
}

// Budget is the spec as the controller takes it (zero fields still mean the defaults).
func (b BudgetSpec) Budget() Budget {
	return Budget{
		MaxIterations: b.MaxIterations, MaxToolCalls: b.MaxToolCalls, MaxDuration: b.MaxDuration.Std(),
		MaxTokens: b.MaxTokens, MaxCostUSD: b.MaxCostUSD, MaxToolFailures: b.MaxToolFailures,
		MaxRepeatedCalls: b.MaxRepeatedCalls, MaxInvalidActions: b.MaxInvalidActions,
	}
}

// ContextSpec is a ContextPolicy as a workflow's agent step writes it (`context = { max_tokens,
// strategy, keep_last, summarizer }`): the summarizer by the name of one of the workflow's
// models, which the caller opens (an eval fixture scripts it instead, see package fixture).
type ContextSpec struct {
	MaxTokens  int64           `json:"max_tokens"`
	Strategy   ContextStrategy `json:"strategy,omitempty"`
	KeepLast   int             `json:"keep_last,omitempty"`
	Summarizer string          `json:"summarizer,omitempty"`
}

// Policy is the spec as the controller takes it, with summarizer as its summarizer model (nil
// unless the strategy is summarize).
func (c ContextSpec) Policy(summarizer model.Model) ContextPolicy {
	return ContextPolicy{MaxTokens: c.MaxTokens, Strategy: c.Strategy, KeepLast: c.KeepLast, Summarizer: summarizer}
}
