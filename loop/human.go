package loop

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/trace"
)

// ActOnDecisions goes on with a run that stopped with needs_human because calls wait for
// approval (State.Pending): it acts on the waiting turn (State.PendingTurn) with the humans'
// decisions, given by call id, without calling the model. Each pending call's decision is
// counted once in State.Approvals and emitted as an approval event (approved or denied); the
// calls of the turn decided before it stopped (State.Settled) keep their decision and are not
// counted again. Then the turn goes through the tool-call budget, execution and results as in
// Step, in the same iteration, and the run goes on (or stops on what the results say); a turn
// with calls that run as child runs waits for them instead (ActOnChildren).
// Decisions for calls that do not wait are ignored.
//
// It returns an error, changing nothing, when the run has no turn waiting for approval or a
// pending call has no decision. The time the run waited (since it stopped) is added to
// State.Waited, which the wall-clock budget does not count.
func (r *Run) ActOnDecisions(ctx context.Context, decisions map[string]Decision) error {
	st := r.st
	turn := st.PendingTurn
	if turn == nil || st.StopReason != NeedsHuman || len(st.Pending) == 0 {
		return fmt.Errorf("loop: run %s has no turn waiting for approval", st.RunID)
	}
	if err := checkWaiting(st.RunID, turn, st.Pending, "approval", "decision", func(id string) bool { _, ok := decisions[id]; return ok }); err != nil {
		return err
	}
	iter := st.Pending[0].Iteration
	r.iter = iter
	r.endWait()
	st.StopReason, st.Detail = "", ""
	deadline := r.deadline()
	ctx, cancel := r.c.clock.WithDeadline(ctx, deadline)
	defer cancel()

	checks := r.turnChecks(turn)
	for _, p := range st.Pending {
		ch, d := &checks[p.Index], decisions[p.Call.ID]
		st.Approvals[p.Call.Name]++
		decision := "approved"
		if !d.Approve {
			decision = "denied"
			ch.denied, ch.reason = true, d.Message
		}
		r.emit(trace.Event{Type: trace.Approval, Iteration: iter, Tool: p.Call.Name, CallID: p.Call.ID, Decision: decision, Reason: d.Message, By: d.By})
	}
	st.Pending, st.PendingTurn, st.Settled = nil, nil, nil
	r.actOnTurn(ctx, iter, turn, checks, deadline, "approval")
	return nil
}

// checkWaiting checks the calls of turn that wait (for what: approval, their child runs): each
// is the call of the turn it says, and has its answer (has; an answer names what it is).
func checkWaiting(runID string, turn *model.Proposal, waiting []PendingCall, what, answer string, has func(callID string) bool) error {
	for _, p := range waiting {
		if p.Index < 0 || p.Index >= len(turn.Calls) || turn.Calls[p.Index].ID != p.Call.ID {
			return fmt.Errorf("loop: run %s: pending call %s (%s) is not call %d of the turn waiting for %s", runID, p.Call.ID, p.Call.Name, p.Index, what)
		}
		if !has(p.Call.ID) {
			return fmt.Errorf("loop: run %s: call %s of %s waits for %s and has no %s", runID, p.Call.ID, p.Call.Name, what, answer)
		}
	}
	return nil
}

// actOnTurn acts on a turn that waited (for what: approval, its child runs) in its iteration
// iter, as after a model call (propose): a run whose context or wall clock ended meanwhile
// does not act, and answers each call as not executed (a child's with its result: it ran);
// else the turn waits for child runs, or executes and records, and the run goes on or stops on
// what the results say.
func (r *Run) actOnTurn(ctx context.Context, iter int, turn *model.Proposal, checks []callCheck, deadline time.Time, what string) {
	reason, detail := contextStop(ctx)
	if reason == "" && !r.c.clock.Now().Before(deadline) {
		reason, detail = Timeout, fmt.Sprintf("the wall-clock budget of %s ran out while the run waited for %s", r.c.budget.MaxDuration, what)
	}
	if reason != "" {
		r.answerUnacted(iter, checks, "not executed: "+string(reason))
		r.stop(iter, reason, detail)
	} else if !r.awaitChildren(iter, turn, checks) {
		r.execute(ctx, iter, checks)
		r.record(iter, checks, ctx.Err() != nil)
		if !r.stopOnContext(ctx, iter) && !r.c.clock.Now().Before(deadline) {
			r.stop(iter, Timeout, fmt.Sprintf("the wall-clock budget of %s ran out during tool calls", r.c.budget.MaxDuration))
		}
	}
	if h := r.c.cfg.Hooks.AfterIteration; h != nil {
		h(ctx, r.st)
	}
}

// turnChecks rebuilds the checks of the turn waiting for approval from the state: the verdicts
// validation and the Approver gave before it stopped (State.Settled), every other call accepted.
// Nothing is validated or counted again: that was done, and counted, when the turn was proposed.
func (r *Run) turnChecks(turn *model.Proposal) []callCheck {
	checks := r.checks[:0]
	for _, call := range turn.Calls {
		ch := callCheck{call: call}
		if ch.entry = r.c.tools[call.Name]; ch.entry == nil {
			// Only a controller built without a tool the turn was validated with gets here.
			ch.verdict, ch.reason = rejected, fmt.Sprintf("unknown tool %q (%s)", call.Name, r.c.declared())
		}
		checks = append(checks, ch)
	}
	for _, s := range r.st.Settled {
		if s.Index < 0 || s.Index >= len(checks) {
			continue
		}
		ch := &checks[s.Index]
		switch {
		case s.Rejected != "":
			ch.verdict, ch.reason = rejected, s.Rejected
		case s.Denied:
			ch.denied, ch.reason = true, s.Message
		case s.Approved:
			ch.approved = true
		}
	}
	r.checks = checks
	return checks
}

// ResumeWithMessage goes on with a run that stopped with needs_human without calls waiting for
// approval (the model escalated, a tool failed too often): it clears the stop, adds the human's
// message to the conversation as a user message, and starts fresh failure streaks (the tool
// that needed a human would otherwise need one again at its next failure). The next Step calls
// the model. The time the run waited (since it stopped) is added to State.Waited, which the
// wall-clock budget does not count.
//
// It returns an error, changing nothing, when the run did not stop with needs_human, when calls
// wait for approval (ActOnDecisions), or when the message is empty.
func (r *Run) ResumeWithMessage(message string) error {
	st := r.st
	switch {
	case st.StopReason != NeedsHuman:
		return fmt.Errorf("loop: run %s does not wait for a human (stop reason %q)", st.RunID, st.StopReason)
	case st.PendingTurn != nil:
		return fmt.Errorf("loop: run %s waits for decisions on %d call(s), not for a message", st.RunID, len(st.Pending))
	case strings.TrimSpace(message) == "":
		return fmt.Errorf("loop: run %s: the human's message is empty", st.RunID)
	}
	r.endWait()
	st.StopReason, st.Detail = "", ""
	clear(st.FailureRun)
	st.Messages = append(st.Messages, model.Message{Role: model.RoleUser, Content: message})
	return nil
}

// endWait adds the time since the run stopped for a human to State.Waited.
func (r *Run) endWait() {
	st := r.st
	if st.WaitingSince.IsZero() {
		return
	}
	if d := r.c.clock.Now().Sub(st.WaitingSince); d > 0 {
		st.Waited += d
	}
	st.WaitingSince = time.Time{}
}
