package runner

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// gone checks that run id has no record, no events and no checkpoint keys left.
func (v *env) gone(id string) {
	v.t.Helper()
	if _, err := v.client.Get(v.ctx, id); !errors.Is(err, ErrNotFound) {
		v.t.Errorf("run %s: the record is still there (%v)", id, err)
	}
	if _, err := v.client.Events(v.ctx, id); !errors.Is(err, ErrNotFound) {
		v.t.Errorf("run %s: events are still there (%v)", id, err)
	}
	if keys := v.checkpointKeys(id); len(keys) != 0 {
		v.t.Errorf("run %s: checkpoint keys are still there: %v", id, keys)
	}
}

// kept checks that run id still has its record and its events.
func (v *env) kept(id string) {
	v.t.Helper()
	if _, err := v.client.Get(v.ctx, id); err != nil {
		v.t.Errorf("run %s: %v", id, err)
	}
	if evs, err := v.client.Events(v.ctx, id); err != nil || len(evs) == 0 {
		v.t.Errorf("run %s: events %d, %v", id, len(evs), err)
	}
}

func TestPrune(t *testing.T) {
	v := newEnv(t)
	v.startWorker((&historyWorker{inputs: map[string]string{}}).register)
	v.worker("prep").serve(func(task *protocol.Task) *protocol.Event { return completed(task, `{"topic":"nats"}`) })
	v.worker("child-work").serve(func(task *protocol.Task) *protocol.Event { return completed(task, `{"summary":"done"}`) })
	loop := loopWorkflow(t, 10)

	v.start(loop, `{"n":0}`, "old-loop")
	v.wait("old-loop")
	v.start(loadBundles(t, "parent.toml"), `{}`, "old-call")
	v.wait("old-call")
	if _, err := v.client.Get(v.ctx, "old-call/sub/1"); err != nil {
		t.Fatalf("the sub-run: %v", err)
	}
	cut := time.Now() // the runs above ended before, the runs below after
	v.start(loop, `{"n":0}`, "recent")
	recent := v.wait("recent")
	stuck := workflow.New("stuck")
	stuck.Task("wait", "nobody-serves-this")
	_, sbs := bundles(t, stuck)
	v.start(sbs, "", "running")
	v.waitFor("running", func(r *Record) bool { return r.Run.Steps["wait"].Status == protocol.StepRunning })
	// A waiting run (one an approval holds), saved as such.
	w := *recent.Run
	w.ID, w.Status = "waiting", protocol.RunWaiting
	data, err := json.Marshal(&Record{Run: &w})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := v.box.JetStream().KeyValue(v.ctx, natsbox.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Create(v.ctx, "waiting", data); err != nil {
		t.Fatal(err)
	}
	if n := len(v.checkpointKeys("old-loop")); n != 4 {
		t.Fatalf("old-loop has %d checkpoint keys, want 4", n)
	}

	rep, err := v.client.Prune(v.ctx, time.Hour, time.Now())
	if err != nil || rep != (PruneReport{Before: rep.Before}) {
		t.Fatalf("nothing ended an hour ago, yet: %+v, %v", rep, err)
	}

	rep, err = v.client.Prune(v.ctx, time.Hour, cut.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if want := (PruneReport{Runs: 2, SubRuns: 1, Checkpoints: 4, Before: cut.UTC()}); rep != want {
		t.Fatalf("prune %+v, want %+v", rep, want)
	}
	v.gone("old-loop")
	v.gone("old-call")
	v.gone("old-call/sub/1")
	// Nothing of them is left in the streams behind the buckets: no purge markers.
	js := v.box.JetStream()
	for _, id := range []string{"old-loop", "old-call", "old-call/sub/1"} {
		rs, err := js.Stream(v.ctx, "KV_"+natsbox.RunsBucket)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := rs.GetLastMsgForSubject(v.ctx, "$KV."+natsbox.RunsBucket+"."+id); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("run %s left a message in its bucket's stream (%v): %v", id, m.Header, err)
		}
	}
	cs, err := js.Stream(v.ctx, "KV_"+natsbox.CheckpointsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := cs.Info(v.ctx); err != nil || info.State.Msgs != 4 {
		t.Errorf("the checkpoints stream holds %d messages (%v), want recent's 4: no markers", info.State.Msgs, err)
	}
	v.kept("recent")
	v.kept("running")
	if n := len(v.checkpointKeys("recent")); n != 4 {
		t.Errorf("recent has %d checkpoint keys, want 4", n)
	}
	if runs, err := v.client.List(v.ctx, ""); err != nil || len(runs) != 3 {
		t.Errorf("list after the prune: %d runs, %v", len(runs), err)
	}

	// Much later: every finished run goes; the running and the waiting run stay.
	rep, err = v.client.Prune(v.ctx, time.Hour, time.Now().Add(2*time.Hour))
	if err != nil || rep.Runs != 1 || rep.SubRuns != 0 || rep.Checkpoints != 4 {
		t.Fatalf("second prune %+v, %v: want recent removed", rep, err)
	}
	v.gone("recent")
	v.kept("running")
	if rec, err := v.client.Get(v.ctx, "waiting"); err != nil || rec.Run.Status != protocol.RunWaiting {
		t.Errorf("the waiting run: %v", err)
	}
	rep, err = v.client.Prune(v.ctx, 0, time.Now().Add(24*time.Hour))
	if err != nil || rep.Runs+rep.SubRuns+rep.Checkpoints != 0 {
		t.Errorf("third prune %+v, %v: want nothing left to remove", rep, err)
	}
	// The engine goes on with the run it keeps.
	if err := v.client.Cancel(v.ctx, "running", "done"); err != nil {
		t.Fatal(err)
	}
	if rec := v.wait("running"); rec.Run.Status != protocol.RunCancelled {
		t.Errorf("running: %s", rec.Run.Status)
	}
}

func TestRetain(t *testing.T) {
	v := newEnv(t)
	v.worker("hello").serve(func(task *protocol.Task) *protocol.Event { return completed(task, `"hi"`) })
	wf := workflow.New("greet")
	wf.Task("hello", "hello")
	_, bs := bundles(t, wf)
	v.start(bs, "", "greet-1")
	v.wait("greet-1")

	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	ticks := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	reports := make(chan PruneReport, 1)
	ctx, cancel := context.WithCancel(v.ctx)
	done := make(chan error, 1)
	go func() {
		done <- v.client.Retain(ctx, Retention{
			OlderThan: time.Hour,
			Now:       func() time.Time { return *now.Load() },
			After:     func(d time.Duration) <-chan time.Time { asked <- d; return ticks },
			Pruned: func(r PruneReport, err error) {
				if err != nil {
					t.Errorf("prune: %v", err)
				}
				reports <- r
			},
		})
	}()
	// next returns the report of the next prune and the wait that follows it.
	next := func() (PruneReport, time.Duration) {
		t.Helper()
		var r PruneReport
		select {
		case r = <-reports:
		case <-v.ctx.Done():
			t.Fatal("Retain did not prune")
		}
		select {
		case d := <-asked:
			return r, d
		case <-v.ctx.Done():
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

	if err := v.client.Retain(v.ctx, Retention{}); err == nil {
		t.Error("Retain with no retention: no error")
	}
	for in, want := range map[time.Duration]time.Duration{DefaultRetention: time.Hour, time.Hour: 6 * time.Minute, 5 * time.Second: time.Second} {
		if got := RetentionEvery(in); got != want {
			t.Errorf("RetentionEvery(%s) = %s, want %s", in, got, want)
		}
	}
}
