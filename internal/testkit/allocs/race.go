//go:build race

package allocs

// Race reports whether the race detector is on: sync.Pool then drops what is put at random
// (to find code that relies on it keeping things), so a path through a pool allocates a
// varying number of times.
const Race = true
