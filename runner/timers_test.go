package runner

import (
	"log/slog"
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
// its key, the whole command in a closure); what stays must be small enough for the aim of
// 10,000 waiting runs under 100 MB, engine and server together.
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
	if per > 400 {
		t.Errorf("a waiting run's timer costs %d B of heap, want at most 400", per)
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
		ts.arm("r", watch2, time.Now())
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if tm := ts.find("r", tickOf(watch2)); tm == nil || !tm.due.Equal(watch2.At) {
			t.Fatalf("the watch is due %v, want %v", tm, watch2.At)
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
