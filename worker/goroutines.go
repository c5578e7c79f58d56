package worker

import (
	"sync/atomic"
	"time"
)

// goroutines runs the tasks' handlers on goroutines it keeps for a while: a goroutine that
// finished one waits for the next, and ends once it has waited through a whole sweep period
// (goroutineIdle: between one and two periods of waiting). A new goroutine's stack starts small
// and the answer of a task (its publish through nats.go) grew it three times, copied each
// time: runtime.copystack was 3% of the CPU of the 64-loop benchmark (BENCHMARKS.md). A kept
// goroutine has the stack the last task grew.
//
// The waits are counted rather than timed: a timer of each goroutine, set again after every
// task and in the select of every wait, cost more than the wait (BENCHMARKS.md). A sweep
// every period ends as many waiting goroutines as never stopped waiting since the one before.
type goroutines struct {
	next  chan job // unbuffered: a send succeeds only when a kept goroutine waits
	quit  chan struct{}
	ended chan<- struct{} // a test's: told when a kept goroutine ends
	waits chan<- struct{} // a test's: told when a kept goroutine starts to wait

	// waiting counts the kept goroutines that wait for a job; fewest is the fewest that
	// waited at once since the last sweep, as many as waited through the whole period.
	waiting atomic.Int32
	fewest  atomic.Int32
}

// job is what a kept goroutine runs: a task (*taskContext), handed over without a closure of
// its own, or a function (jobFunc). A nil job ends the goroutine that takes it (sweep).
type job interface{ run() }

// jobFunc is a function run as a job.
type jobFunc func()

func (f jobFunc) run() { f() }

// goroutineIdle is the sweep period: a kept goroutine that waited through a whole one ends.
const goroutineIdle = 5 * time.Second

// newGoroutines returns goroutines swept every sweepEvery until stop.
func newGoroutines(sweepEvery time.Duration) *goroutines {
	g := &goroutines{next: make(chan job), quit: make(chan struct{})}
	go g.sweeps(sweepEvery)
	return g
}

// run runs j on a kept goroutine that waits for work, or on a new one.
func (g *goroutines) run(j job) {
	select {
	case g.next <- j:
	default:
		go g.keep(j)
	}
}

// keep runs j, then the jobs run hands it, until a sweep hands it nil or stop is called.
func (g *goroutines) keep(j job) {
	if g.ended != nil {
		defer func() { g.ended <- struct{}{} }()
	}
	for j != nil {
		j.run()
		g.waiting.Add(1)
		if g.waits != nil {
			g.waits <- struct{}{}
		}
		select {
		case j = <-g.next:
		case <-g.quit:
			j = nil
		}
		g.lower(g.waiting.Add(-1))
	}
}

// lower records that n goroutines wait, for the sweep.
func (g *goroutines) lower(n int32) {
	for f := g.fewest.Load(); n < f; f = g.fewest.Load() {
		if g.fewest.CompareAndSwap(f, n) {
			return
		}
	}
}

// sweeps sweeps every period until stop.
func (g *goroutines) sweeps(every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			g.sweep()
		case <-g.quit:
			return
		}
	}
}

// sweep ends as many waiting goroutines as waited through the whole period since the last
// sweep, and starts the next period with those that wait now.
func (g *goroutines) sweep() {
	idle := g.fewest.Swap(g.waiting.Load())
	for range idle {
		select {
		case g.next <- nil:
		default: // one took a job meanwhile: it works
			return
		}
	}
}

// stop ends the goroutines that wait for work and the sweeps; the ones running a job end after
// it.
func (g *goroutines) stop() { close(g.quit) }
