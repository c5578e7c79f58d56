package runner

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed" // natsbox.Open starts embedded servers
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// testAckWait is the AckWait of the engines of the tests.
const testAckWait = 2 * time.Second

// env is an embedded NATS server with an engine and a client.
type env struct {
	t      testing.TB
	ctx    context.Context
	box    *natsbox.Box
	client *Client
	eng    *Engine
	stop   func()
}

// newEnv opens an embedded server in a temporary directory and starts an engine on it.
func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvAt(t, t.TempDir())
}

// newEnvAt is newEnv on the data directory dir.
func newEnvAt(t testing.TB, dir string) *env {
	t.Helper()
	return newEnvWithin(t, dir, 60*time.Second)
}

// newEnvWithin is newEnvAt whose context, the bound of every wait of the test, ends after
// bound: a hang fails the test then.
func newEnvWithin(t testing.TB, dir string, bound time.Duration) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	v := &env{t: t, ctx: ctx, box: box, client: NewClient(ClientConfig{Box: box})}
	v.eng, v.stop = v.startEngine(nil)
	return v
}

// newObservedEnv is newEnv with an engine whose settled events the observer sees.
func newObservedEnv(t testing.TB) (*env, *observer) {
	t.Helper()
	v := newEnv(t)
	v.stop()
	obs := newObserver()
	v.eng, v.stop = v.startEngine(obs.attach)
	return v, obs
}

// armed returns the number of timers e holds for run runID.
func armed(e *Engine, runID string) int {
	e.timers.mu.Lock()
	defer e.timers.mu.Unlock()
	return len(e.timers.runs[runID])
}

// startEngine starts another engine on the box (prepare, if set, sees it before it runs) and
// returns it with the function that stops it (also called at cleanup).
func (v *env) startEngine(prepare func(*Engine)) (*Engine, func()) {
	v.t.Helper()
	eng, err := New(Config{Box: v.box, AckWait: testAckWait, Logger: testLogger(v.t)})
	if err != nil {
		v.t.Fatal(err)
	}
	if prepare != nil {
		prepare(eng)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	select {
	case <-eng.Ready():
	case err := <-done:
		cancel()
		v.t.Fatalf("the engine stopped before it was ready: %v", err)
	}
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			v.t.Errorf("Engine.Run: %v", err)
		}
	})
	v.t.Cleanup(stop)
	return eng, stop
}

// start starts a run of bs and returns its id.
func (v *env) start(bs *wire.Bundles, input string, runID string) string {
	v.t.Helper()
	var in json.RawMessage
	if input != "" {
		in = json.RawMessage(input)
	}
	id, err := v.client.Start(v.ctx, bs, in, runID)
	if err != nil {
		v.t.Fatalf("Start: %v", err)
	}
	return id
}

// wait waits for the end of run id.
func (v *env) wait(id string) *Record {
	v.t.Helper()
	rec, err := v.client.Wait(v.ctx, id)
	if err != nil {
		v.t.Fatalf("Wait %s: %v", id, err)
	}
	return rec
}

// waitFor waits until run id's record satisfies ok.
func (v *env) waitFor(id string, ok func(*Record) bool) *Record {
	v.t.Helper()
	for rec, err := range v.client.Watch(v.ctx, id) {
		if err != nil {
			v.t.Fatalf("Watch %s: %v", id, err)
		}
		if ok(rec) {
			return rec
		}
	}
	v.t.Fatalf("run %s ended before the awaited state", id)
	return nil
}

// result waits for the end of run id and returns its result as JSON.
func (v *env) resultJSON(id string) string {
	v.t.Helper()
	rec := v.wait(id)
	res, err := v.client.Result(v.ctx, rec)
	if err != nil {
		v.t.Fatal(err)
	}
	data, err := json.Marshal(res)
	if err != nil {
		v.t.Fatal(err)
	}
	return string(data)
}

// publish publishes ev with msgID ("" for its own id).
func (v *env) publish(ev *protocol.Event, msgID string) {
	v.t.Helper()
	publishEvent(v.ctx, v.t, v.box.JetStream(), ev, msgID)
}

func publishEvent(ctx context.Context, t testing.TB, js jetstream.JetStream, ev *protocol.Event, msgID string) {
	subj, err := wire.EventSubject(ev)
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

// bundles builds the workflow of b and its bundles.
func bundles(t testing.TB, b *workflow.Builder) (*workflow.Definition, *wire.Bundles) {
	t.Helper()
	def, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := wire.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	return def, bs
}

// loadBundles loads a workflow file of testdata and its bundles.
func loadBundles(t testing.TB, file string) *wire.Bundles {
	t.Helper()
	def, ps := workflow.LoadAndValidate("testdata/"+file, workflow.Options{})
	if len(ps) > 0 {
		t.Fatalf("testdata/%s: %v", file, ps)
	}
	bs, err := wire.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// worker plays a worker serving one handler: a durable consumer of its tasks on REINS_TASKS.
type worker struct {
	v    *env
	cons jetstream.Consumer
}

func (v *env) worker(handler string) *worker {
	v.t.Helper()
	subj, err := natsbox.TaskSubject(handler)
	if err != nil {
		v.t.Fatal(err)
	}
	cons, err := v.box.JetStream().CreateOrUpdateConsumer(v.ctx, natsbox.TasksStream, jetstream.ConsumerConfig{
		Durable: "test-" + strings.NewReplacer(".", "_").Replace(handler), FilterSubject: subj,
		AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		v.t.Fatal(err)
	}
	return &worker{v: v, cons: cons}
}

// next returns the next task, acknowledged.
func (w *worker) next() *protocol.Task {
	w.v.t.Helper()
	return w.nextWithin(20 * time.Second)
}

// nextWithin returns the next task, acknowledged, failing the test after d.
func (w *worker) nextWithin(d time.Duration) *protocol.Task {
	w.v.t.Helper()
	ctx, cancel := context.WithTimeout(w.v.ctx, d)
	defer cancel()
	m, err := w.cons.Next(jetstream.FetchContext(ctx))
	if err != nil {
		w.v.t.Fatalf("next task: %v", err)
	}
	task, err := wire.DecodeTask(m.Data())
	if err != nil {
		w.v.t.Fatal(err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		w.v.t.Fatal(err)
	}
	return task
}

// serve answers every task with fn's answer (nil: no answer) until the test ends.
func (w *worker) serve(fn func(*protocol.Task) *protocol.Event) {
	js := w.v.box.JetStream()
	t := w.v.t
	cc, err := w.cons.Consume(func(m jetstream.Msg) {
		task, err := wire.DecodeTask(m.Data())
		if err != nil {
			t.Errorf("a task: %v", err)
			_ = m.Term()
			return
		}
		if ev := fn(task); ev != nil {
			publishEvent(w.v.ctx, t, js, ev, "")
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

// Answers to a task.
func completed(t *protocol.Task, out string) *protocol.Event {
	ev := wire.Answer(t, protocol.EvCompleted, time.Now())
	ev.Output = json.RawMessage(out)
	return ev
}

func continued(t *protocol.Task, out string) *protocol.Event {
	ev := wire.Answer(t, protocol.EvContinued, time.Now())
	ev.Output = json.RawMessage(out)
	return ev
}

func failed(t *protocol.Task, msg string, permanent bool) *protocol.Event {
	ev := wire.Answer(t, protocol.EvFailed, time.Now())
	ev.Error, ev.Permanent = msg, permanent
	return ev
}

// testLogger logs warnings and errors to the test log while the test runs.
func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
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

// observer collects what an engine settles, for tests to wait on.
type observer struct {
	ch chan observed
}

type observed struct {
	out outcome
	ev  *protocol.Event
}

func newObserver() *observer { return &observer{ch: make(chan observed, 4096)} }

func (o *observer) attach(e *Engine) {
	e.observe = func(out outcome, ev *protocol.Event) {
		select {
		case o.ch <- observed{out, ev}:
		default:
		}
	}
}

// await waits until the engine settles an event as out and match (nil: any) accepts it.
func (o *observer) await(t testing.TB, ctx context.Context, out outcome, match func(*protocol.Event) bool) *protocol.Event {
	t.Helper()
	for {
		select {
		case got := <-o.ch:
			if got.out == out && (match == nil || match(got.ev)) {
				return got.ev
			}
		case <-ctx.Done():
			t.Fatalf("the engine never settled the awaited event as %v", out)
			return nil
		}
	}
}

func (o outcome) String() string {
	return [...]string{"ack", "hold", "retry", "drop", "later"}[o]
}
