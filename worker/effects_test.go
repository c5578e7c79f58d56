package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// effectsEnv returns a worker's record of side effects on a fresh server, and its bucket.
func effectsEnv(t *testing.T) (*Effects, jetstream.KeyValue) {
	t.Helper()
	e := newEnv(t)
	w, err := New((*conn.Conn)(e.box), Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := e.js.KeyValue(testCtx(t), natsbox.EffectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return w.Effects(), kv
}

// effect is a side effect that counts its runs and returns value.
type effect struct {
	runs  atomic.Int64
	value string
	err   error
}

func (f *effect) do(context.Context) ([]byte, error) {
	f.runs.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	return []byte(f.value), nil
}

var leaseA, leaseB = Lease{Holder: "task-1@a", For: time.Minute}, Lease{Holder: "task-1@b", For: time.Minute}

// An effect runs once; an attempt after it gets the recorded result; another id runs.
func TestEffectsOnce(t *testing.T) {
	fx, _ := effectsEnv(t)
	ctx := testCtx(t)
	f := &effect{value: `{"refund":"R-1"}`}
	for i, l := range []Lease{leaseA, leaseB, leaseA} {
		v, err := fx.Once(ctx, "r-1/act/0/1/1/refund", l, f.do)
		if err != nil || string(v) != f.value {
			t.Fatalf("call %d: %q, %v; want %s", i+1, v, err, f.value)
		}
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("the effect ran %d times, want 1", n)
	}
	g := &effect{value: `2`}
	if v, err := fx.Once(ctx, "r-1/act/0/2/1/refund", leaseA, g.do); err != nil || string(v) != "2" || g.runs.Load() != 1 {
		t.Errorf("another id: %q, %v, %d runs; want it run", v, err, g.runs.Load())
	}
}

// An effect that fails did not happen: nothing is recorded, and the next attempt runs it at once.
func TestEffectsFailureReleases(t *testing.T) {
	fx, kv := effectsEnv(t)
	ctx := testCtx(t)
	boom := errors.New("payments: 503")
	f := &effect{err: boom}
	if _, err := fx.Once(ctx, "id", leaseA, f.do); !errors.Is(err, boom) {
		t.Fatalf("error %v, want %v", err, boom)
	}
	if _, err := kv.Get(ctx, wire.EffectKey("id")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after a failure the bucket has %v, want no claim", err)
	}
	f.err, f.value = nil, `"ok"`
	if v, err := fx.Once(ctx, "id", leaseB, f.do); err != nil || string(v) != `"ok"` || f.runs.Load() != 2 {
		t.Errorf("the next attempt: %q, %v, %d runs; want it to run", v, err, f.runs.Load())
	}
}

// An attempt that finds another one running the effect waits for its result and does not run
// it: the live claim of a slow holder, or one of its own holder (a redelivery to the same
// process).
func TestEffectsWaitForLiveClaim(t *testing.T) {
	for _, second := range []Lease{leaseB, leaseA} {
		t.Run(second.Holder, func(t *testing.T) {
			fx, _ := effectsEnv(t)
			ctx := testCtx(t)
			waiting := make(chan struct{})
			fx.waiting = func(string) { close(waiting) }
			started, release := make(chan struct{}), make(chan struct{})
			first := make(chan error, 1)
			go func() {
				_, err := fx.Once(ctx, "id", leaseA, func(context.Context) ([]byte, error) {
					close(started)
					<-release
					return []byte(`"first"`), nil
				})
				first <- err
			}()
			<-started
			f := &effect{value: `"second"`}
			got := make(chan string, 1)
			go func() {
				v, err := fx.Once(ctx, "id", second, f.do)
				if err != nil {
					t.Error(err)
				}
				got <- string(v)
			}()
			<-waiting
			close(release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if v := <-got; v != `"first"` || f.runs.Load() != 0 {
				t.Errorf("the waiting attempt got %s and ran %d times; want the first's result, no run", v, f.runs.Load())
			}
		})
	}
}

// A waiting attempt gives up when its context ends, running nothing.
func TestEffectsWaitEndsWithContext(t *testing.T) {
	fx, kv := effectsEnv(t)
	ctx := testCtx(t)
	putClaim(t, kv, "id", effectRecord{Holder: "gone@x", Until: time.Now().Add(time.Hour)})
	wctx, cancel := context.WithCancel(ctx)
	fx.waiting = func(string) { cancel() }
	f := &effect{}
	if _, err := fx.Once(wctx, "id", leaseA, f.do); !errors.Is(err, context.Canceled) || f.runs.Load() != 0 {
		t.Errorf("error %v after %d runs; want context.Canceled, no run", err, f.runs.Load())
	}
}

// A claim whose lease ran out (its holder crashed) is taken over: the effect runs again.
func TestEffectsTakeOverAbandonedClaim(t *testing.T) {
	fx, kv := effectsEnv(t)
	ctx := testCtx(t)
	putClaim(t, kv, "id", effectRecord{Holder: "crashed@x", Until: time.Now().Add(-time.Second)})
	f := &effect{value: `"again"`}
	if v, err := fx.Once(ctx, "id", leaseA, f.do); err != nil || string(v) != `"again"` || f.runs.Load() != 1 {
		t.Errorf("%q, %v, %d runs; want the effect run again", v, err, f.runs.Load())
	}
	if rec := readRecord(t, kv, "id"); !rec.Done || string(rec.Value) != `"again"` {
		t.Errorf("record %+v, want the result", rec)
	}
}

// A holder whose claim was taken over while the effect ran cannot record its result: the
// record of the attempt that took over stands.
func TestEffectsLostLeaseIsFenced(t *testing.T) {
	fx, kv := effectsEnv(t)
	ctx := testCtx(t)
	_, err := fx.Once(ctx, "id", leaseA, func(context.Context) ([]byte, error) {
		// Meanwhile another attempt took the claim over and recorded its result.
		e, err := kv.Get(ctx, wire.EffectKey("id"))
		if err != nil {
			return nil, err
		}
		data, _ := json.Marshal(effectRecord{Done: true, Value: json.RawMessage(`"theirs"`)})
		if _, err := kv.Update(ctx, wire.EffectKey("id"), data, e.Revision()); err != nil {
			return nil, err
		}
		return []byte(`"mine"`), nil
	})
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("error %v, want ErrLeaseLost", err)
	}
	if rec := readRecord(t, kv, "id"); string(rec.Value) != `"theirs"` {
		t.Errorf("record %+v, want the other attempt's", rec)
	}
}

// A holder renews its claim while the effect runs: a claim with a short lease stays live as
// long as its holder works, and the record comes after the renewals.
func TestEffectsRenewal(t *testing.T) {
	fx, kv := effectsEnv(t)
	ctx := testCtx(t)
	short := Lease{Holder: "slow@a", For: 30 * time.Millisecond}
	renewed := make(chan struct{})
	v, err := fx.Once(ctx, "id", short, func(context.Context) ([]byte, error) {
		w, err := kv.Watch(ctx, wire.EffectKey("id"), jetstream.UpdatesOnly())
		if err != nil {
			return nil, err
		}
		defer func() { _ = w.Stop() }()
		for e := range w.Updates() { // two renewals seen
			if e != nil && e.Revision() > 0 {
				select {
				case <-renewed:
					return []byte(`"done"`), nil
				default:
					close(renewed)
				}
			}
		}
		return nil, errors.New("watch ended")
	})
	if err != nil || string(v) != `"done"` {
		t.Fatalf("%q, %v", v, err)
	}
}

// A record written by a worker of an earlier version (the result alone) is a result.
func TestEffectsEarlierRecord(t *testing.T) {
	fx, kv := effectsEnv(t)
	ctx := testCtx(t)
	if _, err := kv.Put(ctx, wire.EffectKey("id"), []byte(`{"tool":"refund","output":1}`)); err != nil {
		t.Fatal(err)
	}
	f := &effect{}
	if v, err := fx.Once(ctx, "id", leaseA, f.do); err != nil || string(v) != `{"tool":"refund","output":1}` || f.runs.Load() != 0 {
		t.Errorf("%q, %v, %d runs; want the earlier record", v, err, f.runs.Load())
	}
}

func putClaim(t *testing.T, kv jetstream.KeyValue, id string, rec effectRecord) {
	t.Helper()
	data, _ := json.Marshal(rec)
	if _, err := kv.Put(testCtx(t), wire.EffectKey(id), data); err != nil {
		t.Fatal(err)
	}
}

func readRecord(t *testing.T, kv jetstream.KeyValue, id string) effectRecord {
	t.Helper()
	e, err := kv.Get(testCtx(t), wire.EffectKey(id))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := decodeEffect(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TaskContext.Effect: a handler's side effect runs once for its key in an iteration, across
// attempts; fn gets an idempotency key that names the iteration, not the attempt.
func TestTaskContextEffect(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int64
	keys := make(chan string, 4)
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		out, err := tc.Effect("refund", func(_ context.Context, key string) (any, error) {
			runs.Add(1)
			keys <- key
			return map[string]string{"refund": "R-1"}, nil
		})
		if err != nil {
			return tc.FailPermanent(err)
		}
		if tc.Attempt() == 1 {
			return tc.Fail(errors.New("the model timed out after the refund"))
		}
		return tc.Complete(out)
	}})
	first := task("r", "loop", "h", 1, 1)
	e.publish(first)
	wantEvent(t, e.event(), protocol.EvFailed, first)
	retry := task("r", "loop", "h", 1, 2)
	e.publish(retry)
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, retry)
	jsonEq(t, ev.Output, `{"refund":"R-1"}`)
	if n := runs.Load(); n != 1 {
		t.Errorf("the effect ran %d times over two attempts, want once", n)
	}
	if k := <-keys; k != "r/loop/-1/1/1/refund" {
		t.Errorf("idempotency key %q, want r/loop/-1/1/1/refund", k)
	}
}

// A checkpoint write larger than a message may be is refused before it is sent, with an error
// that says retrying cannot help (ErrCheckpointTooLarge).
// A checkpoint write larger than a message is stored by reference, and the next iteration (in
// another worker: nothing cached) reads it back whole; one larger than a value may be fails.
func TestCheckpointByReference(t *testing.T) {
	e := newEnv(t)
	big := strings.Repeat("x", 2<<20)
	got := make(chan error, 2)
	r := e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		if tc.Task().Iteration == 1 {
			if err := tc.Checkpoint(big); err != nil {
				got <- err
				return tc.FailPermanent(err)
			}
			got <- nil
			return tc.Continue(1)
		}
		raw, err := tc.LoadCheckpoint()
		var s string
		if err == nil {
			err = json.Unmarshal(raw, &s)
		}
		if err == nil && s != big {
			err = fmt.Errorf("iteration 2 read back %d bytes, want %d", len(s), len(big))
		}
		if err == nil {
			err = tc.Checkpoint(strings.Repeat("y", wire.DefaultMaxValue))
			if !errors.Is(err, ErrCheckpointTooLarge) || !strings.Contains(err.Error(), "the write is 67108874 bytes") {
				err = fmt.Errorf("a write over the limit returned %v, want ErrCheckpointTooLarge naming the size", err)
			} else {
				err = nil
			}
		}
		got <- err
		return tc.Complete(1)
	}})
	tk := task("r", "loop", "h", 1, 1)
	e.publish(tk)
	wantEvent(t, e.event(), protocol.EvContinued, tk)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	r.cache.drop(ckScope{run: "r", step: "loop", item: -1, activation: 1}) // read it back, as another worker would
	tk2 := task("r", "loop", "h", 2, 1)
	e.publish(tk2)
	wantEvent(t, e.event(), protocol.EvCompleted, tk2)
	if err := <-got; err != nil {
		t.Error(err)
	}
	if n := r.reloads.load(); n != 1 {
		t.Errorf("the checkpoint was read back %d times, want 1", n)
	}
}

// lossyKV is the bucket of a cluster electing a leader: claim, when set, decides the outcome of
// the n-th write of a claim (a create, or a compare-and-set of a value that is not a result),
// and may do the real write (write) before answering as a lost answer would.
type lossyKV struct {
	jetstream.KeyValue
	n     atomic.Int64
	claim func(n int64, write func() (uint64, error)) (uint64, error)
}

func (k *lossyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return k.claim(k.n.Add(1), func() (uint64, error) { return k.KeyValue.Create(ctx, key, value, opts...) })
}

func (k *lossyKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	write := func() (uint64, error) { return k.KeyValue.Update(ctx, key, value, rev) }
	if rec, err := decodeEffect(value); err != nil || rec.Done {
		return write()
	}
	return k.claim(k.n.Add(1), write)
}

// lossyEffects is effectsEnv with the bucket's claims going through claim (lossyKV), and a
// test failed if an attempt waits for a live claim: here every claim there is is its own.
func lossyEffects(t *testing.T, claim func(n int64, write func() (uint64, error)) (uint64, error)) (*Effects, jetstream.KeyValue) {
	t.Helper()
	fx, kv := effectsEnv(t)
	fx.wrapKV = func(kv jetstream.KeyValue) jetstream.KeyValue { return &lossyKV{KeyValue: kv, claim: claim} }
	fx.waiting = func(key string) { t.Errorf("the attempt waits for the live claim on %s, its own", key) }
	return fx, kv
}

// landedAnswerLost does the write, then answers as a stream between leaders does.
func landedAnswerLost(write func() (uint64, error)) (uint64, error) {
	if _, err := write(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("kv: %w", jetstream.ErrNoStreamResponse)
}

// A claim that landed though its answer was lost (the bucket between leaders) is the
// attempt's own once asked again: the effect runs once, and its result is recorded.
func TestEffectsClaimAnswerLost(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, kv jetstream.KeyValue)
		lose  int64 // the claim write whose answer is lost
	}{
		{"create", func(*testing.T, jetstream.KeyValue) {}, 1},
		{"take over", func(t *testing.T, kv jetstream.KeyValue) { // after a create that finds it
			putClaim(t, kv, "id", effectRecord{Holder: "crashed@x", Until: time.Now().Add(-time.Second)})
		}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var lost atomic.Bool
			fx, kv := lossyEffects(t, func(n int64, write func() (uint64, error)) (uint64, error) {
				if n == c.lose {
					rev, err := landedAnswerLost(write)
					lost.Store(err != nil && !isWrongRevision(err))
					return rev, err
				}
				return write()
			})
			c.setup(t, kv)
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			fx.waiting = func(key string) {
				t.Errorf("the attempt waits for the live claim on %s, its own", key)
				cancel()
			}
			f := &effect{value: `"once"`}
			if v, err := fx.Once(ctx, "id", leaseA, f.do); err != nil || string(v) != `"once"` || f.runs.Load() != 1 {
				t.Fatalf("%q, %v, %d runs; want the effect run once", v, err, f.runs.Load())
			}
			if !lost.Load() {
				t.Fatalf("claim write %d did not land with its answer lost", c.lose)
			}
			if rec := readRecord(t, kv, "id"); !rec.Done || string(rec.Value) != `"once"` {
				t.Errorf("record %+v, want the result", rec)
			}
		})
	}
}

// A claim asked again that finds another claim there, written while its own first try got no
// answer, is not its own even when it names the same holder (a redelivery of the same
// attempt): the attempt waits for that claim's result and does not run the effect.
func TestEffectsClaimAnswerLostToAnother(t *testing.T) {
	for _, other := range []string{leaseB.Holder, leaseA.Holder} {
		t.Run(other, func(t *testing.T) {
			fx, kv := effectsEnv(t)
			ctx := testCtx(t)
			var lost atomic.Bool
			fx.wrapKV = func(b jetstream.KeyValue) jetstream.KeyValue {
				return &lossyKV{KeyValue: b, claim: func(_ int64, write func() (uint64, error)) (uint64, error) {
					if !lost.CompareAndSwap(false, true) {
						return write()
					}
					// Another attempt claims first; this try's answer is lost.
					putClaim(t, kv, "id", effectRecord{Holder: other, Until: time.Now().Add(time.Hour)})
					return 0, fmt.Errorf("kv: %w", jetstream.ErrNoStreamResponse)
				}}
			}
			fx.waiting = func(string) { // the other attempt records its result
				e, err := kv.Get(ctx, wire.EffectKey("id"))
				if err != nil {
					t.Error(err)
					return
				}
				data, _ := json.Marshal(effectRecord{Done: true, Value: json.RawMessage(`"theirs"`)})
				if _, err := kv.Update(ctx, wire.EffectKey("id"), data, e.Revision()); err != nil {
					t.Error(err)
				}
			}
			f := &effect{value: `"mine"`}
			if v, err := fx.Once(ctx, "id", leaseA, f.do); err != nil || string(v) != `"theirs"` || f.runs.Load() != 0 {
				t.Errorf("%q, %v, %d runs; want the other attempt's result, no run", v, err, f.runs.Load())
			}
		})
	}
}

// A claim that found no stream and did not land is asked again: the effect runs once.
func TestEffectsClaimNoResponders(t *testing.T) {
	var refused atomic.Bool
	fx, kv := lossyEffects(t, func(_ int64, write func() (uint64, error)) (uint64, error) {
		if refused.CompareAndSwap(false, true) {
			return 0, nats.ErrNoResponders
		}
		return write()
	})
	f := &effect{value: `"once"`}
	if v, err := fx.Once(testCtx(t), "id", leaseA, f.do); err != nil || string(v) != `"once"` || f.runs.Load() != 1 {
		t.Fatalf("%q, %v, %d runs; want the effect run once", v, err, f.runs.Load())
	}
	if rec := readRecord(t, kv, "id"); !rec.Done || string(rec.Value) != `"once"` || !refused.Load() {
		t.Errorf("record %+v (a claim refused: %v), want the result after a refused claim", rec, refused.Load())
	}
}

// A renewal that landed though its answer was lost does not lose the claim: whether the
// answer is asked again at once (no response from the stream), or the loss is found by the
// next renewal or by the record after the last one (the connection closed under it), the
// holder's result is recorded.
func TestEffectsRenewalAnswerLost(t *testing.T) {
	closed := func(write func() (uint64, error)) (uint64, error) {
		if _, err := write(); err != nil {
			return 0, err
		}
		return 0, nats.ErrConnectionClosed
	}
	for _, c := range []struct {
		name string
		// lose answers the first renewal; after answers the ones after it.
		lose, after func(write func() (uint64, error)) (uint64, error)
		// next: the effect returns after a renewal after the lost one landed.
		next bool
	}{
		{"asked again", landedAnswerLost, nil, false},
		{"next renewal", closed, nil, true},
		{"last renewal", closed, func(func() (uint64, error)) (uint64, error) { return 0, nats.ErrConnectionClosed }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			lostAnswer, renewed := make(chan struct{}), make(chan struct{})
			var once sync.Once
			fx, kv := lossyEffects(t, func(n int64, write func() (uint64, error)) (uint64, error) {
				switch {
				case n == 1: // the claim
					return write()
				case n == 2:
					defer close(lostAnswer)
					return c.lose(write)
				case c.after != nil:
					return c.after(write)
				}
				rev, err := write()
				if err == nil {
					once.Do(func() { close(renewed) })
				}
				return rev, err
			})
			ctx := testCtx(t)
			short := Lease{Holder: "slow@a", For: 30 * time.Millisecond}
			v, err := fx.Once(ctx, "id", short, func(ctx context.Context) ([]byte, error) {
				<-lostAnswer
				if c.next {
					select {
					case <-renewed:
					case <-ctx.Done():
						return nil, fmt.Errorf("no renewal landed after the lost answer: %w", ctx.Err())
					}
				}
				return []byte(`"done"`), nil
			})
			if err != nil || string(v) != `"done"` {
				t.Fatalf("%q, %v; want the result recorded", v, err)
			}
			if rec := readRecord(t, kv, "id"); !rec.Done || string(rec.Value) != `"done"` {
				t.Errorf("record %+v, want the result", rec)
			}
		})
	}
}
