package builtin

// StateCacheHits is how many iterations took the state their loop's last write left.
func StateCacheHits(h *Handlers) int64 { return h.states.hits.Load() }

// SetCompactEvery sets how rarely the agent compacts its checkpoint (0: never) until the
// test ends.
func SetCompactEvery(t interface{ Cleanup(func()) }, n int) {
	old := compactEvery
	if n == 0 {
		n = 1 << 30
	}
	compactEvery = n
	t.Cleanup(func() { compactEvery = old })
}
