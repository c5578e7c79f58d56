package runner

import (
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
)

// withSaveWindow replaces v's engine by one whose saves wait up to window, and returns the
// observer of the events it settles.
func withSaveWindow(v *env, window time.Duration) *observer {
	v.stop()
	obs := newObserver()
	v.eng, v.stop = v.startEngine(func(e *Engine) {
		e.saveWindow = window
		obs.attach(e)
	})
	return obs
}

// TestSavesWait runs a loop of 200 iterations. With a window no save reaches in the test, the
// decisions wait until maxWaiting of them do: the record is written at the start, after
// decisions 65, 130 and 195, and at the end. Saving after every decision writes it 201 times.
// The revision of the run's record counts the writes (the run is the bucket's only key).
func TestSavesWait(t *testing.T) {
	const iterations = 200
	for _, tc := range []struct {
		name   string
		window time.Duration
		writes uint64
	}{
		{"coalesced", time.Hour, 5},
		{"every decision", -1, 1 + iterations},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t)
			obs := withSaveWindow(v, tc.window)
			v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Continued(task, "null") })
			rec := v.Wait(v.Start(runtest.LoopWorkflow(t, iterations), "", ""))
			if sr := rec.Run.Steps["think"]; rec.Run.Status != protocol.RunCompleted || sr.Iteration != iterations || sr.Attempts != iterations {
				t.Fatalf("run %s at iteration %d after %d tasks, want completed at %d", rec.Run.Status, sr.Iteration, sr.Attempts, iterations)
			}
			if rec.Revision != tc.writes {
				t.Errorf("the record was written %d times, want %d", rec.Revision, tc.writes)
			}
			acked(t, v, obs, 1+iterations)
		})
	}
}

// TestSaveWindowPasses: the decisions of a loop whose worker stops answering are saved once the
// window passes, with nothing else to save them.
func TestSaveWindowPasses(t *testing.T) {
	v := newEnv(t)
	obs := withSaveWindow(v, 50*time.Millisecond)
	v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event {
		if task.Iteration == 5 {
			return nil
		}
		return runtest.Continued(task, "null")
	})
	id := v.Start(runtest.LoopWorkflow(t, 10), "", "")
	// Only the window can save the decision that dispatched iteration 5: no event follows it.
	v.WaitFor(id, func(r *client.Record) bool { return r.Run.Steps["think"].Iteration == 5 })
	acked(t, v, obs, 5)
}

// TestStopSavesWaiting: an engine that stops saves the decisions that wait, and acknowledges
// their events.
func TestStopSavesWaiting(t *testing.T) {
	v := newEnv(t)
	obs := withSaveWindow(v, time.Hour)
	w := v.Worker("think")
	id := v.Start(runtest.LoopWorkflow(t, 10), "", "")
	for range 4 {
		v.Publish(runtest.Continued(w.Next(), "null"), "")
	}
	if task := w.Next(); task.Iteration != 5 { // dispatched: the 4 decisions were made
		t.Fatalf("task of iteration %d, want 5", task.Iteration)
	}
	if rec, err := v.Client.Get(v.Ctx, id); err != nil || rec.Revision != 1 {
		t.Fatalf("before the stop: revision %d (%v), want 1: the 4 decisions wait for a save", revision(rec), err)
	}
	v.stop()
	rec, err := v.Client.Get(v.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if it := rec.Run.Steps["think"].Iteration; rec.Revision != 2 || it != 5 {
		t.Fatalf("after the stop: revision %d at iteration %d, want 2 at 5", rec.Revision, it)
	}
	acked(t, v, obs, 5)
}

func revision(rec *client.Record) uint64 {
	if rec == nil {
		return 0
	}
	return rec.Revision
}

// acked waits until the engine has acknowledged n events, and fails if it settles one
// otherwise first.
func acked(t *testing.T, v *env, obs *observer, n int) {
	t.Helper()
	for i := range n {
		select {
		case got := <-obs.ch:
			if got.out != ack {
				t.Fatalf("event %d (%s) settled as %v, want ack", i+1, got.ev.Type, got.out)
			}
		case <-v.Ctx.Done():
			t.Fatalf("the engine acknowledged %d events, want %d", i, n)
		}
	}
}
