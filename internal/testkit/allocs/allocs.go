// Package allocs measures a function's heap allocations for the tests that pin them.
//
// It owns only that measurement. It must not be imported by anything but tests.
package allocs

import "testing"

// tries is how many times PerRun measures: the runtime counts every goroutine's allocations,
// so a measurement can only come out high (a goroutine another test left allocating while f
// runs, as in a loaded -race run), never low, and the least of a few is f's own.
const tries = 3

// PerRun is [testing.AllocsPerRun] of f over runs calls, the least of a few measurements.
func PerRun(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for range tries - 1 {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}
