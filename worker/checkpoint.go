package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
)

// checkpoints is the checkpoint of one task: its scope, and once resolved, the folded value as
// of the earlier iterations and this attempt's writes.
type checkpoints struct {
	tc    *taskContext
	scope ckScope
	iter  int
	// resume is the task's Resume: > 0 for a task of an iteration dispatched again after a
	// human, which goes on from the iteration's writes and never purges (see resolve).
	resume int
	// mayFollowAttempt is set when another attempt of this iteration may have written keys
	// (Attempt > 1, or the task was delivered before).
	mayFollowAttempt bool

	mu       sync.Mutex
	resolved bool   // raw holds the folded value (stale keys purged)
	raw      []byte // the folded value, compact JSON; nil when there is none
	n        int    // the number of this task's next write
}

// ErrCheckpointTooLarge is wrapped by the error of a checkpoint write larger than a value may be
// (wire.DefaultMaxValue). Retrying cannot help: write less (AppendCheckpoint writes only the new
// items). A write too large for a message is stored by reference (wire.Values).
var ErrCheckpointTooLarge = errors.New("a checkpoint write is too large")

func (tc *taskContext) Checkpoint(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("worker: checkpoint of task %s: the value cannot be encoded as JSON: %w", tc.task.MsgID, err)
	}
	return tc.ck.set(tc, data)
}

func (tc *taskContext) AppendCheckpoint(items ...any) error {
	if len(items) == 0 {
		return nil
	}
	raws := make([][]byte, len(items))
	for i, it := range items {
		data, err := json.Marshal(it)
		if err != nil {
			return fmt.Errorf("worker: checkpoint of task %s: item %d cannot be encoded as JSON: %w", tc.task.MsgID, i, err)
		}
		raws[i] = data
	}
	return tc.ck.append(tc, raws)
}

func (tc *taskContext) LoadCheckpoint() (json.RawMessage, error) { return tc.ck.load(tc) }

func (c *checkpoints) set(ctx context.Context, v []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ready(ctx); err != nil {
		return err
	}
	if err := c.put(ctx, setValue(v)); err != nil {
		return err
	}
	c.raw = v
	return nil
}

func (c *checkpoints) append(ctx context.Context, items [][]byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ready(ctx); err != nil {
		return err
	}
	if !appendable(c.raw) {
		return fmt.Errorf("worker: checkpoint of task %s: cannot append to a value that is not a JSON array (%.40s)", c.tc.task.MsgID, c.raw)
	}
	if err := c.put(ctx, appendValue(items)); err != nil {
		return err
	}
	c.raw = appendItems(c.raw, items)
	return nil
}

func (c *checkpoints) load(ctx context.Context) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	if c.raw == nil {
		return nil, nil
	}
	// Not a copy (LoadCheckpoint says so): a copy per iteration made an iteration's cost grow
	// with the history (checkpoint_growth, BENCHMARKS.md). The capacity is clipped, so that
	// an append by the caller allocates instead of writing over the history.
	return c.raw[:len(c.raw):len(c.raw)], nil
}

// ready refuses checkpoint calls once the task answered, and resolves the value on first use.
// c.mu is held.
func (c *checkpoints) ready(ctx context.Context) error {
	c.tc.mu.Lock()
	open := c.tc.state == stateOpen
	late := c.tc.lateErr()
	c.tc.mu.Unlock()
	if !open {
		return fmt.Errorf("worker: checkpoint of task %s: %w", c.tc.task.MsgID, late)
	}
	if c.resolved {
		return nil
	}
	if err := c.resolve(ctx); err != nil {
		return fmt.Errorf("worker: checkpoint of task %s: %w", c.tc.task.MsgID, err)
	}
	c.resolved = true
	return nil
}

// resolve purges what another attempt of this iteration wrote, then takes the value as of the
// end of the previous iteration from the worker's cache, or else folds it from the bucket.
//
// A resumed task (Resume R > 0) goes on from where its iteration stopped for a human: it folds
// the earlier iterations, its iteration's writes made before (by the task that paused and by
// earlier resumes) and those of its own resume made by earlier deliveries and attempts, and
// numbers its writes after them. Nothing is purged: what a resumed task does acts on a human's
// decision, and its handler must find what an interrupted delivery already did (the agent
// answers again from a checkpoint that shows the decision acted on, instead of acting twice).
func (c *checkpoints) resolve(ctx context.Context) error {
	kv := c.tc.w.ckv
	if c.resume > 0 {
		c.tc.w.cache.drop(c.scope)
		c.tc.w.reloads.add()
		raw, next, err := c.fold(ctx, kv, func(w wire.CheckpointWrite) bool {
			return w.Iteration < c.iter || w.Iteration == c.iter && w.Resume <= c.resume
		}, wire.CheckpointWrite{Iteration: c.iter, Resume: c.resume})
		if err != nil {
			return err
		}
		c.raw, c.n = raw, next
		return nil
	}
	if c.mayFollowAttempt {
		// Asked again while the bucket elects a leader (a purge is safe to repeat), instead
		// of failing the attempt: a task delivered again after a NATS node died lands here.
		if err := natsbox.RetryWrite(ctx, func(actx context.Context) error {
			return purgeIteration(actx, kv, c.scope.String(), c.iter)
		}); err != nil {
			return err
		}
	}
	if c.iter <= 1 {
		c.tc.w.cache.drop(c.scope)
		return nil
	}
	if raw, ok := c.tc.w.cache.take(c.scope, c.iter-1); ok {
		c.raw = raw
		return nil
	}
	c.tc.w.reloads.add()
	raw, _, err := c.fold(ctx, kv, func(w wire.CheckpointWrite) bool { return w.Iteration < c.iter }, wire.CheckpointWrite{})
	if err != nil {
		return err
	}
	c.raw = raw
	return nil
}

// put writes the next key of this attempt.
func (c *checkpoints) put(ctx context.Context, value []byte) error {
	key := wire.CheckpointWrite{Scope: c.scope.String(), Iteration: c.iter, Resume: c.resume, N: c.n}.Key()
	if len(value) > wire.DefaultMaxValue {
		return fmt.Errorf("worker: checkpoint of task %s: the write is %d bytes, more than the %d bytes one may be: %w", c.tc.task.MsgID, len(value), wire.DefaultMaxValue, ErrCheckpointTooLarge)
	}
	value, err := c.tc.w.values.Out(ctx, c.tc.task.RunID, value)
	if err != nil {
		return fmt.Errorf("worker: checkpoint of task %s: write %s: %w", c.tc.task.MsgID, key, err)
	}
	// A put of the same key and value is safe to repeat, and asked again while the bucket
	// elects a leader, instead of holding the task until its deadline.
	if err := natsbox.RetryWrite(ctx, func(actx context.Context) error {
		_, err := c.tc.w.ckv.Put(actx, key, value)
		return err
	}); err != nil {
		return fmt.Errorf("worker: checkpoint of task %s: write %s: %w", c.tc.task.MsgID, key, err)
	}
	c.n++
	return nil
}

// keep hands the value as of the end of this iteration to the worker's cache, for the next
// iteration (the task continued).
func (c *checkpoints) keep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	cache := c.tc.w.cache
	switch {
	case c.resolved:
		cache.put(c.scope, c.iter, c.raw)
		c.raw, c.resolved = nil, false
	case c.resume > 0 || c.mayFollowAttempt: // this iteration has keys the cache does not hold
		cache.drop(c.scope)
	case c.iter == 1:
		cache.put(c.scope, 1, nil)
	default: // nothing written in this iteration: the previous value holds
		cache.bump(c.scope, c.iter-1, c.iter)
	}
}

// forget drops the value the worker keeps for this scope.
func (c *checkpoints) forget() { c.tc.w.cache.drop(c.scope) }

// setValue and appendValue are the values of a key: {"set": V} and {"append": [ITEMS]}.
func setValue(v []byte) []byte {
	out := make([]byte, 0, len(v)+8)
	out = append(out, `{"set":`...)
	out = append(out, v...)
	return append(out, '}')
}

func appendValue(items [][]byte) []byte {
	n := 12
	for _, it := range items {
		n += len(it) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, `{"append":[`...)
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return append(out, "]}"...)
}

// appendable reports whether items can be appended to raw: nothing, null or an array.
func appendable(raw []byte) bool {
	return raw == nil || string(raw) == "null" || raw[0] == '['
}

// appendItems appends items to raw (appendable, compact), in place when raw has room.
func appendItems(raw []byte, items [][]byte) []byte {
	if raw == nil || string(raw) == "null" || string(raw) == "[]" {
		raw = append(raw[:0], '[')
	} else {
		raw = append(raw[:len(raw)-1], ',')
	}
	for i, it := range items {
		if i > 0 {
			raw = append(raw, ',')
		}
		raw = append(raw, it...)
	}
	return append(raw, ']')
}

// entry is one write read back from the bucket.
type entry struct {
	w     wire.CheckpointWrite
	value []byte
}

// fold reads the writes of c's scope that include selects and folds them in order (iteration,
// resume, write number), reading back those stored by reference. It also returns the number
// that follows the writes of own's iteration and resume (0 when there are none), where a task
// that goes on from them writes next.
//
// What it read is checked against the leader of the bucket's stream: on a cluster, the listing
// may come from a replica that has not caught up (natsbox.MissingFromLeader), and folding less
// than was written would go on from an older state. The writes the listing missed are read
// from the leader and folded too.
func (c *checkpoints) fold(ctx context.Context, kv jetstream.KeyValue, include func(wire.CheckpointWrite) bool, own wire.CheckpointWrite) ([]byte, int, error) {
	// Both reads are asked again while the bucket has no leader (a node died), instead of
	// failing the attempt.
	var writes, missing map[string][]byte
	err := natsbox.RetryNoStream(ctx, func() (err error) {
		writes, err = c.read(ctx, kv)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	err = natsbox.RetryNoStream(ctx, func() (err error) {
		missing, err = natsbox.MissingFromLeader(ctx, c.tc.w.js, c.tc.w.names.CheckpointsBucket(), c.scope.String()+".>", func(key string) bool {
			_, ok := writes[key]
			return ok
		})
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if len(missing) > 0 {
		c.tc.logger().WarnContext(c.tc, "worker: the checkpoint was read from a replica behind its leader: the leader's writes are folded in", "missing", len(missing))
		maps.Copy(writes, missing)
	}
	var es []entry
	next := 0
	for key, value := range writes {
		w, err := wire.ParseCheckpointWrite(key)
		if err != nil || !include(w) {
			continue
		}
		if w.Iteration == own.Iteration && w.Resume == own.Resume {
			next = max(next, w.N+1)
		}
		es = append(es, entry{w: w, value: value})
	}
	raw, err := c.apply(ctx, es)
	return raw, next, err
}

// read returns the values of the keys of c's scope, by key.
func (c *checkpoints) read(ctx context.Context, kv jetstream.KeyValue) (map[string][]byte, error) {
	writes := map[string][]byte{}
	for ke, err := range natsbox.Entries(ctx, kv, c.scope.String()+".>") {
		if err != nil {
			return nil, err
		}
		writes[ke.Key()] = ke.Value()
	}
	return writes, nil
}

// apply folds the writes es in order (iteration, resume, write number). A set replaces all
// that comes before it, so the fold starts at the last one: the writes before it are neither
// read back (those stored by reference) nor decoded. A handler that compacts its checkpoint
// with a set now and then (the built-in agent does) keeps this read in proportion to what
// it wrote since, not to its history.
func (c *checkpoints) apply(ctx context.Context, es []entry) ([]byte, error) {
	slices.SortFunc(es, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.w.Iteration, b.w.Iteration), cmp.Compare(a.w.Resume, b.w.Resume), cmp.Compare(a.w.N, b.w.N))
	})
	values := make([][]byte, len(es))
	start := 0
	for i := len(es) - 1; i >= 0; i-- {
		value, err := c.tc.w.values.In(ctx, c.tc.task.RunID, es[i].value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", es[i].w.Key(), err)
		}
		values[i] = value
		if isSet(value) {
			start = i
			break
		}
	}
	var raw []byte
	for i := start; i < len(es); i++ {
		var err error
		if raw, err = applyWrite(raw, values[i]); err != nil {
			return nil, fmt.Errorf("%s: %w", es[i].w.Key(), err)
		}
	}
	return raw, nil
}

// isSet reports whether a stored write is a set, as setValue writes it.
func isSet(value []byte) bool { return bytes.HasPrefix(value, []byte(`{"set":`)) }

// applyWrite applies one stored write to raw.
func applyWrite(raw, value []byte) ([]byte, error) {
	var w struct {
		Set    json.RawMessage   `json:"set"`
		Append []json.RawMessage `json:"append"`
	}
	if err := json.Unmarshal(value, &w); err != nil {
		return nil, fmt.Errorf("%w: the checkpoint write is not valid: %v", wire.ErrMalformed, err)
	}
	switch {
	case w.Set != nil:
		var buf bytes.Buffer
		if err := json.Compact(&buf, w.Set); err != nil {
			return nil, fmt.Errorf("%w: the checkpoint value is not valid: %v", wire.ErrMalformed, err)
		}
		return buf.Bytes(), nil
	case w.Append != nil:
		if !appendable(raw) {
			return nil, fmt.Errorf("%w: an append follows a value that is not a JSON array", wire.ErrMalformed)
		}
		items := make([][]byte, len(w.Append))
		for i, it := range w.Append {
			items[i] = it
		}
		if len(items) == 0 {
			return raw, nil
		}
		return appendItems(raw, items), nil
	}
	return nil, fmt.Errorf("%w: the checkpoint write is neither set nor append", wire.ErrMalformed)
}

// purgeIteration removes the keys of scope's iteration iter.
func purgeIteration(ctx context.Context, kv jetstream.KeyValue, scope string, iter int) error {
	// The keys are read first and purged after: a purge is a write the watch would see.
	var keys []string
	for ke, err := range natsbox.Entries(ctx, kv, fmt.Sprintf("%s.%d.*", scope, iter), jetstream.MetaOnly()) {
		if err != nil {
			return err
		}
		keys = append(keys, ke.Key())
	}
	for _, k := range keys {
		if err := kv.Purge(ctx, k); err != nil {
			return fmt.Errorf("purge %s: %w", k, err)
		}
	}
	return nil
}
