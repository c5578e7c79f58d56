package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/outbox"
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
			m, err := e.out.TaskMsg(ctx, c.Task, at)
			if err != nil {
				return err
			}
			add(m)
		case engine.CmdDeadLetter:
			add(e.deadLetterMsg(c.Task, c.Reason))
		case engine.CmdStartChild:
			m, err := e.out.StartChildMsg(ctx, run.ID, next.bundle, c.Child, at)
			if err != nil {
				return err
			}
			add(m)
		case engine.CmdCancelChild:
			add(e.cancelMsg(c.Child.RunID, at, fmt.Sprintf("its parent run %s no longer waits for it", run.ID)))
		}
	}
	if err := e.out.Publish(ctx, msgs); err != nil {
		return err
	}
	e.keep(ctx, msgs)
	if len(msgs) == 1 {
		outbox.Recycle(msgs[0]) // published synchronously (an iteration's task): nothing holds it, nor its data
	}
	return nil
}

// keep tells the keeper of REINS_TASKS about the tasks among msgs, now stored. A keeper that
// cannot be renewed slows iterations down but loses nothing: it is logged, and tried again.
func (e *Engine) keep(ctx context.Context, msgs []*nats.Msg) {
	for _, m := range msgs {
		if !strings.HasPrefix(m.Subject, e.names.TaskSubjectPrefix()) {
			continue
		}
		if err := e.keeper.Stored(ctx, outbox.MsgSize(m)); err != nil {
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
	if err := e.out.Publish(ctx, msgs); err != nil {
		return err
	}
	if ent.bundle.Definition.Concurrency != nil {
		// The release command: after the save, and again whenever an event of the ended run
		// comes back (release is idempotent).
		if err := e.release(ctx, run.ID, at); err != nil {
			return err
		}
	}
	subj, err := e.names.CancelSubject(run.ID)
	if err != nil {
		return permanent(err)
	}
	if err := e.box.Conn().Publish(subj, []byte(run.ID)); err != nil {
		return fmt.Errorf("announce the end of run %s: %w", run.ID, err)
	}
	return nil
}

// deadLetterMsg is the message of a dead task on REINS_DLQ. A task too large to store whole
// loses its input and texts, as the OmittedHeader says.
func (e *Engine) deadLetterMsg(t *protocol.Task, reason string) *nats.Msg {
	subj, err := e.names.DLQSubject(t.Handler)
	if err != nil {
		e.log.Error("runner: a dead task cannot be stored in the dead-letter queue", "task", t.MsgID, "err", err)
		return nil
	}
	data, err := wire.EncodeTask(t)
	if err != nil {
		e.log.Error("runner: a dead task cannot be encoded", "task", t.MsgID, "err", err)
		return nil
	}
	m := outbox.NewMsg(subj, data, t.MsgID)
	m.Header.Set(ReasonHeader, headerValue(reason))
	if n := outbox.MsgSize(m); n > e.maxPayload {
		c := *t
		c.Input, c.Prompt, c.Instructions, c.Goal = json.RawMessage("null"), "", "", ""
		m.Data, _ = wire.EncodeTask(&c)
		m.Header.Set(OmittedHeader, fmt.Sprintf("input, prompt, instructions and goal: the task is %d bytes, more than the message limit of %d bytes", n, e.maxPayload))
	}
	return m
}

// childFinishedMsg tells the parent of run that it ended, with what its steps spent and the
// stop reason of the step that ended it, the output stored by reference when large (for the
// parent's run). The error is that of the values' store.
func (e *Engine) childFinishedMsg(ctx context.Context, run *engine.Run, p *protocol.Parent, at time.Time) (*nats.Msg, error) {
	ev := &protocol.Event{RunID: p.RunID, Type: protocol.EvChildFinished, At: at,
		Step: p.Step, Item: p.Item, Activation: p.Activation, Iteration: p.Iteration, CallID: p.CallID, Child: run.ID,
		Status: run.Status, Output: run.Output}
	if u := run.Usage(); u != (protocol.Usage{}) {
		ev.Usage = &u
	}
	ev.StopReason, ev.StopDetail = run.Ending()
	if run.Error != nil {
		ev.Error = run.Error.Message
	}
	m, err := outbox.ValuesEventMsg(ctx, e.names, e.values, ev, run.ID)
	switch {
	case errors.Is(err, outbox.ErrStore):
		return nil, err
	case err != nil:
		e.log.Error("runner: the parent of a run cannot be told it ended", "run_id", run.ID, "parent", p.RunID, "err", err)
		return nil, nil
	}
	return m, nil
}

// cancelMsg is a cancel event for run runID.
func (e *Engine) cancelMsg(runID string, at time.Time, reason string) *nats.Msg {
	m, err := outbox.EventMsg(e.names, outbox.CancelEvent(runID, at, reason), "")
	if err != nil {
		e.log.Error("runner: a sub-run cannot be cancelled", "run_id", runID, "err", err)
		return nil
	}
	return m
}

// publishTick publishes the tick of a schedule command of run runID.
func (e *Engine) publishTick(runID string, c engine.Command) error {
	m, err := outbox.EventMsg(e.names, outbox.TickEvent(runID, c), "")
	if err != nil {
		return permanent(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), outbox.PublishTimeout)
	defer cancel()
	ack, err := natsbox.Publish(ctx, e.js.Conn(), m)
	if err == nil {
		_, err = outbox.Own(ctx, e.js, e.names, m, ack) // a tick's id is predictable: taken first, it is sent again
	}
	return err
}

// headerValue makes s fit in one header value: one line, at most maxHeaderValue bytes.
func headerValue(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxHeaderValue {
		s = strings.ToValidUTF8(s[:maxHeaderValue], "")
	}
	return s
}
