package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// verdict is the controller's decision on one proposed call.
type verdict uint8

const (
	accepted  verdict = iota
	rejected          // invalid: fed back to the model, counted as an invalid action
	forbidden         // stops the loop with refused
)

// callCheck carries one proposed call through validation, approval and execution.
type callCheck struct {
	call     model.ToolCall
	entry    *entry
	verdict  verdict
	reason   string // why it was rejected, denied or skipped
	denied   bool   // a human denied it
	approved bool   // a human approved it
	skipped  bool   // over the tool-call budget
	sig      uint64 // hash of the tool name and canonical arguments
	info     tool.Info
	outcome  ToolOutcome

	// child is the outcome of the call's child run (ActOnChildren): the tool is not called.
	child *ToolOutcome
}

// act validates, approves and executes the calls of one turn, then records exactly one result
// per call, in call order.
func (r *Run) act(ctx context.Context, iter int, deadline time.Time, p *model.Proposal) {
	st := r.st
	checks := r.checks[:0]
	for i, call := range p.Calls {
		checks = append(checks, r.validate(iter, i, call))
	}
	r.checks = checks
	st.Proposals += len(checks)

	if i := indexOf(checks, forbidden); i >= 0 {
		why := fmt.Sprintf("the model proposed the forbidden tool %s", checks[i].call.Name)
		r.answerAll(iter, checks, "not executed: "+why)
		r.stop(iter, Refused, why)
		return
	}
	// The streak is walked in call order: it can reach the budget in the middle of a turn even
	// if a valid call follows, and that is still that many invalid proposals in a row.
	longest := 0
	for i := range checks {
		if checks[i].verdict == rejected {
			st.InvalidActions++
			st.InvalidStreak++
			longest = max(longest, st.InvalidStreak)
		} else {
			st.InvalidStreak = 0
		}
	}
	if n := r.c.budget.MaxInvalidActions; longest >= n {
		r.answerAll(iter, checks, "not executed: too many invalid proposals in a row")
		r.stop(iter, Refused, fmt.Sprintf("%d invalid proposals in a row (budget %d)", longest, n))
		return
	}
	if r.checkRepeats(iter, checks) {
		return
	}
	if r.approve(ctx, iter, p, checks) || r.awaitChildren(iter, p, checks) {
		return
	}
	r.execute(ctx, iter, checks)
	r.record(iter, checks, ctx.Err() != nil)
	if !r.stopOnContext(ctx, iter) && !r.c.clock.Now().Before(deadline) {
		r.stop(iter, Timeout, fmt.Sprintf("the wall-clock budget of %s ran out during tool calls", r.c.budget.MaxDuration))
	}
}

// validate decides whether one call may run: forbidden, unknown, not allowed, bad arguments.
func (r *Run) validate(iter, index int, call model.ToolCall) callCheck {
	c := r.c
	ch := callCheck{call: call}
	e := c.tools[call.Name]
	switch {
	case c.forbid[call.Name]:
		ch.verdict, ch.reason = forbidden, "tool "+call.Name+" is forbidden by policy"
	case e == nil:
		ch.verdict, ch.reason = rejected, fmt.Sprintf("unknown tool %q (%s)", call.Name, c.declared())
	case !e.allowed:
		ch.verdict, ch.reason = rejected, fmt.Sprintf("tool %s is not allowed by policy (allowed: %s)", call.Name, c.allowedNames())
	case index < len(r.malformed) && r.malformed[index]:
		ch.verdict, ch.reason = rejected, fmt.Sprintf("arguments of %s rejected: %v: not valid JSON: %s", call.Name, tool.ErrInvalidArguments, call.Arguments)
	default:
		ch.entry = e
		parsed, err := tool.Parse(call.Arguments)
		if err == nil {
			err = e.validator.Validate(parsed)
		}
		if err != nil {
			ch.verdict, ch.reason = rejected, fmt.Sprintf("arguments of %s rejected: %v", call.Name, err)
		} else {
			ch.sig = argsHash(call.Name, parsed)
		}
	}
	decision := trace.DecisionAccept
	switch ch.verdict {
	case rejected:
		decision = trace.DecisionInvalid
	case forbidden:
		decision = trace.DecisionForbid
	default:
		if e.approval {
			decision = trace.DecisionApprove
		}
	}
	r.emit(trace.Event{Type: trace.Validation, Iteration: iter, Tool: call.Name, CallID: call.ID, Decision: decision, Reason: ch.reason})
	return ch
}

// checkRepeats counts identical proposals (same tool, same canonical arguments) and stops with
// no_progress when one reaches the budget. Only calls that passed validation count: invalid ones
// are bounded by max_invalid_actions instead.
func (r *Run) checkRepeats(iter int, checks []callCheck) bool {
	st := r.st
	why := ""
	for i := range checks {
		ch := &checks[i]
		if ch.verdict != accepted {
			continue
		}
		st.CallProposed[ch.sig]++
		r.proposed = append(r.proposed, ch.sig)
		n := st.CallProposed[ch.sig]
		if n > 1 {
			st.RepeatedProposals++
		}
		if n >= r.c.budget.MaxRepeatedCalls && why == "" {
			why = fmt.Sprintf("%s was proposed with the same arguments %d times (budget %d)", ch.call.Name, n, r.c.budget.MaxRepeatedCalls)
		}
	}
	if why != "" {
		r.answerAll(iter, checks, "not executed: no progress")
		r.stop(iter, NoProgress, why)
		return true
	}
	return false
}

// approve asks the approver about every accepted call that needs approval. A denied call is
// answered with the human's message. When any call has no decision, the whole turn waits: the
// loop stops with needs_human and records the turn, untouched, to be acted on after a decision.
func (r *Run) approve(ctx context.Context, iter int, p *model.Proposal, checks []callCheck) bool {
	st := r.st
	var pending []PendingCall
	for i := range checks {
		ch := &checks[i]
		if ch.verdict != accepted || !ch.entry.approval {
			continue
		}
		var d Decision
		err := ErrNoDecision
		if r.c.cfg.Approver != nil {
			d, err = r.c.cfg.Approver.Decide(ctx, ApprovalRequest{RunID: st.RunID, Iteration: iter, CallIndex: i, Call: ch.call, Seq: st.Approvals[ch.call.Name]})
		}
		switch {
		case err != nil:
			pending = append(pending, PendingCall{Iteration: iter, Index: i, Call: ch.call})
			r.emit(trace.Event{Type: trace.Approval, Iteration: iter, Tool: ch.call.Name, CallID: ch.call.ID, Decision: "pending", Reason: err.Error()})
		case d.Approve:
			st.Approvals[ch.call.Name]++
			ch.approved = true
			r.emit(trace.Event{Type: trace.Approval, Iteration: iter, Tool: ch.call.Name, CallID: ch.call.ID, Decision: "approved", Reason: d.Message, By: d.By})
		default:
			st.Approvals[ch.call.Name]++
			ch.denied, ch.reason = true, d.Message
			r.emit(trace.Event{Type: trace.Approval, Iteration: iter, Tool: ch.call.Name, CallID: ch.call.ID, Decision: "denied", Reason: d.Message, By: d.By})
		}
	}
	if len(pending) == 0 {
		return false
	}
	st.Pending = pending
	turn := *p
	st.PendingTurn = &turn
	st.Settled = settled(checks)
	names := make([]string, len(pending))
	for i, pc := range pending {
		names[i] = pc.Call.Name + " (" + pc.Call.ID + ")"
	}
	r.stop(iter, NeedsHuman, fmt.Sprintf("waiting for a human decision on %d call(s): %v", len(pending), names))
	return true
}

// settled lists the calls of a turn that stops for approval whose fate is already known: the
// rejected ones with their reason and those the Approver decided, so that acting on the turn
// later neither validates, asks nor counts them again.
func settled(checks []callCheck) []SettledCall {
	var out []SettledCall
	for i := range checks {
		ch := &checks[i]
		switch {
		case ch.verdict == rejected:
			out = append(out, SettledCall{Index: i, Rejected: ch.reason})
		case ch.denied:
			out = append(out, SettledCall{Index: i, Denied: true, Message: ch.reason})
		case ch.approved:
			out = append(out, SettledCall{Index: i, Approved: true})
		}
	}
	return out
}

// execute runs the accepted, approved calls within the tool-call budget, concurrently when a turn
// has several, bounded by MaxConcurrentTools.
func (r *Run) execute(ctx context.Context, iter int, checks []callCheck) {
	st, budget := r.st, r.c.budget.MaxToolCalls
	run := make([]*callCheck, 0, len(checks))
	for i := range checks {
		ch := &checks[i]
		if ch.verdict != accepted || ch.denied {
			continue
		}
		if st.ToolCalls+len(run) >= budget {
			ch.skipped = true
			ch.reason = fmt.Sprintf("the tool-call budget of %d is spent", budget)
			continue
		}
		name := ch.call.Name
		ch.info = tool.Info{RunID: st.RunID, Iteration: iter, Index: i, Seq: st.Executed[name],
			Key: idempotencyKey(st.RunID, iter, i), CallID: ch.call.ID}
		st.Executed[name]++
		run = append(run, ch)
	}
	for _, ch := range run {
		r.emit(trace.Event{Type: trace.ToolCall, Iteration: iter, Tool: ch.call.Name, CallID: ch.call.ID, Key: ch.info.Key})
	}
	if len(run) == 1 {
		r.callTool(ctx, run[0])
		return
	}
	sem := make(chan struct{}, r.c.cfg.MaxConcurrentTools)
	var wg sync.WaitGroup
	for _, ch := range run {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r.callTool(ctx, ch)
		})
	}
	wg.Wait()
}

// idempotencyKey is stable for (run, iteration, call index): a retried or replayed call carries
// the same key, so a side-effecting tool can do its work at most once.
func idempotencyKey(runID string, iter, index int) string {
	var buf [96]byte
	b := append(buf[:0], runID...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(iter), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(index), 10)
	return string(b)
}

func (r *Run) callTool(ctx context.Context, ch *callCheck) {
	hooks := &r.c.cfg.Hooks
	ctx = tool.WithInfo(ctx, &ch.info)
	if hooks.BeforeTool != nil {
		hooks.BeforeTool(ctx, &ch.info, ch.call)
	}
	start := r.c.clock.Now()
	if ch.child != nil {
		ch.outcome = *ch.child
	} else {
		out, err := tool.SafeCall(ctx, ch.entry.tool, ch.call.Arguments, ch.info.Key)
		ch.outcome = ToolOutcome{Output: out, Err: err, Duration: r.c.clock.Now().Sub(start)}
	}
	if hooks.AfterTool != nil {
		hooks.AfterTool(ctx, &ch.info, ch.call, ch.outcome)
	}
}

// record appends one result per call in call order, updates the failure and evidence counters,
// and stops the loop on a non-retryable failure, too many failures in a row, the tool-call budget,
// the context or the clock. ctxDone says whether the run's context ended during the calls: only
// then is a context error the loop's own rather than the tool's failure.
func (r *Run) record(iter int, checks []callCheck, ctxDone bool) {
	st, b := r.st, &r.c.budget
	var fatal, escalate, skipped *callCheck
	for i := range checks {
		ch := &checks[i]
		name := ch.call.Name
		switch {
		case ch.verdict == rejected:
			r.answer(iter, ch.call, false, "error: "+ch.reason, "")
		case ch.denied:
			r.answer(iter, ch.call, false, "denied by a human: "+ch.reason, "")
		case ch.skipped:
			skipped = ch
			r.answer(iter, ch.call, false, "not executed: "+ch.reason, "")
		case ch.outcome.Err != nil:
			st.ToolCalls++
			err := ch.outcome.Err
			r.answerOutcome(iter, ch.call, true, "error: "+err.Error(), err.Error(), tool.IsRetryable(err), ch.outcome.Duration)
			if ctxDone && isContextErr(err) {
				continue // the context check below names the stop reason
			}
			if !tool.IsRetryable(err) {
				fatal = firstOf(fatal, ch)
				continue
			}
			st.FailureRun[name]++
			if st.FailureRun[name] >= b.MaxToolFailures {
				escalate = firstOf(escalate, ch)
			}
		default:
			st.ToolCalls++
			st.Succeeded[name]++
			st.FailureRun[name] = 0
			r.answerOutcome(iter, ch.call, true, truncate(resultText(ch.outcome.Output), r.c.cfg.MaxToolOutput), "", false, ch.outcome.Duration)
		}
	}
	switch {
	case fatal != nil:
		r.stop(iter, ToolFailure, fmt.Sprintf("tool %s failed with a non-retryable error: %v", fatal.call.Name, fatal.outcome.Err))
	case escalate != nil:
		r.stop(iter, NeedsHuman, fmt.Sprintf("tool %s failed %d times in a row (budget %d): %v",
			escalate.call.Name, st.FailureRun[escalate.call.Name], b.MaxToolFailures, escalate.outcome.Err))
	case skipped != nil:
		r.stop(iter, MaxToolCalls, fmt.Sprintf("executing %s would exceed the tool-call budget of %d", skipped.call.Name, b.MaxToolCalls))
	}
}

// answerAll answers every call of a turn that is not acted on.
func (r *Run) answerAll(iter int, checks []callCheck, why string) {
	for i := range checks {
		reason := why
		if checks[i].verdict == rejected {
			reason = "error: " + checks[i].reason
		}
		r.answer(iter, checks[i].call, false, reason, "")
	}
}

// resultText turns a tool's output into the content of its result message: JSON compacted, so
// the model sees the same text however the tool formatted it, and anything that is not JSON
// passed on as text, so a malformed result is an observation rather than a failure.
func resultText(out []byte) string {
	if len(out) == 0 {
		return "null"
	}
	if isCompactJSON(out) {
		return string(out)
	}
	var buf bytes.Buffer
	buf.Grow(len(out))
	if json.Compact(&buf, out) != nil {
		return string(out)
	}
	return buf.String()
}

// truncate cuts a result longer than limit bytes, at a UTF-8 boundary, and says so in a marker
// the model can read: a huge output must not silently eat the context, nor silently lose data.
func truncate(text string, limit int) string {
	if len(text) <= limit {
		return text
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + fmt.Sprintf("\n…[reins: output truncated: showing %d of %d bytes]", cut, len(text))
}

// isCompactJSON reports whether out is valid JSON with no whitespace outside strings, the usual
// case, which needs no copy through json.Compact.
func isCompactJSON(out []byte) bool {
	inString, escaped := false, false
	for _, c := range out {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\n' || c == '\t' || c == '\r'):
			return false
		}
	}
	return json.Valid(out)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func indexOf(checks []callCheck, v verdict) int {
	for i := range checks {
		if checks[i].verdict == v {
			return i
		}
	}
	return -1
}

func firstOf(cur, ch *callCheck) *callCheck {
	if cur != nil {
		return cur
	}
	return ch
}
