package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed" // natsbox.Open starts embedded servers
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// failsafe bounds every wait of these tests so that a broken build fails instead of hanging. It
// is never a timing assertion.
const failsafe = 30 * time.Second

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	t.Cleanup(cancel)
	return ctx
}

// env is an embedded NATS server with the reins layout, in which the test plays the engine:
// it publishes tasks and reads the workers' answers from REINS_EVENTS.
type env struct {
	t       testing.TB
	box     *natsbox.Box
	js      jetstream.JetStream
	events  jetstream.Consumer
	settled chan settledTask
}

type settledTask struct {
	task *protocol.Task
	how  string
}

// values is the values' store, to read back what goes by reference.
func (e *env) values(t testing.TB) *wire.Values {
	t.Helper()
	ov, err := natsbox.OpenValues(testCtx(t), e.js, natsbox.Names{})
	if err != nil {
		t.Fatal(err)
	}
	return wire.NewValues(ov, 0, 0)
}

func newEnv(t testing.TB) *env {
	return newEnvOpts(t, natsbox.Options{DataDir: t.TempDir()})
}

func newEnvOpts(t testing.TB, opts natsbox.Options) *env {
	t.Helper()
	ctx := testCtx(t)
	box, err := natsbox.Open(ctx, opts)
	if err != nil {
		t.Fatalf("natsbox.Open: %v", err)
	}
	t.Cleanup(func() { _ = box.Close() })
	js := box.JetStream()
	if err := natsbox.EnsureLayout(ctx, js, natsbox.Layout{}); err != nil {
		t.Fatalf("EnsureLayout: %v", err)
	}
	events, err := js.OrderedConsumer(ctx, natsbox.EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("events consumer: %v", err)
	}
	return &env{t: t, box: box, js: js, events: events, settled: make(chan settledTask, 1024)}
}

// testLogger logs to the test's output when REINS_TEST_LOG is set.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("REINS_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// running is a Worker started by start.
type running struct {
	*Worker
	stop func() // cancels Run and waits for it to return
}

// start runs a worker with handlers on e's connection until stopped or the test ends.
func (e *env) start(opts Options, handlers map[string]Handler) *running {
	e.t.Helper()
	return e.startOn((*conn.Conn)(e.box), opts, handlers, nil)
}

// startWith is start with prepare called on the worker before it runs.
func (e *env) startWith(opts Options, handlers map[string]Handler, prepare func(*Worker)) *running {
	e.t.Helper()
	return e.startOn((*conn.Conn)(e.box), opts, handlers, prepare)
}

// startOn is startWith on connection c.
func (e *env) startOn(c *conn.Conn, opts Options, handlers map[string]Handler, prepare func(*Worker)) *running {
	e.t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(e.t)
	}
	w, err := New(c, opts)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	for name, h := range handlers {
		w.Handle(name, h)
	}
	if prepare != nil {
		prepare(w)
	}
	w.testSettled = func(t *protocol.Task, how string) {
		select {
		case e.settled <- settledTask{t, how}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Ready():
	case err := <-done:
		cancel()
		e.t.Fatalf("Run: %v", err)
	case <-time.After(failsafe):
		cancel()
		e.t.Fatal("the worker was not ready in time")
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run returned %v", err)
				}
			case <-time.After(failsafe):
				e.t.Error("Run did not return after its context was cancelled")
			}
		})
	}
	e.t.Cleanup(stop)
	return &running{Worker: w, stop: stop}
}

// task returns iteration iter, attempt attempt of the first activation of step in run, for
// handler.
func task(run, step, handler string, iter, attempt int) *protocol.Task {
	return &protocol.Task{
		RunID: run, Step: step, Item: -1, Body: step, Type: workflow.AgentLoop, Handler: handler,
		Activation: 1, Iteration: iter, Attempt: attempt, Input: []byte(`{"n":` + strconv.Itoa(iter) + `}`),
		MsgID: fmt.Sprintf("%s/%s/1/%d/%d", run, step, iter, attempt),
	}
}

// publish dispatches t as the engine does.
func (e *env) publish(t *protocol.Task) {
	e.t.Helper()
	e.publishAs(t, t.MsgID)
}

// publishAs dispatches t with the message id msgID ("" for none).
func (e *env) publishAs(t *protocol.Task, msgID string) {
	e.t.Helper()
	subject, err := natsbox.Names{}.TaskSubject(t.Handler)
	if err != nil {
		e.t.Fatal(err)
	}
	data, err := wire.EncodeTask(t)
	if err != nil {
		e.t.Fatal(err)
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	if _, err := e.js.Publish(testCtx(e.t), subject, data, opts...); err != nil {
		e.t.Fatalf("publish task %s: %v", t.MsgID, err)
	}
}

// event returns the next event stored in REINS_EVENTS.
func (e *env) event() *protocol.Event {
	e.t.Helper()
	msg, err := e.events.Next(jetstream.FetchMaxWait(failsafe))
	if err != nil {
		e.t.Fatalf("no event: %v", err)
	}
	ev, err := wire.DecodeEvent(msg.Data())
	if err != nil {
		e.t.Fatalf("event: %v", err)
	}
	return ev
}

// waitSettled returns how the worker settled the task with msgID, skipping others.
func (e *env) waitSettled(msgID string) string {
	e.t.Helper()
	deadline := time.After(failsafe)
	for {
		select {
		case s := <-e.settled:
			if s.task.MsgID == msgID {
				return s.how
			}
		case <-deadline:
			e.t.Fatalf("task %s was not settled", msgID)
		}
	}
}

// drained reports whether stream holds no message besides the keepers, asking again (each a
// round trip to the server, no sleep) until it does or the failsafe passes: the worker's
// acknowledgements are not confirmed, and the server applies them after it has read them.
func (e *env) drained(stream string) (uint64, bool) {
	e.t.Helper()
	deadline := time.Now().Add(failsafe)
	for {
		n := e.streamMsgs(stream)
		if n == 0 || time.Now().After(deadline) {
			return n, n == 0
		}
	}
}

// acked returns handler's consumer once nothing it delivered waits for an acknowledgement,
// asking again (each a round trip to the server, no sleep) until then or until the failsafe
// passes: the worker's acknowledgements and terminations are not confirmed, and the server
// applies them after it has read them.
func (e *env) acked(handler string) *jetstream.ConsumerInfo {
	e.t.Helper()
	deadline := time.Now().Add(failsafe)
	for {
		info := e.consumerInfo(handler)
		if info.NumAckPending == 0 || time.Now().After(deadline) {
			return info
		}
	}
}

// streamMsgs returns the number of messages in stream, besides the keeper message(s) of
// REINS_TASKS (natsbox.KeeperSubject, which no worker consumes): in REINS_TASKS, the tasks.
func (e *env) streamMsgs(stream string) uint64 {
	e.t.Helper()
	ctx := testCtx(e.t)
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	keep, err := s.Info(ctx, jetstream.WithSubjectFilter(natsbox.KeeperSubject))
	if err != nil {
		e.t.Fatal(err)
	}
	k := keep.State.Subjects[natsbox.KeeperSubject]
	if stream == natsbox.TasksStream && k == 0 {
		e.t.Fatalf("%s has no keeper message", stream)
	}
	if k > info.State.Msgs {
		e.t.Fatalf("%s has %d messages, fewer than its %d keeper messages", stream, info.State.Msgs, k)
	}
	return info.State.Msgs - k
}

// consumerInfo returns the info of the consumer of handler.
func (e *env) consumerInfo(handler string) *jetstream.ConsumerInfo {
	e.t.Helper()
	ctx := testCtx(e.t)
	c, err := e.js.Consumer(ctx, natsbox.TasksStream, ConsumerPrefix+handler)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// checkpointValues returns the values of the live keys of scope, by key.
func (e *env) checkpointValues(scope string) map[string][]byte {
	e.t.Helper()
	ctx := testCtx(e.t)
	kv, err := e.js.KeyValue(ctx, natsbox.CheckpointsBucket)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]byte{}
	for ke, err := range natsbox.Entries(ctx, kv, scope+".>") {
		if err != nil {
			e.t.Fatal(err)
		}
		out[ke.Key()] = ke.Value()
	}
	return out
}

// recv returns the next value of ch.
func recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failsafe):
		t.Fatal("nothing received in time")
		panic("unreachable")
	}
}

// wantEvent checks an event's type and address.
func wantEvent(t testing.TB, ev *protocol.Event, typ protocol.EventType, tk *protocol.Task) {
	t.Helper()
	if ev.Type != typ {
		t.Fatalf("event type = %s (error %q), want %s", ev.Type, ev.Error, typ)
	}
	if ev.RunID != tk.RunID || ev.Step != tk.Step || ev.Item != tk.Item || ev.Activation != tk.Activation ||
		ev.Iteration != tk.Iteration || ev.Attempt != tk.Attempt {
		t.Fatalf("event %+v does not address task %s", ev, tk.MsgID)
	}
}

func isAnswered(err error) bool { return errors.Is(err, ErrAnswered) }
