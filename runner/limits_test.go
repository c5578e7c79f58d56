package runner

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// TestRunLimits: the engine gives every run it starts its Config.Limits, sub-runs included,
// and the run keeps them: a signal past MaxSignals, sent past the client, is recorded refused;
// a run that reaches MaxEvents ends failed with E_MAX_EVENTS.
func TestRunLimits(t *testing.T) {
	v := newEnv(t)
	lim := engine.Limits{MaxSteps: 40, MaxSignals: 1, MaxEvents: 4}
	v.restart(func(e *Engine) { e.limits = lim })
	for _, h := range []string{"prep", "child-work", "h"} {
		v.Worker(h).Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `1`) })
	}

	// A run and its sub-run keep the limits.
	parent := v.Start(runtest.LoadBundles(t, "testdata/parent.toml"), "", "")
	if rec := v.Wait(parent); rec.Run.Status != protocol.RunCompleted || rec.Run.Limits == nil || *rec.Run.Limits != lim {
		t.Fatalf("run %s with limits %+v; want completed with %+v", rec.Run.Status, rec.Run.Limits, lim)
	}
	if child, err := v.Client.Get(v.Ctx, parent+"/sub/1"); err != nil || child.Run.Limits == nil || *child.Run.Limits != lim {
		t.Fatalf("the sub-run: %v, %+v; want the limits %+v", err, child, lim)
	}

	// The second signal is refused, even sent past the client.
	wf := workflow.New("held")
	wf.WaitEvent("hold", "go")
	_, bs := runtest.Bundles(t, wf)
	held := v.Start(bs, "", "")
	v.WaitFor(held, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
	subj, _ := natsbox.PrincipalSubject(held, natsbox.HumanKind, natsbox.RoleAdmin)
	for _, id := range []string{"s1", "s2"} {
		publishOn(t, v, subj, &protocol.Event{RunID: held, Nonce: id, ID: id, Type: protocol.EvSignal, Item: -1, Name: "later", Output: json.RawMessage(`1`)}, id)
	}
	rec := v.WaitFor(held, func(r *client.Record) bool { return len(r.Run.Acts) == 2 })
	if a := rec.Run.Acts; a[0].Refused != "" || !strings.Contains(a[1].Refused, "it took 1 signals, the most its server allows a run (max_signals_per_run)") || len(rec.Run.SignalIDs) != 1 {
		t.Fatalf("acts %+v, signal ids %v; want the first taken, the second refused", a, rec.Run.SignalIDs)
	}

	// A loop that would go on ends at its fourth event.
	loop := workflow.New("loop").Start("a")
	loop.Task("a", "h")
	loop.Task("b", "h")
	loop.Edge("a", "b")
	loop.Edge("b", "a").MaxIterations(30)
	_, bs = runtest.Bundles(t, loop)
	rec = v.Wait(v.Start(bs, "", ""))
	if rec.Run.Status != protocol.RunFailed || rec.Run.Error == nil || rec.Run.Error.Code != protocol.CodeMaxEvents || rec.Run.Events != 4 {
		t.Fatalf("the loop ended %s %+v after %d events; want failed E_MAX_EVENTS after 4", rec.Run.Status, rec.Run.Error, rec.Run.Events)
	}
}

// TestLimitsConfig: an engine whose Config.Limits is zero gives its runs the limits of a server
// whose operator sets none; a negative field leaves its bound out, and all negative none.
func TestLimitsConfig(t *testing.T) {
	v := newEnv(t)
	v.Worker("h").Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `1`) })
	wf := workflow.New("one")
	wf.Task("a", "h")
	_, bs := runtest.Bundles(t, wf)
	want := engine.Limits{MaxSteps: operator.DefaultMaxSteps, MaxSignals: operator.DefaultMaxSignalsPerRun, MaxEvents: operator.DefaultMaxEventsPerRun}
	if rec := v.Wait(v.Start(bs, "", "")); rec.Run.Limits == nil || *rec.Run.Limits != want {
		t.Errorf("a run of an engine with no limits configured has limits %+v; want %+v", rec.Run.Limits, want)
	}

	v.stop()
	eng, err := New(Config{Conn: (*conn.Conn)(v.Box), AckWait: runtest.AckWait, Logger: runtest.Logger(t), Limits: engine.Limits{MaxSteps: -1, MaxSignals: -1, MaxEvents: -1}})
	if err != nil {
		t.Fatal(err)
	}
	v.stop = v.Go(eng.Run, eng.Ready())
	if rec := v.Wait(v.Start(bs, "", "")); rec.Run.Limits != nil || rec.Run.Events != 0 {
		t.Errorf("a run of an engine with every limit off has limits %+v, %d events counted; want none", rec.Run.Limits, rec.Run.Events)
	}
}
