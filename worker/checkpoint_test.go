package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// iterate plays the engine for one agent_loop step from iteration from: it dispatches each
// iteration (attempt 1, input = the previous output) while the answer is continued and returns
// the last answer.
func (e *env) iterate(run, step, handler string, from int) *protocol.Event {
	e.t.Helper()
	tk := task(run, step, handler, from, 1)
	for {
		e.publish(tk)
		ev := e.event()
		wantEvent(e.t, ev, ev.Type, tk)
		if ev.Type != protocol.EvContinued {
			return ev
		}
		next := task(run, step, handler, tk.Iteration+1, 1)
		next.Input = ev.Output
		tk = next
	}
}

func jsonEq(t testing.TB, got json.RawMessage, want string) {
	t.Helper()
	if string(got) != want {
		t.Fatalf("checkpoint = %s, want %s", got, want)
	}
}

func TestCheckpointSetAndLoad(t *testing.T) {
	e := newEnv(t)
	steps := make(chan string, 16)
	step := func(tc TaskContext) error {
		fail := func(format string, v ...any) error {
			steps <- fmt.Sprintf(format, v...)
			return tc.FailPermanent(fmt.Errorf(format, v...))
		}
		cp, err := tc.LoadCheckpoint()
		if err != nil {
			return fail("load: %v", err)
		}
		switch tc.Iteration() {
		case 1:
			if cp != nil {
				return fail("iteration 1 loaded %s", cp)
			}
			if err := tc.Checkpoint(map[string]int{"a": 1}); err != nil {
				return fail("checkpoint: %v", err)
			}
			if cp, _ = tc.LoadCheckpoint(); string(cp) != `{"a":1}` {
				return fail("after Checkpoint, loaded %s", cp)
			}
			return tc.Continue(nil)
		case 2:
			if string(cp) != `{"a":1}` {
				return fail("iteration 2 loaded %s", cp)
			}
			if err := tc.AppendCheckpoint("x"); err == nil {
				return fail("appending to an object succeeded")
			}
			if err := tc.Checkpoint([]int{1}); err != nil {
				return fail("checkpoint: %v", err)
			}
			if err := tc.AppendCheckpoint(2); err != nil {
				return fail("append: %v", err)
			}
			// The loaded bytes are the worker's, not a copy, but their capacity is clipped: what
			// the handler appends to them is its own, and the worker's next write leaves it be.
			loaded, _ := tc.LoadCheckpoint()
			mine := append(loaded, 'X')
			if err := tc.AppendCheckpoint(3); err != nil {
				return fail("append: %v", err)
			}
			if string(mine) != `[1,2]X` {
				return fail("the handler's append to the loaded bytes became %s after a write", mine)
			}
			if err := tc.AppendCheckpoint(); err != nil {
				return fail("empty append: %v", err)
			}
			return tc.Continue(nil)
		default:
			if string(cp) != `[1,2,3]` {
				return fail("iteration 3 loaded %s", cp)
			}

			if err := tc.Checkpoint(nil); err != nil {
				return fail("checkpoint null: %v", err)
			}
			if err := tc.AppendCheckpoint(map[string]string{"k": "v"}); err != nil {
				return fail("append to null: %v", err)
			}
			cp, _ = tc.LoadCheckpoint()
			return tc.Complete(cp)
		}
	}
	r := e.start(Options{}, map[string]Handler{"cp": step})
	ev := e.iterate("r", "loop", "cp", 1)
	if ev.Type != protocol.EvCompleted {
		t.Fatalf("ended with %s: %s (%v)", ev.Type, ev.Error, drain(steps))
	}
	jsonEq(t, ev.Output, `[{"k":"v"}]`)
	if n := r.reloads.load(); n != 0 {
		t.Errorf("the worker read the checkpoint back %d times; it keeps it between iterations", n)
	}
}

func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case s := <-ch:
			out = append(out, s)
		default:
			return out
		}
	}
}

// appender appends its iteration number every iteration, and completes with the checkpoint at
// iteration last.
func appender(last int) Handler {
	return func(tc TaskContext) error {
		if err := tc.AppendCheckpoint(tc.Iteration()); err != nil {
			return tc.FailPermanent(err)
		}
		if tc.Iteration() < last {
			return tc.Continue(tc.Iteration())
		}
		cp, err := tc.LoadCheckpoint()
		if err != nil {
			return tc.FailPermanent(err)
		}
		return tc.Complete(cp)
	}
}

func TestAppendAcrossIterationsAndWorkers(t *testing.T) {
	e := newEnv(t)
	a := e.start(Options{}, map[string]Handler{"app": appender(5)})
	ev := e.iterate("r1", "loop", "app", 1)
	jsonEq(t, ev.Output, `[1,2,3,4,5]`)
	if n := a.reloads.load(); n != 0 {
		t.Errorf("worker a read the checkpoint back %d times", n)
	}

	// Iterations 1-2 on worker a, 3-5 on worker b: b reads the history once, then keeps it.
	tk := task("r2", "loop", "app", 1, 1)
	e.publish(tk)
	wantEvent(t, e.event(), protocol.EvContinued, tk)
	tk = task("r2", "loop", "app", 2, 1)
	e.publish(tk)
	wantEvent(t, e.event(), protocol.EvContinued, tk)
	a.stop()
	b := e.start(Options{}, map[string]Handler{"app": appender(5)})
	ev = e.iterate("r2", "loop", "app", 3)
	jsonEq(t, ev.Output, `[1,2,3,4,5]`)
	if n := b.reloads.load(); n != 1 {
		t.Errorf("worker b read the checkpoint back %d times, want once", n)
	}
}

// A set replaces what came before it, so a worker that reads a checkpoint back starts from the
// last set: it decodes nothing written before (here a write made unreadable on purpose).
func TestReloadStartsAtTheLastSet(t *testing.T) {
	e := newEnv(t)
	h := func(tc TaskContext) error {
		var err error
		switch it := tc.Iteration(); {
		case it == 3: // a compaction: the same value, written whole
			err = tc.Checkpoint([]int{1, 2, 3})
		case it < 6:
			err = tc.AppendCheckpoint(it)
		default:
			cp, err := tc.LoadCheckpoint()
			if err != nil {
				return tc.FailPermanent(err)
			}
			return tc.Complete(cp)
		}
		if err != nil {
			return tc.FailPermanent(err)
		}
		return tc.Continue(nil)
	}
	a := e.start(Options{}, map[string]Handler{"h": h})
	for it := 1; it <= 5; it++ {
		tk := task("r", "loop", "h", it, 1)
		e.publish(tk)
		wantEvent(t, e.event(), protocol.EvContinued, tk)
	}
	a.stop()
	scope := wire.CheckpointScope("r", "loop", -1, 1)
	kv, err := e.js.KeyValue(testCtx(t), natsbox.CheckpointsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), wire.CheckpointWrite{Scope: scope, Iteration: 1}.Key(), []byte("not JSON")); err != nil {
		t.Fatal(err)
	}
	b := e.start(Options{}, map[string]Handler{"h": h})
	tk := task("r", "loop", "h", 6, 1)
	e.publish(tk)
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	jsonEq(t, ev.Output, `[1,2,3,4,5]`)
	if n := b.reloads.load(); n != 1 {
		t.Errorf("worker b read the checkpoint back %d times, want once", n)
	}
}

// The writes of an attempt that failed do not count: the next attempt starts from the earlier
// iterations' value.
func TestRetryPurgesTheFailedAttemptsWrites(t *testing.T) {
	e := newEnv(t)
	loaded := make(chan string, 4)
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		cp, err := tc.LoadCheckpoint()
		if err != nil {
			return tc.FailPermanent(err)
		}
		loaded <- string(cp)
		switch {
		case tc.Iteration() == 1:
			_ = tc.AppendCheckpoint("a")
			return tc.Continue(nil)
		case tc.Attempt() == 1:
			_ = tc.AppendCheckpoint("stale1", "stale2")
			_ = tc.AppendCheckpoint("stale3")
			return errors.New("flaky")
		default:
			_ = tc.AppendCheckpoint("b")
			cp, _ := tc.LoadCheckpoint()
			return tc.Complete(cp)
		}
	}})
	tk := task("r", "loop", "h", 1, 1)
	e.publish(tk)
	wantEvent(t, e.event(), protocol.EvContinued, tk)
	tk = task("r", "loop", "h", 2, 1)
	e.publish(tk)
	wantEvent(t, e.event(), protocol.EvFailed, tk)
	tk = task("r", "loop", "h", 2, 2)
	e.publish(tk)
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	jsonEq(t, ev.Output, `["a","b"]`)
	if got := []string{recv(t, loaded), recv(t, loaded), recv(t, loaded)}; got[2] != `["a"]` {
		t.Errorf("loaded %q: the retry must not see the failed attempt's writes", got)
	}
	scope := wire.CheckpointScope("r", "loop", -1, 1)
	vals := e.checkpointValues(scope)
	if len(vals) != 2 || string(vals[scope+".2.0"]) != `{"append":["b"]}` {
		t.Errorf("keys after the retry: %q", vals)
	}
}

// The writes of an attempt whose worker stopped (or crashed) without answering do not count
// either: the same attempt delivered again purges them.
func TestRedeliveryPurgesTheLostAttemptsWrites(t *testing.T) {
	e := newEnv(t)
	wrote := make(chan struct{}, 1)
	first := e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		if tc.Iteration() == 1 {
			_ = tc.Checkpoint([]string{"a"})
			return tc.Continue(nil)
		}
		_ = tc.AppendCheckpoint("stale")
		wrote <- struct{}{}
		<-tc.Done()
		return tc.Err()
	}})
	tk := task("r", "loop", "h", 1, 1)
	e.publish(tk)
	wantEvent(t, e.event(), protocol.EvContinued, tk)
	tk = task("r", "loop", "h", 2, 1)
	e.publish(tk)
	recv(t, wrote)
	first.stop()
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		cp, err := tc.LoadCheckpoint()
		if err != nil {
			return tc.FailPermanent(err)
		}
		return tc.Complete(cp)
	}})
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	jsonEq(t, ev.Output, `["a"]`)
	scope := wire.CheckpointScope("r", "loop", -1, 1)
	if vals := e.checkpointValues(scope); len(vals) != 1 || vals[scope+".1.0"] == nil {
		t.Errorf("keys after the redelivery: %q, want only iteration 1's", vals)
	}
}

// An append writes bytes in proportion to its items, however long the history.
func TestAppendWritesOnlyTheItems(t *testing.T) {
	e := newEnv(t)
	item := strings.Repeat("z", 1024)
	const iterations = 40
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		if err := tc.AppendCheckpoint(item); err != nil {
			return tc.FailPermanent(err)
		}
		if tc.Iteration() < iterations {
			return tc.Continue(nil)
		}
		cp, err := tc.LoadCheckpoint()
		if err != nil {
			return tc.FailPermanent(err)
		}
		var items []string
		if err := json.Unmarshal(cp, &items); err != nil {
			return tc.FailPermanent(err)
		}
		return tc.Complete(len(items))
	}})
	ev := e.iterate("r", "loop", "h", 1)
	jsonEq(t, ev.Output, fmt.Sprint(iterations))
	vals := e.checkpointValues(wire.CheckpointScope("r", "loop", -1, 1))
	if len(vals) != iterations {
		t.Fatalf("%d keys, want one per iteration", len(vals))
	}
	want := len(`{"append":[""]}`) + len(item)
	for k, v := range vals {
		if len(v) != want {
			t.Errorf("%s holds %d bytes, want %d (the item only)", k, len(v), want)
		}
	}
}

func TestCheckpointAfterTheAnswerIsRefused(t *testing.T) {
	e := newEnv(t)
	errs := make(chan [3]error, 1)
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		_ = tc.Checkpoint(1)
		_ = tc.Continue(nil)
		_, lerr := tc.LoadCheckpoint()
		errs <- [3]error{tc.Checkpoint(2), tc.AppendCheckpoint(3), lerr}
		return nil
	}})
	e.publish(task("r", "loop", "h", 1, 1))
	for i, err := range recv(t, errs) {
		if !isAnswered(err) {
			t.Errorf("call %d after the answer returned %v, want ErrAnswered", i, err)
		}
	}
}

// The handler of Example, run: it continues until iteration 3, then completes with the log.
func TestContinueUntilIterationThree(t *testing.T) {
	e := newEnv(t)
	e.start(Options{}, map[string]Handler{"count-to-three": func(tc TaskContext) error {
		if err := tc.AppendCheckpoint(map[string]any{"iteration": tc.Iteration(), "input": tc.Input()}); err != nil {
			return err
		}
		if tc.Iteration() < 3 {
			return tc.Continue(map[string]int{"next": tc.Iteration() + 1})
		}
		history, err := tc.LoadCheckpoint()
		if err != nil {
			return err
		}
		return tc.CompleteWith(history, Outcome{StopReason: "counted"})
	}})
	ev := e.iterate("r", "loop", "count-to-three", 1)
	if ev.Type != protocol.EvCompleted || ev.Iteration != 3 || ev.StopReason != "counted" {
		t.Fatalf("ended with %s at iteration %d (%q)", ev.Type, ev.Iteration, ev.StopReason)
	}
	jsonEq(t, ev.Output, `[{"input":{"n":1},"iteration":1},{"input":{"next":2},"iteration":2},{"input":{"next":3},"iteration":3}]`)
}
