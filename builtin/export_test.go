package builtin

// StateCacheHits is how many iterations took the state their loop's last write left.
func StateCacheHits(h *Handlers) int64 { return h.states.hits.Load() }
