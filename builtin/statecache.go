package builtin

import (
	"bytes"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/session"
)

// The state an agent's iteration leaves is what its next iteration starts from, and the next
// one usually runs on the same worker. Folding the checkpoint again would decode every write
// the step ever made: an iteration's cost would grow with the run (agent_long, BENCHMARKS.md).
// So Handlers keep, per loop, the state their last write left, with the checkpoint's bytes as
// the worker held them then: the next iteration takes it when the checkpoint it loads is those
// bytes, with any writes after them (another attempt's) folded on. The bytes are recognised by
// their array and length, not read: the worker hands out its own bytes (LoadCheckpoint), never
// changes those before the closing ']' of an array it handed out (an append overwrites the ']'
// and writes after it; a set, a purge or a read back from the bucket makes a new array), and
// the entry holds the array, so that its address cannot be another's. Hashing the bytes
// instead cost an iteration time in proportion to the run (0.36 ms per 4 MB). A checkpoint in
// another array (the step ran elsewhere, the worker read it back) is folded whole, once.

// cachedStates bounds the loops whose state Handlers keep (each holds the texts of its
// context window).
const cachedStates = 64

// cachedState is the state a loop's last write on this worker left.
type cachedState struct {
	n    int   // the checkpoint's length then
	data *byte // its first byte, in the worker's array
	st   *loop.State
	from int // where the last write's messages begin
	// refs are the messages left as references; kept the references of the messages whose
	// texts are in st whole but checkpointed by reference (to put back out of the window).
	refs map[int]bool
	kept map[int]string
	// session is the mark of the step's session (nil: none).
	session *session.Mark
}

type stateCache struct {
	mu      sync.Mutex
	entries map[string]*cachedState
	order   []string // oldest first
	hits    atomic.Int64
}

func newStateCache() *stateCache { return &stateCache{entries: map[string]*cachedState{}} }

// take returns, and forgets, the state kept for loop key when raw (the checkpoint loaded now)
// is the checkpoint it was kept for, with the writes after it (the array's tail from there, "]"
// or ",ITEM,...]"); nil otherwise.
func (c *stateCache) take(key string, raw []byte) (*cachedState, []byte) {
	c.mu.Lock()
	e := c.entries[key]
	delete(c.entries, key)
	c.mu.Unlock()
	if e == nil || len(raw) < e.n || &raw[0] != e.data || raw[e.n-1] != ']' && raw[e.n-1] != ',' {
		return nil, nil
	}
	c.hits.Add(1)
	return e, raw[e.n-1:]
}

// put keeps e for loop key, checkpointed as raw (an array).
func (c *stateCache) put(key string, raw []byte, e *cachedState) {
	raw = bytes.TrimRight(raw, " \t\r\n")
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return
	}
	e.n, e.data = len(raw), &raw[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok {
		c.order = append(c.order, key)
	}
	c.entries[key] = e
	for len(c.entries) > cachedStates && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		delete(c.entries, old)
	}
	if len(c.order) > 2*cachedStates { // keys taken since: compact
		live := c.order[:0]
		for _, k := range c.order {
			if c.entries[k] != nil {
				live = append(live, k)
			}
		}
		c.order = live
	}
}

// tailDeltas decodes the writes of a checkpoint's tail ("]" or ",ITEM,...]").
func tailDeltas(tail []byte) ([]stateDelta, error) {
	if len(tail) == 0 || tail[0] == ']' {
		return nil, nil
	}
	var deltas []stateDelta
	buf := append([]byte{'['}, tail[1:]...)
	if err := json.Unmarshal(buf, &deltas); err != nil {
		return nil, err
	}
	return deltas, nil
}
