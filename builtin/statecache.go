package builtin

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/reins-run/reins/loop"
)

// The state an agent's iteration leaves is what its next iteration starts from, and the next
// one usually runs on the same worker. Folding the checkpoint again would decode every write
// the step ever made: an iteration's cost would grow with the run (agent_long, BENCHMARKS.md).
// So Handlers keep, per loop, the state their last write left, with the checkpoint's length and
// a hash of it: the next iteration takes it when the checkpoint it loads begins with those
// bytes, and folds only the writes after them (another worker's, when the step moved). A
// checkpoint that does not match (a retry that purged writes, a fork) is folded whole.

// cachedStates bounds the loops whose state Handlers keep (each holds the texts of its
// context window).
const cachedStates = 64

var stateSeed = maphash.MakeSeed()

// cachedState is the state a loop's last write on this worker left.
type cachedState struct {
	n    int    // the checkpoint's length then
	sum  uint64 // maphash of its bytes but the closing ']'
	st   *loop.State
	from int // where the last write's messages begin
	// refs are the messages left as references; kept the references of the messages whose
	// texts are in st whole but checkpointed by reference (to put back out of the window).
	refs map[int]bool
	kept map[int]string
}

type stateCache struct {
	mu      sync.Mutex
	entries map[string]*cachedState
	order   []string // oldest first
	hits    atomic.Int64
}

func newStateCache() *stateCache { return &stateCache{entries: map[string]*cachedState{}} }

// take returns, and forgets, the state kept for loop key when raw (the checkpoint loaded now)
// begins with the checkpoint it was kept for, with the writes after it (an array's tail "]" or
// ",ITEM,...]"); nil otherwise.
func (c *stateCache) take(key string, raw []byte) (*cachedState, []byte) {
	c.mu.Lock()
	e := c.entries[key]
	delete(c.entries, key)
	c.mu.Unlock()
	if e == nil || len(raw) < e.n || raw[e.n-1] != ']' && raw[e.n-1] != ',' || maphash.Bytes(stateSeed, raw[:e.n-1]) != e.sum {
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
	e.n, e.sum = len(raw), maphash.Bytes(stateSeed, raw[:len(raw)-1])
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
