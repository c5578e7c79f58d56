package runner

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// watchSpan is the span of the watch of the tasks of watchedLoop: its timeout, 1 s, and the
// engine's least grace.
const watchSpan = time.Second + engine.MinTaskGrace

// watchedLoop is an agent_loop of three iterations whose attempts have a timeout and no retry:
// one watch fired early fails the run.
func watchedLoop(t *testing.T) (*workflow.Definition, *workflow.Bundles) {
	wf := workflow.New("watched")
	wf.AgentLoop("loop", "count").WithMaxIterations(3).WithTimeout(time.Second)
	return runtest.Bundles(t, wf)
}

// watchDueOf is when the timer of the watch of step of run runID fires (zero: none is armed).
func watchDueOf(e *Engine, runID, step string) time.Time {
	e.timers.mu.Lock()
	defer e.timers.mu.Unlock()
	if tm := e.timers.find(runID, tick{step: step, item: -1, watch: true}); tm != nil {
		return tm.due
	}
	return time.Time{}
}

// An answer decided long after its time (it waited behind a partition's backlog, replayed
// after a failover) dispatches the next task with a watch that Decide counts from the answer's
// time: already due. The engine gives the task its whole timeout and grace from when it went
// out instead of timing it out at once, which failed the run with an answer on its way (as
// seen in the node-failover benchmark: a run stopped for good).
func TestLateDecisionWatchesFromDispatch(t *testing.T) {
	v, obs := newObservedEnv(t)
	_, bs := watchedLoop(t)
	w := v.Worker("count")
	id := v.Start(bs, `{}`, "late-1")
	first := w.Next()
	late := runtest.Continued(first, `1`)
	late.At = time.Now().Add(-10 * time.Minute)
	before := time.Now()
	v.Publish(late, "")
	obs.await(t, v.Ctx, ack, func(ev *protocol.Event) bool {
		return ev.RunID == id && ev.Type == protocol.EvContinued && ev.Iteration == 1
	})
	switch due := watchDueOf(v.eng, id, "loop"); {
	case due.IsZero():
		t.Fatal("no watch is armed for iteration 2: it fired at once, timing out a task just sent")
	case due.Before(before.Add(watchSpan)):
		t.Fatalf("the watch of iteration 2 fires at %s, %s after its task went out at the earliest; want its span, %s",
			due.Format(time.RFC3339Nano), due.Sub(before), watchSpan)
	}
	second := w.Next()
	v.Publish(runtest.Continued(second, `2`), "")
	third := w.Next()
	v.Publish(runtest.Completed(third, `3`), "")
	rec := v.Wait(id)
	if sr := rec.Run.Steps["loop"]; rec.Run.Status != protocol.RunCompleted || sr.Attempts != 3 {
		t.Fatalf("run %s (%v), %d attempts; want completed after 3 attempts, none timed out", rec.Run.Status, rec.Run.Error, sr.Attempts)
	}
}

// A run read from the bucket (a partition taken over, a run the cache let go) has its watches
// armed from the save: the task in flight went out before the save, maybe long after the time
// of the decision that dispatched it.
func TestRearmedWatchCountsFromTheSave(t *testing.T) {
	v := newEnv(t)
	def, bs := watchedLoop(t)
	if err := runstore.PutBundles(v.Ctx, v.KV(natsbox.WorkflowsBucket), bs); err != nil {
		t.Fatal(err)
	}
	const id = "late-2"
	run, _, err := engine.Start(def, id, json.RawMessage(`{}`), time.Now().Add(-10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	data, err := runstore.EncodeRecord(&engine.Record{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, err := v.KV(natsbox.RunsBucket).Create(v.Ctx, id, data); err != nil {
		t.Fatal(err)
	}
	sh := &shard{cache: newRunCache(nil), single: map[string]bool{}}
	if ent, fresh, err := v.eng.load(v.Ctx, sh, id); ent == nil || !fresh || err != nil {
		t.Fatalf("load: %v, fresh %v, %v", ent, fresh, err)
	}
	// The server stamps the save, the engine reads its own clock: a millisecond of slack.
	if due := watchDueOf(v.eng, id, "loop"); due.Before(before.Add(watchSpan - time.Millisecond)) {
		t.Fatalf("the rearmed watch fires at %s, %s after the save at the earliest; want its span, %s",
			due.Format(time.RFC3339Nano), due.Sub(before), watchSpan)
	}
}
