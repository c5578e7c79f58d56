package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// Defaults of Options.
const (
	// DefaultAckWait is short so that the iteration of a worker that died runs again within
	// seconds, well within a step's timeout; a running handler renews it every AckWait/3.
	DefaultAckWait     = 5 * time.Second
	DefaultConcurrency = 64
)

// ConsumerPrefix starts the name of the durable consumer of each handler: "reins-worker-NAME".
// Every worker that registers NAME shares that consumer, so a task goes to one of them. A
// worker principal of a shared server may create that consumer only (natsbox's consumer proxy).
const ConsumerPrefix = natsbox.WorkerConsumerPrefix

const (
	// maxAckPending is large because tasks waiting for their NotBefore stay pending.
	maxAckPending = 1 << 20
	// maxEndedRuns bounds the set of run ids the worker knows have ended.
	maxEndedRuns = 10_000
	// retryConsume is how long a consume loop waits before subscribing again after an error.
	retryConsume = time.Second
)

// Options configure a Worker; the zero value serves with the defaults.
type Options struct {
	// Logger receives the worker's log; nil discards it.
	Logger *slog.Logger
	// AckWait is the AckWait of the handlers' consumers; 0 means [DefaultAckWait]. A crashed
	// worker's task is delivered again after it. While a handler runs, the worker tells
	// JetStream every AckWait/3 that the task is in progress. Workers that share a handler
	// should use the same AckWait (the consumer is shared and takes the last one).
	AckWait time.Duration
	// Concurrency is how many tasks of one handler run at once; 0 means [DefaultConcurrency].
	Concurrency int
	// Now is the clock of the answers' times and of NotBefore; nil means time.Now. Timeouts
	// and heartbeats run on the real clock.
	Now func() time.Time
	// EffectTimeout bounds a side effect's call ([TaskContext.Effect], and the built-in agent's
	// side-effecting tools that set no timeout of their own) from its start; 0 means
	// [DefaultEffectTimeout]. The call runs on after its attempt ends (its timeout, the worker
	// stopping) until its result is recorded, at most this long: a worker that stops waits
	// for it (docs/engine.md, "Side effects, once per call").
	EffectTimeout time.Duration
	// Metrics hears the tasks settled (by handler and outcome, with the handlers' run time)
	// and the side-effect claims, and reads the handlers' task consumers when the metrics are
	// read; nil: no metrics.
	Metrics Metrics
}

// Handler serves the tasks of one name: it answers through tc (Continue, Complete, Fail...).
// Returning without an answer fails the attempt (err != nil) or completes it with a null
// output (nil).
type Handler func(tc TaskContext) error

// Worker serves the tasks of the handlers registered with Handle. Create it with New.
type Worker struct {
	box   *natsbox.Box
	names natsbox.Names // box.Names(): every stream, bucket and subject of the worker
	js    jetstream.JetStream
	log   *slog.Logger
	now   func() time.Time
	// answered holds the tasks this worker answered lately (answeredSet).
	answered    *answeredSet
	ackWait     time.Duration
	concurrency int
	goroutines  *goroutines // where the handlers run (set by Run)
	workflows   *workflows
	effects     *Effects
	metrics     Metrics

	mu         sync.Mutex
	handlers   map[string]Handler
	advertised map[string][]string // names Advertise adds, by kind
	started    bool
	onStop     []func()

	ready  chan struct{}
	runs   *runTable
	cache  *ckCache
	ckv    jetstream.KeyValue // set by Run before ready is closed
	values *wire.Values       // set by Run before ready is closed
	tasks  sync.WaitGroup     // the tasks started and not settled yet

	// testSettled, when set (tests only), is called once the worker has settled a task: answered
	// and acknowledged it, or handed it back.
	testSettled func(t *protocol.Task, how string)
	// reloads counts the times a checkpoint was read back from the bucket (tests only).
	reloads counter
}

// New returns a Worker that serves on c, the connection to the deployment's NATS server as the
// worker principal: [conn.Dial]'s, or a dialed client's (client.Client.Conn). The worker
// takes the tasks of the engines in c's namespace. It leaves c open: the caller closes it once
// Run has returned. Register handlers with Handle, then call Run. A worker program built on
// it links no NATS server.
func New(c *conn.Conn, opts Options) (*Worker, error) {
	switch {
	case c == nil:
		return nil, errors.New("worker: the connection is nil: give New a dialed one (conn.Dial, client.Dial)")
	case opts.AckWait < 0:
		return nil, fmt.Errorf("worker: Options.AckWait is %s: want 0 (meaning %s) or more", opts.AckWait, DefaultAckWait)
	case opts.Concurrency < 0:
		return nil, fmt.Errorf("worker: Options.Concurrency is %d: want 0 (meaning %d) or more", opts.Concurrency, DefaultConcurrency)
	case opts.EffectTimeout < 0:
		return nil, fmt.Errorf("worker: Options.EffectTimeout is %s: want 0 (meaning %s) or more", opts.EffectTimeout, DefaultEffectTimeout)
	}
	box := (*natsbox.Box)(c)
	w := &Worker{
		box:         box,
		names:       box.Names(),
		js:          box.JetStream(),
		log:         opts.Logger,
		now:         opts.Now,
		ackWait:     orDefault(opts.AckWait, DefaultAckWait),
		concurrency: orDefault(opts.Concurrency, DefaultConcurrency),
		handlers:    map[string]Handler{},
		ready:       make(chan struct{}),
		runs:        newRunTable(maxEndedRuns),
		answered:    newAnsweredSet(maxEndedRuns),
		cache:       newCkCache(maxCacheEntries, maxCacheBytes),
		metrics:     orNoMetrics(opts.Metrics),
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.now == nil {
		w.now = time.Now
	}
	w.workflows = &workflows{js: w.js, name: w.names.WorkflowsBucket()}
	w.effects = newEffects(w.js, w.names, w.ackWait, orDefault(opts.EffectTimeout, DefaultEffectTimeout), w.metrics)
	return w, nil
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// OnStop registers f to be called once Run returns, after every task it started has settled:
// what the handlers hold (the MCP servers of the built-in handlers) is released then.
func (w *Worker) OnStop(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onStop = append(w.onStop, f)
}

// stopped calls the OnStop functions, last registered first.
func (w *Worker) stopped() {
	w.mu.Lock()
	fs := w.onStop
	w.onStop = nil
	w.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// Handle registers h under name, a natsbox subject token that can also name a consumer (no '/'
// or '\'). Names starting with "reins-" are the built-in handlers' (package builtin registers
// protocol.HandlerLLM and protocol.HandlerAgent through Handle). Like http.ServeMux, it panics on an
// invalid or duplicate name, a nil handler, or once Run has started.
func (w *Worker) Handle(name string, h Handler) {
	if err := checkName(name); err != nil {
		panic(err.Error())
	}
	if h == nil {
		panic(fmt.Sprintf("worker: Handle(%q): the handler is nil", name))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.started:
		panic(fmt.Sprintf("worker: Handle(%q) after Run started: register every handler first", name))
	case w.handlers[name] != nil:
		panic(fmt.Sprintf("worker: Handle(%q): a handler is already registered under this name", name))
	}
	w.handlers[name] = h
}

// consumerName is the durable consumer of handler name: ConsumerPrefix and the name, with '_'
// written "__" and '.' written "_d" (a consumer name cannot hold dots), so that two handler
// names never share a consumer (natsbox.WorkerConsumerName, which the consumer proxy checks).
func consumerName(name string) string { return natsbox.WorkerConsumerName(name) }

func checkName(name string) error {
	if err := natsbox.CheckHandler(name); err != nil {
		return fmt.Errorf("worker: Handle: handler name: %w", err)
	}
	if name == natsbox.KeeperHandler {
		return fmt.Errorf("worker: Handle: handler name %q is reserved: it holds the task stream's keeper message", name)
	}
	if strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("worker: Handle: handler name %q has '/' or '\\', which a consumer name cannot hold", name)
	}
	return nil
}

// Ready returns a channel closed once Run consumes the tasks of every handler and listens for
// the ends of runs.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// errStopped is the cause of the cancellation of the handlers' contexts when the worker stops.
var errStopped = fmt.Errorf("the worker is stopping: %w", context.Canceled)

// Run ensures the layout, creates or updates the durable consumer of every handler, listens for
// the ends of runs and serves tasks until ctx is done; then it cancels the running handlers,
// hands their tasks back to JetStream, waits for the side effects whose calls still run (each
// at most until its timeout, [Options.EffectTimeout]) and returns nil. It returns an error if it cannot
// start, and may be called once.
func (w *Worker) Run(ctx context.Context) error {
	handlers, err := w.start()
	if err != nil {
		return err
	}
	defer w.stopped()
	w.goroutines = newGoroutines(goroutineIdle)
	defer w.goroutines.stop()
	if err := natsbox.EnsureLayout(ctx, w.js, w.box.Layout()); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.ckv, err = w.js.KeyValue(ctx, w.names.CheckpointsBucket()); err != nil {
		return fmt.Errorf("worker: checkpoints bucket %s: %w", w.names.CheckpointsBucket(), err)
	}
	values, err := natsbox.OpenValues(ctx, w.js, w.names)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.values = wire.NewValues(values, 0, 0)
	unsub, err := w.listenCancels(ctx)
	if err != nil {
		return err
	}
	defer unsub()
	consumers, err := w.consumers(ctx, handlers)
	if err != nil {
		return err
	}
	defer w.metrics.TaskQueues(func(ctx context.Context) ([]TaskQueue, error) { return w.taskQueues(ctx, handlers) })()

	// The handlers' contexts outlive ctx: when it ends, the subscriptions are drained first, so
	// that the tasks handed back go to other workers and not to this worker's last pull request.
	base, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(errStopped)
	servings := make([]*serving, 0, len(handlers))
	var loops sync.WaitGroup
	for _, name := range slices.Sorted(maps.Keys(handlers)) {
		s := &serving{name: name, h: handlers[name], cons: consumers[name], sem: make(chan struct{}, w.concurrency), m: w.metrics.Handler(name)}
		servings = append(servings, s)
		loops.Go(func() { w.consume(ctx, base, s) })
	}
	stopBeats := make(chan struct{})
	var beats sync.WaitGroup
	beats.Go(func() { w.heartbeats(stopBeats) })
	unannounce, err := w.announce(ctx, w.servedKeys(handlers))
	if err != nil {
		w.log.Warn("worker: what it serves is not announced: clients will warn that nobody serves it", "err", err)
		unannounce = func() {}
	}
	defer unannounce()
	close(w.ready)
	w.log.Info("worker ready", "handlers", len(handlers))
	<-ctx.Done()
	loops.Wait()
	w.handBack(servings)
	stop(errStopped)
	w.runs.interruptAll() // the handlers that run are answered for, and freed, at once
	w.tasks.Wait()
	w.drainEffects()
	close(stopBeats)
	beats.Wait()
	w.log.Info("worker stopped")
	return nil
}

// drainEffects waits for the side effects whose calls still run (their attempts ended), so
// that their results are recorded before the worker's connection closes, each at most until
// its timeout (Effects.drain).
func (w *Worker) drainEffects() {
	w.effects.mu.Lock()
	n := len(w.effects.calls)
	w.effects.mu.Unlock()
	if n > 0 {
		w.log.Info("worker: waiting for the side effects in flight before stopping", "calls", n)
	}
	if waited, left := w.effects.drain(); left > 0 {
		w.log.Warn("worker: side effects still run past their timeout: the next attempt calls them again, with the same idempotency key", "calls", left, "waited_for", waited)
	}
}

// handBack gives back to JetStream the tasks received but not started, once the server has
// dropped this worker's subscriptions.
func (w *Worker) handBack(servings []*serving) {
	if err := w.box.Conn().FlushTimeout(flushTimeout); err != nil {
		w.log.Warn("worker: cannot flush the connection before handing tasks back", "err", err)
	}
	for _, s := range servings {
		s.backMu.Lock()
		back := s.handBack
		s.backMu.Unlock()
		for _, msg := range back {
			if err := msg.Nak(); err != nil {
				w.log.Warn("worker: cannot hand a task back", "handler", s.name, "err", err)
			}
		}
	}
}

// start freezes the handlers.
func (w *Worker) start() (map[string]Handler, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil, errors.New("worker: Run called twice: a Worker runs once")
	}
	w.started = true
	return maps.Clone(w.handlers), nil
}

// consumers creates or updates the durable consumer of every handler.
func (w *Worker) consumers(ctx context.Context, handlers map[string]Handler) (map[string]jetstream.Consumer, error) {
	out := make(map[string]jetstream.Consumer, len(handlers))
	for name := range handlers {
		c, err := w.consumer(ctx, name)
		if err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, nil
}

func (w *Worker) consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	subject, err := w.names.TaskSubject(name)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	c, err := w.js.CreateOrUpdateConsumer(ctx, w.names.TasksStream(), jetstream.ConsumerConfig{
		Durable:       consumerName(name),
		Description:   "reins worker of handler " + name,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.ackWait,
		MaxAckPending: maxAckPending,
		MaxDeliver:    -1,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: consumer %s on %s: %w", consumerName(name), w.names.TasksStream(), err)
	}
	return c, nil
}

// serving is one handler being served.
type serving struct {
	name string
	h    Handler
	cons jetstream.Consumer
	sem  chan struct{} // one token per running task
	m    HandlerMetrics
	// handBack holds the messages received but not started when the worker stopped: the
	// consumption's callback adds them (keepBack), Run reads them once every consumption ended.
	backMu   sync.Mutex
	handBack []jetstream.Msg
}

// keepBack keeps msg, received but not started, to hand back once the worker stops.
func (s *serving) keepBack(msg jetstream.Msg) {
	s.backMu.Lock()
	s.handBack = append(s.handBack, msg)
	s.backMu.Unlock()
}

// taskQueues reads the consumer of each handler, for the metrics.
func (w *Worker) taskQueues(ctx context.Context, handlers map[string]Handler) ([]TaskQueue, error) {
	qs := make([]TaskQueue, 0, len(handlers))
	for name := range handlers {
		c, err := w.js.Consumer(ctx, w.names.TasksStream(), consumerName(name))
		if err != nil {
			return nil, fmt.Errorf("worker: consumer %s: %w", consumerName(name), err)
		}
		info := c.CachedInfo()
		qs = append(qs, TaskQueue{Handler: name, Pending: info.NumPending,
			Unacknowledged: uint64(max(info.NumAckPending, 0)), Redelivered: uint64(max(info.NumRedelivered, 0))})
	}
	return qs, nil
}

// consume receives the tasks of s until ctx is done, subscribing again after an error. The
// handlers' contexts derive from base.
func (w *Worker) consume(ctx, base context.Context, s *serving) {
	for ctx.Err() == nil {
		err := w.consumeOnce(ctx, base, s)
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("worker: consuming tasks stopped; subscribing again", "handler", s.name, "err", err)
		t := time.NewTimer(retryConsume)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if c, err := w.consumer(ctx, s.name); err == nil {
			s.cons = c
		}
	}
}

// consumeOnce receives tasks from one consumption until it ends or ctx is done; then it
// drains the consumption, keeping what it had pulled to hand back. A consumption's callback,
// not an iterator: an iterator's Next armed a heartbeat timer of its own for every task, five
// of an iteration's allocations, where a consumption resets one.
func (w *Worker) consumeOnce(ctx, base context.Context, s *serving) error {
	var failure lastError
	cc, err := s.cons.Consume(func(msg jetstream.Msg) {
		if ctx.Err() != nil { // stopping: what was pulled goes back
			s.keepBack(msg)
			return
		}
		w.receive(ctx, base, s, msg)
	},
		jetstream.PullMaxMessages(min(w.concurrency, 256)), jetstream.PullExpiry(natsbox.PullExpiry), jetstream.PullHeartbeat(natsbox.PullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, jetstream.ErrNoHeartbeat) { // the library pulls again
				w.log.Debug("worker: missed a heartbeat of the task subscription", "handler", s.name)
				return
			}
			failure.set(err)
		}))
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		drainConsumption(cc)
		return ctx.Err()
	case <-cc.Closed(): // the library stopped it: an error it cannot get past
		return failure.or(errors.New("the task subscription ended"))
	}
}

// drainConsumption ends cc once what it had pulled reached its callback (which keeps it to
// hand back), within flushTimeout; past that, what is left goes back to JetStream after its
// AckWait.
func drainConsumption(cc jetstream.ConsumeContext) {
	cc.Drain()
	t := time.NewTimer(flushTimeout)
	defer t.Stop()
	select {
	case <-cc.Closed():
	case <-t.C:
		cc.Stop()
	}
}

// lastError is the last error a consumption reported, for when it ends.
type lastError struct {
	mu  sync.Mutex
	err error
}

func (l *lastError) set(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// or returns the last error, or otherwise if there was none.
func (l *lastError) or(otherwise error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	return otherwise
}
