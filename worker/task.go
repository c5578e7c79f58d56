package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// taskAttrs are the log attributes of task t of handler: the handler, the task, its run, step
// and iteration, followed by more.
func taskAttrs(handler string, t *protocol.Task, more ...any) []any {
	return append([]any{"handler", handler, "task", t.MsgID, "run_id", t.RunID, "step", protocol.StepKey(t.Step, t.Item), "iteration", t.Iteration}, more...)
}

// errTimedOut is the cause of the cancellation of a handler's context at its task's timeout.
var errTimedOut = fmt.Errorf("the task's timeout passed: %w", context.DeadlineExceeded)

// receive takes one message of s: it drops what is not a task, hands back a task that is not
// due, acknowledges a task of a run that ended, and starts the others.
func (w *Worker) receive(ctx, base context.Context, s *serving, msg jetstream.Msg) {
	t, err := wire.DecodeTask(msg.Data())
	if err != nil {
		w.log.Error("worker: dropped a message that is not a task", "handler", s.name, "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	published, redelivered := time.Time{}, false
	if d, ok := natsbox.DeliveryOf(msg.Reply()); ok { // Metadata, without allocating it
		published, redelivered = d.Timestamp, d.NumDelivered > 1
	}
	if redelivered {
		s.m.Redelivered()
	}
	if redelivered && w.answered.has(t.MsgID) {
		w.log.Debug("worker: a task it answered came again: acknowledged without running", taskAttrs(s.name, t)...)
		if err := w.ack(msg); err != nil {
			w.log.Warn("worker: cannot acknowledge a task", taskAttrs(s.name, t, "err", err)...)
		}
		w.settled(s.m, t, "answered_before", 0)
		return
	}
	if w.runs.isEnded(t.RunID, published) {
		w.log.Debug("worker: task of a run that ended: acknowledged without running", taskAttrs(s.name, t)...)
		if err := w.ack(msg); err != nil {
			w.log.Warn("worker: cannot acknowledge a task", taskAttrs(s.name, t, "err", err)...)
		}
		w.settled(s.m, t, "run_ended", 0)
		return
	}
	if wait := t.NotBefore.Sub(w.now()); wait > 0 {
		if err := msg.NakWithDelay(wait); err != nil {
			w.log.Warn("worker: cannot hand back a task that is not due", taskAttrs(s.name, t, "err", err)...)
		}
		return
	}
	tc := w.newTaskContext(base, s, msg, t, redelivered)
	tc.published = published
	switch ended, dup := w.runs.admit(tc); {
	case ended:
		tc.stopContext()
		tc.logger().DebugContext(tc, "worker: task of a run that ended: acknowledged without running")
		tc.settleAck("run_ended")
		return
	case dup:
		// Delivered again while its first delivery still runs here (its heartbeats were late:
		// a cut connection, a pause): running both would let this one discard the other's
		// checkpoint writes after they were made. It comes back once the first has answered,
		// and is then acknowledged without running (answered).
		tc.stopContext()
		if err := msg.NakWithDelay(w.ackWait); err != nil {
			w.log.Warn("worker: cannot hand back a task delivered twice", taskAttrs(s.name, t, "err", err)...)
		}
		w.settled(s.m, t, "running_here", 0)
		return
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done(): // stopping: the task goes back to JetStream once the subscription is drained
		w.runs.remove(tc)
		tc.stopContext()
		s.keepBack(msg)
		return
	}
	w.tasks.Add(1)
	tc.slot = s.sem
	w.goroutines.run(tc) // tc.run: the task, not a closure, is what the goroutine gets
}

// run serves the task on the goroutine that runs it ([Worker.serve]).
func (tc *taskContext) run() { tc.w.serve(tc) }

// release frees the task's slot (tc.slot) once it is settled.
func (tc *taskContext) release() {
	tc.stopContext()
	tc.w.runs.remove(tc)
	<-tc.slot
	tc.w.tasks.Done()
}

// settleAndRelease settles a task whose context ended before its handler returned.
func (tc *taskContext) settleAndRelease() {
	tc.settle()
	tc.release()
}

// serve runs the handler of tc in this goroutine and answers for it: the fallback answer when
// it returns without one, or, as soon as its context is done (timeout, end of its run, worker
// stopping), the worker's own answer without waiting for it to return ([taskContext.interrupt]).
// The task's slot is freed once it is settled; a handler abandoned that way runs on without
// one. The worker's heartbeat loop tells JetStream the task is in progress while it has not
// answered.
func (w *Worker) serve(tc *taskContext) {
	if tc.Err() != nil { // the run ended, or the worker stopped, while the task waited for a slot
		tc.settleAndRelease()
		return
	}
	tc.startClock()
	tc.arm()
	tc.running.Store(true)
	err := tc.call()
	if tc.disarm() { // the context was not done: settle here; else interrupt settles
		tc.returned(err)
		tc.release()
	}
}

// Phases of a task's handler, for who settles the task when its context ends first.
const (
	phaseWaiting   int32 = iota // the handler has not started
	phaseRunning                // it runs: the end of its context settles the task
	phaseInterrupt              // its context ended first: interrupt settles the task
	phaseReturned               // it returned first: serve settles the task
)

// arm makes the end of tc's context, from now on, settle the task without waiting for the
// handler. What ends it calls interrupt after: the end of its run (cancel), the worker
// stopping (interruptAll) and, for a task with a timeout, a timer of its own (expired). An
// end before arm is caught here. (An AfterFunc on every task's context cost six allocations.)
func (tc *taskContext) arm() {
	if tc.task.Timeout > 0 {
		tc.timer = time.AfterFunc(tc.task.Timeout, tc.expired)
	}
	tc.phase.Store(phaseRunning)
	if tc.Err() != nil { // ended before the phase said running: its interrupt found nothing to do
		tc.interrupt()
	}
}

// expired settles a task whose timeout passed. The context's own timer (startClock), set
// before this one for the same span, ends the context: expired waits for it, a moment at most,
// so that the task is settled as timed out.
func (tc *taskContext) expired() {
	<-tc.Done()
	tc.interrupt()
}

// disarm reports whether the handler returned before its context ended, in which case the
// caller settles the task; else interrupt did, or does.
func (tc *taskContext) disarm() bool {
	return tc.phase.CompareAndSwap(phaseRunning, phaseReturned)
}

// interrupt settles the task, in a goroutine of its own, when its context ended while its
// handler runs; the handler's return then settles nothing. It is called once the context is
// done, by whatever ended it, and may be called more than once.
func (tc *taskContext) interrupt() {
	if tc.phase.CompareAndSwap(phaseRunning, phaseInterrupt) {
		go tc.settleAndRelease()
	}
}

// heartbeats tells JetStream every AckWait/3 that the tasks whose handlers run and have not
// answered are in progress, until stop is closed. One loop serves every task: a task is beaten
// at most AckWait/3 after its handler started and then every AckWait/3.
func (w *Worker) heartbeats(stop <-chan struct{}) {
	t := time.NewTicker(max(w.ackWait/3, time.Millisecond))
	defer t.Stop()
	var batch []*taskContext
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		batch = w.runs.runningTasks(batch[:0])
		for _, tc := range batch {
			tc.beat()
		}
		clear(batch)
	}
}

// call runs the handler, turning a panic into an error.
func (tc *taskContext) call() (err error) {
	defer func() {
		if v := recover(); v != nil {
			tc.logger().ErrorContext(tc, "worker: handler panicked", "panic", v, "stack", string(debug.Stack()))
			err = &panicError{msg: fmt.Sprintf("handler %s panicked: %v", tc.handler, v)}
		}
	}()
	if err := protocol.CheckVersion(tc.task); err != nil {
		// A task of a protocol version this worker does not speak would be misread: refused
		// for good, with both versions named (docs/protocol.md, "Versions").
		return tc.FailPermanent(fmt.Errorf("worker: %w", err))
	}
	if err := tc.w.values.InTask(tc, tc.task); err != nil {
		err = fmt.Errorf("worker: the input of task %s cannot be read: %w", tc.task.MsgID, err)
		if errors.Is(err, wire.ErrValue) {
			return tc.FailPermanent(err)
		}
		return err // the store failed: the engine tries the task again
	}
	return tc.h(tc)
}

type panicError struct{ msg string }

func (e *panicError) Error() string { return e.msg }

// returned answers for a handler that returned: nothing if it answered, the worker's own answer
// if its context is done, else Fail(err) or Complete(nil).
func (tc *taskContext) returned(err error) {
	if tc.Err() != nil {
		tc.settle()
		return
	}
	var aerr error
	if err != nil {
		aerr = tc.Fail(err)
	} else {
		aerr = tc.Complete(nil)
	}
	if aerr != nil && !errors.Is(aerr, ErrAnswered) {
		tc.logger().WarnContext(tc, "worker: cannot answer for a handler that returned", "err", aerr)
	}
}

// settle ends a task whose context is done and that has not answered: timed_out at its
// timeout, acknowledged when its run ended, handed back when the worker stops.
func (tc *taskContext) settle() {
	cause := context.Cause(tc)
	if !tc.claim(cause) {
		return
	}
	switch {
	case errors.Is(cause, errTimedOut):
		tc.timeOut()
	case errors.Is(cause, errRunEnded):
		tc.logger().InfoContext(tc, "worker: the run ended: the task's answer is discarded")
		tc.w.cache.drop(tc.ck.scope)
		tc.settleAck("run_ended")
	default:
		tc.logger().InfoContext(tc, "worker: the worker stops: the task goes back to JetStream")
		tc.w.cache.drop(tc.ck.scope)
		tc.settleNak("stopped")
	}
}

// timeOut publishes timed_out for a task whose handler did not answer in time.
func (tc *taskContext) timeOut() {
	ev := tc.event(protocol.EvTimedOut)
	ev.Error = fmt.Sprintf("the handler did not answer within %s", tc.task.Timeout)
	tc.logger().WarnContext(tc, "worker: task timed out", "timeout", tc.task.Timeout)
	if err := tc.deliver(ev); err != nil {
		tc.logger().WarnContext(tc, "worker: cannot publish timed_out", "err", err)
	}
}

// settleAck acknowledges the task without answering it.
func (tc *taskContext) settleAck(how string) {
	if err := tc.w.ack(tc.msg); err != nil {
		tc.logger().WarnContext(tc, "worker: cannot acknowledge a task", "err", err)
	}
	tc.finish(nil, how)
}

// settleNak hands the task back to JetStream, to run again at once (same attempt).
func (tc *taskContext) settleNak(how string) {
	if err := tc.msg.Nak(); err != nil {
		tc.logger().WarnContext(tc, "worker: cannot hand a task back", "err", err)
	}
	tc.finish(nil, how)
}

// beat tells JetStream that the task is still being worked on, while it has not answered.
func (tc *taskContext) beat() {
	if !tc.open() {
		return
	}
	if err := tc.msg.InProgress(); err != nil {
		tc.logger().WarnContext(tc, "worker: heartbeat failed", "err", err)
	}
}

// ack acknowledges msg and waits for the server to confirm, at most AckWait.
func (w *Worker) ack(msg jetstream.Msg) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.ackWait)
	defer cancel()
	return msg.DoubleAck(ctx)
}
