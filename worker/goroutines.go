package worker

import "time"

// goroutines runs the tasks' handlers on goroutines it keeps for a while: a goroutine that
// finished one waits up to goroutineIdle for the next. A new goroutine's stack starts small
// and the answer of a task (its publish through nats.go) grew it three times, copied each
// time: runtime.copystack was 3% of the CPU of the 64-loop benchmark (BENCHMARKS.md). A kept
// goroutine has the stack the last task grew.
type goroutines struct {
	next  chan func() // unbuffered: a send succeeds only when a kept goroutine waits
	quit  chan struct{}
	ended chan<- struct{} // a test's: told when a kept goroutine ends
}

// goroutineIdle is how long a kept goroutine waits for another function before it ends.
const goroutineIdle = 5 * time.Second

func newGoroutines() *goroutines {
	return &goroutines{next: make(chan func()), quit: make(chan struct{})}
}

// run runs f on a kept goroutine that waits for work, or on a new one.
func (g *goroutines) run(f func()) {
	select {
	case g.next <- f:
	default:
		go g.keep(f)
	}
}

// keep runs f, then the functions run hands it, until none comes for goroutineIdle or stop
// is called.
func (g *goroutines) keep(f func()) {
	idle := time.NewTimer(goroutineIdle)
	defer idle.Stop()
	if g.ended != nil {
		defer func() { g.ended <- struct{}{} }()
	}
	for {
		f()
		idle.Reset(goroutineIdle) // Go 1.23 timers: no stale tick survives Reset
		select {
		case f = <-g.next:
		case <-idle.C:
			return
		case <-g.quit:
			return
		}
	}
}

// stop ends the goroutines that wait for work; the ones running a function end after it.
func (g *goroutines) stop() { close(g.quit) }
