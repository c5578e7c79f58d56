// Package intern gives one string for the bytes of a value that comes again and again on the
// hot path of an iteration (a run's id, a step, a handler, a workflow's hash, a stream's name),
// so that decoding a message does not allocate it each time.
//
// It owns a bounded, process-wide table and nothing else: it must not import another package
// of reins.
package intern

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// kept bounds the table: past it, the table is emptied and fills again with what recurs.
const kept = 4096

var table = struct {
	sync.Mutex
	m map[string]*string
}{m: make(map[string]*string, 256)}

// front holds strings given lately, each in the place [hash] gives its bytes, found without
// the table's lock and map (the lock is taken by every goroutine of the process that decodes or
// publishes, and the map is seldom in the processor's cache). A place holds a string of the
// table, or one the table has dropped since: either is the string of the bytes it matched.
var front [1 << frontBits]atomic.Pointer[string]

const frontBits = 8

// Bytes returns string(b), the same string each time for the same bytes while it stays in
// the table.
func Bytes(b []byte) string {
	place := &front[hash(b)>>(64-frontBits)]
	if p := place.Load(); p != nil && *p == string(b) { // compared without making a string of b
		return *p
	}
	table.Lock()
	p, ok := table.m[string(b)] // no allocation: the compiler reads the map with b's bytes
	if !ok {
		if len(table.m) >= kept {
			clear(table.m)
		}
		p = new(string)
		*p = string(b)
		table.m[*p] = p
	}
	table.Unlock()
	place.Store(p)
	return *p
}

// hash mixes the length and the last eight bytes of b, where the values interned differ most
// (a run id ends in random characters); its top bits are a place in a table of a power of two.
func hash(b []byte) uint64 {
	n := len(b)
	x := uint64(n)
	if n >= 8 {
		x ^= binary.LittleEndian.Uint64(b[n-8:])
	} else {
		for _, c := range b {
			x = x<<8 ^ uint64(c)
		}
	}
	return x * 0x9e3779b97f4a7c15 // Fibonacci hashing: the top bits take from every bit of x
}
