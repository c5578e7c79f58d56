// Package defaults holds the one reading of a configuration value that every layer of reins
// shares: 0 means the default, a negative value means none.
//
// It owns that rule only. It must not import any package of reins: workflow, runner and api
// read their configurations through it.
package defaults

// OrNone is v, or def when v is 0, or 0, which the code reading it takes as no bound, when v
// is negative.
func OrNone[T ~int | ~int64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}
