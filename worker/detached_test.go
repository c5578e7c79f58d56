package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// honest is a side effect that stops when its context ends (an MCP server cancels its
// handler on notifications/cancelled): it happens only once released, and tells why it
// stopped otherwise.
type honest struct {
	started, release chan struct{}
	stopped          chan error // the cause of its context's end, when it ends first
	runs             chan struct{}
}

func newHonest() *honest {
	return &honest{started: make(chan struct{}, 4), release: make(chan struct{}), stopped: make(chan error, 4), runs: make(chan struct{}, 4)}
}

func (h *honest) do(ctx context.Context) ([]byte, error) {
	h.started <- struct{}{}
	select {
	case <-h.release:
		h.runs <- struct{}{}
		return []byte(`"done"`), nil
	case <-ctx.Done():
		h.stopped <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}
}

// The attempt's context ends (its timeout, the worker stopping) while a side effect's call
// is in flight: Once returns at once, and the call, which would stop if its context ended,
// runs on under a context of its own; its result is recorded, and the next attempt (another
// holder) waits for it instead of calling again. One call, one effect.
func TestEffectsCallOutlivesAttempt(t *testing.T) {
	for _, cause := range []error{errTimedOut, errStopped} {
		t.Run(cause.Error(), func(t *testing.T) {
			fx, kv := effectsEnv(t)
			ctx := testCtx(t)
			h := newHonest()
			actx, end := context.WithCancelCause(ctx)
			first := make(chan error, 1)
			go func() {
				_, err := fx.Once(actx, "id", leaseA, h.do)
				first <- err
			}()
			<-h.started
			end(cause)
			if err := <-first; !errors.Is(err, cause) {
				t.Fatalf("the ended attempt returned %v; want its cause %v", err, cause)
			}
			waiting := make(chan struct{})
			fx.waiting = func(string) { close(waiting) }
			second := make(chan string, 1)
			go func() {
				v, err := fx.Once(ctx, "id", leaseB, h.do)
				if err != nil {
					t.Error(err)
				}
				second <- string(v)
			}()
			select {
			case <-waiting:
			case err := <-h.stopped:
				t.Fatalf("the call's context ended with the attempt's (%v): the call was abandoned", err)
			case <-h.started:
				t.Fatal("the next attempt called again while the first call runs")
			}
			close(h.release)
			if v := <-second; v != `"done"` {
				t.Errorf("the next attempt got %s, want the first call's result", v)
			}
			if n := len(h.runs); n != 1 {
				t.Errorf("the effect happened %d times, want once", n)
			}
			entry, err := kv.Get(ctx, wire.EffectKey("id"))
			if err != nil {
				t.Fatal(err)
			}
			if rec, _ := decodeEffect(entry.Value()); !rec.Done || string(rec.Value) != `"done"` {
				t.Errorf("record %s, want the call's result", entry.Value())
			}
			waitNoCalls(t, fx)
		})
	}
}

// The end of the run cancels the call, whether it comes while the attempt waits for it or after
// the attempt ended: nothing is recorded, and the claim is released.
func TestEffectsRunEndCancelsCall(t *testing.T) {
	for _, name := range []string{"during the attempt", "after the attempt"} {
		t.Run(name, func(t *testing.T) {
			fx, kv := effectsEnv(t)
			ctx := testCtx(t)
			h := newHonest()
			actx, end := context.WithCancelCause(ctx)
			lease := leaseA
			lease.Run = "r-1"
			first := make(chan error, 1)
			go func() {
				_, err := fx.Once(actx, "id", lease, h.do)
				first <- err
			}()
			<-h.started
			if name == "during the attempt" {
				end(errRunEnded)
			} else {
				end(errTimedOut)
				<-first
				first <- nil
				if n := fx.endRun("r-2"); n != 0 {
					t.Errorf("the end of another run cancelled %d calls", n)
				}
				if n := fx.endRun("r-1"); n != 1 {
					t.Errorf("the end of the run cancelled %d calls, want 1", n)
				}
			}
			<-first
			if err := <-h.stopped; !errors.Is(err, errRunEnded) {
				t.Errorf("the call's context ended with %v, want the run's end", err)
			}
			waitNoCalls(t, fx)
			if _, err := kv.Get(ctx, wire.EffectKey("id")); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Errorf("the key is still there (%v): a cancelled call releases its claim", err)
			}
		})
	}
}

// A call runs at most its Lease.Timeout, however long its attempt lasts.
func TestEffectsCallTimeout(t *testing.T) {
	fx, _ := effectsEnv(t)
	ctx := testCtx(t)
	h := newHonest()
	lease := leaseA
	lease.Timeout = 50 * time.Millisecond
	if _, err := fx.Once(ctx, "id", lease, h.do); !errors.Is(err, errEffectTimeout) {
		t.Errorf("Once returned %v, want the call's timeout", err)
	}
	if l := fx.LeaseFor(&protocol.Task{MsgID: "m", RunID: "r"}); l.Timeout != DefaultEffectTimeout {
		t.Errorf("LeaseFor gives a timeout of %s, want the default %s", l.Timeout, DefaultEffectTimeout)
	}
}

// A worker that stops while a side effect's call is in flight waits for it and records its
// result before Run returns; then it starts no call.
func TestWorkerStopWaitsForEffects(t *testing.T) {
	e := newEnv(t)
	h := newHonest()
	r := e.startWith(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		_, err := tc.Effect("refund", func(ctx context.Context, _ string) (any, error) {
			v, err := h.do(ctx)
			return string(v), err
		})
		return err
	}}, nil)
	draining := make(chan struct{})
	r.effects.draining = func() { close(draining) }
	e.publish(task("r", "loop", "h", 1, 1))
	<-h.started
	stopped := make(chan struct{})
	go func() {
		r.stop()
		close(stopped)
	}()
	select {
	case <-draining:
	case err := <-h.stopped:
		t.Fatalf("the worker stopping ended the call's context (%v)", err)
	}
	select {
	case <-stopped:
		t.Fatal("Run returned while a side effect's call was in flight")
	default:
	}
	close(h.release)
	<-stopped
	kv, err := e.js.KeyValue(testCtx(t), e.box.Names().EffectsBucket())
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(testCtx(t), wire.EffectKey("r/loop/-1/1/1/refund"))
	if err != nil {
		t.Fatalf("no record after the worker stopped: %v", err)
	}
	if rec, _ := decodeEffect(entry.Value()); !rec.Done {
		t.Errorf("record %s, want the call's result", entry.Value())
	}
	if _, err := r.effects.Once(testCtx(t), "other", leaseA, h.do); err == nil {
		t.Error("a stopped worker started a call")
	}
}

// waitNoCalls waits until fx forgets its calls (each is forgotten once recorded or failed).
func waitNoCalls(t *testing.T, fx *Effects) {
	t.Helper()
	fx.mu.Lock()
	calls := make([]*call, 0, len(fx.calls))
	for c := range fx.calls {
		calls = append(calls, c)
	}
	fx.mu.Unlock()
	for _, c := range calls {
		<-c.done
	}
}
