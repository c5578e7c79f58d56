package client_test

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// TestDecideEachPendingCall pauses an agent on two calls and decides them one at a time by
// call id through the Client: the run waits until both are decided, then the same iteration is
// dispatched again carrying both decisions, and its answer ends the step.
func TestDecideEachPendingCall(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("two_calls").Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"done"}]`)})
	wf.Agent("act", "m").WithGoal("act")
	_, bs := runtest.Bundles(t, wf)
	var mu sync.Mutex
	var resumed []*protocol.Task
	v.Worker(protocol.HandlerAgent).Serve(func(task *protocol.Task) *protocol.Event {
		if task.Resume == 0 {
			ev := wire.Answer(task, protocol.EvWaiting, time.Now())
			ev.Pending = []protocol.PendingCall{
				{CallID: "c1", Tool: "refund", Arguments: json.RawMessage(`{"amount":5}`)},
				{CallID: "c2", Tool: "email", Arguments: json.RawMessage(`{"to":"a@b.c"}`)},
			}
			return ev
		}
		mu.Lock()
		resumed = append(resumed, task)
		mu.Unlock()
		return runtest.Completed(task, `{"stop_reason":"completed"}`)
	})
	id := v.Start(bs, "", "")
	v.WaitFor(id, func(rec *client.Record) bool { return rec.Run.Status == protocol.RunWaiting })

	if _, err := v.Client.Decide(v.Ctx, id, "c9", true, "", "ana"); !errors.Is(err, client.ErrNotWaiting) || errors.Is(err, client.ErrRunNotWaiting) {
		t.Fatalf("Decide on an unknown call: %v, want ErrNotWaiting (the run waits for something else, not ErrRunNotWaiting)", err)
	}
	done, err := v.Client.Decide(v.Ctx, id, "c2", false, "no emails today", "ana")
	if err != nil || len(done) != 1 || done[0].CallID != "c2" || done[0].Tool != "email" {
		t.Fatalf("Decide c2: %+v, %v", done, err)
	}
	if err := v.Client.AwaitDecided(v.Ctx, id, done); err != nil {
		t.Fatalf("AwaitDecided c2: %v", err)
	}
	rec, err := v.Client.Get(v.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d := rec.Run.Steps["act"].Decisions; len(d) != 1 || d["c2"].By != "admin" {
		t.Fatalf("decisions %+v once AwaitDecided returned; want c2's, by admin", d)
	}
	// A decision the engine did not record, for a call decided since: it no longer fits.
	stale := slices.Clone(done)
	stale[0].Event = "not-sent"
	if err := v.Client.AwaitDecided(v.Ctx, id, stale); !errors.Is(err, client.ErrNotWaiting) {
		t.Fatalf("AwaitDecided on a call decided by another decision: %v, want ErrNotWaiting", err)
	}
	if rec.Run.Status != protocol.RunWaiting {
		t.Fatalf("after one of two decisions the run is %s; want still waiting", rec.Run.Status)
	}
	res := client.NewResult(nil, rec)
	if len(res.Waiting) != 1 || len(res.Waiting[0].Pending) != 1 || res.Waiting[0].Pending[0].CallID != "c1" {
		t.Errorf("Result.Waiting %+v; want only c1 pending", res.Waiting)
	}
	if _, err := v.Client.Decide(v.Ctx, id, "", true, "", "ana"); err != nil {
		t.Fatalf("Decide the rest: %v", err)
	}
	final := v.Wait(id)
	if final.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %+v", final.Run.Status, final.Run.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resumed) != 1 {
		t.Fatalf("%d resumed tasks; want 1", len(resumed))
	}
	task := resumed[0]
	want := []protocol.Decision{{CallID: "c1", Approve: true, By: "admin", OnBehalfOf: "ana"}, {CallID: "c2", Message: "no emails today", By: "admin", OnBehalfOf: "ana"}}
	if task.Iteration != 1 || task.Resume != 1 || !slices.Equal(task.Decisions, want) {
		t.Errorf("resumed task: iteration %d resume %d decisions %+v; want iteration 1 resume 1 with %+v", task.Iteration, task.Resume, task.Decisions, want)
	}
	if _, err := v.Client.Decide(v.Ctx, id, "", true, "", ""); !errors.Is(err, client.ErrFinished) {
		t.Errorf("Decide on a finished run: %v, want ErrFinished", err)
	}
}

// TestSignalBeforeTheWait sends a signal before any step waits for it: the run keeps it, and
// the wait_event step that starts later takes it at once.
func TestSignalBeforeTheWait(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("late_wait")
	wf.Sleep("pause", time.Hour)
	wf.WaitEvent("hold", "go")
	wf.Edge("pause", "hold")
	_, bs := runtest.Bundles(t, wf)
	id := v.Start(bs, "", "")
	v.WaitFor(id, func(rec *client.Record) bool { return rec.Run.Steps["pause"].Status == protocol.StepRunning })
	if err := v.Client.Signal(v.Ctx, id, "go", json.RawMessage(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	rec := v.WaitFor(id, func(rec *client.Record) bool { return len(rec.Run.Signals["go"]) == 1 })
	if got := string(rec.Run.Signals["go"][0]); got != `{"n":1}` {
		t.Errorf("kept signal %s", got)
	}
	if err := v.Client.Signal(v.Ctx, id, "go", json.RawMessage(`{`)); err == nil {
		t.Error("Signal with data that is not JSON: no error")
	}
	// Nothing waits at all (the step sleeps): ErrRunNotWaiting, which is an ErrNotWaiting.
	if _, err := v.Client.Resume(v.Ctx, id, "", json.RawMessage(`"hi"`)); !errors.Is(err, client.ErrRunNotWaiting) || !errors.Is(err, client.ErrNotWaiting) {
		t.Errorf("Resume with nothing paused: %v, want ErrRunNotWaiting and ErrNotWaiting", err)
	}
	if _, err := v.Client.Decide(v.Ctx, id, "", true, "", ""); !errors.Is(err, client.ErrRunNotWaiting) {
		t.Errorf("Decide with nothing waiting: %v, want ErrRunNotWaiting", err)
	}
}
