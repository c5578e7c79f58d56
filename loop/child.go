package loop

import (
	"context"
	"fmt"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
)

// Child tools (Config.ChildTools) are tools whose calls the loop does not execute: each runs as
// a child run somewhere else (the durable engine runs an agent or workflow tool's call as a
// sub-run) and its result comes back later. A turn with such a call, once validated, approved
// and within the tool-call budget, is left untouched, as a turn waiting for approval is
// (State.PendingTurn, State.Settled), with those calls in State.Children; the run has not
// stopped. Run.ActOnChildren acts on the turn with the children's results: the other calls run
// then, the children's results are their calls' results, what the children spent counts
// against this run's token and cost budgets, and the run goes on.

// ChildResult is how the child run of one call ended, as ActOnChildren takes it.
type ChildResult struct {
	// Output is the call's result when the child completed (JSON, or text).
	Output []byte
	// Error, when not empty, says why the child did not complete: the call's result is this
	// error, retryable (the model reads it and may try again; failures in a row count toward
	// max_tool_failures as any tool's do).
	Error string
	// Usage and CostUSD are what the child spent: they are added to this run's, so that its
	// max_tokens and max_cost_usd budgets see them.
	Usage   model.Usage
	CostUSD float64
}

// AwaitingChildren reports whether the run waits for the child runs of calls of its turn
// (Run.ActOnChildren goes on).
func (s *State) AwaitingChildren() bool { return len(s.Children) > 0 }

// markChildren marks the child tools: declared tools whose calls run as child runs.
func (c *Controller) markChildren(names []string) error {
	for _, n := range names {
		e, ok := c.tools[n]
		if !ok {
			return fmt.Errorf("%w: child tool %q is not a declared tool", ErrConfig, n)
		}
		e.child = true
	}
	return nil
}

// awaitChildren leaves the turn waiting when a call that would run now (accepted, not denied,
// within the tool-call budget, as execute decides) is a child tool's: nothing of the turn is
// executed, and the run waits for ActOnChildren. It reports whether the turn waits.
func (r *Run) awaitChildren(iter int, turn *model.Proposal, checks []callCheck) bool {
	st := r.st
	var children []PendingCall
	n := 0
	for i := range checks {
		ch := &checks[i]
		if ch.verdict != accepted || ch.denied || st.ToolCalls+n >= r.c.budget.MaxToolCalls {
			continue
		}
		n++
		if ch.entry.child && ch.child == nil { // a child's result is in: it ran
			children = append(children, PendingCall{Iteration: iter, Index: i, Call: ch.call})
		}
	}
	if len(children) == 0 {
		return false
	}
	t := *turn
	st.PendingTurn, st.Settled, st.Children = &t, settled(checks), children
	// The children's time is theirs to bound: like a human's, it is not this run's work.
	st.WaitingSince = r.c.clock.Now()
	return true
}

// ActOnChildren goes on with a run that waits for the child runs of calls of its turn
// (State.Children), given their results by call id: it acts on the turn as ActOnDecisions does,
// in the same iteration and without calling the model: the calls that are not children run
// now, each child's result is its call's (tool_call and tool_result events for it too), and the
// children's usage and cost are added to the run's, where the token and cost budgets see them
// (the next Step, or StopIfSpent, stops the run when they are spent). The time the run waited is
// added to State.Waited.
//
// It returns an error, changing nothing, when the run does not wait for children or a child has
// no result. Results for calls that do not wait are ignored.
func (r *Run) ActOnChildren(ctx context.Context, results map[string]ChildResult) error {
	st := r.st
	turn := st.PendingTurn
	if turn == nil || len(st.Children) == 0 || st.Stopped() {
		return fmt.Errorf("loop: run %s has no calls waiting for child runs", st.RunID)
	}
	if err := checkWaiting(st.RunID, turn, st.Children, "its child run", "result", func(id string) bool { _, ok := results[id]; return ok }); err != nil {
		return err
	}
	iter := st.Children[0].Iteration
	r.iter = iter
	r.endWait()
	deadline := r.deadline()
	ctx, cancel := r.c.clock.WithDeadline(ctx, deadline)
	defer cancel()

	checks := r.turnChecks(turn)
	for _, p := range st.Children {
		res := results[p.Call.ID]
		out := ToolOutcome{Output: res.Output}
		if res.Error != "" {
			out = ToolOutcome{Err: &tool.Error{Message: res.Error, Retryable: true}}
		}
		checks[p.Index].child = &out
		st.Usage.InputTokens += res.Usage.InputTokens
		st.Usage.OutputTokens += res.Usage.OutputTokens
		st.CostUSD = model.AddCost(st.CostUSD, res.CostUSD)
	}
	st.Children, st.PendingTurn, st.Settled = nil, nil, nil
	r.actOnTurn(ctx, iter, turn, checks, deadline, "its child runs")
	return nil
}

// answerUnacted answers the calls of a turn the run stops before acting on: a child's call with
// its child's result (it ran), every other as why.
func (r *Run) answerUnacted(iter int, checks []callCheck, why string) {
	for i := range checks {
		ch := &checks[i]
		if ch.child != nil { // it ran
			r.st.ToolCalls++
			r.st.Executed[ch.call.Name]++
		}
		switch {
		case ch.child != nil && ch.child.Err != nil:
			r.answerOutcome(iter, ch.call, true, "error: "+ch.child.Err.Error(), ch.child.Err.Error(), true, 0)
		case ch.child != nil:
			r.answerOutcome(iter, ch.call, true, truncate(resultText(ch.child.Output), r.c.cfg.MaxToolOutput), "", false, 0)
		default:
			r.answer(iter, ch.call, false, why, "")
		}
	}
}
