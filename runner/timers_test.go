package runner

import (
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
)

// ignoreTicks is a fire function for timers that never come due in a test.
func ignoreTicks(string, engine.Command) error { return nil }

// A waiting run holds one timer (its loop_delay, its deadline): ten thousand waiting runs hold
// ten thousand. Each used to cost about 1.1 KB of heap (a map per run, the tick's message id as
// its key, the whole command in a closure), then 345 B with a runtime timer each, 191 B in one
// queue; what stays must be small enough for the aim of 10,000 waiting runs under 100 MB,
// engine and server together.
func TestTimersCostPerWaitingRun(t *testing.T) {
	const runs = 10_000
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = "run-" + strconv.Itoa(i) // the ids are the runs', not the timers'
	}
	at := time.Now().Add(time.Hour)
	ts := newTimers(time.Now, ignoreTicks, slog.Default())
	defer ts.close()
	before := liveHeap()
	for _, id := range ids {
		ts.arm(id, engine.Command{Type: engine.CmdSchedule, At: at, Step: "loop", Item: -1, Activation: 1}, time.Now())
	}
	per := (liveHeap() - before) / runs
	t.Logf("%d B per waiting run's timer", per)
	if per > 250 {
		t.Errorf("a waiting run's timer costs %d B of heap, want at most 250", per)
	}
	runtime.KeepAlive(ts)
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// The timers keep the rules of the ticks: one timer per tick however often it is armed, a
// task's watch replacing its step's previous one, a run's timers gone with the run, and a due
// tick published once with the fields its message id is made of.
func TestTimersArm(t *testing.T) {
	later := time.Now().Add(time.Hour)
	tick := engine.Command{Type: engine.CmdSchedule, At: later, Step: "wait", Item: 2, Activation: 3}
	other := tick
	other.At = later.Add(time.Minute)
	watch := engine.Command{Type: engine.CmdSchedule, At: later, Step: "loop", Item: -1, Watch: true}
	watch2 := watch
	watch2.At = later.Add(time.Minute)
	for _, tc := range []struct {
		name string
		arm  []engine.Command
		want int
	}{
		{"one tick", []engine.Command{tick}, 1},
		{"the same tick twice", []engine.Command{tick, tick}, 1},
		{"two ticks of one step", []engine.Command{tick, other}, 2},
		{"a watch replaces the step's", []engine.Command{watch, watch2}, 1},
		{"a tick and a watch", []engine.Command{tick, watch}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTimers(time.Now, ignoreTicks, slog.Default())
			defer ts.close()
			for _, c := range tc.arm {
				ts.arm("r", c, time.Now())
			}
			ts.mu.Lock()
			got := len(ts.runs["r"])
			ts.mu.Unlock()
			if got != tc.want {
				t.Fatalf("%d timers armed, want %d", got, tc.want)
			}
			ts.cancelRun("r")
			ts.mu.Lock()
			left := len(ts.runs)
			ts.mu.Unlock()
			if left != 0 {
				t.Fatalf("%d runs keep timers after cancelRun", left)
			}
		})
	}
	t.Run("the replaced watch's due", func(t *testing.T) {
		ts := newTimers(time.Now, ignoreTicks, slog.Default())
		defer ts.close()
		ts.arm("r", watch, time.Now())
		ts.mu.Lock()
		first := ts.find("r", tickOf(watch))
		ts.mu.Unlock()
		ts.arm("r", watch2, time.Now())
		ts.mu.Lock()
		defer ts.mu.Unlock()
		tm := ts.find("r", tickOf(watch2))
		if tm == nil || !tm.due.Equal(watch2.At) || !tm.tick.at.Equal(watch2.At) {
			t.Fatalf("the watch is due %v, want %v", tm, watch2.At)
		}
		if tm != first { // a loop's every iteration moves its watch: no timer made for it
			t.Fatal("the watch waiting was replaced by a new timer, not moved")
		}
	})
	for _, c := range []engine.Command{tick, {Type: engine.CmdSchedule, Step: "work", Item: -1, Activation: 1, Watch: true}} {
		t.Run("a due tick fires with its fields, watch "+strconv.FormatBool(c.Watch), func(t *testing.T) {
			got := make(chan engine.Command, 2)
			ts := newTimers(time.Now, func(runID string, c engine.Command) error {
				if runID == "r" {
					got <- c
				}
				return nil
			}, slog.Default())
			defer ts.close()
			c.At = time.Now().Add(-time.Second)
			ts.arm("r", c, time.Now())
			fired := <-got
			if fired.Type != engine.CmdSchedule || !fired.At.Equal(c.At) || fired.Step != c.Step || fired.Item != c.Item || fired.Activation != c.Activation || fired.Watch != c.Watch {
				t.Fatalf("fired %+v, want the tick of %+v", fired, c)
			}
		})
	}
}

// A map step of thousands of items has a watch per item, all timers of one run, each re-armed
// as its item's task goes out again: the run's timers stay consistent (each found by its tick,
// in its place) however many there are, as they are disarmed one by one, and the run's index
// goes with them.
func TestTimersManyOfOneRun(t *testing.T) {
	for _, n := range []int{1, keyedFrom, keyedFrom + 1, 3 * keyedFrom, 1000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ts := newTimers(time.Now, ignoreTicks, slog.Default())
			defer ts.close()
			later := time.Now().Add(time.Hour)
			watches := make([]engine.Command, n)
			for i := range watches {
				watches[i] = engine.Command{Type: engine.CmdSchedule, At: later, Step: "each", Item: i, Watch: true}
				ts.arm("r", watches[i], time.Now())
				ts.arm("r", engine.Command{Type: engine.CmdSchedule, At: later, Step: "each", Item: i, Activation: 1}, time.Now())
			}
			for i := range watches { // the tasks go out again: each watch replaces its item's
				watches[i].At = later.Add(time.Minute)
				ts.arm("r", watches[i], time.Now())
			}
			ts.mu.Lock()
			defer ts.mu.Unlock()
			checkTimers(t, ts, "r", 2*n)
			for i, w := range watches {
				tm := ts.find("r", tickOf(w))
				if tm == nil || !tm.due.Equal(w.At) {
					t.Fatalf("item %d's watch is %v, want one due %v", i, tm, w.At)
				}
				ts.remove(tm)
				checkTimers(t, ts, "r", 2*n-i-1)
			}
		})
	}
}

// checkTimers checks run runID's n timers: each in its place in the slice, and in the run's
// index by its key while the run has one (always above keyedFrom, never at half of it or
// below); ts.mu is held.
func checkTimers(t *testing.T, ts *timers, runID string, n int) {
	t.Helper()
	list := ts.runs[runID]
	if len(list) != n {
		t.Fatalf("%d timers, want %d", len(list), n)
	}
	for i, tm := range list {
		if int(tm.idx) != i {
			t.Fatalf("timer %d says it is at %d", i, tm.idx)
		}
		if ts.find(runID, tm.tick) != tm {
			t.Fatalf("timer %d (%+v) is not found by its tick", i, tm.tick)
		}
	}
	m, keyed := ts.keyed[runID]
	switch {
	case n > keyedFrom && !keyed:
		t.Fatalf("%d timers with no index", n)
	case n <= keyedFrom/2 && keyed:
		t.Fatalf("%d timers keep an index", n)
	case keyed && len(m) != n:
		t.Fatalf("the index holds %d timers of %d", len(m), n)
	}
}

// BenchmarkTimersArmOneRun arms n watches of one run (a map step of n items), then each again
// as its task goes out again, then cancels the run. ns/timer stays flat from 1,000 to 10,000
// timers: arming and disarming one does not scan the run's others.
func BenchmarkTimersArmOneRun(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			later := time.Now().Add(time.Hour)
			ts := newTimers(time.Now, ignoreTicks, slog.Default())
			defer ts.close()
			for b.Loop() {
				for i := range n {
					ts.arm("r", engine.Command{Type: engine.CmdSchedule, At: later, Step: "each", Item: i, Watch: true}, later)
				}
				for i := range n {
					ts.arm("r", engine.Command{Type: engine.CmdSchedule, At: later.Add(time.Minute), Step: "each", Item: i, Watch: true}, later)
				}
				ts.cancelRun("r")
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*n), "ns/timer")
		})
	}
}

// The timers wait in one queue under one runtime timer: whatever is armed, replaced and
// cancelled, in any order, the queue holds every timer not firing exactly once, in heap order,
// each knowing its place, and the wake is set no later than the first of them.
func TestTimersQueue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	later := time.Now().Add(time.Hour) // none comes due while the test runs
	ts := newTimers(time.Now, ignoreTicks, slog.Default())
	defer ts.close()
	for op := range 5000 {
		run := "r" + strconv.Itoa(rng.IntN(20))
		c := engine.Command{Type: engine.CmdSchedule, At: later.Add(time.Duration(rng.IntN(1000)) * time.Second), Step: "s", Item: rng.IntN(12), Activation: 1, Watch: rng.IntN(2) == 0}
		switch r := rng.IntN(20); {
		case r == 0:
			ts.cancelRun(run)
		case r == 1:
			ts.cancelWhere(func(id string) bool { return id == run })
		default:
			ts.arm(run, c, time.Now())
		}
		checkQueue(t, ts, op)
	}
}

// checkQueue checks the queue's invariants after operation op.
func checkQueue(t *testing.T, ts *timers, op int) {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	total := 0
	for id, list := range ts.runs {
		total += len(list)
		for _, tm := range list {
			if tm.queued == notQueued || int(tm.queued) >= len(ts.queue) || ts.queue[tm.queued] != tm {
				t.Fatalf("after %d operations: run %s's timer %+v is not in its place in the queue", op, id, tm.tick)
			}
		}
	}
	if total != len(ts.queue) {
		t.Fatalf("after %d operations: the queue holds %d timers, the runs %d", op, len(ts.queue), total)
	}
	for i, tm := range ts.queue {
		if int(tm.queued) != i {
			t.Fatalf("after %d operations: the timer at %d says it is at %d", op, i, tm.queued)
		}
		if parent := (i - 1) / 2; i > 0 && tm.due.Before(ts.queue[parent].due) {
			t.Fatalf("after %d operations: the timer at %d is due before its parent", op, i)
		}
	}
	if len(ts.queue) > 0 && (ts.wakeAt.IsZero() || ts.wakeAt.After(ts.queue[0].due)) {
		t.Fatalf("after %d operations: the wake is set for %v, the first timer is due %v", op, ts.wakeAt, ts.queue[0].due)
	}
}

// Timers of many runs, due at different times already passed, each fire once however often
// they are armed before they are published, and the queue is empty after them.
func TestTimersFireEachOnce(t *testing.T) {
	const runs = 200
	got := make(chan string, 2*runs)
	armed := make(chan struct{}) // a tick fired is armed again only once every run's is armed twice
	ts := newTimers(time.Now, func(runID string, _ engine.Command) error {
		<-armed
		got <- runID
		return nil
	}, slog.Default())
	defer ts.close()
	past := time.Now().Add(-time.Minute)
	for i := range runs {
		c := engine.Command{Type: engine.CmdSchedule, At: past.Add(time.Duration(i%7) * time.Second), Step: "wait", Item: -1, Activation: 1}
		ts.arm("r"+strconv.Itoa(i), c, time.Now())
		ts.arm("r"+strconv.Itoa(i), c, time.Now()) // armed twice while it fires, fires once
	}
	close(armed)
	seen := map[string]bool{}
	for range runs {
		id := <-got
		if seen[id] {
			t.Fatalf("run %s's tick fired twice", id)
		}
		seen[id] = true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.queue) != 0 {
		t.Fatalf("%d timers wait after every one fired", len(ts.queue))
	}
	select {
	case id := <-got:
		t.Fatalf("run %s's tick fired again", id)
	default:
	}
}

// A wake set for a timer disarmed since finds nothing due, fires nothing, and is set again for
// the first timer left.
func TestTimersWakeAfterDisarm(t *testing.T) {
	fired := make(chan string, 1)
	ts := newTimers(time.Now, func(runID string, _ engine.Command) error {
		fired <- runID
		return nil
	}, slog.Default())
	defer ts.close()
	soon, later := time.Now().Add(time.Minute), time.Now().Add(time.Hour)
	ts.arm("late", engine.Command{Type: engine.CmdSchedule, At: later, Step: "wait", Item: -1, Activation: 1}, time.Now())
	ts.arm("soon", engine.Command{Type: engine.CmdSchedule, At: soon, Step: "wait", Item: -1, Activation: 1}, time.Now())
	ts.cancelRun("soon")
	ts.mu.Lock()
	wakeAt := ts.wakeAt
	ts.mu.Unlock()
	if !wakeAt.Equal(soon) {
		t.Fatalf("the wake is set for %v, want the disarmed timer's %v", wakeAt, soon)
	}
	ts.wakeUp() // the wake set for soon comes
	ts.mu.Lock()
	wakeAt, queued := ts.wakeAt, len(ts.queue)
	ts.mu.Unlock()
	if !wakeAt.Equal(later) || queued != 1 {
		t.Fatalf("after the wake: set for %v with %d timers queued, want %v and 1", wakeAt, queued, later)
	}
	select {
	case id := <-fired:
		t.Fatalf("run %s's tick fired before it was due", id)
	default:
	}
}

// A step with a timeout has its watch moved at every iteration's dispatch: moving it makes
// nothing.
func TestTimersMoveWatchAllocs(t *testing.T) {
	ts := newTimers(time.Now, ignoreTicks, slog.Default())
	defer ts.close()
	at := time.Now().Add(time.Hour)
	w := engine.Command{Type: engine.CmdSchedule, At: at, Step: "loop", Item: -1, Watch: true}
	ts.arm("r", w, time.Now())
	allocs := testing.AllocsPerRun(100, func() {
		w.At = w.At.Add(time.Second)
		ts.arm("r", w, time.Now())
	})
	if allocs != 0 {
		t.Fatalf("moving a watch allocates %.1f times, want 0", allocs)
	}
}

// The queue's array shrinks once the timers of a burst are gone.
func TestTimersQueueShrinks(t *testing.T) {
	ts := newTimers(time.Now, ignoreTicks, slog.Default())
	defer ts.close()
	later := time.Now().Add(time.Hour)
	const runs = 10_000
	for i := range runs {
		ts.arm("r"+strconv.Itoa(i), engine.Command{Type: engine.CmdSchedule, At: later, Step: "wait", Item: -1, Activation: 1}, time.Now())
	}
	for i := range runs - 1 {
		ts.cancelRun("r" + strconv.Itoa(i))
	}
	checkQueue(t, ts, runs)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if c := cap(ts.queue); c > minQueueCap {
		t.Fatalf("the queue keeps an array of %d for one timer", c)
	}
}
