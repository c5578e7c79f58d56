package runner

import (
	"context"
	"testing"
	"time"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
)

// env is an embedded NATS server with a client (runtest.Env) and an engine.
type env struct {
	*runtest.Env
	eng  *Engine
	stop func()
}

// newEnv opens an embedded server in a temporary directory and starts an engine on it.
func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvAt(t, t.TempDir())
}

// newEnvWith is newEnv whose engine prepare sees before it runs.
func newEnvWith(t testing.TB, prepare func(*Engine)) *env {
	t.Helper()
	v := &env{Env: runtest.NewWithin(t, t.TempDir(), 60*time.Second)}
	v.eng, v.stop = v.startEngine(prepare)
	return v
}

// partitioned keeps an engine alone on the partitions' own consumers (solo.go), for the tests
// of what engines that share the partitions do with them.
func partitioned(e *Engine) { e.partitioned = true }

// newEnvAt is newEnv on the data directory dir.
func newEnvAt(t testing.TB, dir string) *env {
	t.Helper()
	return newEnvWithin(t, dir, 60*time.Second)
}

// newEnvWithin is newEnvAt whose context, the bound of every wait of the test, ends after
// bound: a hang fails the test then.
func newEnvWithin(t testing.TB, dir string, bound time.Duration) *env {
	t.Helper()
	v := &env{Env: runtest.NewWithin(t, dir, bound)}
	v.eng, v.stop = v.startEngine(nil)
	return v
}

// startEngine starts another engine on the box (prepare, if set, sees it before it runs) and
// returns it with the function that stops it (also called at cleanup).
func (v *env) startEngine(prepare func(*Engine)) (*Engine, func()) {
	v.T.Helper()
	eng, err := New(Config{Conn: (*conn.Conn)(v.Box), AckWait: runtest.AckWait, Logger: runtest.Logger(v.T)})
	if err != nil {
		v.T.Fatal(err)
	}
	if prepare != nil {
		prepare(eng)
	}
	return eng, v.Go(eng.Run, eng.Ready())
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
	return [...]string{"ack", "hold", "retry", "drop", "later", "refuse", "await"}[o]
}
