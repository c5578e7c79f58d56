package worker

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// errRunEnded is the cause of the cancellation of a handler's context when its run ends.
var errRunEnded = fmt.Errorf("the run ended: %w", context.Canceled)

const (
	// flushTimeout bounds the wait for the server to confirm the cancel subscription.
	flushTimeout = 10 * time.Second
)

// runTable knows the runs that ended (the last max ids announced, with when the announcement
// came) and the tasks running, so that the end of a run cancels its tasks and those of its
// sub-runs. Only tasks published before the announcement count as the ended run's: an
// announcement that was not true (a stray message, a run id used again after a prune) cannot
// make the worker drop the tasks the engine sends after it.
type runTable struct {
	mu    sync.Mutex
	ended *ring[time.Time] // run id → when its end was announced
	// running holds the tasks whose handlers run, by message id: admit refuses a second
	// delivery of a task while the first runs, so an id has one task at most, and admit finds
	// it without going through every running task.
	running map[string]*taskContext
}

func newRunTable(max int) *runTable {
	return &runTable{ended: newRing[time.Time](max), running: map[string]*taskContext{}}
}

// admit registers tc as running unless its run (or a parent run) has ended (ended), or a
// handler of the same task (a delivery before this one) still runs in this worker (dup).
func (r *runTable) admit(tc *taskContext) (ended, dup bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hasEnded(tc.task.RunID, tc.published) {
		return true, false
	}
	if _, ok := r.running[tc.task.MsgID]; ok {
		return false, true
	}
	r.running[tc.task.MsgID] = tc
	return false, false
}

// remove forgets tc, when it is the task running under its id (a delivery refused as dup
// never was).
func (r *runTable) remove(tc *taskContext) {
	r.mu.Lock()
	if r.running[tc.task.MsgID] == tc {
		delete(r.running, tc.task.MsgID)
	}
	r.mu.Unlock()
}

// runningTasks appends to dst the tasks whose handlers run.
func (r *runTable) runningTasks(dst []*taskContext) []*taskContext {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tc := range r.running {
		if tc.running.Load() {
			dst = append(dst, tc)
		}
	}
	return dst
}

// interruptAll settles, without waiting for their handlers, the tasks whose contexts the
// worker's stop ended ([taskContext.interrupt]).
func (r *runTable) interruptAll() {
	r.mu.Lock()
	all := make([]*taskContext, 0, len(r.running))
	for _, tc := range r.running {
		all = append(all, tc)
	}
	r.mu.Unlock()
	for _, tc := range all {
		tc.interrupt()
	}
}

// isEnded reports whether run, or a run whose sub-run it is, ended after a task of it was
// published (at published).
func (r *runTable) isEnded(run string, published time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hasEnded(run, published)
}

// hasEnded reports whether run, or a run whose sub-run it is (ids are parent/step/activation),
// was announced ended after published. r.mu is held.
func (r *runTable) hasEnded(run string, published time.Time) bool {
	for {
		if at, ok := r.ended.get(run); ok && !at.Before(published) {
			return true
		}
		i := strings.LastIndexByte(run, '/')
		if i < 0 {
			return false
		}
		run = run[:i]
	}
}

// end records that run ended and cancels the tasks of it and of its sub-runs.
func (r *runTable) end(run string) int {
	r.mu.Lock()
	r.remember(run)
	var cancel []*taskContext
	for _, tc := range r.running {
		if id := tc.task.RunID; id == run || strings.HasPrefix(id, run+"/") {
			cancel = append(cancel, tc)
		}
	}
	r.mu.Unlock()
	for _, tc := range cancel {
		tc.cancel(errRunEnded)
	}
	return len(cancel)
}

// remember records that run was announced ended now, forgetting the oldest id beyond the
// bound. r.mu is held.
func (r *runTable) remember(run string) { r.ended.put(run, time.Now()) }

// listenCancels subscribes to the ends of runs; the returned function unsubscribes.
func (w *Worker) listenCancels(ctx context.Context) (func(), error) {
	nc := w.box.Conn()
	prefix := w.names.CancelSubjectPrefix()
	sub, err := nc.Subscribe(w.names.CancelSubjects(), func(m *nats.Msg) {
		run := strings.TrimPrefix(m.Subject, prefix)
		n, calls := w.runs.end(run), w.effects.endRun(run)
		if n > 0 || calls > 0 {
			w.log.Info("worker: run ended; its running tasks and side effects are cancelled", "run_id", run, "tasks", n, "side_effects", calls)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("worker: subscribe to %s: %w", w.names.CancelSubjects(), err)
	}
	fctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil { // the server has the subscription before Ready
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("worker: subscribe to %s: %w", w.names.CancelSubjects(), err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// counter is an atomic counter.
type counter struct{ n atomic.Int64 }

func (c *counter) add()        { c.n.Add(1) }
func (c *counter) load() int64 { return c.n.Load() }

// ring is a map that keeps its last max keys: putting one more forgets the oldest. It is not
// safe for concurrent use.
//
// Its index holds each key's 64-bit hash, not the key: a put evicts the oldest entry by its
// stored hash, without reading the old key's bytes, which are seldom in the processor's cache
// on the path of every answer (answeredSet). A get compares the key itself, so two keys of one
// hash never read as each other: the later one takes the hash's place and the earlier one reads
// as forgotten, as if the ring had already let it go.
type ring[V any] struct {
	index   map[uint64]int32 // a key's hash → its place in entries
	entries []ringEntry[V]   // oldest at next once full
	next    int
	max     int
	mask    uint64 // of the hash: all ones but in tests, which make keys share hashes
}

type ringEntry[V any] struct {
	key  string
	hash uint64
	v    V
}

// ringSeed seeds every ring's hash: only this process reads it.
var ringSeed = maphash.MakeSeed()

func newRing[V any](max int) *ring[V] {
	return &ring[V]{index: make(map[uint64]int32), max: max, mask: ^uint64(0)} // entries grow as keys come
}

func (r *ring[V]) hash(key string) uint64 { return maphash.String(ringSeed, key) & r.mask }

// get returns key's value, and whether the ring holds key.
func (r *ring[V]) get(key string) (V, bool) {
	if i, ok := r.index[r.hash(key)]; ok && r.entries[i].key == key {
		return r.entries[i].v, true
	}
	var zero V
	return zero, false
}

// put sets key to v; a key already there keeps its place.
func (r *ring[V]) put(key string, v V) {
	h := r.hash(key)
	if i, ok := r.index[h]; ok && r.entries[i].key == key {
		r.entries[i].v = v
		return
	}
	e := ringEntry[V]{key: key, hash: h, v: v}
	if len(r.entries) < r.max {
		r.index[h] = int32(len(r.entries))
		r.entries = append(r.entries, e)
		return
	}
	if old := r.entries[r.next].hash; r.index[old] == int32(r.next) { // unless a later key of that hash took its place
		delete(r.index, old)
	}
	r.entries[r.next] = e
	r.index[h] = int32(r.next)
	r.next = (r.next + 1) % len(r.entries)
}

// answeredSet remembers the last max tasks (by message id) this worker answered, so that a
// redelivery of one (its acknowledgement was lost: a connection cut, a pause past AckWait) is
// acknowledged without running again. Running it again would discard, before rewriting them,
// the checkpoint writes the next iteration, dispatched on the answer, may be reading.
type answeredSet struct {
	mu  sync.Mutex
	ids *ring[struct{}]
}

func newAnsweredSet(max int) *answeredSet { return &answeredSet{ids: newRing[struct{}](max)} }

func (a *answeredSet) add(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids.put(id, struct{}{})
}

func (a *answeredSet) has(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.ids.get(id)
	return ok
}
