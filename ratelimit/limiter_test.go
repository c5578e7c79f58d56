package ratelimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/openai"
	"github.com/reins-run/reins/ratelimit"
)

// shared is an embedded NATS server with the reins layout, a manual clock, and limiters each on
// a connection of its own, as the workers of several processes would be.
type shared struct {
	env *runtest.Env
	clk *clock.Manual
}

func newShared(t *testing.T) *shared {
	t.Helper()
	env := runtest.New(t)
	if err := natsbox.EnsureLayout(env.Ctx, env.Box.JetStream(), env.Box.Layout()); err != nil {
		t.Fatal(err)
	}
	return &shared{env: env, clk: clock.NewManual(t0)}
}

// limiter is one worker's limiter; waits reports each wait it starts, by scope key (buffered:
// a test that does not read them does not block the limiter).
type limiter struct {
	*ratelimit.Limiter
	box     *natsbox.Box
	waits   chan string
	renewed chan struct{}
}

func (s *shared) limiter(t *testing.T, name string) *limiter {
	t.Helper()
	box, err := s.env.Box.Connect(s.env.Ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratelimit.New(ratelimit.Config{JS: box.JetStream(), Bucket: box.Names().LimitsBucket(), Clock: s.clk})
	if err != nil {
		t.Fatal(err)
	}
	lim := &limiter{Limiter: l, box: box, waits: make(chan string, 1024), renewed: make(chan struct{}, 1024)}
	l.SetHooks(func(key string) {
		select {
		case lim.waits <- key:
		default: // a test that does not read them
		}
	}, func() {
		select {
		case lim.renewed <- struct{}{}:
		default:
		}
	})
	t.Cleanup(func() { l.Close(); _ = box.Close() })
	return lim
}

// limiterOn is a limiter on the test's own connection with a clock of its own, closed when
// the test ends.
func (s *shared) limiterOn(t *testing.T, clk clock.Clock) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{JS: s.env.Box.JetStream(), Bucket: s.env.Box.Names().LimitsBucket(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// crash cuts the limiter off as a process that died would be: its connection closed, nothing
// released, its renewals stopped.
func (l *limiter) crash() {
	_ = l.box.Close()
	l.Close()
}

// state reads a scope's record as the bucket holds it.
func (s *shared) state(t *testing.T, key string) ratelimit.State {
	t.Helper()
	kv, err := s.env.Box.JetStream().KeyValue(s.env.Ctx, s.env.Box.Names().LimitsBucket())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(s.env.Ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ratelimit.DecodeState(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSharedConcurrencyNeverExceeded: callers of two limiters sharing max_concurrent = 2 never
// run more than two calls at once, and every call runs.
func TestSharedConcurrencyNeverExceeded(t *testing.T) {
	s := newShared(t)
	a, b := s.limiter(t, "worker-a"), s.limiter(t, "worker-b")
	scope := ratelimit.Scope{Key: ratelimit.ModelKey("openai", "gpt-4.1-mini"), Limits: ratelimit.Limits{MaxConcurrent: 2}}
	var running, most, calls atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		l := []*limiter{a, b}[i%2]
		wg.Go(func() {
			for range 15 {
				g, err := l.Acquire(s.env.Ctx, scope, 10)
				if err != nil {
					t.Error(err)
					return
				}
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				calls.Add(1)
				running.Add(-1)
				if err := g.Release(10); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if most.Load() > 2 || most.Load() < 1 || calls.Load() != 120 {
		t.Errorf("%d calls, at most %d at once: want 120, at most 2", calls.Load(), most.Load())
	}
	if st := s.state(t, scope.Key); len(st.Slots) != 0 || len(st.Queue) != 0 {
		t.Errorf("after every call: slots %+v, queue %+v", st.Slots, st.Queue)
	}
}

// TestSharedRPMNeverExceeded: callers of two limiters sharing rpm = 5, with time running as
// fast as their waits allow, start no more requests over any span than the bucket allows.
func TestSharedRPMNeverExceeded(t *testing.T) {
	s := newShared(t)
	a, b := s.limiter(t, "worker-a"), s.limiter(t, "worker-b")
	scope := ratelimit.Scope{Key: ratelimit.ProviderKey("local"), Limits: ratelimit.Limits{RPM: 5}}
	var mu sync.Mutex
	var starts []time.Time
	var wg sync.WaitGroup
	for i := range 6 {
		l := []*limiter{a, b}[i%2]
		wg.Go(func() {
			for range 4 {
				g, err := l.Acquire(s.env.Ctx, scope, 1)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				starts = append(starts, g.At)
				mu.Unlock()
				_ = g.Release(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	runTime(t, s, done)
	if len(starts) != 24 {
		t.Fatalf("%d requests started, want 24", len(starts))
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := range starts {
		for j := i; j < len(starts); j++ {
			if n, allowed := float64(j-i+1), 5*(1+starts[j].Sub(starts[i]).Minutes()); n > allowed+1e-9 {
				t.Fatalf("%v requests started within %v (allowed %.2f): %v", n, starts[j].Sub(starts[i]), allowed, starts)
			}
		}
	}
	// 24 requests at 5 a minute, the first 5 at once: the last starts 3m48s in, not before.
	if last := starts[23].Sub(t0); last < 228*time.Second {
		t.Errorf("the 24th request started %v in", last)
	}
}

// runTime advances the manual clock to its next wait, as fast as the waits come, until done.
func runTime(t *testing.T, s *shared, done <-chan struct{}) {
	t.Helper()
	for {
		select {
		case <-done:
			return
		case <-s.env.Ctx.Done():
			t.Fatal("the callers did not finish")
		default:
		}
		if next, ok := s.clk.Next(); ok {
			s.clk.Advance(next.Sub(s.clk.Now()))
		}
		runtime.Gosched()
	}
}

// TestFirstComeFirstServed: callers that queue behind a held slot, in two processes, start in
// the order they came.
func TestFirstComeFirstServed(t *testing.T) {
	s := newShared(t)
	a, b := s.limiter(t, "worker-a"), s.limiter(t, "worker-b")
	scope := ratelimit.Scope{Key: ratelimit.ModelKey("openai", "o3"), Limits: ratelimit.Limits{MaxConcurrent: 1}}
	holder, err := a.Acquire(s.env.Ctx, scope, 1)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		l := []*limiter{a, b}[i%2]
		wg.Go(func() {
			g, err := l.Acquire(s.env.Ctx, scope, 1)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			_ = g.Release(1)
		})
		for len(s.state(t, scope.Key).Queue) < i+1 { // caller i is queued before the next one comes
			<-l.waits
		}
	}
	if err := holder.Release(1); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for i := range order {
		if i != want {
			t.Fatalf("caller %d started where caller %d was due", i, want)
		}
		want++
	}
}

// TestCrashedHolderSlotComesBack: a worker that dies holding the only slot stops renewing it;
// another worker's call waits until the lease ends, not before, and then starts.
func TestCrashedHolderSlotComesBack(t *testing.T) {
	s := newShared(t)
	a, b := s.limiter(t, "worker-a"), s.limiter(t, "worker-b")
	scope := ratelimit.Scope{Key: ratelimit.ModelKey("anthropic", "claude-sonnet-4"), Limits: ratelimit.Limits{MaxConcurrent: 1}}
	if _, err := a.Acquire(s.env.Ctx, scope, 1); err != nil {
		t.Fatal(err)
	}
	a.crash()
	granted := make(chan *ratelimit.Grant, 1)
	go func() {
		g, err := b.Acquire(s.env.Ctx, scope, 1)
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	leaseEnd := t0.Add(ratelimit.DefaultLease)
	var g *ratelimit.Grant
	done := make(chan struct{})
	go func() { g = <-granted; close(done) }()
	runTime(t, s, done)
	if g == nil {
		t.Fatal("the waiting call failed")
	}
	if g.At.Before(leaseEnd) {
		t.Fatalf("the call started at %v, before the crashed holder's lease ended (%v)", g.At.Sub(t0), ratelimit.DefaultLease)
	}
	if st := s.state(t, scope.Key); len(st.Slots) != 1 {
		t.Errorf("slots: %+v, want the new call's alone", st.Slots)
	}
}

// TestLiveHolderKeepsItsSlot: a running call's lease is renewed every third of it, so that a
// caller of another worker waits through several leases, and starts once the call ends.
func TestLiveHolderKeepsItsSlot(t *testing.T) {
	s := newShared(t)
	a, b := s.limiter(t, "worker-a"), s.limiter(t, "worker-b")
	scope := ratelimit.Scope{Key: ratelimit.ModelKey("anthropic", "claude-opus-4"), Limits: ratelimit.Limits{MaxConcurrent: 1}}
	holder, err := a.Acquire(s.env.Ctx, scope, 1)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan *ratelimit.Grant, 1)
	go func() {
		g, err := b.Acquire(s.env.Ctx, scope, 1)
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	<-b.waits
	for range 9 { // three leases
		s.clk.Advance(ratelimit.DefaultLease / 3)
		<-a.renewed
		select {
		case <-granted:
			t.Fatalf("the call started at %v while the holder ran", s.clk.Now().Sub(t0))
		default:
		}
	}
	if st := s.state(t, scope.Key); len(st.Slots) != 1 || st.Slots[0].Until != s.clk.Now().Add(ratelimit.DefaultLease).UnixNano() {
		t.Errorf("slots after 3 leases: %+v", st.Slots)
	}
	if err := holder.Release(1); err != nil {
		t.Fatal(err)
	}
	if g := <-granted; g == nil {
		t.Fatal("the waiting call failed")
	}
}

// TestRenewalsWaitFromNew: the first round of renewals waits from New on, registered before
// New returns, so that a clock moved at once is not missed: when the renewals' goroutine
// registered it as it came to run, a test that moved the clock first waited for a renewal
// that never came (TestLiveHolderKeepsItsSlot hung so in a loaded run of every test).
func TestRenewalsWaitFromNew(t *testing.T) {
	s := newShared(t)
	clk := clock.NewManual(t0)
	s.limiterOn(t, clk)
	if next, ok := clk.Next(); !ok || !next.Equal(t0.Add(ratelimit.DefaultLease/3)) {
		t.Fatalf("after New, the clock's next wait is %v (%v), want the renewals' at %v", next, ok, t0.Add(ratelimit.DefaultLease/3))
	}
}

// TestRenewalsOnAVirtualClock: a clock that can only be slept on (clock.Virtual) returns from
// a sleep at once; the renewals keep the real clock's pace on it rather than follow each
// other without pause, moving it on as they went. A call granted at once leaves it where it
// was.
func TestRenewalsOnAVirtualClock(t *testing.T) {
	s := newShared(t)
	clk := clock.NewVirtual(t0)
	l := s.limiterOn(t, clk)
	scope := ratelimit.Scope{Key: ratelimit.ModelKey("local", "m"), Limits: ratelimit.Limits{MaxConcurrent: 1}}
	g, err := l.Acquire(s.env.Ctx, scope, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Release(1); err != nil {
		t.Fatal(err)
	}
	if now := clk.Now(); !now.Equal(t0) {
		t.Fatalf("the virtual clock moved %v with nothing waiting", now.Sub(t0))
	}
}

// TestRetryAfterPausesEveryWorker: a 429 with Retry-After from a server speaking the OpenAI
// protocol, answered to one worker's call, makes another worker's call of the same model wait
// until then before it reaches the server; a call of another model does not wait.
func TestRetryAfterPausesEveryWorker(t *testing.T) {
	s := newShared(t)
	a, b := s.limiter(t, "worker-a"), s.limiter(t, "worker-b")
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if requests.Add(1) == 1 {
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	defer srv.Close()
	open := func(l *limiter, name string) model.Model {
		m, err := openai.New(provider.Config{Model: name, BaseURL: srv.URL + "/v1", APIKey: "sk-test"})
		if err != nil {
			t.Fatal(err)
		}
		return l.Wrap(m, nil, ratelimit.Scope{Key: ratelimit.ModelKey("local", name)})
	}
	req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
	_, err := open(a, "small").Generate(s.env.Ctx, req)
	if me := (*model.Error)(nil); !errors.As(err, &me) || me.Status != http.StatusTooManyRequests || me.RetryAfter != 20*time.Second {
		t.Fatalf("the first call: %v, want the 429 with its Retry-After", err)
	}
	// Another model of the provider is not paused.
	if _, err := open(b, "large").Generate(s.env.Ctx, req); err != nil {
		t.Fatalf("a call of another model: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := open(b, "small").Generate(s.env.Ctx, req)
		done <- err
	}()
	if key := <-b.waits; key != ratelimit.ModelKey("local", "small") {
		t.Fatalf("waited on %s", key)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("the server saw %d requests while the model was paused, want 2", n)
	}
	s.clk.Advance(19 * time.Second)
	if next, ok := s.clk.Next(); !ok || !next.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("after 19s the next wait ends at %v, want the pause's end at 20s", next.Sub(t0))
	}
	select {
	case err := <-done:
		t.Fatalf("the call returned %v during the pause", err)
	default:
	}
	s.clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("the call after the pause: %v", err)
	}
	if n := requests.Load(); n != 3 {
		t.Errorf("the server saw %d requests, want 3", n)
	}
}

// TestWaitEndsWithContext: a call waiting for capacity returns when its context ends, and
// leaves the queue, so that the callers behind it are not held up.
func TestWaitEndsWithContext(t *testing.T) {
	s := newShared(t)
	a := s.limiter(t, "worker-a")
	scope := ratelimit.Scope{Key: ratelimit.ModelKey("openai", "gpt-5"), Limits: ratelimit.Limits{MaxConcurrent: 1}}
	if _, err := a.Acquire(s.env.Ctx, scope, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(s.env.Ctx)
	done := make(chan error, 1)
	go func() {
		_, err := a.Acquire(ctx, scope, 1)
		done <- err
	}()
	<-a.waits
	cancel()
	if err := <-done; err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire after its context ended: %v", err)
	}
	if st := s.state(t, scope.Key); len(st.Queue) != 0 {
		t.Errorf("the queue still holds %+v", st.Queue)
	}
}
