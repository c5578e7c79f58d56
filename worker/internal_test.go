package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/reins-run/reins/protocol"
)

func TestEndedRunsAreBounded(t *testing.T) {
	r := newRunTable(3)
	before := time.Now().Add(-time.Minute) // when the tasks were published
	for i := range 5 {
		r.end(fmt.Sprint("run", i))
	}
	r.end("run4") // known already: not added twice
	for i, want := range []bool{false, false, true, true, true} {
		if got := r.isEnded(fmt.Sprint("run", i), before); got != want {
			t.Errorf("run%d ended = %v, want %v (the last 3 ids are kept)", i, got, want)
		}
	}
	if !r.isEnded("run3/call/1/2", before) || r.isEnded("run33", before) || r.isEnded("run1/x/1", before) {
		t.Error("a sub-run ends with its parent, and only with it")
	}
}

// A task published after its run was announced ended is not the ended run's: the announcement
// was not true (a stray message), or the id names a new run.
func TestEndedRunsOnlyDropEarlierTasks(t *testing.T) {
	r := newRunTable(3)
	r.end("run1")
	if r.isEnded("run1", time.Now().Add(time.Second)) || r.isEnded("run1/call/1", time.Now().Add(time.Second)) {
		t.Error("a task published after the announcement is dropped")
	}
	if !r.isEnded("run1", time.Now().Add(-time.Second)) {
		t.Error("a task published before the announcement runs")
	}
}

func TestCheckpointCache(t *testing.T) {
	sc := func(run string) ckScope { return ckScope{run: run, step: "loop", item: -1, activation: 1} }
	c := newCkCache(2, 100)
	c.put(sc("a"), 1, []byte("[1]"))
	if _, ok := c.take(sc("a"), 2); ok {
		t.Error("took the value of iteration 1 as iteration 2's")
	}
	if _, ok := c.take(sc("a"), 1); ok {
		t.Error("a mismatched take must drop the entry")
	}
	c.put(sc("a"), 1, []byte("[1]"))
	c.bump(sc("a"), 1, 2)
	if raw, ok := c.take(sc("a"), 2); !ok || string(raw) != "[1]" {
		t.Errorf("after bump: %s %v", raw, ok)
	}
	c.put(sc("a"), 3, nil)
	c.bump(sc("a"), 1, 2) // not at 1: dropped
	if _, ok := c.take(sc("a"), 3); ok {
		t.Error("a mismatched bump must drop the entry")
	}
	c.put(sc("a"), 1, nil)
	c.put(sc("b"), 1, nil)
	c.put(sc("c"), 1, nil) // evicts a
	if _, ok := c.take(sc("a"), 1); ok {
		t.Error("the oldest entry survived the entry bound")
	}
	c.put(sc("big"), 1, make([]byte, 101)) // larger than the byte bound: not kept
	if _, ok := c.take(sc("big"), 1); ok {
		t.Error("an entry larger than the byte bound was kept")
	}
	c.put(sc("d"), 1, make([]byte, 60))
	c.put(sc("e"), 1, make([]byte, 60)) // evicts d for bytes
	if _, ok := c.take(sc("d"), 1); ok {
		t.Error("the byte bound was not enforced")
	}
	if _, ok := c.take(sc("e"), 1); !ok {
		t.Error("the newest entry was evicted")
	}
	c.put(sc("f"), 1, make([]byte, 10))
	c.drop(sc("f"))
	if len(c.entries) != 0 || c.order.Len() != 0 || c.bytes != 0 {
		t.Errorf("entries %d, list %d, bytes %d", len(c.entries), c.order.Len(), c.bytes)
	}
}

func TestAppendItems(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"", `[1,2]`}, {"null", `[1,2]`}, {"[]", `[1,2]`}, {"[0]", `[0,1,2]`},
	} {
		var raw []byte
		if c.raw != "" {
			raw = []byte(c.raw)
		}
		if got := appendItems(raw, [][]byte{[]byte("1"), []byte("2")}); string(got) != c.want {
			t.Errorf("appendItems(%s) = %s, want %s", c.raw, got, c.want)
		}
	}
	for _, v := range []string{`{"a":1}`, `"s"`, `3`} {
		if appendable([]byte(v)) {
			t.Errorf("%s is appendable", v)
		}
	}
	if _, err := applyWrite(nil, []byte(`{"other":1}`)); err == nil {
		t.Error("a write that is neither set nor append was applied")
	}
	if raw, err := applyWrite([]byte("[1]"), []byte(`{"set": [ 2 ]}`)); err != nil || string(raw) != "[2]" {
		t.Errorf("set: %s %v", raw, err)
	}
}

// The worker remembers the tasks it answered, the last max of them.
func TestAnsweredSetIsBounded(t *testing.T) {
	a := newAnsweredSet(2)
	for _, id := range []string{"r/s/1/1/1", "r/s/1/2/1", "r/s/1/2/1", "r/s/1/3/1"} {
		a.add(id)
	}
	for id, want := range map[string]bool{"r/s/1/1/1": false, "r/s/1/2/1": true, "r/s/1/3/1": true, "r/s/1/4/1": false} {
		if got := a.has(id); got != want {
			t.Errorf("has(%s) = %v, want %v", id, got, want)
		}
	}
}

// A second delivery of a task is refused while the first runs, and removing a delivery that
// was never admitted does not make the table forget the first: a third delivery is still
// refused until the first is removed.
func TestRunTableAdmitsOneDeliveryOfATask(t *testing.T) {
	r := newRunTable(3)
	tcOf := func(msgID, run string) *taskContext {
		return &taskContext{task: &protocol.Task{MsgID: msgID, RunID: run}}
	}
	first, second, other := tcOf("run1/s/1/1/1", "run1"), tcOf("run1/s/1/1/1", "run1"), tcOf("run2/s/1/1/1", "run2")
	if ended, dup := r.admit(first); ended || dup {
		t.Fatalf("the first delivery: ended %v, dup %v; want it admitted", ended, dup)
	}
	if _, dup := r.admit(other); dup {
		t.Fatal("another task is taken for a second delivery of the first")
	}
	if _, dup := r.admit(second); !dup {
		t.Fatal("a second delivery of a running task is admitted")
	}
	r.remove(second) // a delivery that was never admitted: the running one's entry stays
	if _, dup := r.admit(tcOf("run1/s/1/1/1", "run1")); !dup {
		t.Fatal("removing a refused delivery made the table forget the one that runs")
	}
	r.remove(first)
	if ended, dup := r.admit(second); ended || dup {
		t.Fatalf("after the first was removed: ended %v, dup %v; want the next delivery admitted", ended, dup)
	}
	if got := len(r.runningTasks(nil)); got != 0 {
		t.Errorf("%d tasks running: none of the admitted handlers started", got)
	}
}
