package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/reins-run/reins/ratelimit"
)

// ExampleAcquire: a scope of rpm = 2 lets two calls start at once, then one every 30 seconds;
// the third call waits in the queue until the bucket holds a request again.
func ExampleAcquire() {
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	limits := ratelimit.Limits{RPM: 2}
	var s ratelimit.State // what the bucket holds for the scope, shared by every worker
	call := func(id string, at time.Duration) {
		d := ratelimit.Acquire(&s, limits, start.Add(at), ratelimit.Request{ID: id, Lease: 30 * time.Second, QueueLease: time.Minute})
		if d.Granted {
			fmt.Printf("%s at %v: starts\n", id, at)
			return
		}
		fmt.Printf("%s at %v: waits, looks again at %v\n", id, at, d.Wake.Sub(start))
	}
	call("a", 0)
	call("b", 0)
	call("c", 0)
	call("c", 30*time.Second)
	// Output:
	// a at 0s: starts
	// b at 0s: starts
	// c at 0s: waits, looks again at 30s
	// c at 30s: starts
}
