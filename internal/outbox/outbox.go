// Package outbox builds the messages a decision of the engine sends (tasks, events, the starts
// of sub-runs) and publishes them, each event on the subject of its maker
// (Subject: the engine's own subject of the run for what only the engine makes): the engine's shell (package runner) sends what engine.Decide
// commands through it, and the client (package client) sends a forked run's tasks through it,
// so that both send the same subjects, bodies and message ids. A task or a start that cannot
// be sent becomes the failure event that answers it, never a lost message.
//
// It decides nothing and reads no run state: it encodes and publishes what it is given.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/telemetry"
	"github.com/reins-run/reins/workflow"
)

// PublishTimeout bounds the wait for the acknowledgements of one decision's messages.
const PublishTimeout = 10 * time.Second

// Outbox builds and publishes messages on one connection.
type Outbox struct {
	JS jetstream.JetStream
	// Names are the namespace's subjects the messages go on.
	Names natsbox.Names
	// Values stores the large values of tasks and events by reference.
	Values *wire.Values
	// MaxPayload is the server's message limit: a task or a start past it is answered by a
	// failure instead.
	MaxPayload int
	// Log receives what can be neither sent nor answered (nil: discarded).
	Log *slog.Logger
}

// TaskMsg is the message of a task, its large values stored by reference; a task that cannot
// be sent is answered by a permanent failure instead, on the run's own subject. The error is
// that of the values' store, worth trying again.
func (o *Outbox) TaskMsg(ctx context.Context, t *protocol.Task, at time.Time) (*nats.Msg, error) {
	subj, err := o.Names.TaskSubject(t.Handler)
	if err != nil {
		return o.undeliverable(t, at, fmt.Sprintf("the task for step %s cannot be sent: %v", wire.TaskKey(t), err)), nil
	}
	out, err := o.Values.OutTask(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.MsgID, err)
	}
	m := newMsg(subj, t.MsgID)
	if m.Data != nil { // a kept message's buffer (Recycle)
		m.Data, err = wire.AppendTask(m.Data, out)
	} else {
		m.Data, err = wire.EncodeTask(out)
	}
	if err != nil {
		return o.undeliverable(t, at, fmt.Sprintf("the task for step %s cannot be encoded: %v", wire.TaskKey(t), err)), nil
	}
	if telemetry.Enabled() {
		// The worker's span of the task is a child of the step's: the same for every attempt,
		// iteration and redelivery of one activation.
		telemetry.Inject(m.Header, telemetry.StepSpan(t.RunID, protocol.StepKey(t.Step, t.Item), t.Activation))
	}
	if n := MsgSize(m); n > o.MaxPayload {
		return o.undeliverable(t, at, fmt.Sprintf("the task for step %s is %d bytes, more than the message limit of %d bytes", wire.TaskKey(t), n, o.MaxPayload)), nil
	}
	return m, nil
}

func (o *Outbox) undeliverable(t *protocol.Task, at time.Time, why string) *nats.Msg {
	ev := wire.Answer(t, protocol.EvFailed, at)
	ev.Permanent, ev.Error = true, why
	m, err := EventMsg(o.Names, ev, "")
	if err != nil {
		o.log().Error("outbox: a task cannot be sent nor answered", "task", t.MsgID, "why", why, "err", err)
		return nil
	}
	return m
}

// StartChildMsg is the start event of a sub-run, its input stored by reference when large;
// one that cannot be sent fails the step that waits for it. The error is that of the values'
// store.
func (o *Outbox) StartChildMsg(ctx context.Context, runID string, b *workflow.Bundle, c *engine.ChildRun, at time.Time) (*nats.Msg, error) {
	hash, ok := b.Workflows[c.Workflow]
	if c.Agent != "" {
		hash, ok = b.Agents[c.Agent]
	}
	if !ok {
		what := "the workflow file " + c.Workflow
		if c.Agent != "" {
			what = "the workflow of agent tool step " + c.Agent
		}
		return o.childFailedMsg(runID, c, at, fmt.Sprintf("%s is not in the stored bundle of workflow %s", what, b.Definition.Name)), nil
	}
	ev := &protocol.Event{RunID: c.RunID, Type: protocol.EvStart, At: at, Input: c.Input, Item: -1,
		Workflow: hash, Parent: ParentOf(runID, c), OnBehalfOf: c.StartedBy}
	m, err := ValuesEventMsg(ctx, o.Names, o.Values, ev, "")
	switch {
	case errors.Is(err, ErrStore):
		return nil, err
	case err != nil:
		return o.childFailedMsg(runID, c, at, err.Error()), nil
	}
	if n := MsgSize(m); n > o.MaxPayload {
		return o.childFailedMsg(runID, c, at, fmt.Sprintf("its start event is %d bytes, more than the message limit of %d bytes", n, o.MaxPayload)), nil
	}
	return m, nil
}

// childFailedMsg tells run runID that its sub-run c failed before it started.
func (o *Outbox) childFailedMsg(runID string, c *engine.ChildRun, at time.Time, why string) *nats.Msg {
	m, err := EventMsg(o.Names, CouldNotStart(ParentOf(runID, c), c.RunID, at, why), c.RunID)
	if err != nil {
		o.log().Error("outbox: a sub-run cannot start and its parent cannot be told", "run", c.RunID, "why", why, "err", err)
		return nil
	}
	return m
}

// ParentOf is the parent of sub-run c, started by run runID.
func ParentOf(runID string, c *engine.ChildRun) *protocol.Parent {
	return &protocol.Parent{RunID: runID, Step: c.Step, Item: c.Item, Activation: c.Activation, Iteration: c.Iteration, CallID: c.CallID}
}

// CouldNotStart is the event that tells parent p that its sub-run child failed before it
// started.
func CouldNotStart(p *protocol.Parent, child string, at time.Time, why string) *protocol.Event {
	return &protocol.Event{RunID: p.RunID, Type: protocol.EvChildFinished, At: at,
		Step: p.Step, Item: p.Item, Activation: p.Activation, Iteration: p.Iteration, CallID: p.CallID, Child: child,
		Status: protocol.RunFailed, Error: "the sub-run could not start: " + why}
}

// CancelEvent is the event that cancels run runID.
func CancelEvent(runID string, at time.Time, reason string) *protocol.Event {
	return &protocol.Event{RunID: runID, Type: protocol.EvCancel, At: at, Item: -1, Reason: reason}
}

// TickEvent is the tick of schedule command c of run runID.
func TickEvent(runID string, c engine.Command) *protocol.Event {
	return &protocol.Event{RunID: runID, Type: protocol.EvTick, At: c.At, Step: c.Step, Item: c.Item, Activation: c.Activation}
}

// Publish publishes msgs asynchronously and waits for every acknowledgement, within
// PublishTimeout. One message (the next task of a loop, most often) goes through
// natsbox.Publish, which reads its acknowledgement without reflection; so does every message
// of several that is not acknowledged within natsbox.PublishAttempt, sent again until it is
// (its message id stores it once): a stream whose leader died never answers what it got.
func (o *Outbox) Publish(ctx context.Context, msgs []*nats.Msg) error {
	switch len(msgs) {
	case 0:
		return nil
	case 1: // without a context of its own: the hot path's allocations (natsbox.PublishWithin)
		ack, err := natsbox.PublishWithin(ctx, o.JS.Conn(), msgs[0], PublishTimeout)
		if err == nil && ack.Duplicate {
			ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
			defer cancel()
			_, err = Own(ctx, o.JS, o.Names, msgs[0], &ack)
		}
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	futs := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := o.JS.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("publish on %s: %w", m.Subject, err)
		}
		futs = append(futs, f)
	}
	attempt := time.NewTimer(natsbox.PublishAttempt)
	defer attempt.Stop()
	var again []*nats.Msg // not acknowledged within the attempt
	expired := false
	type dup struct {
		m   *nats.Msg
		ack *jetstream.PubAck
	}
	var dups []dup
	for _, f := range futs {
		if expired {
			select {
			case ack := <-f.Ok():
				if ack.Duplicate {
					dups = append(dups, dup{f.Msg(), ack})
				}
			default:
				again = append(again, f.Msg())
			}
			continue
		}
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				dups = append(dups, dup{f.Msg(), ack})
			}
		case <-f.Err():
			again = append(again, f.Msg()) // the synchronous publish returns the error worth returning
		case <-ctx.Done():
			return fmt.Errorf("publish on %s: %w", f.Msg().Subject, ctx.Err())
		case <-attempt.C:
			expired = true
			again = append(again, f.Msg())
		}
	}
	for _, m := range again {
		ack, err := natsbox.Publish(ctx, o.JS.Conn(), m)
		if err == nil {
			_, err = Own(ctx, o.JS, o.Names, m, ack)
		}
		if err != nil {
			return err
		}
	}
	for _, d := range dups {
		if _, err := Own(ctx, o.JS, o.Names, d.m, d.ack); err != nil {
			return err
		}
	}
	return nil
}

// Own checks ack, the acknowledgement of event message m, against squatting: JetStream takes a
// message for a duplicate by its message id alone, and whoever may publish on the events
// stream (a worker, a submitter on its own subject) may give a message any id, the id of an
// event the engine or a person is about to send included (a sub-run's start, a trigger's
// start, a cancel: their ids are predictable). A duplicate whose stored message came on
// another subject than m's is not m's: m is published again under an id of its own (its id,
// "/", and a random suffix), so that it is stored, and that acknowledgement is returned. A
// duplicate of m's own subject (m sent again, by a replay or a retry) stands. Messages of other
// streams are returned as they are.
func Own(ctx context.Context, js jetstream.JetStream, n natsbox.Names, m *nats.Msg, ack *jetstream.PubAck) (*jetstream.PubAck, error) {
	if ack == nil || !ack.Duplicate || ack.Sequence == 0 {
		return ack, nil
	}
	if _, ok := n.SubjectPartition(m.Subject); !ok {
		return ack, nil
	}
	s, err := js.Stream(ctx, n.EventsStream())
	if err != nil {
		return nil, fmt.Errorf("read what was stored under message id %s: %w", m.Header.Get(jetstream.MsgIDHeader), err)
	}
	stored, err := s.GetMsg(ctx, ack.Sequence)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Removed since (a run pruned): it cannot be m's stored copy to keep.
	case err != nil:
		return nil, fmt.Errorf("read what was stored under message id %s: %w", m.Header.Get(jetstream.MsgIDHeader), err)
	case stored.Subject == m.Subject:
		return ack, nil
	}
	again := nats.NewMsg(m.Subject)
	again.Data = m.Data
	for k, vs := range m.Header {
		again.Header[k] = vs
	}
	again.Header.Set(jetstream.MsgIDHeader, m.Header.Get(jetstream.MsgIDHeader)+"/"+nuid.Next())
	return natsbox.Publish(ctx, js.Conn(), again)
}

// ErrStore is wrapped by the errors of EventMsg that come from the values' store: worth trying
// again, unlike the others.
var ErrStore = errors.New("the values' store failed")

// Subject is the subject the maker of ev publishes it on in namespace n: a worker's answer
// (wire.IsAnswer) on the run's subject, anything else on the engine's (the engine's and an
// admin's connections may publish there). A person's events go on the person's own subject
// instead (natsbox.Names.PrincipalSubject), which the client chooses.
func Subject(n natsbox.Names, ev *protocol.Event) (string, error) {
	if wire.IsAnswer(ev.Type) {
		return n.EventSubject(ev.RunID)
	}
	return n.EngineSubject(ev.RunID)
}

// ValuesEventMsg is EventMsg for an event that may carry large values (an input, an output):
// they are stored by reference.
func ValuesEventMsg(ctx context.Context, n natsbox.Names, values *wire.Values, ev *protocol.Event, child string) (*nats.Msg, error) {
	out, err := values.OutEvent(ctx, ev)
	if err != nil {
		return nil, fmt.Errorf("event for run %s: %w: %w", ev.RunID, ErrStore, err)
	}
	return EventMsg(n, out, child)
}

// EventMsg is the message of ev in namespace n (child: the sub-run a child_finished event is
// about), on the subject of its maker (Subject): a task's answer on the run's, any other event
// on the engine's.
func EventMsg(n natsbox.Names, ev *protocol.Event, child string) (*nats.Msg, error) {
	subj, err := Subject(n, ev)
	if err != nil {
		return nil, err
	}
	data, err := wire.EncodeEvent(ev)
	if err != nil {
		return nil, fmt.Errorf("event for run %s: %w", ev.RunID, err)
	}
	return NewMsg(subj, data, wire.EventMsgID(ev, child)), nil
}

// NewMsg is the message of data on subject with the message id msgID: one [Recycle] kept, or
// a new one.
func NewMsg(subject string, data []byte, msgID string) *nats.Msg {
	m := newMsg(subject, msgID)
	m.Data = data
	return m
}

// newMsg is NewMsg before its data: a message Recycle kept brings the buffer of the data it
// had, empty, to append to (TaskMsg); a new one has none.
func newMsg(subject, msgID string) *nats.Msg {
	if m, ok := kept.Get().(*nats.Msg); ok {
		m.Subject = subject
		m.Header[jetstream.MsgIDHeader][0] = msgID
		return m
	}
	im := &idMsg{}
	im.id[0] = msgID
	im.m = nats.Msg{Subject: subject, Header: nats.Header{jetstream.MsgIDHeader: im.id[:]}}
	return &im.m
}

// idMsg is a message and the values of its one header in one allocation: every iteration's
// task is one.
type idMsg struct {
	m  nats.Msg
	id [1]string
}

// kept holds the messages given to Recycle, each with its header map, the value of its message
// id and the buffer of its data: the message, its map, the map's slots and a task's bytes were
// four of the allocations of every iteration.
var kept sync.Pool

// maxKeptData bounds the data buffer a kept message keeps, so that one large task does not pin
// its buffer.
const maxKeptData = 64 << 10

// Recycle keeps m, a message of [NewMsg] or [Outbox.TaskMsg], and the buffer of its data, for a
// later one. Only for a message that nothing holds any more, nor its data: nats.go is done with
// one once its synchronous publish returned (Publish of one message), not with one published
// asynchronously; and the data of every message a decision sends is encoded for it. Its
// headers are all dropped (a trace context, a reason).
func Recycle(m *nats.Msg) {
	id := m.Header[jetstream.MsgIDHeader]
	if len(id) != 1 {
		return // not one of NewMsg's
	}
	clear(m.Header)
	id[0] = ""
	data := m.Data[:0]
	if cap(data) > maxKeptData {
		data = nil
	}
	*m = nats.Msg{Header: m.Header, Data: data}
	m.Header[jetstream.MsgIDHeader] = id
	kept.Put(m)
}

// MsgSize is the size of m as the server counts it against max payload: headers and data.
// A message whose one header is its id (every task's, every event's without tracing) is sized
// without walking the header map, which costs more than the rest of the sum.
func MsgSize(m *nats.Msg) int {
	n := len("NATS/1.0\r\n\r\n") + len(m.Data)
	if len(m.Header) == 1 {
		if vs, ok := m.Header[jetstream.MsgIDHeader]; ok {
			return n + linesSize(jetstream.MsgIDHeader, vs)
		}
	}
	for k, vs := range m.Header {
		n += linesSize(k, vs)
	}
	return n
}

// linesSize is the size of header k's lines: "k: v\r\n" for each of its values vs.
func linesSize(k string, vs []string) int {
	n := 0
	for _, v := range vs {
		n += len(k) + len(": \r\n") + len(v)
	}
	return n
}

func (o *Outbox) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}
