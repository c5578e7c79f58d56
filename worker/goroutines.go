package worker

import "time"

// goroutines runs the tasks' handlers on goroutines it keeps for a while: a goroutine that
// finished one waits up to goroutineIdle for the next. A new goroutine's stack starts small
// and the answer of a task (its publish through nats.go) grew it three times, copied each
// time: runtime.copystack was 3% of the CPU of the 64-loop benchmark (BENCHMARKS.md). A kept
// goroutine has the stack the last task grew.
type goroutines struct {
	next  chan job // unbuffered: a send succeeds only when a kept goroutine waits
	quit  chan struct{}
	ended chan<- struct{} // a test's: told when a kept goroutine ends
}

// job is what a kept goroutine runs: a task (*taskContext), handed over without a closure of
// its own, or a function (jobFunc).
type job interface{ run() }

// jobFunc is a function run as a job.
type jobFunc func()

func (f jobFunc) run() { f() }

// goroutineIdle is how long a kept goroutine waits for another function before it ends.
const goroutineIdle = 5 * time.Second

func newGoroutines() *goroutines {
	return &goroutines{next: make(chan job), quit: make(chan struct{})}
}

// run runs j on a kept goroutine that waits for work, or on a new one.
func (g *goroutines) run(j job) {
	select {
	case g.next <- j:
	default:
		go g.keep(j)
	}
}

// keep runs j, then the jobs run hands it, until none comes for goroutineIdle or stop is
// called.
func (g *goroutines) keep(j job) {
	idle := time.NewTimer(goroutineIdle)
	defer idle.Stop()
	if g.ended != nil {
		defer func() { g.ended <- struct{}{} }()
	}
	for {
		j.run()
		idle.Reset(goroutineIdle) // Go 1.23 timers: no stale tick survives Reset
		select {
		case j = <-g.next:
		case <-idle.C:
			return
		case <-g.quit:
			return
		}
	}
}

// stop ends the goroutines that wait for work; the ones running a job end after it.
func (g *goroutines) stop() { close(g.quit) }
