// Package runtest is what the tests of the engine's shell (package runner) and of the client
// (package client) share: an embedded NATS server with a client, what runs on it (Go), a
// stand-in worker that answers tasks as a test says, and the workflows and answers tests use.
// Only tests import it.
//
// It asserts nothing about the engine or the client: every helper fails the test when what it
// waits for does not come within the environment's bound, so that a test never hangs.
package runtest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed" // natsbox.Open starts embedded servers
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// AckWait is the AckWait of the engines of the tests.
const AckWait = 2 * time.Second

// Env is an embedded NATS server with a client. Ctx ends at the environment's bound: every
// wait of a test ends with it.
type Env struct {
	T      testing.TB
	Ctx    context.Context
	Box    *natsbox.Box
	Client *client.Client
}

// New opens an embedded server in a temporary directory, bounded by 60 s. It starts no engine
// (it cannot import the engine's shell, whose own tests import it): Go runs one.
func New(t testing.TB) *Env {
	t.Helper()
	return NewWithin(t, t.TempDir(), 60*time.Second)
}

// NewWithin is New on the data directory dir, bounded by bound: a hang fails the test then.
func NewWithin(t testing.TB, dir string, bound time.Duration) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	return &Env{T: t, Ctx: ctx, Box: box, Client: client.New(client.Config{Conn: (*conn.Conn)(box)})}
}

// Go runs run (an engine's or a worker's Run) until the test ends or stop is called. It returns
// once ready is closed, and fails the test when run returns before.
func (v *Env) Go(run func(context.Context) error, ready <-chan struct{}) (stop func()) {
	v.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		v.T.Fatalf("stopped before it was ready: %v", err)
	}
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			v.T.Errorf("Run: %v", err)
		}
	})
	v.T.Cleanup(stop)
	return stop
}

// Start starts a run of bs with input (JSON; "" for none) and returns its id.
func (v *Env) Start(bs *workflow.Bundles, input string, runID string) string {
	v.T.Helper()
	var in json.RawMessage
	if input != "" {
		in = json.RawMessage(input)
	}
	id, err := v.Client.Start(v.Ctx, bs, in, runID)
	if err != nil {
		v.T.Fatalf("Start: %v", err)
	}
	return id
}

// Wait waits for the end of run id.
func (v *Env) Wait(id string) *client.Record {
	v.T.Helper()
	rec, err := v.Client.Wait(v.Ctx, id)
	if err != nil {
		v.T.Fatalf("Wait %s: %v", id, err)
	}
	return rec
}

// WaitFor waits until run id's record satisfies ok.
func (v *Env) WaitFor(id string, ok func(*client.Record) bool) *client.Record {
	v.T.Helper()
	for u, err := range v.Client.Watch(v.Ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			v.T.Fatalf("Watch %s: %v", id, err)
		}
		if ok(rec) {
			return rec
		}
	}
	v.T.Fatalf("run %s ended before the awaited state", id)
	return nil
}

// ResultJSON waits for the end of run id and returns its result as JSON.
func (v *Env) ResultJSON(id string) string {
	v.T.Helper()
	rec := v.Wait(id)
	res, err := v.Client.Result(v.Ctx, rec)
	if err != nil {
		v.T.Fatal(err)
	}
	data, err := json.Marshal(res)
	if err != nil {
		v.T.Fatal(err)
	}
	return string(data)
}

// Publish publishes ev with msgID ("" for its own id).
func (v *Env) Publish(ev *protocol.Event, msgID string) {
	v.T.Helper()
	PublishEvent(v.Ctx, v.T, v.Box.JetStream(), ev, msgID)
}

// KV opens one of the buckets of the layout.
func (v *Env) KV(bucket string) jetstream.KeyValue {
	v.T.Helper()
	kv, err := v.Box.JetStream().KeyValue(v.Ctx, bucket)
	if err != nil {
		v.T.Fatalf("bucket %s: %v", bucket, err)
	}
	return kv
}

// StreamMsgs counts the messages of stream name.
func (v *Env) StreamMsgs(name string) uint64 {
	v.T.Helper()
	s, err := v.Box.JetStream().Stream(v.Ctx, name)
	if err != nil {
		v.T.Fatal(err)
	}
	info, err := s.Info(v.Ctx)
	if err != nil {
		v.T.Fatal(err)
	}
	return info.State.Msgs
}

// PublishEvent publishes ev on js with msgID ("" for its own id), as a worker or the engine
// would: an answer on the run's subject, any other event on the engine's (outbox.Subject).
func PublishEvent(ctx context.Context, t testing.TB, js jetstream.JetStream, ev *protocol.Event, msgID string) {
	subj, err := outbox.Subject(natsbox.Names{}, ev)
	if err != nil {
		t.Error(err)
		return
	}
	data, err := wire.EncodeEvent(ev)
	if err != nil {
		t.Error(err)
		return
	}
	if msgID == "" {
		msgID = wire.EventMsgID(ev, "")
	}
	if _, err := js.Publish(ctx, subj, data, jetstream.WithMsgID(msgID)); err != nil {
		t.Errorf("publish %s: %v", subj, err)
	}
}

// Bundles builds the workflow of b and its bundles.
func Bundles(t testing.TB, b *workflow.Builder) (*workflow.Definition, *workflow.Bundles) {
	t.Helper()
	def, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	return def, bs
}

// LoadBundles loads a workflow file and its bundles.
func LoadBundles(t testing.TB, file string) *workflow.Bundles {
	t.Helper()
	def, ps := workflow.LoadAndValidate(file, workflow.Options{})
	if len(ps) > 0 {
		t.Fatalf("%s: %v", file, ps)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// Worker plays a worker serving one handler: a durable consumer of its tasks on REINS_TASKS.
type Worker struct {
	v    *Env
	cons jetstream.Consumer
}

// Worker returns the stand-in worker of handler.
func (v *Env) Worker(handler string) *Worker {
	v.T.Helper()
	subj, err := v.Box.Names().TaskSubject(handler)
	if err != nil {
		v.T.Fatal(err)
	}
	cons, err := v.Box.JetStream().CreateOrUpdateConsumer(v.Ctx, v.Box.Names().TasksStream(), jetstream.ConsumerConfig{
		Durable: "test-" + strings.NewReplacer(".", "_").Replace(handler), FilterSubject: subj,
		AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		v.T.Fatal(err)
	}
	return &Worker{v: v, cons: cons}
}

// Consumer is the worker's consumer of its tasks.
func (w *Worker) Consumer() jetstream.Consumer { return w.cons }

// Next returns the next task, acknowledged.
func (w *Worker) Next() *protocol.Task {
	w.v.T.Helper()
	return w.NextWithin(20 * time.Second)
}

// NextWithin returns the next task, acknowledged, failing the test after d.
func (w *Worker) NextWithin(d time.Duration) *protocol.Task {
	w.v.T.Helper()
	ctx, cancel := context.WithTimeout(w.v.Ctx, d)
	defer cancel()
	m, err := w.cons.Next(jetstream.FetchContext(ctx))
	if err != nil {
		w.v.T.Fatalf("next task: %v", err)
	}
	task, err := wire.DecodeTask(m.Data())
	if err != nil {
		w.v.T.Fatal(err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		w.v.T.Fatal(err)
	}
	return task
}

// Serve answers every task with fn's answer (nil: no answer) until the test ends.
func (w *Worker) Serve(fn func(*protocol.Task) *protocol.Event) {
	js := w.v.Box.JetStream()
	t := w.v.T
	cc, err := w.cons.Consume(func(m jetstream.Msg) {
		task, err := wire.DecodeTask(m.Data())
		if err != nil {
			t.Errorf("a task: %v", err)
			_ = m.Term()
			return
		}
		if ev := fn(task); ev != nil {
			PublishEvent(w.v.Ctx, t, js, ev, "")
		}
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Stop()
		<-cc.Closed()
	})
}

// Completed is the answer that completes task t with output out (JSON).
func Completed(t *protocol.Task, out string) *protocol.Event {
	ev := wire.Answer(t, protocol.EvCompleted, time.Now())
	ev.Output = json.RawMessage(out)
	return ev
}

// Continued is the answer that continues task t's loop with output out (JSON).
func Continued(t *protocol.Task, out string) *protocol.Event {
	ev := wire.Answer(t, protocol.EvContinued, time.Now())
	ev.Output = json.RawMessage(out)
	return ev
}

// Failed is the answer that fails task t with msg, for good when permanent.
func Failed(t *protocol.Task, msg string, permanent bool) *protocol.Event {
	ev := wire.Answer(t, protocol.EvFailed, time.Now())
	ev.Error, ev.Permanent = msg, permanent
	return ev
}

// Logger logs warnings and errors to the test log while the test runs.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	level := slog.LevelWarn
	if os.Getenv("REINS_TEST_LOG") == "debug" { // to see what a failing test's engines did
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// LoopWorkflow is a workflow of one agent_loop step, think, served by handler "think", bounded
// at max iterations.
func LoopWorkflow(t testing.TB, max int) *workflow.Bundles {
	wf := workflow.New("looping")
	wf.AgentLoop("think", "think").WithMaxIterations(max)
	_, bs := Bundles(t, wf)
	return bs
}

// ServeFan returns the bundles of a workflow with a parallel step (left, right) then a map
// (double of each of input.items), and serves its handlers.
func (v *Env) ServeFan() *workflow.Bundles {
	v.T.Helper()
	wf := workflow.New("fan")
	wf.Parallel("both", "left", "right")
	wf.Task("left", "left")
	wf.Task("right", "right")
	wf.Map("each", "input.items").WithStep("double").WithMaxItems(10).WithMaxConcurrent(2)
	wf.Task("double", "double")
	wf.Edge("both", "each")
	_, bs := Bundles(v.T, wf)
	v.Worker("left").Serve(func(task *protocol.Task) *protocol.Event { return Completed(task, `"L"`) })
	v.Worker("right").Serve(func(task *protocol.Task) *protocol.Event { return Completed(task, `"R"`) })
	v.Worker("double").Serve(func(task *protocol.Task) *protocol.Event {
		n, _ := strconv.Atoi(string(task.Input))
		return Completed(task, strconv.Itoa(2*n))
	})
	return bs
}

// ServeThink serves handler "think" of LoopWorkflow: iterations before done continue with
// {"n": ITERATION}, iteration done completes with {"done": true}.
func (v *Env) ServeThink(done int) {
	v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event {
		if task.Iteration == done {
			return Completed(task, `{"done":true}`)
		}
		return Continued(task, fmt.Sprintf(`{"n":%d}`, task.Iteration))
	})
}
