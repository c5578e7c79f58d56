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
	g := newGoroutines(time.Hour) // swept by the test alone
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

// A sweep ends as many waiting goroutines as waited through the whole period since the last
// one: none the first time after they came to wait, then those that no job woke meanwhile.
func TestGoroutinesSweep(t *testing.T) {
	ended, waits := make(chan struct{}, 8), make(chan struct{}, 8)
	g := newGoroutines(time.Hour) // swept by the test alone
	g.ended, g.waits = ended, waits
	defer g.stop()

	// Three goroutines at once, then all three wait.
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(3)
	for range 3 {
		g.run(jobFunc(func() { started.Done(); <-release }))
	}
	started.Wait()
	close(release)
	for range 3 {
		<-waits
	}

	g.sweep() // they did not wait through the period before: it began with none waiting
	assertEnded(t, ended, 0)

	// One job in the next period: one goroutine worked, two waited through it.
	ran := make(chan struct{})
	g.run(jobFunc(func() { close(ran) }))
	<-ran
	<-waits // the goroutine that ran it waits again
	g.sweep()
	assertEnded(t, ended, 2)

	g.sweep() // the last one waited through the period since
	assertEnded(t, ended, 1)
	if n := g.waiting.Load(); n != 0 {
		t.Errorf("%d goroutines wait after the sweeps, want 0", n)
	}
}

// assertEnded checks that n kept goroutines ended, and no more by the time their count went down.
func assertEnded(t *testing.T, ended <-chan struct{}, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-ended:
		case <-time.After(failsafe):
			t.Fatalf("%d of %d goroutines ended after a sweep", i, n)
		}
	}
	select {
	case <-ended:
		t.Fatalf("more than %d goroutines ended after a sweep", n)
	default:
	}
}

// BenchmarkGoroutinesRun hands jobs to a kept goroutine one after the other, as a worker's
// tasks of one loop come: each job waits for the one before to have ended and its goroutine
// to wait again.
func BenchmarkGoroutinesRun(b *testing.B) {
	g := newGoroutines(time.Hour)
	defer g.stop()
	done := make(chan struct{})
	j := jobFunc(func() { done <- struct{}{} })
	for b.Loop() {
		g.run(j)
		<-done
	}
}
