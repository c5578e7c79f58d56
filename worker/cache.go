package worker

import (
	"container/list"
	"sync"

	"github.com/reins-run/reins/internal/wire"
)

// Bounds of the checkpoint cache of a worker.
const (
	maxCacheEntries = 4096
	maxCacheBytes   = 256 << 20
)

// ckScope names the checkpoint of one activation of a step: what wire.CheckpointScope makes
// its KV keys' prefix of. The cache is keyed by it, not by that prefix, so that an iteration
// that reads and writes no checkpoint makes no string to find its entry.
type ckScope struct {
	run, step        string
	item, activation int
}

// String is the scope's KV key prefix, wire.CheckpointScope.
func (s ckScope) String() string { return wire.CheckpointScope(s.run, s.step, s.item, s.activation) }

// ckCache keeps, per checkpoint scope, the value as of the end of the last iteration this
// worker continued, so that the next iteration, when it runs here, reads nothing back. The
// least recently stored entries go first once either bound is reached.
type ckCache struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int
	bytes      int
	entries    map[ckScope]*list.Element // of *ckEntry
	order      *list.List                // most recent first
}

type ckEntry struct {
	scope ckScope
	iter  int
	raw   []byte
}

func newCkCache(maxEntries, maxBytes int) *ckCache {
	return &ckCache{maxEntries: maxEntries, maxBytes: maxBytes, entries: map[ckScope]*list.Element{}, order: list.New()}
}

// take removes the entry of scope and returns its value when it is as of the end of iter.
func (c *ckCache) take(scope ckScope, iter int) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.entries[scope]
	if el == nil {
		return nil, false
	}
	e := c.removeLocked(el)
	return e.raw, e.iter == iter
}

// put stores raw as the value of scope at the end of iter; the cache owns raw from then on.
func (c *ckCache) put(scope ckScope, iter int, raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.entries[scope]; el != nil {
		c.removeLocked(el)
	}
	if cap(raw) > c.maxBytes {
		return
	}
	c.entries[scope] = c.order.PushFront(&ckEntry{scope: scope, iter: iter, raw: raw})
	c.bytes += cap(raw)
	for len(c.entries) > c.maxEntries || c.bytes > c.maxBytes {
		c.removeLocked(c.order.Back())
	}
}

// bump marks the entry of scope, when it is as of the end of from, as of the end of to.
func (c *ckCache) bump(scope ckScope, from, to int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.entries[scope]
	if el == nil {
		return
	}
	if e := el.Value.(*ckEntry); e.iter == from {
		e.iter = to
		return
	}
	c.removeLocked(el)
}

// drop removes the entry of scope.
func (c *ckCache) drop(scope ckScope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.entries[scope]; el != nil {
		c.removeLocked(el)
	}
}

func (c *ckCache) removeLocked(el *list.Element) *ckEntry {
	e := c.order.Remove(el).(*ckEntry)
	delete(c.entries, e.scope)
	c.bytes -= cap(e.raw)
	return e
}
