package runner

import (
	"container/list"
	"context"
	"sync/atomic"
)

// DefaultCachedRuns is how many running or waiting runs an engine keeps decoded in memory when
// [Config.CachedRuns] is 0. The others are read from the bucket when an event comes for them, as
// after a restart: thousands of runs waiting for a human or a timer cost the bucket, not the
// engine's memory.
const DefaultCachedRuns = 1024

// runCache is a shard's cache of the runs it decided, least recently used first out.
type runCache struct {
	entries map[string]*list.Element // of *cached
	order   list.List                // most recently used at the front
	count   *atomic.Int64            // the engine's count of cached runs (nil: none)
}

type cached struct {
	id  string
	ent *entry
}

func newRunCache(count *atomic.Int64) *runCache {
	return &runCache{entries: map[string]*list.Element{}, count: count}
}

func (c *runCache) add(n int64) {
	if c.count != nil {
		c.count.Add(n)
	}
}

// get returns the entry of run id, marking it used; nil when it is not cached.
func (c *runCache) get(id string) *entry {
	el := c.entries[id]
	if el == nil {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*cached).ent
}

// peek returns the entry of run id without marking it used.
func (c *runCache) peek(id string) *entry {
	if el := c.entries[id]; el != nil {
		return el.Value.(*cached).ent
	}
	return nil
}

// put caches ent as run id's, most recently used.
func (c *runCache) put(id string, ent *entry) {
	if el := c.entries[id]; el != nil {
		el.Value.(*cached).ent = ent
		c.order.MoveToFront(el)
		return
	}
	c.entries[id] = c.order.PushFront(&cached{id: id, ent: ent})
	c.add(1)
}

// remove drops run id.
func (c *runCache) remove(id string) {
	if el := c.entries[id]; el != nil {
		c.order.Remove(el)
		delete(c.entries, id)
		c.add(-1)
	}
}

func (c *runCache) len() int { return len(c.entries) }

// oldest is the id of the least recently used run ("" when empty).
func (c *runCache) oldest() string {
	if el := c.order.Back(); el != nil {
		return el.Value.(*cached).id
	}
	return ""
}

// all calls f with every cached entry.
func (c *runCache) all(f func(*entry)) {
	for el := c.order.Front(); el != nil; el = el.Next() {
		f(el.Value.(*cached).ent)
	}
}

// trim evicts the least recently used runs of sh beyond the engine's share of its cache,
// saving first what waits for a save (evict).
func (e *Engine) trim(ctx context.Context, sh *shard) {
	for sh.cache.len() > e.cachedPerShard {
		e.evict(ctx, sh, sh.cache.oldest())
		e.stats.evicted.Add(1)
	}
}
