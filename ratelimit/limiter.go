package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/internal/natsbox"
)

// DefaultLease is how long a slot is held without being renewed (Config.Lease).
const DefaultLease = 30 * time.Second

// writeTimeout bounds a write that must happen whatever the caller's context: freeing a slot,
// settling tokens, leaving the queue, recording a pause.
const writeTimeout = 10 * time.Second

// Config configures a Limiter.
type Config struct {
	// JS and Bucket are where the scopes' records are kept: natsbox's LimitsBucket of the
	// deployment's namespace (Box.Names().LimitsBucket()).
	JS     jetstream.JetStream
	Bucket string
	// Clock is the time of the buckets, leases and waits (nil: the real clock). The waits use
	// its After method when it has one (clock.Manual), so that a test moves them. A clock
	// without one (clock.Virtual) is slept on by a call's waits, which moves it, while the
	// renewals of leases keep the real clock's pace: a sleep on it returns at once, and they
	// would otherwise follow each other without pause, moving it as they went.
	Clock clock.Clock
	// Lease is how long a slot is held without being renewed (0: DefaultLease); it is renewed
	// every third of it while the call runs. A place in the queue lasts a third of it.
	Lease time.Duration
	// Logger receives what goes wrong in the background (a renewal that failed, a slot lost).
	Logger *slog.Logger
}

// Scope is a set of calls that share limits: a provider's (ProviderKey) or one model's
// (ModelKey), with the limits the operator gave it.
type Scope struct {
	Key    string
	Limits Limits
}

// ProviderKey is the key of provider's scope: "provider.PROVIDER".
func ProviderKey(provider string) string { return "provider." + escape(provider) }

// ModelKey is the key of the scope of model of provider: "model.PROVIDER.MODEL", each name
// escaped (a byte other than a letter, a digit, '-' and '_' written "=XX" in hexadecimal:
// "gpt-4.1" is "gpt-4=2E1"), so that any name makes one valid key.
func ModelKey(provider, model string) string {
	return "model." + escape(provider) + "." + escape(model)
}

func escape(name string) string {
	if name == "" {
		return "="
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02X", c)
	}
	return b.String()
}

// Limiter is the shell of the rules over the bucket, for every call of one process. It is safe
// for concurrent use. Create it with New and Close it when the process stops.
type Limiter struct {
	cfg   Config
	clk   clock.Clock
	lease time.Duration
	log   *slog.Logger
	id    string // names this process in slot and queue ids
	seq   atomic.Uint64

	ctx    context.Context // ends with Close: watches and renewals
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	kv     jetstream.KeyValue
	scopes map[string]*scopeState
	// held are the slots this process's calls hold, by scope key: renewed by renewals.
	held map[string]map[string]bool

	// waiting and renewed, when set (tests), are called as a call starts waiting (its timer
	// registered) and after each round of renewals.
	waiting func(key string)
	renewed func()
}

// scopeState is the last record of a scope this process saw (its own writes and its watch),
// and a channel closed when it changes.
type scopeState struct {
	load    sync.Mutex // held while the scope is first read and its watch started
	write   sync.Mutex // held by the process's writer of the scope's record
	mu      sync.Mutex
	loaded  bool
	rev     uint64
	state   State
	changed chan struct{}
}

// New returns a limiter over cfg's bucket; it renews the leases of its slots until Close.
func New(cfg Config) (*Limiter, error) {
	if cfg.JS == nil || cfg.Bucket == "" {
		return nil, errors.New("ratelimit: Config.JS and Config.Bucket are required")
	}
	if cfg.Lease < 0 {
		return nil, fmt.Errorf("ratelimit: Config.Lease is %s: want 0 (meaning %s) or more", cfg.Lease, DefaultLease)
	}
	l := &Limiter{cfg: cfg, clk: cfg.Clock, lease: cfg.Lease, log: cfg.Logger, id: newID(),
		scopes: map[string]*scopeState{}, held: map[string]map[string]bool{}, done: make(chan struct{})}
	if l.clk == nil {
		l.clk = clock.Real{}
	}
	if l.lease == 0 {
		l.lease = DefaultLease
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	// The first round's wait is registered before New returns, not when the goroutine comes
	// to run: a clock moved by a test right after would otherwise pass it unseen.
	go l.renewals(l.renewAfter(l.lease / 3))
	return l, nil
}

func newID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// Close stops the limiter's watches and renewals. The slots its calls still hold come back
// when their leases end.
func (l *Limiter) Close() {
	l.cancel()
	<-l.done
}

// Grant is capacity a call holds in one scope, until Release.
type Grant struct {
	l       *Limiter
	scope   Scope
	id      string
	charged int64
	slot    bool
	// At is when it was granted, and Waited how long the call waited for it.
	At     time.Time
	Waited time.Duration
}

// Acquire waits until the call may start in scope, charging it tokens (its estimate), and
// returns the capacity it holds. It returns ctx's error when ctx ends first (leaving the
// queue), and the bucket's error when the record cannot be read or written.
func (l *Limiter) Acquire(ctx context.Context, scope Scope, tokens int64) (*Grant, error) {
	start := l.clk.Now()
	ss, err := l.scope(ctx, scope.Key)
	if err != nil {
		return nil, err
	}
	r := Request{ID: l.id + "-" + strconv.FormatUint(l.seq.Add(1), 36), Tokens: tokens, Lease: l.lease, QueueLease: l.lease / 3}
	queued := false
	for {
		d, now, changed, err := l.decide(ctx, ss, scope, r)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			if err := l.catchUp(ctx, ss, scope.Key, changed); err != nil {
				return nil, l.abandon(scope.Key, r.ID, queued, err)
			}
			continue
		} else if err != nil {
			return nil, l.abandon(scope.Key, r.ID, queued, err)
		}
		if d.Write {
			queued = !d.Granted
		}
		if d.Granted {
			g := &Grant{l: l, scope: scope, id: r.ID, charged: d.Charged, slot: scope.Limits.MaxConcurrent > 0, At: now, Waited: now.Sub(start)}
			if g.slot {
				l.hold(scope.Key, r.ID)
			}
			return g, nil
		}
		var timer <-chan time.Time
		if !d.Wake.IsZero() {
			timer = l.after(ctx, d.Wake.Sub(now))
		}
		if waiting, _ := l.hooks(); waiting != nil {
			waiting(scope.Key)
		}
		select {
		case <-changed:
		case <-timer:
		case <-ctx.Done():
			return nil, l.abandon(scope.Key, r.ID, queued, fmt.Errorf("waiting for capacity: %w", context.Cause(ctx)))
		}
	}
}

// decide applies Acquire to the scope's last record and writes the result when it changed.
// The writes of one process to one scope take turns (ss.write): its callers would otherwise
// race each other's compare-and-set, all but one failing each round.
func (l *Limiter) decide(ctx context.Context, ss *scopeState, scope Scope, r Request) (Decision, time.Time, <-chan struct{}, error) {
	ss.write.Lock()
	defer ss.write.Unlock()
	st, rev, changed := ss.snapshot()
	now := l.clk.Now()
	d := Acquire(&st, scope.Limits, now, r)
	if d.Write {
		if err := l.write(ctx, ss, scope.Key, st, rev); err != nil {
			return d, now, changed, err
		}
	}
	return d, now, changed, nil
}

// abandon takes a caller that stops waiting out of the queue (best effort: its place would
// run out anyway), and returns err.
func (l *Limiter) abandon(key, id string, queued bool, err error) error {
	if queued {
		_ = l.update(context.Background(), key, func(s *State) bool { return Leave(s, id) })
	}
	return fmt.Errorf("ratelimit: %s: %w", key, err)
}

// Release frees the call's slot and settles its tokens: used is what it spent (0 for a call
// that failed before the provider counted any). It writes only when something changes.
func (g *Grant) Release(used int64) error {
	if g == nil {
		return nil
	}
	if g.slot {
		g.l.unhold(g.scope.Key, g.id)
	}
	if !g.slot && (g.scope.Limits.TPM <= 0 || used == g.charged) {
		return nil
	}
	return g.l.update(context.Background(), g.scope.Key, func(s *State) bool {
		return Settle(s, g.scope.Limits, g.id, g.charged, used)
	})
}

// Pause makes every worker's calls of the scope key wait until until.
func (l *Limiter) Pause(key string, until time.Time) error {
	return l.update(context.Background(), key, func(s *State) bool { return Pause(s, until) })
}

// update applies change to the record of key with compare-and-set until it lands, within
// writeTimeout of ctx's values (not its end: what it writes must be written).
func (l *Limiter) update(ctx context.Context, key string, change func(*State) bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	ss, err := l.scope(ctx, key)
	if err != nil {
		return err
	}
	for {
		ss.write.Lock()
		st, rev, changed := ss.snapshot()
		if !change(&st) {
			ss.write.Unlock()
			return nil
		}
		err := l.write(ctx, ss, key, st, rev)
		ss.write.Unlock()
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			if err != nil {
				return fmt.Errorf("ratelimit: %s: %w", key, err)
			}
			return nil
		}
		if err := l.catchUp(ctx, ss, key, changed); err != nil {
			return fmt.Errorf("ratelimit: %s: %w", key, err)
		}
	}
}

// write writes st as the record of key on revision rev, and keeps it as the scope's last.
func (l *Limiter) write(ctx context.Context, ss *scopeState, key string, st State, rev uint64) error {
	newRev, err := natsbox.UpdateKV(ctx, l.cfg.JS, l.cfg.Bucket, key, st.Encode(), rev)
	if err != nil {
		return err
	}
	ss.set(newRev, st)
	return nil
}

// scope returns what this process knows of the scope key, reading it and starting its watch
// the first time.
func (l *Limiter) scope(ctx context.Context, key string) (*scopeState, error) {
	l.mu.Lock()
	ss := l.scopes[key]
	if ss == nil {
		ss = &scopeState{changed: make(chan struct{})}
		l.scopes[key] = ss
	}
	l.mu.Unlock()
	ss.load.Lock() // one load and one watch per scope, whoever asks first
	defer ss.load.Unlock()
	ss.mu.Lock()
	loaded := ss.loaded
	ss.mu.Unlock()
	if loaded {
		return ss, nil
	}
	kv, err := l.bucket(ctx)
	if err != nil {
		return nil, err
	}
	if err := l.reload(ctx, ss, key); err != nil {
		return nil, err
	}
	w, err := kv.Watch(l.ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("ratelimit: watch %s: %w", key, err)
	}
	go follow(w, ss)
	return ss, nil
}

// follow keeps ss up to date with the watch's updates until it stops.
func follow(w jetstream.KeyWatcher, ss *scopeState) {
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		st := State{}
		if e.Operation() == jetstream.KeyValuePut {
			var err error
			if st, err = DecodeState(e.Value()); err != nil {
				continue // a record nobody can read is replaced by the next write's reload
			}
		}
		ss.set(e.Revision(), st)
	}
}

// catchUpWait is how long a writer whose compare-and-set found a newer record waits for the
// watch to bring it before it reads it itself.
const catchUpWait = 100 * time.Millisecond

// catchUp waits until ss holds a record newer than the one a write was refused on (changed
// is closed when one arrives): the watch brings it to every waiter of the process at once,
// where a read of each would ask the server as many times. It reads the record itself when
// the watch is late.
func (l *Limiter) catchUp(ctx context.Context, ss *scopeState, key string, changed <-chan struct{}) error {
	t := time.NewTimer(catchUpWait)
	defer t.Stop()
	select {
	case <-changed:
		return nil
	case <-t.C:
		return l.reload(ctx, ss, key)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reload reads the record of key from the bucket into ss.
func (l *Limiter) reload(ctx context.Context, ss *scopeState, key string) error {
	kv, err := l.bucket(ctx)
	if err != nil {
		return err
	}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		ss.reset(0, State{})
		return nil
	case err != nil:
		return fmt.Errorf("read %s: %w", key, err)
	}
	st, err := DecodeState(e.Value())
	if err != nil {
		st = State{} // unreadable: the next write replaces it
	}
	ss.reset(e.Revision(), st)
	return nil
}

func (l *Limiter) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kv != nil {
		return l.kv, nil
	}
	kv, err := l.cfg.JS.KeyValue(ctx, l.cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", l.cfg.Bucket, err)
	}
	l.kv = kv
	return kv, nil
}

// snapshot returns a copy of the scope's last record, its revision, and a channel closed when
// a newer one arrives.
func (ss *scopeState) snapshot() (State, uint64, <-chan struct{}) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.state.Clone(), ss.rev, ss.changed
}

// set keeps st as the scope's record at rev unless a newer one is kept already.
func (ss *scopeState) set(rev uint64, st State) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.loaded && rev <= ss.rev {
		return
	}
	ss.keep(rev, st)
}

// reset keeps st at rev whatever was kept (what the bucket answered last).
func (ss *scopeState) reset(rev uint64, st State) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.keep(rev, st)
}

func (ss *scopeState) keep(rev uint64, st State) {
	ss.loaded, ss.rev, ss.state = true, rev, st
	close(ss.changed)
	ss.changed = make(chan struct{})
}

func (l *Limiter) hooks() (waiting func(string), renewed func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting, l.renewed
}

func (l *Limiter) hold(key, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[key] == nil {
		l.held[key] = map[string]bool{}
	}
	l.held[key][id] = true
}

func (l *Limiter) unhold(key, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held[key], id)
	if len(l.held[key]) == 0 {
		delete(l.held, key)
	}
}

// renewals renews the leases of the slots held every third of a lease, until Close; timer is
// the first round's wait.
func (l *Limiter) renewals(timer <-chan time.Time) {
	defer close(l.done)
	for {
		select {
		case <-timer:
		case <-l.ctx.Done():
			return
		}
		timer = l.renewAfter(l.lease / 3) // the next round's, counted from this one's time
		l.mu.Lock()
		held := map[string][]string{}
		for key, ids := range l.held {
			held[key] = slices.Sorted(maps.Keys(ids))
		}
		l.mu.Unlock()
		for key, ids := range held {
			var lost []string
			err := l.update(l.ctx, key, func(s *State) bool {
				var changed bool
				lost, changed = Renew(s, ids, l.clk.Now().Add(l.lease))
				return changed
			})
			switch {
			case err != nil && l.ctx.Err() == nil:
				l.log.Warn("ratelimit: the leases of running calls could not be renewed", "scope", key, "err", err)
			case len(lost) > 0:
				// Paused longer than a lease: another call took the slot. The call runs on,
				// one more than the limit until it ends.
				l.log.Warn("ratelimit: running calls lost their slots (their leases ran out)", "scope", key, "calls", len(lost))
			}
		}
		if _, renewed := l.hooks(); renewed != nil {
			renewed()
		}
	}
}

// renewAfter returns a channel that receives once the renewals' wait d passed: on the
// limiter's clock when it has an After method (clock.Manual), else on the real clock (see
// Config.Clock).
func (l *Limiter) renewAfter(d time.Duration) <-chan time.Time {
	if c, ok := l.clk.(afterClock); ok {
		return c.After(d)
	}
	return time.After(d)
}

// afterClock is a clock whose waits a test moves (clock.Manual).
type afterClock interface {
	After(time.Duration) <-chan time.Time
}

// after returns a channel that receives once d passed on the limiter's clock: a clock with an
// After method (clock.Manual) waits on it; the real clock on a timer; another clock (Virtual)
// sleeps, which moves it.
func (l *Limiter) after(ctx context.Context, d time.Duration) <-chan time.Time {
	switch c := l.clk.(type) {
	case afterClock:
		return c.After(d)
	case clock.Real:
		return time.After(d)
	}
	ch := make(chan time.Time, 1)
	if l.clk.Sleep(ctx, d) == nil {
		ch <- l.clk.Now()
	}
	return ch
}
