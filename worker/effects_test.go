package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// effectsEnv returns a worker's record of side effects on a fresh server, and its bucket.
func effectsEnv(t *testing.T) (*Effects, jetstream.KeyValue) {
	t.Helper()
	e := newEnv(t)
	w, err := New(Config{Box: e.box})
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
	e.start(Config{}, map[string]Handler{"h": func(tc TaskContext) error {
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
	r := e.start(Config{}, map[string]Handler{"h": func(tc TaskContext) error {
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
	r.cache.drop(wire.CheckpointScope("r", "loop", -1, 1)) // read it back, as another worker would
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
