// Package intern gives one string for the bytes of a value that comes again and again on the
// hot path of an iteration (a run's id, a step, a handler, a workflow's hash, a stream's name),
// so that decoding a message does not allocate it each time.
//
// It owns a bounded, process-wide table and nothing else: it must not import another package
// of reins.
package intern

import "sync"

// kept bounds the table: past it, the table is emptied and fills again with what recurs.
const kept = 4096

var table = struct {
	sync.Mutex
	m map[string]string
}{m: make(map[string]string, 256)}

// Bytes returns string(b), the same string each time for the same bytes while it stays in
// the table.
func Bytes(b []byte) string {
	table.Lock()
	s, ok := table.m[string(b)] // no allocation: the compiler reads the map with b's bytes
	if !ok {
		if len(table.m) >= kept {
			clear(table.m)
		}
		s = string(b)
		table.m[s] = s
	}
	table.Unlock()
	return s
}
