package worker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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

// ErrLeaseLost is wrapped by the error of a side effect whose holder lost its claim while the
// effect ran (it was paused or cut off longer than its lease, and another attempt took the
// claim over): the holder may not record its result, and its attempt fails (retryable).
var ErrLeaseLost = errors.New("the claim on the side effect was lost")

// ErrNotRecorded is wrapped by the error of a side effect that ran but whose result could not
// be recorded: its attempt fails (retryable), and the next attempt runs the effect again with
// the same idempotency key once the claim's lease ends.
var ErrNotRecorded = errors.New("the result of the side effect could not be recorded")

// recordTimeout bounds the write of a record or a claim. It does not end with the task's
// context: once a side effect happened, recording it matters even if the task is abandoned.
const recordTimeout = 10 * time.Second

// DefaultEffectTimeout bounds a side effect's call when nothing else does ([Options.EffectTimeout],
// [Lease.Timeout]): the call runs on after its attempt ends, for at most this long from its start.
// It is the MCP reference client's request timeout: long enough for a remote system's honest
// work, short enough that a worker shutting down waits for it.
const DefaultEffectTimeout = time.Minute

// Effects is the record of side effects, natsbox.EffectsBucket: for each side effect, named by
// an id (its idempotency key, with whatever else identifies the call), a claim while an attempt
// runs it, then what it returned, so that an attempt that runs again (redelivered after a crash,
// retried after a timeout) returns the recorded result instead of doing the effect twice. Once
// implements the protocol; docs/engine.md says what it guarantees. It is safe for concurrent
// use, and opens the bucket on first use.
type Effects struct {
	js    jetstream.JetStream
	names natsbox.Names
	// ackWait is the worker's AckWait: the default lease is the attempt's timeout plus it.
	ackWait time.Duration
	// id names the worker process in the claims it holds.
	id string
	// waiting, when set (tests), is called as an attempt starts waiting for a live claim.
	waiting func(key string)
	// draining, when set (tests), is called as a stopping worker starts waiting for its calls.
	draining func()
	// wrapKV, when set (tests), wraps the bucket as it opens: a test loses the answers of
	// writes that landed.
	wrapKV func(jetstream.KeyValue) jetstream.KeyValue

	// metrics counts the claims (nil: not counted).
	metrics Metrics
	// timeout is the default Lease.Timeout (Options.EffectTimeout).
	timeout time.Duration

	mu     sync.Mutex
	kv     jetstream.KeyValue
	values *wire.Values
	// calls are the calls running in this process, each until its result is recorded (or it
	// failed); stopping is set once the worker waits for them to end: no call starts after.
	calls    map[*call]struct{}
	stopping bool
}

// Effects returns the worker's record of side effects (package builtin records its tools'
// results there; [TaskContext.Effect] is the way for a handler).
func (w *Worker) Effects() *Effects { return w.effects }

// Conn returns the connection the worker serves on: package builtin opens the sessions of
// agent steps on it.
func (w *Worker) Conn() *conn.Conn { return (*conn.Conn)(w.box) }

// newEffects returns the record of side effects of a worker with AckWait ackWait.
func newEffects(js jetstream.JetStream, names natsbox.Names, ackWait, timeout time.Duration, m Metrics) *Effects {
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	return &Effects{js: js, names: names, ackWait: ackWait, timeout: timeout, id: hex.EncodeToString(nonce), metrics: orNoMetrics(m),
		calls: map[*call]struct{}{}}
}

// LeaseFor is the lease of the side effects of an attempt of task t in this worker: held by the
// attempt in this process, for the attempt's timeout (AckWait when it has none) plus AckWait.
// So a claim outlives any pause of its holder shorter than that, and an attempt redelivered
// after AckWait waits for the paused one instead of running the effect again; a holder that
// died stops renewing, and the attempt the engine retries after timing it out (its timeout
// plus grace) finds the claim run out and takes it over.
func (e *Effects) LeaseFor(t *protocol.Task) Lease {
	base := t.Timeout
	if base <= 0 {
		base = e.ackWait
	}
	return Lease{Holder: t.MsgID + "@" + e.id, For: base + e.ackWait, Run: t.RunID, Timeout: e.timeout}
}

func (e *Effects) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kv != nil {
		return e.kv, nil
	}
	kv, err := e.js.KeyValue(ctx, e.names.EffectsBucket())
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", e.names.EffectsBucket(), err)
	}
	values, err := natsbox.OpenValues(ctx, e.js, e.names)
	if err != nil {
		return nil, err
	}
	if e.wrapKV != nil {
		kv = e.wrapKV(kv)
	}
	e.kv, e.values = kv, wire.NewValues(values, 0, 0)
	return kv, nil
}

// Lease says who claims a side effect and for how long.
type Lease struct {
	// Holder names the attempt that claims (the task's message id and the worker process): a
	// live claim of its own holder (a delivery of the same attempt) is waited for, as another's.
	Holder string
	// For is how long a claim lives without being renewed; its holder renews it every For/3
	// while the effect runs. A claim older than that is taken to be abandoned: the effect runs
	// again, with the same idempotency key.
	For time.Duration
	// Run is the run the effect belongs to: a result too large for a record is stored by
	// reference with the run's values (wire.Values), and goes when the run is pruned. The end of
	// the run (a cancel) cancels its calls.
	Run string
	// Timeout bounds the call from its start (0: [DefaultEffectTimeout]). The call runs under a
	// context of its own, detached from the attempt's: an attempt that ends (its timeout, the
	// worker stopping) does not end the call, whose result is recorded for the next attempt.
	Timeout time.Duration
}

// effectRecord is what the bucket holds for an effect: a claim (Holder, Until) or a result
// (Done, Value).
type effectRecord struct {
	Holder string          `json:"holder,omitempty"`
	Until  time.Time       `json:"until,omitzero"`
	Done   bool            `json:"done,omitempty"`
	Value  json.RawMessage `json:"value,omitempty"`
}

// Once runs do, the side effect id, unless a result of it is recorded, and returns the
// recorded result, a JSON value (do returns one; nothing is null). do's result is recorded (and returned) when it returns no error; an error
// means the effect did not happen and may run again: the claim is released and the error
// returned. Before do runs, the attempt claims id with lease; another attempt that finds a
// live claim waits for its result (at most until ctx ends); a claim whose lease ran out is
// taken over, and do runs again. A holder that lost its claim while do ran cannot record its
// result (the record is written on the claim's revision): Once returns [ErrLeaseLost]. A result
// that cannot be recorded returns [ErrNotRecorded].
//
// do runs under a context detached from ctx, bounded by lease.Timeout: when ctx ends while do
// runs, Once returns ctx's cause at once, and do runs on, its claim renewed, until its result
// is recorded for the attempt that comes next (which waits for it). Only the end of the run
// (a cancel) cancels do's context. A worker that stops waits for the calls still running
// ([Worker.Run]).
func (e *Effects) Once(ctx context.Context, id string, lease Lease, do func(context.Context) ([]byte, error)) ([]byte, error) {
	if lease.For <= 0 || lease.Holder == "" || lease.Timeout < 0 {
		return nil, fmt.Errorf("worker: side effect %s: lease %+v: want a holder, a duration over 0 and a timeout of 0 or more", wire.EffectKey(id), lease)
	}
	if err := context.Cause(ctx); err != nil { // an abandoned attempt starts nothing
		return nil, fmt.Errorf("worker: side effect %s: %w", wire.EffectKey(id), err)
	}
	kv, err := e.bucket(ctx)
	if err != nil {
		return nil, fmt.Errorf("worker: side effect %s: %w", wire.EffectKey(id), err)
	}
	key := wire.EffectKey(id)
	for {
		rev, value, err := e.claim(ctx, kv, key, lease)
		switch {
		case err != nil:
			return nil, fmt.Errorf("worker: side effect %s: %w", key, err)
		case value != nil:
			return value, nil
		case rev > 0:
			return e.run(ctx, kv, key, rev, lease, do)
		}
		// Someone else's live claim changed or ran out: look again.
	}
}

// claim claims key for lease. It returns the revision of the claim; or the recorded result;
// or neither once a live claim of another attempt changed or ran out.
func (e *Effects) claim(ctx context.Context, kv jetstream.KeyValue, key string, lease Lease) (uint64, []byte, error) {
	data, err := e.claimData(lease)
	if err != nil {
		return 0, nil, err
	}
	rev, err := put(ctx, kv, key, data, 0, nil)
	if err == nil {
		e.metrics.EffectClaim(EffectClaimed)
		return rev, nil, nil
	}
	if !isWrongRevision(err) {
		return 0, nil, fmt.Errorf("claim: %w", err)
	}
	entry, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) { // released in between: claim again
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read the record: %w", err)
	}
	rec, err := decodeEffect(entry.Value())
	switch {
	case err != nil:
		return 0, nil, err
	case rec.Done:
		value, err := e.values.In(ctx, lease.Run, rec.Value)
		if err != nil {
			return 0, nil, fmt.Errorf("read the recorded result: %w", err)
		}
		e.metrics.EffectClaim(EffectRecorded)
		return 0, value, nil
	case !time.Now().Before(rec.Until):
		// The holder is gone (or paused past its lease; one of this process that still ran
		// would have renewed it): take the claim over, on the revision read, so that of two
		// attempts taking it over one wins.
		data, err := e.claimData(lease)
		if err != nil {
			return 0, nil, err
		}
		rev, err := put(ctx, kv, key, data, entry.Revision(), nil)
		if isWrongRevision(err) {
			return 0, nil, nil
		}
		if err != nil {
			return 0, nil, fmt.Errorf("take over an abandoned claim: %w", err)
		}
		e.metrics.EffectClaim(EffectTakenOver)
		return rev, nil, nil
	}
	return 0, nil, e.await(ctx, kv, key, entry.Revision(), rec.Until)
}

// await returns once key changes after revision rev, or the claim's lease (until) runs out, or
// ctx ends (its error).
func (e *Effects) await(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64, until time.Time) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("watch a live claim: %w", err)
	}
	defer func() { _ = w.Stop() }()
	// The claim may have changed between the read and the watch: look once more.
	if entry, err := kv.Get(ctx, key); err != nil || entry.Revision() != rev {
		return nil
	}
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	if e.waiting != nil {
		e.waiting(key)
	}
	e.metrics.EffectClaim(EffectWaited)
	select {
	case <-w.Updates():
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the attempt that holds the claim: %w", context.Cause(ctx))
	}
}

// result is what a call of a side effect returned, as Once returns it.
type result struct {
	value []byte
	err   error
}

// call is a side effect's call running in this process, under a context of its own.
type call struct {
	run    string
	cancel context.CancelCauseFunc
	// done is closed once the call's result is recorded or the call failed.
	done chan struct{}
	// deadline is when the call's context ends (Lease.Timeout after its start).
	deadline time.Time
}

// errEffectTimeout is the cause of the end of a call's context at its Lease.Timeout.
var errEffectTimeout = fmt.Errorf("the side effect's timeout passed: %w", context.DeadlineExceeded)

// run runs do holding the claim at revision rev, renewing it, and records the result on the
// claim's last revision, in a goroutine of its own under a context detached from ctx: it
// returns what do returned, or ctx's cause as soon as ctx ends (the call runs on). The end
// of the run (errRunEnded) cancels the call as well.
func (e *Effects) run(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64, lease Lease, do func(context.Context) ([]byte, error)) ([]byte, error) {
	c, cctx, err := e.start(ctx, lease)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		_ = kv.Delete(dctx, key, jetstream.LastRevision(rev))
		return nil, fmt.Errorf("worker: side effect %s: %w", key, err)
	}
	out := make(chan result, 1)
	go func() {
		defer e.finish(c)
		value, err := e.hold(cctx, kv, key, rev, lease, do)
		out <- result{value, err}
	}()
	select {
	case r := <-out:
		return r.value, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-out: // ended together: the result counts
		return r.value, r.err
	default:
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, errRunEnded) {
		c.cancel(cause)
		return nil, fmt.Errorf("worker: side effect %s: the run ended, so its call is cancelled: %w", key, cause)
	}
	return nil, fmt.Errorf("worker: side effect %s: the attempt ended while its call runs on (the next attempt waits for its result): %w", key, cause)
}

// start registers a call of lease under a context detached from ctx (its values kept),
// bounded by lease.Timeout; it refuses once the worker stops.
func (e *Effects) start(ctx context.Context, lease Lease) (*call, context.Context, error) {
	timeout := lease.Timeout
	if timeout == 0 {
		timeout = DefaultEffectTimeout
	}
	cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	cctx, stopTimer := context.WithTimeoutCause(cctx, timeout, errEffectTimeout)
	c := &call{run: lease.Run, done: make(chan struct{}), deadline: time.Now().Add(timeout),
		cancel: func(cause error) { cancel(cause); stopTimer() }}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		c.cancel(errStopped)
		return nil, nil, errors.New("the worker is stopping: the call is not made")
	}
	e.calls[c] = struct{}{}
	return c, cctx, nil
}

// finish forgets c, once its result is recorded or it failed.
func (e *Effects) finish(c *call) {
	c.cancel(context.Canceled)
	e.mu.Lock()
	delete(e.calls, c)
	e.mu.Unlock()
	close(c.done)
}

// endRun cancels the calls of run and of its sub-runs: a cancelled run waits for nothing.
func (e *Effects) endRun(run string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for c := range e.calls {
		if c.run == run || strings.HasPrefix(c.run, run+"/") {
			c.cancel(errRunEnded)
			n++
		}
	}
	return n
}

// drain stops new calls and waits for those running to end, each at most until its deadline
// plus recordTimeout (a call that ignores its context is left behind: its claim lapses once
// the process exits, and the next attempt calls again, with the same key). It returns how
// many calls it waited for and how many it left behind.
func (e *Effects) drain() (waited, left int) {
	e.mu.Lock()
	e.stopping = true
	if e.draining != nil {
		e.draining()
	}
	calls := make([]*call, 0, len(e.calls))
	for c := range e.calls {
		calls = append(calls, c)
	}
	e.mu.Unlock()
	for _, c := range calls {
		t := time.NewTimer(time.Until(c.deadline) + recordTimeout)
		select {
		case <-c.done:
		case <-t.C:
			left++
		}
		t.Stop()
	}
	return len(calls), left
}

// hold runs do holding the claim at revision rev, renewing it, and records the result on the
// claim's last revision.
func (e *Effects) hold(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64, lease Lease, do func(context.Context) ([]byte, error)) ([]byte, error) {
	r := &renewal{e: e, kv: kv, key: key, lease: lease, rev: rev, stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	value, err := do(ctx)
	rev, lost := r.end()
	if err != nil {
		if !lost { // the effect did not happen: let the next attempt run it at once
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
			defer cancel()
			_ = kv.Delete(dctx, key, jetstream.LastRevision(rev))
		}
		return nil, err
	}
	if lost {
		return nil, fmt.Errorf("worker: side effect %s ran, but %w (its holder was paused or cut off longer than %s): the attempt fails and the result of the attempt that took it over counts", key, ErrLeaseLost, lease.For)
	}
	if len(value) == 0 {
		value = []byte("null")
	}
	if !json.Valid(value) {
		return nil, fmt.Errorf("worker: side effect %s ran, but its result is not JSON, so %w", key, ErrNotRecorded)
	}
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(recordTimeout, lease.For))
	defer cancel()
	stored, err := e.values.Out(vctx, lease.Run, value)
	var data []byte
	if err == nil {
		data, err = json.Marshal(effectRecord{Done: true, Value: stored})
	}
	if err == nil {
		err = record(ctx, kv, key, data, rev, lease.For)
	}
	if isWrongRevision(err) {
		return nil, fmt.Errorf("worker: side effect %s ran, but %w before its result was recorded: the attempt fails and the result of the attempt that took it over counts", key, ErrLeaseLost)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: side effect %s ran, but %w: %v", key, ErrNotRecorded, err)
	}
	return value, nil
}

// record writes data, the record of an effect that ran, on the claim's revision rev. It asks
// again while the bucket has no leader to answer (a NATS node lost: its streams elect another
// within seconds), for up to the claim's lease (at least recordTimeout): failing there would
// run the effect again, and asking longer is never worse, since another attempt waits for a
// live claim, and one that took an expired claim over makes this write's compare-and-set fail.
// A write asked again may find the revision moved by its own earlier try, which landed while
// its answer was lost: the record read back says so.
func record(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, rev uint64, lease time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(recordTimeout, lease))
	defer cancel()
	tries := 0
	err := natsbox.RetryWrite(ctx, func(actx context.Context) error {
		tries++
		_, err := kv.Update(actx, key, data, rev)
		return err
	})
	if isWrongRevision(err) && tries > 1 {
		if entry, gerr := kv.Get(ctx, key); gerr == nil && bytes.Equal(entry.Value(), data) {
			return nil
		}
	}
	return err
}

// renewal renews a claim every lease.For/3 until end is called or a renewal finds the claim
// taken over.
type renewal struct {
	e     *Effects
	kv    jetstream.KeyValue
	key   string
	lease Lease

	stop, done chan struct{}
	// Owned by loop until done is closed.
	rev  uint64
	lost bool
	// unsure holds the renewals written on rev that failed without an answer (the latest
	// maxUnsure): one of them may have landed, and made the next revision.
	unsure [][]byte
}

// maxUnsure bounds renewal.unsure while the bucket does not answer. Forgetting an older write
// is safe: a claim not recognised as the holder's own is taken as lost (ErrLeaseLost).
const maxUnsure = 8

func (r *renewal) loop() {
	defer close(r.done)
	t := time.NewTicker(max(r.lease.For/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		data, err := r.e.claimData(r.lease)
		if err != nil {
			continue // as another failure: the next tick tries again
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(recordTimeout, r.lease.For))
		rev, err := put(ctx, r.kv, r.key, data, r.rev, r.unsure)
		cancel()
		switch {
		case err == nil:
			r.rev, r.unsure = rev, nil
		case isWrongRevision(err):
			r.lost = true
			return
		default:
			// Another failure (the server unreachable for a moment): the next tick tries
			// again; the write may have landed all the same, which the next one would find.
			r.unsure = append(r.unsure, data)
			if len(r.unsure) > maxUnsure {
				r.unsure = r.unsure[1:]
			}
		}
	}
}

// end stops the renewals and returns the claim's revision and whether it was lost. A last
// renewal that failed without an answer may have landed: the claim read back says so, so that
// the record is not refused for a revision the holder itself moved.
func (r *renewal) end() (uint64, bool) {
	close(r.stop)
	<-r.done
	if !r.lost && len(r.unsure) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		defer cancel()
		if rev, ok := ownClaim(ctx, r.kv, r.key, r.unsure); ok {
			r.rev = rev
		}
	}
	return r.rev, r.lost
}

// claimData is the value of a claim for lease from now. It names the holder and the instant
// its lease ends, to the nanosecond: no other write of a claim has the same bytes, which is
// how a holder knows its own write when the answer to it was lost.
func (e *Effects) claimData(l Lease) ([]byte, error) {
	data, err := json.Marshal(effectRecord{Holder: l.Holder, Until: time.Now().Add(l.For)})
	if err != nil {
		return nil, fmt.Errorf("encode a claim: %w", err)
	}
	return data, nil
}

// put writes data, a claim on key: a create (rev 0: of two attempts one wins), or a
// compare-and-set on revision rev. It asks again while the bucket has no leader to answer (a
// NATS node lost: its streams elect another within seconds), within recordTimeout, as record
// does. A write asked again may find the key moved by its own earlier try, which landed while
// its answer was lost: when the value read back is data (or one of unsure, the caller's
// earlier writes on rev that got no answer), the claim is the caller's, at the revision read.
// Any other value is another attempt's: ErrKeyExists, as without asking again.
func put(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, rev uint64, unsure [][]byte) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	tries := 0
	var landed uint64
	err := natsbox.RetryWrite(ctx, func(actx context.Context) (err error) {
		tries++
		if rev == 0 {
			landed, err = kv.Create(actx, key, data)
		} else {
			landed, err = kv.Update(actx, key, data, rev)
		}
		return err
	})
	if isWrongRevision(err) && (tries > 1 || len(unsure) > 0) {
		if tries > 1 {
			unsure = append(slices.Clip(unsure), data)
		}
		if own, ok := ownClaim(ctx, kv, key, unsure); ok {
			return own, nil
		}
	}
	return landed, err
}

// ownClaim reads key back (asked again while the bucket has no leader, as the write was) and
// returns its revision when its value is one of writes, the caller's claims whose answers were
// lost. A read that fails says no: the claim is then taken as another's, as without it.
func ownClaim(ctx context.Context, kv jetstream.KeyValue, key string, writes [][]byte) (uint64, bool) {
	var entry jetstream.KeyValueEntry
	err := natsbox.RetryWrite(ctx, func(actx context.Context) (err error) {
		entry, err = kv.Get(actx, key)
		return err
	})
	if err != nil || !slices.ContainsFunc(writes, func(w []byte) bool { return bytes.Equal(entry.Value(), w) }) {
		return 0, false
	}
	return entry.Revision(), true
}

// decodeEffect reads a record. A value that is not a record is the result stored by a worker of
// an earlier version, which stored results only.
func decodeEffect(data []byte) (effectRecord, error) {
	var rec effectRecord
	if err := json.Unmarshal(data, &rec); err != nil || (!rec.Done && rec.Holder == "") {
		return effectRecord{Done: true, Value: data}, nil
	}
	return rec, nil
}

// isWrongRevision tells whether err is a compare-and-set that found another revision (the KV
// maps every such failure of Create and Update to ErrKeyExists).
func isWrongRevision(err error) bool { return errors.Is(err, jetstream.ErrKeyExists) }

// Effect implements [TaskContext.Effect].
func (tc *taskContext) Effect(key string, fn func(ctx context.Context, idempotencyKey string) (any, error)) (json.RawMessage, error) {
	t := tc.task
	idem := fmt.Sprintf("%s/%s/%d/%d/%d/%s", t.RunID, t.Step, t.Item, t.Activation, t.Iteration, key)
	return tc.w.effects.Once(tc, idem, tc.w.effects.LeaseFor(t), func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx, idem)
		if err != nil {
			return nil, err
		}
		data, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("worker: the result of side effect %q is not JSON-encodable: %w", key, err)
		}
		return data, nil
	})
}
