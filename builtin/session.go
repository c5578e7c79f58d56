package builtin

import (
	"errors"
	"fmt"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/session"
	"github.com/reins-run/reins/workflow"
)

// A step with a session (Task.Session, rendered by the engine) starts its loop from the
// session's conversation with its goal appended as the next user message, and saves what the
// loop ended with into the session once the step completes (see the package doc, Sessions).

// sessionScope is the scope of the task's session: the principal who started the run, the
// workflow's name, the step of the definition and the rendered value.
func sessionScope(j *job) session.Scope {
	return session.Scope{Principal: j.task.StartedBy, Workflow: j.bundle.Definition.Name, Step: j.task.Body, Session: j.task.Session}
}

// startSession returns the loop state a step with a session starts from: the session's
// conversation (none when there is none, or it expired) with goal appended, under the view the
// session was saved with; and the mark the step's writes carry.
func (h *Handlers) startSession(j *job, id, goal string) (*loop.State, *session.Mark, error) {
	if h.cfg.Sessions == nil {
		return nil, nil, j.failf("the step has a session, but this worker keeps no sessions")
	}
	sc := sessionScope(j)
	now := h.clock.Now()
	cur, err := h.cfg.Sessions.Get(j.t, sc.Key())
	switch {
	case errors.Is(err, session.ErrNotFound):
		cur = nil
	case err != nil:
		return nil, nil, fmt.Errorf("step %s: cannot load session %q: %w", j.name, j.task.Session, err)
	}
	live := cur
	if cur != nil && cur.Expired(now) {
		live = nil
	}
	msgs, mark := session.Continue(live, goal)
	if cur != nil {
		mark.Revision = cur.Revision // the compare-and-set of the save replaces an expired one
	}
	st := &loop.State{RunID: id, Goal: goal, StartedAt: now, Messages: msgs}
	if live != nil {
		st.Context = loop.ContextView{Summary: live.Summary, TruncatedBefore: live.TruncatedBefore}
	}
	h.log.DebugContext(j.t, "agent continues a session", "run_id", j.task.RunID, "step", j.name, "session", sc.Key(), "messages", mark.Prior)
	return st, &mark, nil
}

// saveSession saves the conversation of st, the state after the iteration, into the step's
// session once the step completes with it (stopped, with no calls waiting for approval or
// sub-runs); mark is what the loop took from the session. A turn saved already is not saved
// again (a delivery that saved and died before it answered).
func (h *Handlers) saveSession(j *job, st *loop.State, mark *session.Mark) error {
	if j.task.Session == "" || mark == nil || !st.Stopped() || st.AwaitingChildren() || st.StopReason == loop.NeedsHuman && len(st.Pending) > 0 {
		return nil
	}
	if h.cfg.Sessions == nil {
		return j.failf("the step has a session, but this worker keeps no sessions")
	}
	ttl := j.step.SessionTTL.Std()
	if ttl <= 0 {
		ttl = workflow.DefaultSessionTTL.Std()
	}
	c := &session.Conversation{TurnID: agentRunID(j.task), Goal: st.Goal, Messages: st.Messages, Window: window(st),
		Summary: st.Context.Summary, TruncatedBefore: st.Context.TruncatedBefore}
	saved, err := h.cfg.Sessions.Save(j.t, sessionScope(j), *mark, c, h.clock.Now(), ttl)
	switch {
	case errors.Is(err, session.ErrTooLarge):
		return j.failf("cannot save session %q: %w", j.task.Session, err)
	case err != nil:
		return fmt.Errorf("step %s: cannot save session %q, will try again: %w", j.name, j.task.Session, err)
	}
	h.log.DebugContext(j.t, "agent saved its session", "run_id", j.task.RunID, "step", j.name, "saved", saved)
	return nil
}
