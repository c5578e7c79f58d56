package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// logBuffer is what an engine logged, for tests that read its sentences.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// subRunEnv is an engine whose sub-runs' starts wait at most 8 deliveries for their parent,
// logging into the buffer, and a run p1 of testdata/parent.toml whose call step sub waits for
// its sub-run p1/sub/1 (whose task nobody serves yet).
func subRunEnv(t *testing.T) (*env, *observer, *logBuffer) {
	t.Helper()
	v := newEnv(t)
	obs := newObserver()
	logs := &logBuffer{}
	v.restart(func(e *Engine) {
		obs.attach(e)
		e.parentDeliveries = 8
		e.log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	v.Worker("prep").Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `{"for":"child"}`) })
	v.Start(runtest.LoadBundles(t, "testdata/parent.toml"), `{}`, "p1")
	v.WaitFor("p1/sub/1", func(r *client.Record) bool { return r.Run.Status == protocol.RunRunning })
	return v, obs, logs
}

// noRecord fails the test if run id has a record.
func (v *env) noRecord(id string) {
	v.T.Helper()
	if _, err := v.Client.Get(v.Ctx, id); !errors.Is(err, client.ErrNotFound) {
		v.T.Errorf("run %s: %v; want no record", id, err)
	}
}

// TestSubRunStartNeedsItsParent: the start of a sub-run begins a run only when it comes on the
// engine's subject and its parent's state has that sub-run in flight, at that step, item,
// activation, iteration and call, under that id; a person's is refused at once, and the
// engine's for a parent that does not wait for it (or does not exist) after a bounded wait.
// None of them makes a record, and the parent's step still ends with its own sub-run's output.
func TestSubRunStartNeedsItsParent(t *testing.T) {
	v, obs, logs := subRunEnv(t)
	child, err := v.Client.Get(v.Ctx, "p1/sub/1")
	if err != nil {
		t.Fatal(err)
	}
	hash := child.Run.Hash
	start := func(id string, p protocol.Parent) *protocol.Event {
		return &protocol.Event{RunID: id, Type: protocol.EvStart, At: time.Now(), Item: -1, Workflow: hash, Input: json.RawMessage(`"forged"`), Parent: &p}
	}
	sub := protocol.Parent{RunID: "p1", Step: "sub", Item: -1, Activation: 1}
	done := v.Start(runtest.LoadBundles(t, "testdata/child.toml"), `{}`, "")
	v.Worker("child-work").Serve(func(tk *protocol.Task) *protocol.Event {
		if tk.RunID == "p1/sub/1" {
			return nil // the real sub-run's task waits for the test (below)
		}
		return runtest.Completed(tk, `"child of `+tk.RunID+`"`)
	})
	v.Wait(done)
	for _, tc := range []struct {
		name    string
		subject string // "" for the engine's
		ev      *protocol.Event
		why     string
	}{
		{"a person's", "sam", start("forged-1", sub), "principal sam may not start run forged-1 as a sub-run of run p1: only the engine starts sub-runs"},
		{"another id at the waiting step", "", start("forged-2", sub), "its parent run p1 has no such sub-run in flight at step sub after 8 deliveries"},
		{"a later activation's id", "", start("p1/sub/2", protocol.Parent{RunID: "p1", Step: "sub", Item: -1, Activation: 2}), "has no such sub-run in flight"},
		{"an agent's call at the step", "", start("p1/sub/1/1/k1", protocol.Parent{RunID: "p1", Step: "sub", Item: -1, Activation: 1, Iteration: 1, CallID: "k1"}), "has no such sub-run in flight"},
		{"a parent that does not exist", "", start("ghost/sub/1", protocol.Parent{RunID: "ghost", Step: "sub", Item: -1, Activation: 1}), "its parent run ghost has no record after 8 deliveries"},
		{"a parent that ended", "", start(done+"/sub/1", protocol.Parent{RunID: done, Step: "work", Item: -1, Activation: 1}), "ended completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.subject == "" {
				v.Publish(tc.ev, "")
			} else {
				subj, _ := natsbox.PrincipalSubject(tc.ev.RunID, natsbox.SubmitKind, tc.subject)
				publishOn(t, v, subj, tc.ev, tc.ev.RunID+"/start")
			}
			obs.await(t, v.Ctx, refuse, func(ev *protocol.Event) bool {
				return ev != nil && ev.RunID == tc.ev.RunID && ev.Type == protocol.EvStart
			})
			v.noRecord(tc.ev.RunID)
			if !strings.Contains(logs.String(), tc.why) {
				t.Errorf("the engine's log does not say %q:\n%s", tc.why, logs)
			}
		})
	}
	v.Publish(runtest.Completed(&protocol.Task{RunID: "p1/sub/1", Step: "work", Item: -1, Activation: 1, Iteration: 1, Attempt: 1}, `"the real child's"`), "")
	if rec := v.Wait("p1"); rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != `"the real child's"` {
		t.Fatalf("p1 %s output %s; want completed with its own sub-run's output", rec.Run.Status, rec.Run.Output)
	}
}

// TestSubRunStartBeforeItsParentsSave: a sub-run's start decided before its parent's record
// shows the sub-run (the engine publishes a decision's commands before it saves the state) is
// held, and begins once the parent's record shows it.
func TestSubRunStartBeforeItsParentsSave(t *testing.T) {
	v := newEnv(t)
	obs := newObserver()
	v.restart(obs.attach)
	bs := runtest.LoadBundles(t, "testdata/parent.toml")
	childHash := bs.All[bs.Root].Workflows["child.toml"]
	early := &protocol.Event{RunID: "p2/sub/1", Type: protocol.EvStart, At: time.Now(), Item: -1, Workflow: childHash, Input: json.RawMessage(`{"for":"child"}`),
		Parent: &protocol.Parent{RunID: "p2", Step: "sub", Item: -1, Activation: 1}}
	v.Publish(early, "") // the message id the parent's own start will have: stored once
	obs.await(t, v.Ctx, await, func(ev *protocol.Event) bool { return ev.RunID == "p2/sub/1" })
	v.Worker("prep").Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `{"for":"child"}`) })
	v.Worker("child-work").Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `"child"`) })
	v.Start(bs, `{}`, "p2")
	if rec := v.Wait("p2"); rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != `"child"` {
		t.Fatalf("p2 %s output %s (%+v); want completed by its sub-run", rec.Run.Status, rec.Run.Output, rec.Run.Error)
	}
}

// TestSenderRules: each event is taken only from whom may send it, on its subject; any other
// is refused (terminated, counted), and changes nothing: no record for a start refused, the
// run goes on after a cancel refused.
func TestSenderRules(t *testing.T) {
	v, obs, logs := subRunEnv(t)
	engineSubj := func(id string) string { s, _ := v.Box.Names().EngineSubject(id); return s }
	workerSubj := func(id string) string { s, _ := v.Box.Names().EventSubject(id); return s }
	submit := func(id, who string) string {
		s, _ := v.Box.Names().PrincipalSubject(id, natsbox.SubmitKind, who)
		return s
	}
	human := func(id, who string) string {
		s, _ := v.Box.Names().PrincipalSubject(id, natsbox.HumanKind, who)
		return s
	}
	hash := runtest.LoadBundles(t, "testdata/child.toml").Root
	v.Start(runtest.LoadBundles(t, "testdata/child.toml"), `{}`, "stores-child")
	startOf := func(id string) *protocol.Event {
		return &protocol.Event{RunID: id, Type: protocol.EvStart, At: time.Now(), Item: -1, Workflow: hash, Input: json.RawMessage(`{}`)}
	}
	at := time.Now()
	for _, tc := range []struct {
		name    string
		subject string
		ev      *protocol.Event
	}{
		{"a worker cancels", workerSubj("p1"), &protocol.Event{RunID: "p1", Type: protocol.EvCancel, At: at, Item: -1, Reason: "wanda says"}},
		{"a worker cancels a sub-run", workerSubj("p1/sub/1"), &protocol.Event{RunID: "p1/sub/1", Type: protocol.EvCancel, At: at, Item: -1}},
		{"a worker ends a sub-run", workerSubj("p1"), &protocol.Event{RunID: "p1", Type: protocol.EvChildFinished, At: at, Step: "sub", Item: -1, Activation: 1, Child: "p1/sub/1", Output: json.RawMessage(`"forged"`)}},
		{"a worker ticks", workerSubj("p1"), &protocol.Event{RunID: "p1", Type: protocol.EvTick, At: at, Item: -1}},
		{"a worker grants", workerSubj("p1"), &protocol.Event{RunID: "p1", Type: protocol.EvGranted, At: at, Item: -1}},
		{"a worker starts", workerSubj("w-1"), startOf("w-1")},
		{"a person ends a sub-run", submit("p1", "sam"), &protocol.Event{RunID: "p1", Type: protocol.EvChildFinished, At: at, Step: "sub", Item: -1, Activation: 1, Child: "p1/sub/1", Nonce: "x1"}},
		{"a person ticks", human("p1", "alice"), &protocol.Event{RunID: "p1", Type: protocol.EvTick, At: at, Item: -1, Nonce: "x2"}},
		{"a person answers a task", human("p1/sub/1", "alice"), runtest.Completed(&protocol.Task{RunID: "p1/sub/1", Step: "work", Item: -1, Activation: 1, Iteration: 1, Attempt: 1}, `"forged"`)},
		{"a person starts a trigger's id", submit("t-nightly-abc", "sam"), startOf("t-nightly-abc")},
		{"a person starts a fork's id", submit("p1-fork-1", "sam"), startOf("p1-fork-1")},
		{"a person starts a sub-run's id", submit("p1/sub/9", "sam"), startOf("p1/sub/9")},
		{"the engine's subject carries no decision", engineSubj("p1"), &protocol.Event{RunID: "p1", Type: protocol.EvSignal, At: at, Item: -1, Name: "go", ID: "s1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			publishOn(t, v, tc.subject, tc.ev, tc.name)
			obs.await(t, v.Ctx, refuse, func(ev *protocol.Event) bool { return ev != nil && ev.RunID == tc.ev.RunID && ev.Type == tc.ev.Type })
			if tc.ev.Type == protocol.EvStart {
				v.noRecord(tc.ev.RunID)
			}
		})
	}
	for _, why := range []string{
		"a worker may not cancel run p1: workers answer tasks",
		"a worker may not send a child_finished event for run p1: on the run's subject workers only answer tasks, and only the engine makes child_finished events",
		"principal sam may not send a child_finished event for run p1: only the engine and workers make it",
		"principal alice may not send a completed event for run p1/sub/1",
		`principal sam may not start run t-nightly-abc: an id that begins with \"t-\" names a run of a trigger, which only the server starts`,
		`principal sam may not start run p1-fork-1: an id that ends in \"-fork-N\" names a fork`,
		"principal sam may not start run p1/sub/9: an id with '/' names a sub-run, which only the engine starts",
		"the engine's subject of run p1 carries no signal event",
	} {
		if !strings.Contains(logs.String(), why) {
			t.Errorf("the engine's log does not say %q:\n%s", why, logs)
		}
	}
	if n := v.eng.stats.refused.Load(); n < 13 {
		t.Errorf("%d events counted refused; want 13 at least", n)
	}
	// On the engine's subject, the end of another sub-run than the one the step awaits changes
	// nothing, and is logged.
	v.Publish(&protocol.Event{RunID: "p1", Type: protocol.EvChildFinished, At: at, Step: "sub", Item: -1, Activation: 1, Child: "forged-9",
		Status: protocol.RunCompleted, Output: json.RawMessage(`"forged"`)}, "forged-9/finished")
	obs.await(t, v.Ctx, ack, func(ev *protocol.Event) bool { return ev != nil && ev.Child == "forged-9" })
	if !strings.Contains(logs.String(), "a child_finished event for a sub-run the run does not await changed nothing") {
		t.Errorf("the engine's log does not tell of the child_finished it did not await:\n%s", logs)
	}
	for _, id := range []string{"p1", "p1/sub/1"} {
		if rec, err := v.Client.Get(v.Ctx, id); err != nil || rec.Run.Status != protocol.RunRunning || len(rec.Run.Acts) != 0 {
			t.Fatalf("run %s after the refused events: %v %+v; want running, no act", id, err, rec)
		}
	}
	// The submitter's own cancel is taken, and recorded as its; the engine's cancel of the
	// sub-run it no longer waits for, as the engine's, with why.
	if err := v.Client.Cancel(v.Ctx, "p1", "not needed"); err != nil {
		t.Fatal(err)
	}
	rec := v.Wait("p1")
	if rec.Run.Status != protocol.RunCancelled || len(rec.Run.Acts) != 1 || rec.Run.Acts[0].By != "admin" || rec.Run.Acts[0].Reason != "not needed" {
		t.Fatalf("p1 %s, acts %+v; want cancelled by admin, its submitter", rec.Run.Status, rec.Run.Acts)
	}
	sub := v.Wait("p1/sub/1")
	if sub.Run.Status != protocol.RunCancelled || len(sub.Run.Acts) != 1 || sub.Run.Acts[0].By != natsbox.EngineName ||
		!strings.Contains(sub.Run.Acts[0].Reason, "its parent run p1 ended cancelled") {
		t.Fatalf("p1/sub/1 %s, acts %+v; want cancelled by the engine because its parent ended", sub.Run.Status, sub.Run.Acts)
	}
}

// TestStartAs: a run the server starts as a principal (a trigger's, client.StartOptions.As)
// comes on the engine's subject, may have an id of the server's space, and is recorded as
// started by that principal; a client may not start a run with such an id
// (wire.CheckClientRunID).
func TestStartAs(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("nightly")
	wf.Task("work", "nightly.work")
	_, bs := runtest.Bundles(t, wf)
	v.Worker("nightly.work").Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `"`+tk.StartedBy+`"`) })
	if _, err := v.Client.StartWith(v.Ctx, bs, nil, client.StartOptions{RunID: "t-nightly-abc", Trigger: true, As: "bob"}); err != nil {
		t.Fatal(err)
	}
	if rec := v.Wait("t-nightly-abc"); rec.Run.Status != protocol.RunCompleted || rec.Run.StartedBy != "bob" {
		t.Fatalf("run %s started by %q; want completed, started by bob", rec.Run.Status, rec.Run.StartedBy)
	}
	for _, id := range []string{"t-nightly-def", "x-fork-1", "a/b/1"} {
		if _, err := v.Client.Start(v.Ctx, bs, nil, id); err == nil || !strings.Contains(err.Error(), id) {
			t.Errorf("a client starts run %s: %v; want refused", id, err)
		}
	}
}

// TestAdmitSubRuns: a sub-run is admitted as any run: one whose workflow the server refuses
// fails at once with the refusal, runs no task, and its parent's step fails with it.
func TestAdmitSubRuns(t *testing.T) {
	v := newEnv(t)
	v.restart(func(e *Engine) {
		e.admit = func(_ context.Context, defs []*workflow.Definition, _ json.RawMessage) *protocol.RunError {
			if defs[0].Name == "child" {
				return &protocol.RunError{Code: "E_OPERATOR_ONLY", Message: "the server refused the workflow: mcp: refused"}
			}
			return nil
		}
	})
	v.Worker("prep").Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `{}`) })
	v.Worker("child-work").Serve(func(tk *protocol.Task) *protocol.Event {
		t.Errorf("a task of a refused sub-run ran: %s", tk.MsgID)
		return runtest.Completed(tk, `"ran"`)
	})
	rec := v.Wait(v.Start(runtest.LoadBundles(t, "testdata/parent.toml"), `{}`, "p3"))
	if sr := rec.Run.Steps["sub"]; rec.Run.Status != protocol.RunFailed || !strings.Contains(sr.Error, "sub-run p3/sub/1 failed: the server refused the workflow: mcp: refused") {
		t.Fatalf("p3 %s, sub: %q; want failed with the sub-run's refusal", rec.Run.Status, sr.Error)
	}
	if sub := v.Wait("p3/sub/1"); sub.Run.Error == nil || sub.Run.Error.Code != "E_OPERATOR_ONLY" {
		t.Fatalf("p3/sub/1: %+v; want failed E_OPERATOR_ONLY", sub.Run.Error)
	}
}

// TestSubRunStartedAsItsRoot: a sub-run is started as its parent's submitter, so that the
// principal who started the root run may act on its sub-runs as on its own (cancel it here),
// and a principal the sub-run does not name may not.
func TestSubRunStartedAsItsRoot(t *testing.T) {
	v := newEnv(t)
	v.Worker("prep").Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `{"for":"child"}`) })
	bob := client.New(client.Config{Conn: (*conn.Conn)(v.Box), Principal: "bob"})
	if _, err := bob.Start(v.Ctx, runtest.LoadBundles(t, "testdata/parent.toml"), json.RawMessage(`{}`), "bobs"); err != nil {
		t.Fatal(err)
	}
	child := v.WaitFor("bobs/sub/1", func(r *client.Record) bool { return r.Run.Status == protocol.RunRunning })
	if child.Run.StartedBy != "bob" {
		t.Fatalf("the sub-run is started by %q, want bob, its root's submitter", child.Run.StartedBy)
	}
	mallory := client.New(client.Config{Conn: (*conn.Conn)(v.Box), Principal: "mallory", Roles: []string{"submitter", "approver"}})
	if err := mallory.Cancel(v.Ctx, "bobs/sub/1", "mine"); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("mallory cancels bob's sub-run: %v, want refused", err)
	}
	if err := bob.Cancel(v.Ctx, "bobs/sub/1", "not needed"); err != nil {
		t.Fatal(err)
	}
	rec := v.Wait("bobs/sub/1")
	if rec.Run.Status != protocol.RunCancelled || len(rec.Run.Acts) != 1 || rec.Run.Acts[0].By != "bob" {
		t.Fatalf("bob's sub-run %s, acts %+v; want cancelled by bob", rec.Run.Status, rec.Run.Acts)
	}
}
