package worker

import (
	"sync"
	"testing"
	"time"
)

// A goroutine that finished a function waits for the next, which runs on it; functions run
// while it is busy get goroutines of their own; stop ends the waiting ones.
func TestGoroutinesKeep(t *testing.T) {
	ended := make(chan struct{}, 8)
	g := newGoroutines()
	g.ended = ended

	first := make(chan struct{})
	g.run(jobFunc(func() { close(first) }))
	<-first
	// The goroutine that ran it now waits for work: a send is taken.
	ran := make(chan struct{})
	select {
	case g.next <- jobFunc(func() { close(ran) }):
	case <-time.After(failsafe):
		t.Fatal("no goroutine waits for work after running a function")
	}
	<-ran

	// Two functions at once, one blocking: both run.
	release := make(chan struct{})
	var both sync.WaitGroup
	both.Add(2)
	g.run(jobFunc(func() { both.Done(); <-release }))
	g.run(jobFunc(func() { both.Done() }))
	both.Wait()
	close(release)

	g.stop()
	for range 2 { // the goroutines kept by now (at least the one that took the send) end
		select {
		case <-ended:
		case <-time.After(failsafe):
			t.Fatal("a kept goroutine did not end after stop")
		}
	}
}
