package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/tracing"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// TaskContext is what a handler gets for one task: the task, the ways to answer it, checkpoints
// and heartbeats. Its methods are safe for concurrent use.
type TaskContext interface {
	// Context is cancelled at the task's timeout, when its run ends, or when the worker stops.
	context.Context
	// Task returns the task; the handler must not modify it.
	Task() *protocol.Task
	// Input is the task's input: the step's input, or the output of the previous iteration.
	Input() json.RawMessage
	RunID() string
	// StepID is task.Step: the step, or for a child of a parallel or map step its parent.
	StepID() string
	// Item is the index of a child of a parallel or map step, -1 for other steps.
	Item() int
	Iteration() int
	Attempt() int

	// Continue asks for another iteration (agent_loop, agent) whose input is output.
	Continue(output any) error
	// Complete ends the task with output.
	Complete(output any) error
	// CompleteWith ends the task with output, a label and/or a stop reason.
	CompleteWith(output any, o Outcome) error
	// Fail fails the attempt; the step's retry policy applies.
	Fail(err error) error
	// FailPermanent fails the attempt and the step: retrying cannot help.
	FailPermanent(err error) error
	// Wait answers that the iteration stopped on tool calls that wait for a human decision (an
	// agent step's iteration): the step waits, and once every call is decided the engine
	// dispatches the iteration again, with Task.Resume and Task.Decisions. pending must list
	// one call or more; an empty list is an error and answers nothing.
	Wait(pending []protocol.PendingCall) error

	// Checkpoint replaces the checkpoint with v.
	Checkpoint(v any) error
	// AppendCheckpoint appends items to the checkpoint, which must be a JSON array or nothing;
	// it writes bytes in proportion to the items, not to the history.
	AppendCheckpoint(items ...any) error
	// LoadCheckpoint returns the checkpoint as of the earlier iterations and this attempt's
	// writes; nil when there is none. The bytes are the worker's own copy, handed out without
	// copying so that a long history costs nothing to load: read or decode them, but do not
	// modify them, and load again after a checkpoint write (as bufio.Scanner.Bytes, they may
	// be overwritten by the next write).
	LoadCheckpoint() (json.RawMessage, error)

	// Effect runs fn, a side effect, once for key in this iteration of the step, across its
	// attempts and redeliveries, and returns its result (the JSON of fn's value): an attempt
	// that finds the result recorded returns it without running fn; one that finds another
	// attempt running fn waits for it. fn gets the idempotency key (run, step, activation,
	// iteration and key) to pass to the system it changes: when a holder is lost (crashed, or
	// paused past its lease), fn runs again with the same key. An error from fn means the
	// effect did not happen: nothing is recorded and Effect returns it. docs/engine.md says
	// what is exactly-once and what is at-least-once with a key.
	Effect(key string, fn func(ctx context.Context, idempotencyKey string) (any, error)) (json.RawMessage, error)

	// Heartbeat tells JetStream that the task is still being worked on (the worker also does it
	// every AckWait/3 while the handler runs); once the task is answered it does nothing.
	Heartbeat() error
	// AddUsage adds u to what the answer reports (the engine adds it to the step's usage).
	AddUsage(u protocol.Usage)
	// Record keeps what the iteration did (the last call wins), to be sent with the answer as
	// its durable record ([protocol.Event].Record), with the task's wall time: texts longer
	// than 2 KiB are clipped there, their whole kept by reference in the run's values. A
	// loop's trace.Iteration is the same type.
	Record(it protocol.Iteration)
	// KeepText stores a text with the run's values and returns a reference to it (a string that
	// starts with NUL); ReadText reads it back. For texts a handler keeps out of its checkpoint.
	KeepText(text string) (string, error)
	ReadText(ref string) (string, error)
}

// Outcome is what CompleteWith adds to the output: the label that picks the step's edges, and
// why an agent or agent_loop stopped: the stop reason, and the sentence that explains it (run
// results and reins runs show print it).
type Outcome struct {
	Label, StopReason, StopDetail string
}

// ErrAnswered is wrapped by the error of every answer after the first (only the first counts),
// and of answers and checkpoint writes after the worker answered for the handler (timeout,
// end of the run, worker stopping).
var ErrAnswered = errors.New("worker: the task is already answered")

// maxErrorLen bounds the error message of a failed event.
const maxErrorLen = 16 << 10

type answerState int

const (
	stateOpen      answerState = iota // no answer yet
	stateAnswering                    // an answer is being published
	stateDone                         // answered, discarded or handed back
)

// taskContext implements TaskContext.
type taskContext struct {
	context.Context // base, then base with the task's deadline once started

	w       *Worker
	handler string
	h       Handler
	m       HandlerMetrics
	msg     jetstream.Msg
	task    *protocol.Task
	// published is when JetStream stored the task (the server's clock).
	published time.Time
	// running is set once the handler starts: the heartbeat loop beats the task from then on.
	running atomic.Bool
	// phase says whether the handler runs, returned, or was interrupted by the end of its
	// context ([taskContext.arm]); timer settles a task with a timeout when it passes.
	phase atomic.Int32
	timer *time.Timer

	cancelBase   context.CancelCauseFunc
	stopDeadline context.CancelFunc

	mu     sync.Mutex
	state  answerState
	reason error // why later answers are refused
	// finished is closed when state becomes stateDone; made under mu by the first that waits
	// for it (claim), most tasks having none.
	finished chan struct{}
	usage    protocol.Usage
	record   *protocol.Iteration // what the handler recorded (Record)
	started  time.Time           // when the handler started, for the record's Duration
	// ranFrom is started on the real clock, for the metrics (Options.Now may be a test's).
	ranFrom time.Time
	span    oteltrace.Span // the iteration's span, nil when tracing is off
	// redelivered: the task was delivered before (its message's metadata says).
	redelivered bool
	// slot is the handler's semaphore, one token of which the task holds while it runs.
	slot chan struct{}

	ck checkpoints
}

// newTaskContext is the context of task t, delivered in msg (not for the first time when
// redelivered, which receive read from msg's metadata).
func (w *Worker) newTaskContext(ctx context.Context, s *serving, msg jetstream.Msg, t *protocol.Task, redelivered bool) *taskContext {
	base, cancel := context.WithCancelCause(ctx)
	tc := &taskContext{
		Context:      base,
		w:            w,
		handler:      s.name,
		h:            s.h,
		m:            s.m,
		msg:          msg,
		task:         t,
		redelivered:  redelivered,
		cancelBase:   cancel,
		stopDeadline: func() {},
	}
	tc.ck = checkpoints{tc: tc, scope: ckScope{run: t.RunID, step: t.Step, item: t.Item, activation: t.Activation},
		iter: t.Iteration, resume: t.Resume, mayFollowAttempt: t.Attempt > 1 || redelivered}
	return tc
}

// startClock sets the task's deadline, when it has a timeout; it runs before the handler starts.
func (tc *taskContext) startClock() {
	tc.started, tc.ranFrom = tc.w.now(), time.Now()
	tc.startSpan()
	if tc.task.Timeout > 0 {
		tc.Context, tc.stopDeadline = context.WithTimeoutCause(tc.Context, tc.task.Timeout, errTimedOut)
	}
}

// logger is the worker's logger with the task's handler and message id; it is made only when
// something is logged, off the path of a task that goes well.
func (tc *taskContext) logger() *slog.Logger {
	return tc.w.log.With(taskAttrs(tc.handler, tc.task)...)
}

// cancel ends the task's context with cause (its run ended), and settles the task if its
// handler runs.
func (tc *taskContext) cancel(cause error) {
	tc.cancelBase(cause)
	tc.interrupt()
}

// stopContext releases the task's contexts once the worker is done with the task.
func (tc *taskContext) stopContext() {
	if tc.timer != nil {
		tc.timer.Stop() // one that fired already waits for the context, ended here
	}
	tc.stopDeadline()
	tc.cancelBase(context.Canceled)
}

func (tc *taskContext) Task() *protocol.Task   { return tc.task }
func (tc *taskContext) Input() json.RawMessage { return tc.task.Input }
func (tc *taskContext) RunID() string          { return tc.task.RunID }
func (tc *taskContext) StepID() string         { return tc.task.Step }
func (tc *taskContext) Item() int              { return tc.task.Item }
func (tc *taskContext) Iteration() int         { return tc.task.Iteration }
func (tc *taskContext) Attempt() int           { return tc.task.Attempt }

func (tc *taskContext) AddUsage(u protocol.Usage) {
	tc.mu.Lock()
	tc.usage.Add(u)
	tc.mu.Unlock()
}

func (tc *taskContext) Heartbeat() error {
	if !tc.open() {
		return nil
	}
	if err := tc.msg.InProgress(); err != nil {
		return fmt.Errorf("worker: heartbeat of task %s: %w", tc.task.MsgID, err)
	}
	return nil
}

func (tc *taskContext) Continue(output any) error {
	return tc.answer(protocol.EvContinued, output, Outcome{})
}

func (tc *taskContext) Complete(output any) error {
	return tc.answer(protocol.EvCompleted, output, Outcome{})
}

func (tc *taskContext) CompleteWith(output any, o Outcome) error {
	return tc.answer(protocol.EvCompleted, output, o)
}

func (tc *taskContext) Wait(pending []protocol.PendingCall) error {
	if len(pending) == 0 {
		return fmt.Errorf("worker: Wait of task %s: no pending call: a task waits for decisions on one call or more", tc.task.MsgID)
	}
	if err := tc.begin(); err != nil {
		return err
	}
	ev := tc.event(protocol.EvWaiting)
	ev.Pending = pending
	data, buf, err := tc.fits(ev)
	if err != nil {
		return tc.deliverProblem(err)
	}
	defer keepAnswerBuffer(buf)
	return tc.deliverData(ev, data, "")
}

func (tc *taskContext) Fail(err error) error { return tc.fail(err, false) }

func (tc *taskContext) FailPermanent(err error) error { return tc.fail(err, true) }

func (tc *taskContext) fail(err error, permanent bool) error {
	if berr := tc.begin(); berr != nil {
		return berr
	}
	ev := tc.event(protocol.EvFailed)
	ev.Error = errorText(err)
	ev.Permanent = permanent
	if tc.withRecord(ev, true) != nil {
		// The whole texts cannot be kept: a failure is answered all the same, its record clipped.
		_ = tc.withRecord(ev, false)
	}
	return tc.deliver(ev)
}

func errorText(err error) string {
	if err == nil {
		return "the handler failed without saying why"
	}
	return clip(err.Error())
}

// clip bounds a sentence of an answer (an error, a stop detail) at maxErrorLen bytes.
func clip(s string) string {
	if len(s) > maxErrorLen {
		s = strings.ToValidUTF8(s[:maxErrorLen], "") + "…"
	}
	return s
}

// answer publishes a completed or continued event with output.
func (tc *taskContext) answer(typ protocol.EventType, output any, o Outcome) error {
	if err := tc.begin(); err != nil {
		return err
	}
	ev := tc.event(typ)
	ev.Label, ev.StopReason, ev.StopDetail = o.Label, o.StopReason, clip(o.StopDetail)
	raw, err := encodeOutput(output)
	if err != nil {
		return tc.deliverProblem(fmt.Errorf("the output of step %s cannot be encoded as JSON: %w", tc.stepName(), err))
	}
	ev.Output = raw
	var id string // made when published, but for a continued answer (continuedID)
	if typ == protocol.EvContinued {
		id = continuedID(ev, rand.Uint32())
	}
	data, buf, err := tc.fits(ev)
	if err != nil {
		return tc.deliverProblem(err)
	}
	defer keepAnswerBuffer(buf)
	return tc.deliverData(ev, data, id)
}

// jsonNull is the output of an answer without one. Shared by every such answer: an event's
// output is only read (encoded, recorded), never written in place.
var jsonNull = json.RawMessage("null")

// encodeOutput encodes a handler's output as JSON. A nil output (Continue(nil), the common
// answer of a loop whose state is in its checkpoint) is jsonNull, as json.Marshal would give,
// without making it again for every iteration.
func encodeOutput(output any) (json.RawMessage, error) {
	if output == nil {
		return jsonNull, nil
	}
	return json.Marshal(output)
}

// appendNonce appends what tells apart the continued answers of one attempt: the time of the
// answer and r, both in base 36, as NANOS-R.
func appendNonce(dst []byte, at time.Time, r uint32) []byte {
	b := strconv.AppendInt(dst, at.UnixNano(), 36)
	return strconv.AppendUint(append(b, '-'), uint64(r), 36)
}

// continuedID gives continued answer ev its nonce (of its time and r) and returns its message
// id, which ends with the nonce: one string for both, ev.Nonce the end of it (every iteration
// of a loop has one).
func continuedID(ev *protocol.Event, r uint32) string {
	var buf [192]byte // on the stack: only the string is allocated
	ev.Nonce = ""
	id := append(wire.AppendEventMsgID(buf[:0], ev, ""), '/')
	start := len(id)
	s := string(appendNonce(id, ev.At, r))
	ev.Nonce = s[start:]
	return s
}

// storeError is a problem of an answer that the values' store caused: worth trying again.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// deliverProblem fails the attempt with problem, which the answering call returns: for good,
// unless the values' store caused it.
func (tc *taskContext) deliverProblem(problem error) error {
	tc.logger().WarnContext(tc, "worker: the answer fails the attempt", "err", problem)
	ev := tc.event(protocol.EvFailed)
	ev.Error = problem.Error()
	ev.Permanent = !errors.As(problem, new(*storeError))
	if err := tc.deliver(ev); err != nil {
		return err
	}
	return fmt.Errorf("worker: %w", problem)
}

// stepName names the task's step for messages: STEP or STEP#ITEM.
func (tc *taskContext) stepName() string { return protocol.StepKey(tc.task.Step, tc.task.Item) }

// natsHeaderOverhead is the size of a message's headers besides the Nats-Msg-Id value.
const natsHeaderOverhead = len("NATS/1.0\r\nNats-Msg-Id: \r\n\r\n")

// fits encodes an answer and reports one larger than the server's max payload; it returns the
// encoded answer, which deliverData publishes as is, in buf: the caller hands buf to
// keepAnswerBuffer once the answer is published (nats.go copies what it sends).
func (tc *taskContext) fits(ev *protocol.Event) (data []byte, buf *[]byte, err error) {
	if err := tc.withRecord(ev, true); err != nil {
		return nil, nil, err
	}
	ev, err = tc.w.values.OutEvent(tc, ev)
	if err != nil {
		return nil, nil, &storeError{fmt.Errorf("the answer to step %s cannot be stored: %w", tc.stepName(), err)}
	}
	buf = answerBuffers.Get().(*[]byte)
	data, err = wire.AppendEvent((*buf)[:0], ev)
	if err != nil {
		keepAnswerBuffer(buf)
		return nil, nil, fmt.Errorf("the answer to step %s cannot be encoded: %w", tc.stepName(), err)
	}
	*buf = data
	limit := tc.w.box.MaxPayload()
	var id [128]byte // the message id's length, without making the string
	size := int64(len(data) + natsHeaderOverhead + len(wire.AppendEventMsgID(id[:0], ev, "")) + tracing.HeaderSize())
	if size <= limit {
		return data, buf, nil
	}
	keepAnswerBuffer(buf)
	switch {
	case int64(len(ev.Output)) > limit:
		return nil, nil, fmt.Errorf("the output of step %s is %d bytes, more than the message limit of %d bytes", tc.stepName(), len(ev.Output), limit)
	case len(ev.Pending) > 0:
		return nil, nil, fmt.Errorf("the answer to step %s is %d bytes with its %d pending call(s), more than the message limit of %d bytes", tc.stepName(), size, len(ev.Pending), limit)
	default:
		return nil, nil, fmt.Errorf("the answer to step %s is %d bytes with its output of %d bytes, more than the message limit of %d bytes", tc.stepName(), size, len(ev.Output), limit)
	}
}

// answerBuffers keeps the buffers answers are encoded in: an answer's bytes are needed only
// until its publish returns, and copying them out of a scratch buffer was an allocation of
// every iteration.
var answerBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxAnswerBuffer bounds the buffers kept, so that one large answer does not pin its buffer.
const maxAnswerBuffer = 64 << 10

// keepAnswerBuffer hands buf back for the next answer.
func keepAnswerBuffer(buf *[]byte) {
	if cap(*buf) <= maxAnswerBuffer {
		*buf = (*buf)[:0]
		answerBuffers.Put(buf)
	}
}

// answerEvents keeps the events answers are built in: an answer's event is read only until
// [taskContext.deliverData] returns (it is encoded, published and forgotten), and making a new
// one was 512 bytes of every iteration.
var answerEvents = sync.Pool{New: func() any { return new(protocol.Event) }}

// event returns the answer of type typ with the usage reported so far, in an event of
// answerEvents that deliverData hands back.
func (tc *taskContext) event(typ protocol.EventType) *protocol.Event {
	ev := answerEvents.Get().(*protocol.Event)
	wire.AnswerIn(ev, tc.task, typ, tc.w.now())
	tc.mu.Lock()
	if tc.usage != (protocol.Usage{}) {
		u := tc.usage
		ev.Usage = &u
	}
	tc.mu.Unlock()
	return ev
}

// begin claims the right to answer: only the first answer counts, and none once the context is
// done (the worker answers then).
func (tc *taskContext) begin() error {
	tc.ck.mu.Lock() // no checkpoint write in flight: later ones are refused
	defer tc.ck.mu.Unlock()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.state != stateOpen {
		return tc.lateErr()
	}
	if err := tc.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrAnswered, context.Cause(tc))
	}
	tc.state = stateAnswering
	return nil
}

// claim claims the right to answer for the worker (timeout, end of run, stop). It returns false
// when the handler answered; when its answer is in flight, claim waits for it.
func (tc *taskContext) claim(cause error) bool {
	tc.mu.Lock()
	st := tc.state
	if st == stateOpen {
		tc.state = stateAnswering
		tc.reason = cause
	}
	var finished chan struct{}
	if st == stateAnswering {
		if tc.finished == nil {
			tc.finished = make(chan struct{})
		}
		finished = tc.finished
	}
	tc.mu.Unlock()
	if finished != nil {
		<-finished
	}
	return st == stateOpen
}

// open reports whether the task has not answered yet.
func (tc *taskContext) open() bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.state == stateOpen
}

// lateErr is the error of an answer after the first. tc.mu is held.
func (tc *taskContext) lateErr() error {
	if tc.reason != nil {
		return fmt.Errorf("%w: %w", ErrAnswered, tc.reason)
	}
	return ErrAnswered
}

// finish marks the task done; reason, when not nil, is why later answers are refused.
func (tc *taskContext) finish(reason error, how string) {
	tc.mu.Lock()
	if tc.state == stateDone {
		tc.mu.Unlock()
		return
	}
	tc.state = stateDone
	if reason != nil && tc.reason == nil {
		tc.reason = reason
	}
	if tc.finished != nil {
		close(tc.finished)
	}
	ranFrom, u := tc.ranFrom, tc.usage
	tc.mu.Unlock()
	var ran time.Duration
	if !ranFrom.IsZero() {
		ran = time.Since(ranFrom)
	}
	tc.endSpan(how, u)
	tc.w.settled(tc.m, tc.task, how, ran)
}

// settled counts a task of the handler of m settled (how: the answer's type, or how it was
// settled without one), its handler having run for ran (0: it did not run), and reports it to
// tests.
func (w *Worker) settled(m HandlerMetrics, t *protocol.Task, how string, ran time.Duration) {
	m.Settled(how, ran)
	if w.log.Enabled(context.Background(), slog.LevelDebug) {
		w.log.Debug("worker: task settled", taskAttrs(t.Handler, t, "outcome", how)...)
	}
	if w.testSettled != nil {
		w.testSettled(t, how)
	}
}

// deliver publishes ev, waits for JetStream to store it, then acknowledges the task. A continued
// event keeps the checkpoint for the next iteration; any other drops it. When ev cannot be
// published, the task goes back to JetStream to run again.
func (tc *taskContext) deliver(ev *protocol.Event) error { return tc.deliverData(ev, nil, "") }

// deliverData is deliver with ev already encoded as data (nil: encode it here), with message
// id id ("": made here). It hands ev back to answerEvents: the caller must not read it after.
func (tc *taskContext) deliverData(ev *protocol.Event, data []byte, id string) error {
	defer keepAnswerEvent(ev)
	if ev.Type == protocol.EvContinued {
		tc.ck.keep()
	} else {
		tc.ck.forget()
	}
	tc.spanAnswer(ev)
	if err := tc.w.publish(ev, data, id, tc.spanContext()); err != nil {
		tc.ck.forget()
		err = fmt.Errorf("worker: publish the %s answer to task %s: %w", ev.Type, tc.task.MsgID, err)
		tc.logger().WarnContext(tc, "worker: an answer could not be published: the task goes back to JetStream", "err", err)
		_ = tc.msg.Nak()
		tc.finish(err, "lost")
		return err
	}
	tc.w.answered.add(tc.task.MsgID)
	// The ack is not confirmed: the answer is stored, and an ack that is lost only makes
	// JetStream deliver the task again after its AckWait, which this worker acknowledges
	// without running (answered) and another finds stale.
	// Confirming it cost a round trip per task (BENCHMARKS.md).
	if err := tc.msg.Ack(); err != nil {
		tc.logger().WarnContext(tc, "worker: answered but cannot acknowledge the task", "err", err)
	}
	tc.finish(nil, string(ev.Type))
	return nil
}

// publish stores ev, encoded as data (nil: encode it here), in REINS_EVENTS under message id id
// ("": made here), with the trace context of sc (the task's span) when valid, within an
// AckWait: the task is redelivered after that anyway. Not under the task's context: an answer
// is published even when the task's context ended as the handler answered.
func (w *Worker) publish(ev *protocol.Event, data []byte, id string, sc oteltrace.SpanContext) error {
	subject, err := w.names.EventSubject(ev.RunID)
	if err != nil {
		return err
	}
	if data == nil {
		if data, err = wire.EncodeEvent(ev); err != nil {
			return err
		}
	}
	am := answerMsgs.Get().(*answerMsg)
	defer am.release()
	if id == "" {
		id = wire.EventMsgID(ev, "")
	}
	m := am.build(subject, data, id)
	tracing.Inject(m.Header, sc)
	_, err = natsbox.PublishWithin(context.Background(), w.js.Conn(), m, w.ackWait)
	return err
}

// keepAnswerEvent forgets what ev held and keeps it for the next answer.
func keepAnswerEvent(ev *protocol.Event) {
	*ev = protocol.Event{}
	answerEvents.Put(ev)
}

// answerMsg is the message of an answer, kept for the next one: nats.go is done with a message
// once its publish returns, and the message, its headers and their value were three of the
// allocations of every iteration.
type answerMsg struct {
	m  nats.Msg
	id [1]string // the Nats-Msg-Id header's values
}

var answerMsgs = sync.Pool{New: func() any { return &answerMsg{m: nats.Msg{Header: nats.Header{}}} }}

// build makes am the message of data on subject with message id id, and returns it.
func (am *answerMsg) build(subject string, data []byte, id string) *nats.Msg {
	am.id[0] = id
	am.m.Subject, am.m.Data = subject, data
	am.m.Header[jetstream.MsgIDHeader] = am.id[:]
	return &am.m
}

// release keeps am for the next answer.
func (am *answerMsg) release() {
	am.reset()
	answerMsgs.Put(am)
}

// reset forgets what the last message held, a trace context among its headers too.
func (am *answerMsg) reset() {
	clear(am.m.Header)
	am.id[0], am.m.Subject, am.m.Reply, am.m.Data = "", "", "", nil
}
