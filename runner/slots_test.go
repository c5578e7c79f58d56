package runner

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// perKey is one task step (handler "serve") under the concurrency key {{input.c}} with limit.
func perKey(t testing.TB, limit int) *workflow.Bundles {
	t.Helper()
	wf := workflow.New("per-key").Concurrency("{{input.c}}", limit)
	wf.Task("serve", "serve")
	_, bs := runtest.Bundles(t, wf)
	return bs
}

// status returns the saved status of run id.
func (v *env) status(id string) protocol.RunStatus {
	v.T.Helper()
	rec, err := v.Client.Get(v.Ctx, id)
	if err != nil {
		v.T.Fatalf("run %s: %v", id, err)
	}
	return rec.Run.Status
}

// waitStatus waits until run id's saved status is s.
func (v *env) waitStatus(id string, s protocol.RunStatus) *client.Record {
	v.T.Helper()
	return v.WaitFor(id, func(r *client.Record) bool { return r.Run.Status == s })
}

// expectReleased watches the concurrency bucket until it holds nothing, and fails the test
// when it never does: every run ended, and each left its key (its release comes after the
// save of its end).
func (v *env) expectReleased() {
	v.T.Helper()
	w, err := v.KV(v.Box.Names().ConcurrencyBucket()).WatchAll(v.Ctx)
	if err != nil {
		v.T.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	live, listed := map[string]string{}, false
	for e := range w.Updates() {
		switch {
		case e == nil:
			listed = true
		case e.Operation() == jetstream.KeyValuePut:
			live[e.Key()] = string(e.Value())
		default:
			delete(live, e.Key())
		}
		if listed && len(live) == 0 {
			return
		}
	}
	v.T.Fatalf("the concurrency bucket still holds %d keys after every run ended: %v", len(live), live)
}

// holders returns the runs holding a slot of key c of workflow per-key, and those queued.
func (v *env) holders(c string) (holding, queued []string) {
	v.T.Helper()
	e, err := v.KV(v.Box.Names().ConcurrencyBucket()).Get(v.Ctx, slotKey("per-key", c))
	if err != nil {
		v.T.Fatalf("concurrency key %q: %v", c, err)
	}
	return runsOf(v.T, e.Value())
}

// runsOf returns the runs holding a slot and those queued in a key's record.
func runsOf(t testing.TB, data []byte) (holding, queued []string) {
	t.Helper()
	var rec keyRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	for _, h := range rec.Holders {
		holding = append(holding, h.Run)
	}
	for _, q := range rec.Queue {
		queued = append(queued, q.Run)
	}
	return holding, queued
}

// waitHolders watches key c of workflow per-key until its holders and queue are want and
// queue: a release comes after the save of the run that ended.
func (v *env) waitHolders(c string, holding, queued []string) {
	v.T.Helper()
	w, err := v.KV(v.Box.Names().ConcurrencyBucket()).Watch(v.Ctx, slotKey("per-key", c))
	if err != nil {
		v.T.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var h, q []string
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		h, q = nil, nil
		if e.Operation() == jetstream.KeyValuePut {
			h, q = runsOf(v.T, e.Value())
		}
		if slices.Equal(h, holding) && slices.Equal(q, queued) {
			return
		}
	}
	v.T.Fatalf("key %q: holders %v, queue %v; never %v and %v", c, h, q, holding, queued)
}

// TestConcurrencyOneAtATime: five runs of one key with limit 1. The first holds the slot; the
// other four, started while it runs, queue whatever order the engine's shards take their
// starts in, and run one at a time in the order they started: when each one's task comes, it
// alone holds the slot, every later one is queued, and every earlier one completed.
//
// With two engines, the runs' partitions (a hash of each run id) are shared between them: both
// change the key's record, by compare-and-set.
func TestConcurrencyOneAtATime(t *testing.T) {
	t.Run("one engine", func(t *testing.T) { oneAtATime(t, newEnv(t)) })
	t.Run("two engines", func(t *testing.T) {
		v := newEnv(t)
		v.stop()
		live := []string{"engine-a", "engine-b"}
		for _, id := range live {
			v.startEngine(func(e *Engine) { e.id = id })
		}
		awaitOwners(t, v, func(p int) string { return rendezvous(p, live) })
		by := map[string]bool{}
		for _, id := range []string{"q0", "q1", "q2", "q3", "q4"} {
			by[rendezvous(natsbox.Partition(id), live)] = true
		}
		if len(by) != 2 {
			t.Fatalf("the runs' partitions are all owned by %v: the test needs both engines", by)
		}
		oneAtATime(t, v)
	})
}

func oneAtATime(t *testing.T, v *env) {
	bs := perKey(t, 1)
	w := v.Worker("serve")
	ids := []string{v.Start(bs, `{"c":"cust-1"}`, "q0")}
	v.waitStatus("q0", protocol.RunRunning)
	for _, id := range []string{"q1", "q2", "q3", "q4"} {
		ids = append(ids, v.Start(bs, `{"c":"cust-1"}`, id))
	}
	for _, id := range ids[1:] {
		v.waitStatus(id, protocol.RunQueued)
	}
	for i, id := range ids {
		task := w.Next()
		if task.RunID != id {
			t.Fatalf("task %d is of run %s, want %s: runs start in the order they started", i, task.RunID, id)
		}
		v.waitStatus(id, protocol.RunRunning)
		holding, queued := v.holders("cust-1")
		if !slices.Equal(holding, []string{id}) || !slices.Equal(queued, ids[i+1:]) {
			t.Fatalf("while %s runs: holders %v, queue %v; want [%s] and %v", id, holding, queued, id, ids[i+1:])
		}
		for j, other := range ids {
			want := protocol.RunQueued
			switch {
			case j < i:
				want = protocol.RunCompleted
			case j == i:
				continue
			}
			if s := v.status(other); s != want {
				t.Fatalf("while %s runs, run %s is %s, want %s", id, other, s, want)
			}
		}
		v.Publish(runtest.Completed(task, `"served"`), "")
	}
	var last *client.Record
	for _, id := range ids {
		rec := v.Wait(id)
		if rec.Run.Status != protocol.RunCompleted || rec.Run.Slot == nil || rec.Run.Slot.Key != "cust-1" {
			t.Fatalf("run %s: %s, slot %+v", id, rec.Run.Status, rec.Run.Slot)
		}
		if last != nil && rec.Run.Slot.Granted.Before(last.Run.Slot.Granted) {
			t.Fatalf("run %s was granted at %s, before run %s (%s)", id, rec.Run.Slot.Granted, last.Run.ID, last.Run.Slot.Granted)
		}
		last = rec
	}
	v.expectReleased()
}

// TestConcurrencyKeysApart: runs of different keys do not wait for each other, and a limit of 2
// lets two runs of one key run at once, the third waiting.
func TestConcurrencyKeysApart(t *testing.T) {
	v := newEnv(t)
	w := v.Worker("serve")
	one := perKey(t, 1)
	a1 := v.Start(one, `{"c":"a"}`, "a1")
	b1 := v.Start(one, `{"c":"b"}`, "b1")
	tasks := map[string]*protocol.Task{}
	for range 2 {
		task := w.Next()
		tasks[task.RunID] = task
	}
	if tasks[a1] == nil || tasks[b1] == nil {
		t.Fatalf("tasks of %v: want runs a1 and b1 at once (different keys)", tasks)
	}
	two := perKey(t, 2)
	v.Start(two, `{"c":"x"}`, "x1")
	v.waitStatus("x1", protocol.RunRunning)
	v.Start(two, `{"c":"x"}`, "x2")
	v.waitStatus("x2", protocol.RunRunning)
	v.Start(two, `{"c":"x"}`, "x3")
	v.waitStatus("x3", protocol.RunQueued)
	for range 2 {
		task := w.Next()
		tasks[task.RunID] = task
	}
	if tasks["x1"] == nil || tasks["x2"] == nil {
		t.Fatalf("tasks of %v: want x1 and x2 at once (limit 2)", tasks)
	}
	v.Publish(runtest.Completed(tasks["x1"], `1`), "")
	x3 := w.Next()
	if x3.RunID != "x3" {
		t.Fatalf("task of %s, want x3 once x1 ended", x3.RunID)
	}
	for _, task := range []*protocol.Task{tasks[a1], tasks[b1], tasks["x2"], x3} {
		v.Publish(runtest.Completed(task, `1`), "")
	}
	for _, id := range []string{a1, b1, "x1", "x2", "x3"} {
		if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s %s", id, rec.Run.Status)
		}
	}
	v.expectReleased()
}

// TestConcurrencyCancelQueued: a queued run that is cancelled ends cancelled without running
// and leaves the queue: the run behind it takes the slot next. Cancelling the run that holds
// the slot frees it too.
func TestConcurrencyCancelQueued(t *testing.T) {
	v := newEnv(t)
	bs := perKey(t, 1)
	w := v.Worker("serve")
	v.Start(bs, `{"c":"k"}`, "c1")
	first := w.Next()
	v.Start(bs, `{"c":"k"}`, "c2")
	v.waitStatus("c2", protocol.RunQueued)
	v.Start(bs, `{"c":"k"}`, "c3")
	v.waitStatus("c3", protocol.RunQueued)
	v.Start(bs, `{"c":"k"}`, "c4")
	v.waitStatus("c4", protocol.RunQueued)
	if err := v.Client.Cancel(v.Ctx, "c2", "not needed"); err != nil {
		t.Fatal(err)
	}
	rec := v.Wait("c2")
	if rec.Run.Status != protocol.RunCancelled || rec.Run.Error.Code != protocol.CodeCancelled || rec.Run.Steps["serve"].Status != protocol.StepSkipped {
		t.Fatalf("cancelled queued run: %s %+v, step %s", rec.Run.Status, rec.Run.Error, rec.Run.Steps["serve"].Status)
	}
	v.waitHolders("k", []string{"c1"}, []string{"c3", "c4"})
	v.Publish(runtest.Completed(first, `1`), "")
	next := w.Next()
	if next.RunID != "c3" {
		t.Fatalf("task of %s, want c3: the cancelled c2 left the queue", next.RunID)
	}
	if err := v.Client.Cancel(v.Ctx, "c3", "stop"); err != nil {
		t.Fatal(err)
	}
	if last := w.Next(); last.RunID != "c4" {
		t.Fatalf("task of %s, want c4 once c3, holding the slot, was cancelled", last.RunID)
	} else {
		v.Publish(runtest.Completed(last, `1`), "")
	}
	if rec := v.Wait("c4"); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run c4 %s", rec.Run.Status)
	}
	v.Wait("c3")
	v.expectReleased()
}

// TestConcurrencyForgedGrant: a granted event for a queued run sent by a worker (on the run's
// subject) is refused; one on the engine's subject for a run that holds no slot (a stale one)
// changes nothing: the run stays queued and no task is sent for it.
func TestConcurrencyForgedGrant(t *testing.T) {
	v, obs := newObservedEnv(t)
	bs := perKey(t, 1)
	w := v.Worker("serve")
	v.Start(bs, `{"c":"k"}`, "f1")
	first := w.Next()
	v.Start(bs, `{"c":"k"}`, "f2")
	v.waitStatus("f2", protocol.RunQueued)
	runSubj, _ := natsbox.EventSubject("f2")
	publishOn(t, v, runSubj, &protocol.Event{RunID: "f2", Type: protocol.EvGranted, At: first.NotBefore, Item: -1}, "forged-by-a-worker")
	obs.await(t, v.Ctx, refuse, func(ev *protocol.Event) bool { return ev.Type == protocol.EvGranted && ev.RunID == "f2" })
	v.Publish(&protocol.Event{RunID: "f2", Type: protocol.EvGranted, At: first.NotBefore, Item: -1}, "forged")
	obs.await(t, v.Ctx, ack, func(ev *protocol.Event) bool { return ev.Type == protocol.EvGranted && ev.RunID == "f2" })
	if s := v.status("f2"); s != protocol.RunQueued {
		t.Fatalf("run f2 is %s after a forged grant, want queued", s)
	}
	v.Publish(runtest.Completed(first, `1`), "")
	if task := w.Next(); task.RunID != "f2" {
		t.Fatalf("task of %s, want f2", task.RunID)
	} else {
		v.Publish(runtest.Completed(task, `1`), "")
	}
	v.Wait("f2")
	v.expectReleased()
}

// TestConcurrencyQueueFull: a run that would queue past the bound of its key's queue is refused
// at once (E_QUEUE_FULL) rather than waiting, and takes no place: the runs queued before it
// run in turn, and the bucket ends empty.
func TestConcurrencyQueueFull(t *testing.T) {
	v := newEnv(t)
	v.stop()
	v.eng, v.stop = v.startEngine(func(e *Engine) { e.maxQueued = 2 })
	bs := perKey(t, 1)
	w := v.Worker("serve")
	v.Start(bs, `{"c":"k"}`, "full0")
	v.waitStatus("full0", protocol.RunRunning)
	for _, id := range []string{"full1", "full2"} {
		v.Start(bs, `{"c":"k"}`, id)
		v.waitStatus(id, protocol.RunQueued)
	}
	rec := v.Wait(v.Start(bs, `{"c":"k"}`, "full3"))
	if rec.Run.Status != protocol.RunFailed || rec.Run.Error.Code != protocol.CodeQueueFull || rec.Run.Steps["serve"].Status != protocol.StepSkipped {
		t.Fatalf("run over the queue's bound: %s %+v", rec.Run.Status, rec.Run.Error)
	}
	v.waitHolders("k", []string{"full0"}, []string{"full1", "full2"})
	for _, id := range []string{"full0", "full1", "full2"} {
		task := w.Next()
		if task.RunID != id {
			t.Fatalf("task of %s, want %s", task.RunID, id)
		}
		v.Publish(runtest.Completed(task, `1`), "")
		v.Wait(id)
	}
	v.expectReleased()
}

// TestConcurrencyKeyNotRendered: a run whose input lacks the key's path fails with
// E_CONCURRENCY_KEY before any step and takes no slot.
func TestConcurrencyKeyNotRendered(t *testing.T) {
	v := newEnv(t)
	rec := v.Wait(v.Start(perKey(t, 1), `{"other":1}`, "nokey"))
	if rec.Run.Status != protocol.RunFailed || rec.Run.Error.Code != protocol.CodeConcurrencyKey {
		t.Fatalf("run %s %+v, want failed with %s", rec.Run.Status, rec.Run.Error, protocol.CodeConcurrencyKey)
	}
	v.expectReleased()
}

// TestKeyRecordRules: the rules of a key's record, apart from the bucket. A run queues behind
// every run that started before it, whatever order the acquires come in; the head of the queue
// gets a slot while fewer runs hold one than its own limit; a run leaves holding or queued, and
// doing any of it twice changes nothing.
func TestKeyRecordRules(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 3, 1, 9, 0, s, 0, time.UTC) }
	run := func(id string, s, limit int) slotRun { return slotRun{Run: id, Started: at(s), Limit: limit} }
	names := func(rs []slotRun) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, r.Run)
		}
		return out
	}
	for _, tc := range []struct {
		name          string
		steps         func(rec *keyRecord)
		holders, wait []string
	}{
		{"the first takes the slot", func(rec *keyRecord) {
			rec.enqueue(run("a", 1, 1))
			rec.grant()
		}, []string{"a"}, []string{}},
		{"queued in start order, whatever the order of the acquires", func(rec *keyRecord) {
			for _, r := range []slotRun{run("h", 0, 1), run("c", 3, 1), run("a", 1, 1), run("b", 2, 1), run("b2", 2, 1)} {
				rec.enqueue(r)
				rec.grant()
			}
		}, []string{"h"}, []string{"a", "b", "b2", "c"}},
		{"an acquire again changes nothing", func(rec *keyRecord) {
			rec.enqueue(run("a", 1, 1))
			rec.grant()
			rec.enqueue(run("b", 2, 1))
			if rec.enqueue(run("a", 1, 1)) || rec.enqueue(run("b", 2, 1)) || rec.grant() {
				t.Error("an acquire again changed the record")
			}
		}, []string{"a"}, []string{"b"}},
		{"a release grants the head", func(rec *keyRecord) {
			for _, r := range []slotRun{run("a", 1, 1), run("b", 2, 1), run("c", 3, 1)} {
				rec.enqueue(r)
				rec.grant()
			}
			rec.leave("a")
			rec.grant()
			if rec.leave("a") {
				t.Error("a release again changed the record")
			}
		}, []string{"b"}, []string{"c"}},
		{"a queued run leaves", func(rec *keyRecord) {
			for _, r := range []slotRun{run("a", 1, 1), run("b", 2, 1), run("c", 3, 1)} {
				rec.enqueue(r)
				rec.grant()
			}
			rec.leave("b")
			if rec.grant() {
				t.Error("a queued run's release granted a slot")
			}
		}, []string{"a"}, []string{"c"}},
		{"each run its own limit", func(rec *keyRecord) {
			for _, r := range []slotRun{run("a", 1, 2), run("b", 2, 2), run("c", 3, 1), run("d", 4, 3)} {
				rec.enqueue(r)
				rec.grant()
			}
			rec.leave("a") // c needs fewer than 1 holders: b still holds one
		}, []string{"b"}, []string{"c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec keyRecord
			tc.steps(&rec)
			if h, q := names(rec.Holders), names(rec.Queue); !slices.Equal(h, tc.holders) || !slices.Equal(q, tc.wait) {
				t.Fatalf("holders %v, queue %v; want %v and %v", h, q, tc.holders, tc.wait)
			}
		})
	}
}
