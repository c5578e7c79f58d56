package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// gone checks that run id has no record, no events and no checkpoint keys left.
func (v *env) gone(id string) {
	v.T.Helper()
	if _, err := v.Client.Get(v.Ctx, id); !errors.Is(err, client.ErrNotFound) {
		v.T.Errorf("run %s: the record is still there (%v)", id, err)
	}
	if _, err := v.Client.Events(v.Ctx, id); !errors.Is(err, client.ErrNotFound) {
		v.T.Errorf("run %s: events are still there (%v)", id, err)
	}
	if keys := v.checkpointKeys(id); len(keys) != 0 {
		v.T.Errorf("run %s: checkpoint keys are still there: %v", id, keys)
	}
}

// kept checks that run id still has its record and its events.
func (v *env) kept(id string) {
	v.T.Helper()
	if _, err := v.Client.Get(v.Ctx, id); err != nil {
		v.T.Errorf("run %s: %v", id, err)
	}
	if evs, err := v.Client.Events(v.Ctx, id); err != nil || len(evs) == 0 {
		v.T.Errorf("run %s: events %d, %v", id, len(evs), err)
	}
}

func TestPrune(t *testing.T) {
	v := newEnv(t)
	v.startWorker((&historyWorker{inputs: map[string]string{}}).register)
	v.Worker("prep").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `{"topic":"nats"}`) })
	v.Worker("child-work").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `{"summary":"done"}`) })
	loop := runtest.LoopWorkflow(t, 10)

	v.Start(loop, `{"n":0}`, "old-loop")
	v.Wait("old-loop")
	v.Start(runtest.LoadBundles(t, "testdata/parent.toml"), `{}`, "old-call")
	v.Wait("old-call")
	if _, err := v.Client.Get(v.Ctx, "old-call/sub/1"); err != nil {
		t.Fatalf("the sub-run: %v", err)
	}
	cut := time.Now() // the runs above ended before, the runs below after
	v.Start(loop, `{"n":0}`, "recent")
	recent := v.Wait("recent")
	stuck := workflow.New("stuck")
	stuck.Task("wait", "nobody-serves-this")
	_, sbs := runtest.Bundles(t, stuck)
	v.Start(sbs, "", "running")
	v.WaitFor("running", func(r *client.Record) bool { return r.Run.Steps["wait"].Status == protocol.StepRunning })
	// A waiting run (one an approval holds), saved as such.
	w := *recent.Run
	w.ID, w.Status = "waiting", protocol.RunWaiting
	data, err := json.Marshal(&client.Record{Run: &w})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := v.Box.JetStream().KeyValue(v.Ctx, natsbox.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Create(v.Ctx, "waiting", data); err != nil {
		t.Fatal(err)
	}
	if n := len(v.checkpointKeys("old-loop")); n != 4 {
		t.Fatalf("old-loop has %d checkpoint keys, want 4", n)
	}

	rep, err := v.Client.Prune(v.Ctx, time.Hour, time.Now())
	if err != nil || rep != (client.PruneReport{Before: rep.Before}) {
		t.Fatalf("nothing ended an hour ago, yet: %+v, %v", rep, err)
	}

	rep, err = v.Client.Prune(v.Ctx, time.Hour, cut.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if want := (client.PruneReport{Runs: 2, SubRuns: 1, Checkpoints: 4, Before: cut.UTC()}); rep != want {
		t.Fatalf("prune %+v, want %+v", rep, want)
	}
	v.gone("old-loop")
	v.gone("old-call")
	v.gone("old-call/sub/1")
	// Nothing of them is left in the streams behind the buckets: no purge markers.
	js := v.Box.JetStream()
	rs, err := js.Stream(v.Ctx, natsbox.KVStream(natsbox.RunsBucket))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old-loop", "old-call", "old-call/sub/1"} {
		if m, err := rs.GetLastMsgForSubject(v.Ctx, natsbox.KVSubject(natsbox.RunsBucket, id)); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("run %s left a message in its bucket's stream (%v): %v", id, m.Header, err)
		}
	}
	if n := v.StreamMsgs(natsbox.KVStream(natsbox.CheckpointsBucket)); n != 4 {
		t.Errorf("the checkpoints stream holds %d messages, want recent's 4: no markers", n)
	}
	v.kept("recent")
	v.kept("running")
	if n := len(v.checkpointKeys("recent")); n != 4 {
		t.Errorf("recent has %d checkpoint keys, want 4", n)
	}
	if runs, err := v.Client.List(v.Ctx, ""); err != nil || len(runs) != 3 {
		t.Errorf("list after the prune: %d runs, %v", len(runs), err)
	}

	// Much later: every finished run goes; the running and the waiting run stay.
	rep, err = v.Client.Prune(v.Ctx, time.Hour, time.Now().Add(2*time.Hour))
	if err != nil || rep.Runs != 1 || rep.SubRuns != 0 || rep.Checkpoints != 4 {
		t.Fatalf("second prune %+v, %v: want recent removed", rep, err)
	}
	v.gone("recent")
	v.kept("running")
	if rec, err := v.Client.Get(v.Ctx, "waiting"); err != nil || rec.Run.Status != protocol.RunWaiting {
		t.Errorf("the waiting run: %v", err)
	}
	rep, err = v.Client.Prune(v.Ctx, 0, time.Now().Add(24*time.Hour))
	if err != nil || rep.Runs+rep.SubRuns+rep.Checkpoints != 0 {
		t.Errorf("third prune %+v, %v: want nothing left to remove", rep, err)
	}
	// The engine goes on with the run it keeps.
	if err := v.Client.Cancel(v.Ctx, "running", "done"); err != nil {
		t.Fatal(err)
	}
	if rec := v.Wait("running"); rec.Run.Status != protocol.RunCancelled {
		t.Errorf("running: %s", rec.Run.Status)
	}
}

func TestRetain(t *testing.T) {
	v := newEnv(t)
	v.Worker("hello").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `"hi"`) })
	wf := workflow.New("greet")
	wf.Task("hello", "hello")
	_, bs := runtest.Bundles(t, wf)
	v.Start(bs, "", "greet-1")
	v.Wait("greet-1")

	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	ticks := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	reports := make(chan client.PruneReport, 1)
	ctx, cancel := context.WithCancel(v.Ctx)
	done := make(chan error, 1)
	go func() {
		done <- v.Client.Retain(ctx, client.Retention{
			OlderThan: time.Hour,
			Now:       func() time.Time { return *now.Load() },
			After:     func(d time.Duration) <-chan time.Time { asked <- d; return ticks },
			Pruned: func(r client.PruneReport, err error) {
				if err != nil {
					t.Errorf("prune: %v", err)
				}
				reports <- r
			},
		})
	}()
	// next returns the report of the next prune and the wait that follows it.
	next := func() (client.PruneReport, time.Duration) {
		t.Helper()
		var r client.PruneReport
		select {
		case r = <-reports:
		case <-v.Ctx.Done():
			t.Fatal("Retain did not prune")
		}
		select {
		case d := <-asked:
			return r, d
		case <-v.Ctx.Done():
			t.Fatal("Retain did not wait after the prune")
		}
		return r, 0
	}

	r, every := next() // at once
	if r.Runs != 0 || every != 6*time.Minute {
		t.Fatalf("first prune %+v, then a wait of %s: want nothing removed, then 6m", r, every)
	}
	later := start.Add(2 * time.Hour)
	now.Store(&later)
	ticks <- later
	r, _ = next()
	if r.Runs != 1 || !r.Before.Equal(start.Add(time.Hour)) {
		t.Fatalf("second prune %+v: want greet-1 removed", r)
	}
	v.gone("greet-1")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Retain: %v", err)
	}

	if err := v.Client.Retain(v.Ctx, client.Retention{}); err == nil {
		t.Error("Retain with no retention: no error")
	}
	for in, want := range map[time.Duration]time.Duration{client.DefaultRetention: time.Hour, time.Hour: 6 * time.Minute, 5 * time.Second: time.Second} {
		if got := client.RetentionEvery(in); got != want {
			t.Errorf("RetentionEvery(%s) = %s, want %s", in, got, want)
		}
	}
}
