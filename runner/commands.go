package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// maxHeaderValue bounds the value of a header the engine writes (a dead-letter reason).
const maxHeaderValue = 4096

// carryOut publishes the messages of a decision's commands, all at once, and waits for their
// acknowledgements. Schedules and the end of the run come after the save.
func (e *Engine) carryOut(ctx context.Context, at time.Time, next *entry, cmds []engine.Command) error {
	var msgs []*nats.Msg
	add := func(m *nats.Msg) {
		if m != nil {
			msgs = append(msgs, m)
		}
	}
	run := next.rec.Run
	for _, c := range cmds {
		switch c.Type {
		case engine.CmdDispatch:
			m, err := e.taskMsg(ctx, c.Task, at)
			if err != nil {
				return err
			}
			add(m)
		case engine.CmdDeadLetter:
			add(e.deadLetterMsg(c.Task, c.Reason))
		case engine.CmdStartChild:
			m, err := e.startChildMsg(ctx, run.ID, next.bundle, c.Child, at)
			if err != nil {
				return err
			}
			add(m)
		case engine.CmdCancelChild:
			add(e.cancelMsg(c.Child.RunID, at, fmt.Sprintf("its parent run %s no longer waits for it", run.ID)))
		}
	}
	if err := e.publish(ctx, msgs); err != nil {
		return err
	}
	e.keep(ctx, msgs)
	return nil
}

// keep tells the keeper of REINS_TASKS about the tasks among msgs, now stored. A keeper that
// cannot be renewed slows iterations down but loses nothing: it is logged, and tried again.
func (e *Engine) keep(ctx context.Context, msgs []*nats.Msg) {
	for _, m := range msgs {
		if !strings.HasPrefix(m.Subject, natsbox.TaskSubjectPrefix) {
			continue
		}
		if err := e.keeper.Stored(ctx, msgSize(m)); err != nil {
			e.log.Warn("runner: the keeper message of the task stream was not renewed", "err", err)
		}
	}
}

// finished announces the end of a run: cancel its sub-runs still in flight, tell its parent, and
// tell workers (core NATS) to stop what they still run for it. All of it is idempotent.
func (e *Engine) finished(ctx context.Context, at time.Time, ent *entry) error {
	run := ent.rec.Run
	var msgs []*nats.Msg
	for _, c := range engine.SubRuns(ent.bundle.Definition, run) {
		if m := e.cancelMsg(c.RunID, at, fmt.Sprintf("its parent run %s ended %s", run.ID, run.Status)); m != nil {
			msgs = append(msgs, m)
		}
	}
	if p := ent.rec.Parent; p != nil {
		m, err := e.childFinishedMsg(ctx, run, p, at)
		if err != nil {
			return err
		}
		if m != nil {
			msgs = append(msgs, m)
		}
	}
	if err := e.publish(ctx, msgs); err != nil {
		return err
	}
	subj, err := natsbox.CancelSubject(run.ID)
	if err != nil {
		return permanent(err)
	}
	if err := e.box.Conn().Publish(subj, []byte(run.ID)); err != nil {
		return fmt.Errorf("announce the end of run %s: %w", run.ID, err)
	}
	return nil
}

// taskMsg is the message of a task, its large values stored by reference; a task that cannot
// be sent is answered by a permanent failure instead, on the run's own subject. The error is
// that of the values' store, worth trying again.
func (e *Engine) taskMsg(ctx context.Context, t *protocol.Task, at time.Time) (*nats.Msg, error) {
	subj, err := wire.TaskSubject(t)
	if err != nil {
		return e.undeliverable(t, at, fmt.Sprintf("the task for step %s cannot be sent: %v", taskKey(t), err)), nil
	}
	out, err := e.values.OutTask(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.MsgID, err)
	}
	data, err := wire.EncodeTask(out)
	if err != nil {
		return e.undeliverable(t, at, fmt.Sprintf("the task for step %s cannot be encoded: %v", taskKey(t), err)), nil
	}
	m := newMsg(subj, data, t.MsgID)
	if n := msgSize(m); n > e.maxPayload {
		return e.undeliverable(t, at, fmt.Sprintf("the task for step %s is %d bytes, more than the message limit of %d bytes", taskKey(t), n, e.maxPayload)), nil
	}
	return m, nil
}

func (e *Engine) undeliverable(t *protocol.Task, at time.Time, why string) *nats.Msg {
	ev := wire.Answer(t, protocol.EvFailed, at)
	ev.Permanent, ev.Error = true, why
	m, err := eventMsg(ev, "")
	if err != nil {
		e.log.Error("runner: a task cannot be sent nor answered", "task", t.MsgID, "why", why, "err", err)
		return nil
	}
	return m
}

// deadLetterMsg is the message of a dead task on REINS_DLQ. A task too large to store whole
// loses its input and texts, as the OmittedHeader says.
func (e *Engine) deadLetterMsg(t *protocol.Task, reason string) *nats.Msg {
	subj, err := natsbox.DLQSubject(t.Handler)
	if err != nil {
		e.log.Error("runner: a dead task cannot be stored in the dead-letter queue", "task", t.MsgID, "err", err)
		return nil
	}
	data, err := wire.EncodeTask(t)
	if err != nil {
		e.log.Error("runner: a dead task cannot be encoded", "task", t.MsgID, "err", err)
		return nil
	}
	m := newMsg(subj, data, t.MsgID)
	m.Header.Set(ReasonHeader, headerValue(reason))
	if n := msgSize(m); n > e.maxPayload {
		c := *t
		c.Input, c.Prompt, c.Instructions, c.Goal = json.RawMessage("null"), "", "", ""
		m.Data, _ = wire.EncodeTask(&c)
		m.Header.Set(OmittedHeader, fmt.Sprintf("input, prompt, instructions and goal: the task is %d bytes, more than the message limit of %d bytes", n, e.maxPayload))
	}
	return m
}

// startChildMsg is the start event of a sub-run, its input stored by reference when large;
// one that cannot be sent fails the step that waits for it. The error is that of the values'
// store.
func (e *Engine) startChildMsg(ctx context.Context, runID string, b *wire.Bundle, c *engine.ChildRun, at time.Time) (*nats.Msg, error) {
	hash, ok := b.Workflows[c.Workflow]
	if !ok {
		return e.childFailedMsg(runID, c, at, fmt.Sprintf("the workflow file %s is not in the stored bundle of workflow %s", c.Workflow, b.Definition.Name)), nil
	}
	ev := &protocol.Event{RunID: c.RunID, Type: protocol.EvStart, At: at, Input: c.Input, Item: -1,
		Workflow: hash, Parent: parentOf(runID, c)}
	m, err := valuesEventMsg(ctx, e.values, ev, "")
	switch {
	case errors.Is(err, errStore):
		return nil, err
	case err != nil:
		return e.childFailedMsg(runID, c, at, err.Error()), nil
	}
	if n := msgSize(m); n > e.maxPayload {
		return e.childFailedMsg(runID, c, at, fmt.Sprintf("its start event is %d bytes, more than the message limit of %d bytes", n, e.maxPayload)), nil
	}
	return m, nil
}

// childFailedMsg tells run runID that its sub-run c failed before it started.
func (e *Engine) childFailedMsg(runID string, c *engine.ChildRun, at time.Time, why string) *nats.Msg {
	m, err := eventMsg(couldNotStart(parentOf(runID, c), at, why), c.RunID)
	if err != nil {
		e.log.Error("runner: a sub-run cannot start and its parent cannot be told", "run", c.RunID, "why", why, "err", err)
		return nil
	}
	return m
}

// parentOf is the parent of sub-run c, started by run runID.
func parentOf(runID string, c *engine.ChildRun) *protocol.Parent {
	return &protocol.Parent{RunID: runID, Step: c.Step, Item: c.Item, Activation: c.Activation}
}

// couldNotStart is the event that tells parent p that its sub-run failed before it started.
func couldNotStart(p *protocol.Parent, at time.Time, why string) *protocol.Event {
	return &protocol.Event{RunID: p.RunID, Type: protocol.EvChildFinished, At: at,
		Step: p.Step, Item: p.Item, Activation: p.Activation, Status: protocol.RunFailed,
		Error: "the sub-run could not start: " + why}
}

// cancelEvent is the event that cancels run runID.
func cancelEvent(runID string, at time.Time, reason string) *protocol.Event {
	return &protocol.Event{RunID: runID, Type: protocol.EvCancel, At: at, Item: -1, Reason: reason}
}

// personCancel is a cancel a person sends: with a nonce, so that the run records it once.
func personCancel(runID string, at time.Time, reason string) *protocol.Event {
	ev := cancelEvent(runID, at, reason)
	ev.Nonce = nonce()
	return ev
}

// tickEvent is the tick of schedule command c of run runID.
func tickEvent(runID string, c engine.Command) *protocol.Event {
	return &protocol.Event{RunID: runID, Type: protocol.EvTick, At: c.At, Step: c.Step, Item: c.Item, Activation: c.Activation}
}

// childFinishedMsg tells the parent of run that it ended, the output stored by reference when
// large (for the parent's run). The error is that of the values' store.
func (e *Engine) childFinishedMsg(ctx context.Context, run *engine.Run, p *protocol.Parent, at time.Time) (*nats.Msg, error) {
	ev := &protocol.Event{RunID: p.RunID, Type: protocol.EvChildFinished, At: at,
		Step: p.Step, Item: p.Item, Activation: p.Activation, Status: run.Status, Output: run.Output}
	if run.Error != nil {
		ev.Error = run.Error.Message
	}
	m, err := valuesEventMsg(ctx, e.values, ev, run.ID)
	switch {
	case errors.Is(err, errStore):
		return nil, err
	case err != nil:
		e.log.Error("runner: the parent of a run cannot be told it ended", "run", run.ID, "parent", p.RunID, "err", err)
		return nil, nil
	}
	return m, nil
}

// cancelMsg is a cancel event for run runID.
func (e *Engine) cancelMsg(runID string, at time.Time, reason string) *nats.Msg {
	m, err := eventMsg(cancelEvent(runID, at, reason), "")
	if err != nil {
		e.log.Error("runner: a sub-run cannot be cancelled", "run", runID, "err", err)
		return nil
	}
	return m
}

// publishTick publishes the tick of a schedule command of run runID.
func (e *Engine) publishTick(runID string, c engine.Command) error {
	m, err := eventMsg(tickEvent(runID, c), "")
	if err != nil {
		return permanent(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	_, err = natsbox.Publish(ctx, e.js.Conn(), m)
	return err
}

// publish publishes msgs asynchronously and waits for every acknowledgement. One message (the
// next task of a loop, most often) goes through natsbox.Publish, which reads its
// acknowledgement without reflection.
func (e *Engine) publish(ctx context.Context, msgs []*nats.Msg) error {
	switch len(msgs) {
	case 0:
		return nil
	case 1:
		ctx, cancel := context.WithTimeout(ctx, publishTimeout)
		defer cancel()
		_, err := natsbox.Publish(ctx, e.js.Conn(), msgs[0])
		return err
	}
	futs := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := e.js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("publish on %s: %w", m.Subject, err)
		}
		futs = append(futs, f)
	}
	timeout := time.NewTimer(publishTimeout)
	defer timeout.Stop()
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish on %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return fmt.Errorf("publish on %s: no acknowledgement within %s", f.Msg().Subject, publishTimeout)
		}
	}
	return nil
}

// errStore is wrapped by the errors of eventMsg that come from the values' store: worth trying
// again, unlike the others.
var errStore = errors.New("the values' store failed")

// valuesEventMsg is eventMsg for an event that may carry large values (an input, an output):
// they are stored by reference.
func valuesEventMsg(ctx context.Context, values *wire.Values, ev *protocol.Event, child string) (*nats.Msg, error) {
	out, err := values.OutEvent(ctx, ev)
	if err != nil {
		return nil, fmt.Errorf("event for run %s: %w: %w", ev.RunID, errStore, err)
	}
	return eventMsg(out, child)
}

// eventMsg is the message of ev (child: the sub-run a child_finished event is about).
func eventMsg(ev *protocol.Event, child string) (*nats.Msg, error) {
	subj, err := wire.EventSubject(ev)
	if err != nil {
		return nil, err
	}
	data, err := wire.EncodeEvent(ev)
	if err != nil {
		return nil, fmt.Errorf("event for run %s: %w", ev.RunID, err)
	}
	return newMsg(subj, data, wire.EventMsgID(ev, child)), nil
}

func newMsg(subject string, data []byte, msgID string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	return m
}

// msgSize is the size of m as the server counts it against max payload: headers and data.
func msgSize(m *nats.Msg) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n + len(m.Data)
}

// headerValue makes s fit in one header value: one line, at most maxHeaderValue bytes.
func headerValue(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxHeaderValue {
		s = strings.ToValidUTF8(s[:maxHeaderValue], "")
	}
	return s
}

// taskKey names the step of a task as the run state does: step, or step#item for a child.
func taskKey(t *protocol.Task) string {
	if t.Item >= 0 {
		return t.Step + "#" + strconv.Itoa(t.Item)
	}
	return t.Step
}
