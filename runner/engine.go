package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/defaults"
	"github.com/reins-run/reins/internal/fault"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// DefaultAckWait is the AckWait of the engine's consumers when [Config.AckWait] is 0: how long an
// event whose delivery or acknowledgement was lost with a NATS node waits before it comes
// again. Events the engine holds longer are kept from redelivery (keepalive.go).
const DefaultAckWait = 5 * time.Second

// Headers of the messages the engine publishes.
const (
	// ReasonHeader carries why a task was dead-lettered (its last error), on REINS_DLQ.
	ReasonHeader = "Reins-Reason"
	// OmittedHeader says what was left out of a dead-lettered task too large to store whole.
	OmittedHeader = "Reins-Omitted"
)

const (
	defaultShards = 64
	shardQueue    = 64
	maxAckPending = 1 << 20
	// holdDelay is how long an event that cannot be decided yet is held back (no record yet, or
	// ahead of the state); retryDelay, after an error.
	holdDelay = 250 * time.Millisecond
	// awaitDelay is the first delay of a sub-run's start that came before its parent's save
	// (event.go, awaitFor).
	awaitDelay = 20 * time.Millisecond
	retryDelay = time.Second
	// maxHoldDelay bounds the delay of an event held back many times.
	maxHoldDelay = 5 * time.Second
	// missingDeliveries is how many times an event of a run with no record is delivered before
	// it is dropped.
	missingDeliveries = 20
	// maxReloads bounds the decisions of one event on reloaded state (compare-and-set conflicts).
	maxReloads = 10
)

// Config configures an Engine.
type Config struct {
	// Conn is the NATS connection (required).
	Conn *conn.Conn
	// Logger receives what the engine could not do; nil discards.
	Logger *slog.Logger
	// AckWait is the AckWait of the engine's consumers; 0 means [DefaultAckWait]. An engine that
	// dies is replaced after LeaseTTL, not AckWait: the events it had not acknowledged come at
	// once to the engine that takes its partitions. AckWait is how long an event lost in transit
	// with a NATS node waits to come again (keepalive.go).
	AckWait time.Duration
	// LeaseTTL is how long an engine's heartbeat counts: another engine takes the partitions of
	// one not heard for this long (partitions.go); 0 means [DefaultLeaseTTL]. Engines sharing a
	// server should use the same.
	LeaseTTL time.Duration
	// ID names the engine in [natsbox.EnginesBucket]; "" means a new unique id.
	ID string
	// Now is the engine's clock: a timer fires when Now reaches the time of its schedule
	// command (the tick carries that time, as every event the engine makes carries the time of
	// the decision that made it); nil means [time.Now].
	Now func() time.Time
	// SaveWindow is how long a decision that only dispatches the next task of a running run
	// may wait for the save of the run record, so that a fast loop's iterations are saved
	// together (saves.go); its event is acknowledged once saved. 0 means [DefaultSaveWindow], a
	// negative window saves after every decision. It runs on the wall clock, not on Now: it
	// bounds how late a save is, not when anything happens in a run.
	SaveWindow time.Duration
	// Roles returns the roles of a principal (the operator's configuration); nil knows only
	// "admin", the data directory's, with role admin. The engine checks the approvers of a
	// step against the roles of whoever decides.
	Roles func(principal string) []string
	// Admit, when set, judges a run before it starts: the workflow and sub-workflows it would
	// run and its input. A non-nil error ends the run failed at once with that error, before
	// any step runs (a server refuses what its operator does not allow). Nil admits all.
	Admit func(ctx context.Context, defs []*workflow.Definition, input json.RawMessage) *protocol.RunError
	// Limits are the bounds of the server's operator on a run's growth (max_steps, signals,
	// events: [engine.Limits]), given to every run the engine starts, sub-runs included, which
	// keeps them for its life. A field at 0 takes its default ([DefaultLimits]: those of a server
	// whose operator sets none); a negative one leaves that bound out.
	Limits engine.Limits
	// MaxOutputBytes bounds the output of one answer of a task; a larger one fails the step
	// for good with stop reason output_too_large. 0 means [DefaultMaxOutputBytes], a server's
	// max_output_bytes when its operator sets none; a negative bound leaves it out (no bound
	// beyond NATS's).
	MaxOutputBytes int64
	// MaxValueBytes bounds a value the engine reads back from the values' store (a run input
	// or an output stored by reference, [wire.Values]); 0 means the larger of
	// [wire.DefaultMaxValue] and MaxOutputBytes. A server gives the larger of its limits.
	MaxValueBytes int64
	// CachedRuns is how many running or waiting runs the engine keeps decoded in memory (0:
	// [DefaultCachedRuns]); a run the cache let go is read from the bucket when an event comes.
	CachedRuns int
	// Metrics receives what the engine decided (runs, steps, iterations) and reports its
	// counters, partitions and waiting runs at each scrape; nil: no metrics.
	Metrics *metrics.Metrics
}

// DefaultLimits are the bounds of a run's growth that a field of [Config.Limits] left at 0
// takes: those of a server whose operator sets none ([operator.DefaultGrowth]).
func DefaultLimits() engine.Limits {
	return engine.Limits{MaxSteps: operator.DefaultMaxSteps, MaxSignals: operator.DefaultMaxSignalsPerRun, MaxEvents: operator.DefaultMaxEventsPerRun}
}

// runLimits is what the engine gives the runs it starts for Config.Limits l: each field at 0
// its default, a negative one 0 (no bound, as a run's record says it).
func runLimits(l engine.Limits) engine.Limits {
	def := DefaultLimits()
	return engine.Limits{MaxSteps: defaults.OrNone(l.MaxSteps, def.MaxSteps), MaxSignals: defaults.OrNone(l.MaxSignals, def.MaxSignals),
		MaxEvents: defaults.OrNone(l.MaxEvents, def.MaxEvents)}
}

// DefaultMaxOutputBytes bounds the output of one answer when [Config.MaxOutputBytes] is 0: 64
// MiB, as a server's max_output_bytes by default.
const DefaultMaxOutputBytes = operator.DefaultMaxBytes

// outputBound is the engine's bound on an answer's output for Config.MaxOutputBytes n: 0 for
// none (n negative).
func outputBound(n int64) int64 { return defaults.OrNone(n, DefaultMaxOutputBytes) }

// StopOutputTooLarge is the stop reason of a step whose output passed [Config.MaxOutputBytes].
const StopOutputTooLarge = "output_too_large"

// Engine consumes run events and decides them with package engine. Run it once.
type Engine struct {
	box        *natsbox.Box
	names      natsbox.Names // box.Names(): every stream, bucket and subject of the engine
	js         jetstream.JetStream
	log        *slog.Logger
	ackWait    time.Duration
	now        func() time.Time
	saveWindow time.Duration
	shards     int
	roles      func(string) []string
	admit      func(context.Context, []*workflow.Definition, json.RawMessage) *protocol.RunError
	limits     engine.Limits
	maxOutput  int64
	maxValue   int64
	metrics    *metrics.Metrics

	id       string
	leaseTTL time.Duration
	flight   flight
	// floors is the highest acknowledged floor seen of each partition's consumer (sawFloor);
	// kept is the highest written to natsbox.EnginesBucket (keepFloor).
	floors, kept [natsbox.Partitions]atomic.Uint64

	ready   chan struct{}
	started atomic.Bool

	// Set by Run before any event is handled.
	runs       jetstream.KeyValue
	index      jetstream.KeyValue // natsbox.StatusBucket
	slots      jetstream.KeyValue // natsbox.ConcurrencyBucket (slots.go)
	engines    jetstream.KeyValue // natsbox.EnginesBucket, for the floors kept (floors.go)
	store      *runstore.Store
	values     *wire.Values
	timers     *timers
	keeper     *natsbox.Keeper
	maxPayload int
	// cachedPerShard is each shard's share of Config.CachedRuns.
	cachedPerShard int
	out            *outbox.Outbox  // set by open, with values and maxPayload
	saver          *runstore.Saver // set by open: the engine's saves of run records

	stats stats
	// beatsPaused, set by tests, stops the heartbeats as a pause or a cut link would, while
	// the engine goes on deciding what it pulled.
	beatsPaused atomic.Bool
	// killBeforeSave, when positive, kills the process before its n-th save (REINS_FAULT).
	killBeforeSave int64
	saves          atomic.Int64
	// maxQueued is MaxQueued (tests make it smaller).
	maxQueued int
	// parentDeliveries is how many deliveries a sub-run's start waits for its parent's record
	// to show it (missingDeliveries; tests make it smaller).
	parentDeliveries uint64
	// killBeforeRelease, when positive, kills the process before its n-th release.
	killBeforeRelease int64
	releases          atomic.Int64
	// observe, when set (tests), sees every event settled (ev is nil for a malformed one).
	observe func(out outcome, ev *protocol.Event)
	// trimmed, when set (tests), sees each shard after an event and the trim of its cache.
	trimmed func(sh *shard)
	// beaten, when set (tests), sees each heartbeat: whether it was acknowledged.
	beaten func(acked bool)
	// sendingBeat, when set (tests), is called before each heartbeat is sent, with the
	// heartbeat's context: a heartbeat whose answer never comes blocks in it.
	sendingBeat func(ctx context.Context)
	// rounding, when set (tests), is called at the start of each round of the leases.
	rounding func()
	// takingOver, when set (tests), is called as a takeover begins on a partition's consumer.
	takingOver func(p int)
	// resetting, when set (tests), is called before a takeover resets a partition's consumer:
	// an error stands for a reset that failed.
	resetting func(p int) error
	// remaking, when set (tests), is called in a takeover between the deletion of a
	// partition's consumer and its creation: an error stands for a creation that failed.
	remaking func(p int) error
	// partitioned, set by tests, keeps an engine alone on the partitions' own consumers, as
	// when other engines share them (solo.go).
	partitioned bool
}

// stats counts what the engine did, for tests and logs.
type stats struct {
	decided atomic.Int64 // events that changed a run (saved, or waiting for a save)
	acked   atomic.Int64 // events acknowledged without change (duplicates, stale answers)
	held    atomic.Int64 // events held back (no record yet, ahead of the state)
	dropped atomic.Int64 // events terminated
	refused atomic.Int64 // events terminated because their sender may not send them
	reloads atomic.Int64 // decisions done again on reloaded state
	// redelivered counts the resets of a partition's consumer to its acknowledged floor.
	redelivered atomic.Int64
	conflicts   atomic.Int64 // compare-and-set conflicts among the reloads
	cached      atomic.Int64 // runs decoded in the shards' caches
	evicted     atomic.Int64 // runs the caches let go to stay within CachedRuns
	fences      atomic.Int64 // rounds of the leases that stopped the engine's consumption (fenced)
	saves       atomic.Int64 // run records saved
	// partitions has bit p set while the engine consumes partition p.
	partitions atomic.Uint32
}

// New returns an engine over cfg.Conn. It does no I/O: Run does.
func New(cfg Config) (*Engine, error) {
	if cfg.Conn == nil {
		return nil, errors.New("runner: Config.Conn is required")
	}
	if cfg.AckWait < 0 {
		return nil, fmt.Errorf("runner: Config.AckWait is %s: want 0 (meaning %s) or more", cfg.AckWait, DefaultAckWait)
	}
	if cfg.LeaseTTL < 0 {
		return nil, fmt.Errorf("runner: Config.LeaseTTL is %s: want 0 (meaning %s) or more", cfg.LeaseTTL, DefaultLeaseTTL)
	}
	if cfg.ID == "" {
		cfg.ID = nuid.Next()
	} else if err := natsbox.CheckToken(cfg.ID); err != nil {
		return nil, fmt.Errorf("runner: Config.ID: %w", err)
	}
	box := (*natsbox.Box)(cfg.Conn)
	e := &Engine{
		box: box, names: box.Names(), js: box.JetStream(), log: cfg.Logger, ackWait: cfg.AckWait, now: cfg.Now,
		id: cfg.ID, leaseTTL: cmp.Or(cfg.LeaseTTL, DefaultLeaseTTL),
		saveWindow: cfg.SaveWindow, shards: defaultShards, ready: make(chan struct{}),
		roles: cfg.Roles, admit: cfg.Admit, maxValue: cfg.MaxValueBytes,
		metrics: cfg.Metrics, maxQueued: MaxQueued, parentDeliveries: missingDeliveries,
	}
	if cfg.CachedRuns < 0 {
		return nil, fmt.Errorf("runner: Config.CachedRuns is %d: want 0 (meaning %d) or more", cfg.CachedRuns, DefaultCachedRuns)
	}
	e.cachedPerShard = max(1, cmp.Or(cfg.CachedRuns, DefaultCachedRuns)/e.shards)
	e.limits = runLimits(cfg.Limits)
	e.maxOutput = outputBound(cfg.MaxOutputBytes)
	if cfg.MaxValueBytes < 0 {
		return nil, fmt.Errorf("runner: Config.MaxValueBytes is %d: want 0 (the default) or more", cfg.MaxValueBytes)
	}
	if e.maxValue == 0 {
		e.maxValue = max(wire.DefaultMaxValue, e.maxOutput)
	}
	if e.saveWindow == 0 {
		e.saveWindow = DefaultSaveWindow
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.ackWait == 0 {
		e.ackWait = DefaultAckWait
	}
	if e.now == nil {
		e.now = time.Now
	}
	// Crash tests: "kill-before-save:N" makes the process exit (status 86) right before the
	// engine's N-th save of a run, after it carried out the decision's commands: the window the
	// algorithm must survive.
	// "kill-before-release:N", right before its N-th release of a concurrency key, after the
	// save of the run that ended.
	var err error
	if v := os.Getenv(fault.Env); strings.HasPrefix(v, killBeforeRelease+":") {
		e.killBeforeRelease, err = fault.Parse(v, killBeforeRelease)
	} else {
		e.killBeforeSave, err = fault.Parse(v, killBeforeSave)
	}
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return e, nil
}

// killBeforeSave and killBeforeRelease are the fault points of crash tests (internal/fault).
const (
	killBeforeSave    = "kill-before-save"
	killBeforeRelease = "kill-before-release"
)

// faultRelease kills the process when the fault injection says so.
func (e *Engine) faultRelease(runID string) {
	if e.killBeforeRelease > 0 && e.releases.Add(1) == e.killBeforeRelease {
		e.log.Error("runner: killed before a release, as "+fault.Env+" asks", "run_id", runID, "release", e.killBeforeRelease)
		os.Exit(86)
	}
}

// fault kills the process when the fault injection says so.
func (e *Engine) fault(runID string) {
	if e.killBeforeSave > 0 && e.saves.Add(1) == e.killBeforeSave {
		e.log.Error("runner: killed before a save, as "+fault.Env+" asks", "run_id", runID, "save", e.killBeforeSave)
		os.Exit(86)
	}
}

// Ready is closed once the engine consumes events (never, when Run fails before).
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// Run ensures the JetStream layout, takes part in the leases of the partitions, and consumes
// the events of those it owns (arming again the timers of their running runs) until ctx is
// done, when it hands them over and returns nil; or it returns the error that stopped it.
func (e *Engine) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("runner: Engine.Run was called twice: use a new Engine")
	}
	err := e.run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (e *Engine) run(ctx context.Context) error {
	if err := e.open(ctx); err != nil {
		return err
	}
	// The leases have a connection of their own: a heartbeat's answer must not wait behind the
	// megabytes of a large value the engine reads on its main connection.
	lb, err := e.box.Connect(ctx, "reins-engine-leases")
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	defer lb.Close()
	defer e.metrics.AddEngine(e.engineStats)()
	defer e.metrics.AddWaitingRuns(e.waitingRuns)()
	kv, err := lb.JetStream().KeyValue(ctx, e.names.EnginesBucket())
	if err != nil {
		return fmt.Errorf("runner: bucket %s: %w", e.names.EnginesBucket(), err)
	}
	e.timers = newTimers(e.now, e.publishTick, e.log)
	defer e.timers.close()
	return e.consume(ctx, kv)
}

// open ensures the layout and binds the streams and buckets the engine decides with.
func (e *Engine) open(ctx context.Context) error {
	if err := natsbox.EnsureLayout(ctx, e.js, e.box.Layout()); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	runs, err := e.js.KeyValue(ctx, e.names.RunsBucket())
	if err != nil {
		return fmt.Errorf("runner: bucket %s: %w", e.names.RunsBucket(), err)
	}
	if e.index, err = e.js.KeyValue(ctx, e.names.StatusBucket()); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", e.names.StatusBucket(), err)
	}
	if e.slots, err = e.js.KeyValue(ctx, e.names.ConcurrencyBucket()); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", e.names.ConcurrencyBucket(), err)
	}
	if e.engines, err = e.js.KeyValue(ctx, e.names.EnginesBucket()); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", e.names.EnginesBucket(), err)
	}
	wfs, err := e.js.KeyValue(ctx, e.names.WorkflowsBucket())
	if err != nil {
		return fmt.Errorf("runner: bucket %s: %w", e.names.WorkflowsBucket(), err)
	}
	tasks, err := e.js.Stream(ctx, e.names.TasksStream())
	if err != nil {
		return fmt.Errorf("runner: stream %s: %w", e.names.TasksStream(), err)
	}
	values, err := natsbox.OpenValues(ctx, e.js, e.names)
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	e.runs, e.store, e.keeper = runs, runstore.NewStore(wfs), natsbox.NewKeeper(e.js.Conn(), e.names, tasks)
	e.values = wire.NewValues(values, 0, e.maxValue)
	if e.maxPayload == 0 { // set by a test that wants a smaller bound
		e.maxPayload = int(e.box.MaxPayload())
	}
	e.out = &outbox.Outbox{JS: e.js, Names: e.names, Values: e.values, MaxPayload: e.maxPayload, Log: e.log}
	e.saver = &runstore.Saver{JS: e.js, Names: e.names, Runs: e.runs, Index: e.index, Values: e.values, MaxPayload: e.maxPayload}
	e.legacyEvents(ctx)
	return nil
}

// legacyConsumer is the consumer of the events of every run before partitions (layout 1).
const legacyConsumer = "reins-engine"

// legacyEvents reports the events that wait on the consumer of layout 1, whose subjects no
// partition holds: the version that sent them must decide them.
func (e *Engine) legacyEvents(ctx context.Context) {
	c, err := e.js.Consumer(ctx, e.names.EventsStream(), legacyConsumer)
	if err != nil {
		return
	}
	if info := c.CachedInfo(); info.NumPending+uint64(info.NumAckPending) > 0 {
		e.log.Error("runner: events of an earlier layout wait on a consumer no engine of this version reads: let the earlier version finish them",
			"consumer", legacyConsumer, "pending", info.NumPending, "unacknowledged", info.NumAckPending)
	}
}

// rearm arms the timers of every running run of the partitions of mine, from its saved state,
// and with tidy, tidies the status index on the way (reindex).
func (e *Engine) rearm(ctx context.Context, mine map[int]bool, tidy bool) error {
	n := 0
	keys := map[string]bool{} // the index keys of the saved records
	for ent, err := range natsbox.Entries(ctx, e.runs, ">") {
		if err != nil {
			return fmt.Errorf("runner: read the runs to arm their timers: %w", err)
		}
		rec, err := runstore.DecodeRecord(ent)
		if err != nil {
			e.log.Warn("runner: a run record cannot be read, so its timers are not armed", "run_id", ent.Key(), "err", err)
			continue
		}
		keys[runstore.StatusKey(rec.Run)] = true
		if rec.Run.Finished() || !mine[natsbox.Partition(rec.Run.ID)] {
			continue
		}
		b, err := e.store.Get(ctx, rec.Run.Hash)
		if err != nil {
			e.log.Warn("runner: the workflow of a run cannot be read, so its timers are not armed", "run_id", rec.Run.ID, "err", err)
			continue
		}
		e.rearmRun(b.Definition, rec.Run, ent)
		n++
	}
	e.log.Debug("runner: timers armed", "running_runs", n)
	if !tidy {
		return nil
	}
	if err := e.reindex(ctx, keys); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

// watchConsumer looks a partition's consumer up each time look says the pulls go unanswered
// (at most once per half pull expiry), and on its own every lookEvery, and reports in lost that
// the consumption must be made again: the consumer was deleted (wrapping
// jetstream.ErrConsumerDeleted), or it stalled. The library reports the deletion itself (a
// terminal error, then Closed) only through a pull request the server held when it deleted the
// consumer: a pull request it had not registered yet (the consumer is deleted right after the
// engine started consuming, or while a request is on its way) reaches no one, and every later
// one too, which the library reports as missing heartbeats and "no responders", again and
// again, without ever stopping. And after a NATS node that led the consumer died, the library
// was seen pulling without an error and without a message for minutes while events waited:
// the looks on its own find that (stalled).
//
// back reports the connection coming back (nats.Conn.StatusChanged, removed on return): what
// was on its way to it was lost, as is what the old leader had sent when reset says the
// consumer's leader changed; both have the consumer deliver again (redeliver).
func (e *Engine) watchConsumer(ctx context.Context, p int, cons jetstream.Consumer, look, reset <-chan struct{}, back chan nats.Status, lost chan<- error) {
	tick := time.NewTicker(lookEvery)
	defer tick.Stop()
	defer e.js.Conn().RemoveStatusListener(back)
	var prev *jetstream.ConsumerInfo // of the last look on the tick
	// After a look, the next waits for rest (half a pull's expiry): looks and ticks are nil.
	var rest <-chan time.Time
	looks, ticks := look, tick.C
	for {
		periodic := false
		select {
		case <-ctx.Done():
			return
		case <-reset:
			e.redeliver(ctx, p, cons)
			continue
		case <-back:
			e.redeliver(ctx, p, cons)
			continue
		case <-rest:
			rest, looks, ticks = nil, look, tick.C
			continue
		case <-looks:
		case <-ticks:
			periodic = true
		}
		ictx, cancel := context.WithTimeout(ctx, natsbox.PullExpiry)
		info, err := cons.Info(ictx)
		cancel()
		name := cons.CachedInfo().Name
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			err = fmt.Errorf("the consumer %s of %s is gone (%w): %w", name, e.names.EventsStream(), jetstream.ErrConsumerDeleted, err)
			e.log.Warn("runner: the consumption of a partition stopped", "consumer", name, "err", err)
			lost <- err
			return
		case err != nil && ctx.Err() == nil:
			e.log.Debug("runner: look the consumer up", "consumer", name, "err", err)
		case err == nil && periodic && e.flight.settledAll(each(p)) && stalled(prev, info):
			err = fmt.Errorf("the consumer %s of %s delivered nothing for %s with %d events waiting", name, e.names.EventsStream(), lookEvery, info.NumPending)
			e.log.Warn("runner: the consumption of a partition stalled", "consumer", name, "err", err)
			lost <- err
			return
		case err == nil && periodic:
			prev = info
		}
		if err == nil {
			for _, q := range each(p) {
				e.sawFloor(q, info)
			}
			e.keepFloors(ctx, each(p))
		}
		rest, looks, ticks = time.After(natsbox.PullExpiry/2), nil, nil
	}
}

// redeliver has partition p's consumer deliver again at once what it delivered past its
// acknowledged floor (natsbox.ResetConsumer): after its leader changed, or the connection the
// engine pulls on came back, a delivery may have been lost on its way, and the server would
// send it again only after AckWait. What the engine holds and has not acknowledged yet comes
// twice, and changes nothing the second time. Tried for a pull's expiry at most (a leader being
// elected answers nothing), then left to AckWait. (Measured before it: in a benchmark stopping
// NATS nodes, half of the stops held a run for AckWait, 5 s, and the others for 1.2 s.)
func (e *Engine) redeliver(ctx context.Context, p int, cons jetstream.Consumer) {
	name := cons.CachedInfo().Name
	ctx, cancel := context.WithTimeout(ctx, natsbox.PullExpiry)
	defer cancel()
	var seq uint64
	var err error
	for {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		seq, err = natsbox.ResetConsumer(actx, e.js, e.names.EventsStream(), name, 0)
		if err != nil {
			<-actx.Done() // an attempt a second at most, and one a second
		}
		acancel()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		e.log.Debug("runner: deliver again what a consumer delivered past its floor", "consumer", name, "err", err)
		return
	}
	e.stats.redelivered.Add(1)
	e.log.Info("runner: a partition's consumer delivers again past its acknowledged floor", "consumer", name, "from", seq)
}

// lookEvery is how often a partition's consumer is looked up when nothing asks for it.
const lookEvery = 2 * natsbox.PullExpiry

// stalled reports whether a consumer looked up as prev and then as cur, lookEvery later,
// delivered nothing meanwhile while events waited for it at both looks and the engine had room
// for them (fewer unacknowledged than MaxAckPending): no pull reached it, since a consumption
// that is going delivers what waits within a pull, and the library pulls again every pull
// expiry at most.
func stalled(prev, cur *jetstream.ConsumerInfo) bool {
	return prev != nil && cur != nil && prev.NumPending > 0 && cur.NumPending > 0 &&
		cur.Delivered.Stream == prev.Delivered.Stream && cur.Created.Equal(prev.Created) &&
		cur.NumAckPending < cur.Config.MaxAckPending
}

// shards is the set of shard goroutines of a consumption.
type shards struct {
	all      []*shard
	stopping chan struct{}
	wg       sync.WaitGroup
}

func (e *Engine) startShards(ctx context.Context) *shards {
	p := &shards{all: make([]*shard, e.shards), stopping: make(chan struct{})}
	for i := range p.all {
		sh := &shard{in: make(chan *heldEvent, shardQueue), cache: newRunCache(&e.stats.cached), single: map[string]bool{}}
		p.all[i] = sh
		p.wg.Go(func() { e.serve(ctx, sh, p.stopping) })
	}
	return p
}

// close ends the shards once nothing is routed to them any more.
func (p *shards) close() {
	for _, sh := range p.all {
		close(sh.in)
	}
	p.wg.Wait()
}

// consumeError logs an error of the consumption; one that ends it is kept in why. One that
// says the pull requests go unanswered asks watchConsumer (look) whether the consumer is there;
// one that says the consumer's leader changed asks it to have what may have been lost with the
// old leader delivered again (reset).
func (e *Engine) consumeError(err error, why chan<- error, look, reset chan<- struct{}) {
	if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrNoResponders) {
		select {
		case look <- struct{}{}:
		default:
		}
	}
	if errors.Is(err, jetstream.ErrConsumerLeadershipChanged) {
		select {
		case reset <- struct{}{}:
		default:
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrBadRequest), errors.Is(err, jetstream.ErrConnectionClosed):
		e.log.Warn("runner: the consumption of a partition stopped", "err", err)
		select {
		case why <- err:
		default:
		}
	default:
		e.log.Debug("runner: consuming events", "err", err)
	}
}

// route hands a message to the shard of its run.
func (e *Engine) route(p *shards, m jetstream.Msg) {
	part, _ := e.names.SubjectPartition(m.Subject()) // the consumer's filter: always one
	h := e.flight.add(part, m, time.Now())
	select {
	case <-p.stopping:
		e.giveBack(h)
		return
	default:
	}
	// By run: the events people send for a run come on subjects of their own, and must be
	// decided in order with the run's others. The runs of a partition hash to its share of
	// the shards: the partition's number is left out of the hash.
	run, _, _ := strings.Cut(m.Subject()[e.names.EventPrefixLen():], ".")
	hash := fnv.New32a()
	_, _ = hash.Write([]byte(run))
	sh := p.all[hash.Sum32()/natsbox.Partitions%uint32(len(p.all))]
	select {
	case sh.in <- h:
	case <-p.stopping:
		e.giveBack(h)
	}
}

// giveBack returns an event to the server undecided, for the next engine.
func (e *Engine) giveBack(m *heldEvent) {
	_ = m.Nak()
	e.flight.done(m)
}

// serve decides the events of one shard in order, and saves the runs whose decisions wait when
// their save is due. Once the engine stops, what is left is given back to the server (Nak) for
// the next engine, and what waits for a save is saved.
func (e *Engine) serve(ctx context.Context, sh *shard, stopping <-chan struct{}) {
	defer e.saveAll(ctx, sh)
	for {
		select {
		case m, ok := <-sh.in:
			if !ok {
				return
			}
			select {
			case <-stopping:
				e.giveBack(m)
				continue
			default:
			}
			e.handle(ctx, sh, m)
			e.trim(ctx, sh)
			if e.trimmed != nil {
				e.trimmed(sh)
			}
		case <-sh.saves.fired():
			e.saveDue(ctx, sh)
		}
	}
}
