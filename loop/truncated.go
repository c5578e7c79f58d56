package loop

import (
	"fmt"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/trace"
)

// maxTruncated is how many replies in a row may be cut off at their output limit: the one that
// makes this many stops the run with OutputTruncated, whatever room the budgets leave. It bounds
// the asking again where the cap cannot grow (a model at its own output limit, a context
// window that is full).
const maxTruncated = 3

// notRun answers each call of a reply cut off at its output limit.
const notRun = "not executed: the reply was cut off at its output limit"

// cutOff deals with a reply that ended on its output limit (Response.Truncated) and reports
// whether it did: an answer or tool calls cut off anywhere is never taken as a final answer
// and its calls are never run (each is answered not executed). The loop asks again, at twice
// the cut reply's output tokens as far as the budgets allow (State.OutputCap, sent as
// Request.RaiseOutputTokens; the provider keeps it within the model's own limit), with a user
// message saying why; or stops with OutputTruncated when the budgets leave no more than the cut
// reply had, or when this is the maxTruncated-th cut reply in a row. An escalation or a refusal
// cut off is still one, and so is a turn that calls a forbidden tool: those are not dealt with
// here.
func (r *Run) cutOff(iter int, p *model.Proposal, resp *model.Response) bool {
	st := r.st
	if !resp.Truncated || (p.Kind != model.KindAnswer && p.Kind != model.KindToolCalls) || r.proposesForbidden(p) {
		st.TruncatedStreak, st.OutputCap = 0, 0
		return false
	}
	st.Proposals += max(len(p.Calls), 1) // as act and finalAnswer count them
	st.TruncatedStreak++
	cut := resp.Usage.OutputTokens
	why := "the reply was cut off at its output limit" + after(cut)
	if resp.FinishReason != "" {
		why += fmt.Sprintf(" (finish reason %q)", resp.FinishReason)
	}
	next, detail := r.askAgain(cut)
	if st.TruncatedStreak >= maxTruncated {
		detail = fmt.Sprintf("%s; %d replies in a row were cut off", why, st.TruncatedStreak)
	} else if detail != "" {
		detail = why + "; " + detail
	}
	decision := fmt.Sprintf("%s: not acted on; asking again", why)
	if next > 0 {
		decision += fmt.Sprintf(" with up to %d output tokens", next)
	}
	if detail != "" {
		decision = why + ": not acted on"
	}
	r.emit(trace.Event{Type: trace.Validation, Iteration: iter, Decision: trace.DecisionTruncated, Reason: decision})
	for i := range p.Calls {
		r.answer(iter, p.Calls[i], false, notRun, "")
	}
	if detail != "" {
		st.OutputCap = 0
		r.stop(iter, OutputTruncated, detail)
		return true
	}
	st.OutputCap = next
	st.Messages = append(st.Messages, model.Message{Role: model.RoleUser, Content: "reins: your last reply was cut off at its output limit" +
		after(cut) + ", so it was not acted on: reply again, complete, and shorter if you can."})
	return true
}

// proposesForbidden reports whether a turn calls a forbidden tool: a call's name comes whole
// before its arguments, so a cut reply that names one is acted on as any such turn (act stops
// the run refused before anything runs).
func (r *Run) proposesForbidden(p *model.Proposal) bool {
	for i := range p.Calls {
		if r.c.forbid[p.Calls[i].Name] {
			return true
		}
	}
	return false
}

// askAgain is the reply cap of the call that asks again after a reply cut off at cut output
// tokens: twice cut, within what the token and cost budgets leave for a call whose input is
// the last one's plus the cut reply (0: no cap of the loop's, when cut is not known or no
// budget applies); or, when the budgets leave no more than cut, why the run stops instead.
func (r *Run) askAgain(cut int64) (int64, string) {
	next := 2 * max(cut, 0)
	b := &r.c.budget
	if b.MaxTokens <= 0 && b.MaxCostUSD <= 0 {
		return next, ""
	}
	limit, reason, _ := r.replyCap(r.c.cfg.Model, model.EstimateInputTokens(&r.req)+cut)
	switch {
	case reason != "":
		return 0, fmt.Sprintf("the %s budget leaves no room to ask again", budgetName(reason))
	case limit > 0 && limit <= cut:
		return 0, fmt.Sprintf("the budgets leave room for %d output tokens, no more than the cut reply had", limit)
	case limit > 0 && (next == 0 || limit < next):
		return limit, ""
	}
	return next, ""
}

// budgetName is how a detail names the budget of a stop reason.
func budgetName(reason StopReason) string {
	if reason == MaxCost {
		return "cost"
	}
	return "token"
}

// after says after how many output tokens a reply was cut off, when the provider said.
func after(cut int64) string {
	if cut <= 0 {
		return ""
	}
	return fmt.Sprintf(" after %d output tokens", cut)
}
