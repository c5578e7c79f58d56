//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/protocol"
)

// serveAll starts the engine and the built-in workers (reins serve) against url.
func serveAll(t *testing.T, url string) *proc {
	t.Helper()
	p := start(t, "reins serve", nil, bins.reins, "serve", "--nats", url, "--listen", "127.0.0.1:0", "--ack-wait", "1s")
	p.waitFor("reins serving", 30*time.Second)
	return p
}

// awaitRecord watches run id until ok holds for a saved record and returns it.
func awaitRecord(t *testing.T, ctx context.Context, c *client.Client, id string, what string, ok func(*client.Record) bool) *client.Record {
	t.Helper()
	for u, err := range c.Watch(ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			t.Fatalf("run %s: waiting until %s: %v", id, what, err)
		}
		if ok(rec) {
			return rec
		}
		if rec.Finished() {
			t.Fatalf("run %s ended %s before %s: %+v", id, rec.Run.Status, what, rec.Run.Error)
		}
	}
	t.Fatalf("run %s: stopped watching before %s", id, what)
	return nil
}

// TestWaitsSurviveEngineKill kills the engine while a run sleeps, waits for an approval and
// waits for an event, and two others wait for their loop_delay and their retry backoff, keeps it down past the due time of one of them, and checks that after a
// restart each wait ends at its original due time: the one due during the outage at once, the
// others when they were due, not a whole wait after the restart.
func TestWaitsSurviveEngineKill(t *testing.T) {
	c := newCluster(t)
	eng := serve(t, c.url)
	loopWorker(t, c.url, c.state, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(ctx)
	// Two waits held in the task message (NotBefore) rather than in the run state.
	delayed := reins(t, "run", "testdata/delay.toml", "--nats", c.url, "--detach", "--run-id", "delay-1", "--input", `{"until":2}`)
	retried := reins(t, "run", "testdata/retry.toml", "--nats", c.url, "--detach", "--run-id", "retry-1", "--input", `{"until":1,"fail_first":true}`)
	id := reins(t, "run", "testdata/waits.toml", "--nats", c.url, "--detach", "--run-id", "waits-1", "--input", `{"go":"now"}`)
	taskWaits := []*taskWait{
		watchTaskWait(t, ctx, cl, delayed, "iteration 2 waits for its loop_delay", func(sr *engine.StepRun) bool { return sr.Iteration == 2 }),
		watchTaskWait(t, ctx, cl, retried, "attempt 2 waits for its backoff", func(sr *engine.StepRun) bool { return sr.Attempt == 2 }),
	}
	waits := []string{"nap", "short_nap", "ask", "hold"}
	rec := awaitRecord(t, ctx, cl, id, "every wait started", func(rec *client.Record) bool {
		for _, k := range waits {
			if sr := rec.Run.Steps[k]; sr == nil || sr.Until.IsZero() {
				return false
			}
		}
		return true
	})
	due := map[string]time.Time{}
	for _, k := range waits {
		due[k] = rec.Run.Steps[k].Until
	}
	eng.kill()
	// The outage itself, not a synchronization: the engine stays down past short_nap's due
	// time (2 s after it started), and comes back well before the others are due (6 s).
	outage := time.NewTimer(time.Until(due["short_nap"].Add(time.Second)))
	<-outage.C
	serve(t, c.url)
	// From when the new engine is up: process start-up is the machine's, not the engine's.
	restarted := time.Now()

	ended := map[string]time.Time{}
	final := awaitRecord(t, ctx, cl, id, "it ended", func(rec *client.Record) bool {
		for _, k := range waits {
			if st := rec.Run.Steps[k].Status; ended[k].IsZero() && (st == protocol.StepCompleted || st == protocol.StepFailed) {
				ended[k] = time.Now()
			}
		}
		return rec.Finished()
	})
	if final.Run.Status != protocol.RunCompleted {
		t.Fatalf("run ended %s: %+v", final.Run.Status, final.Run.Error)
	}
	// Late by at most the time a restarted engine takes to take the partitions of the killed one
	// over (its heartbeat's lease, runner.DefaultLeaseTTL, 1.2 s), read the run and fire its timer.
	const slack = 2 * time.Second
	if got := ended["short_nap"]; got.Before(due["short_nap"]) || got.After(restarted.Add(slack)) {
		t.Errorf("short_nap (due %s, during the outage) ended at %s; want right after the restart at %s",
			due["short_nap"].Format(time.StampMilli), got.Format(time.StampMilli), restarted.Format(time.StampMilli))
	}
	for _, k := range []string{"nap", "ask", "hold"} {
		if got := ended[k]; got.Before(due[k].Add(-100*time.Millisecond)) || got.After(due[k].Add(slack)) {
			t.Errorf("%s ended at %s; want at its original due time %s (restart at %s)",
				k, got.Format(time.StampMilli), due[k].Format(time.StampMilli), restarted.Format(time.StampMilli))
		}
	}
	// The worker holds a task back until its NotBefore: the engine's outage does not move it.
	for _, w := range taskWaits {
		end := <-w.ended
		if end.rec == nil || end.rec.Run.Status != protocol.RunCompleted || end.at.Before(w.due) || end.at.After(w.due.Add(slack)) {
			t.Errorf("run %s ended (%+v) at %s; want completed at its due time %s", w.id, end.rec, end.at.Format(time.StampMilli), w.due.Format(time.StampMilli))
		}
	}
	steps := final.Run.Steps
	if got := steps["ask"].Label; got != "denied" {
		t.Errorf("ask: label %q after its timeout; want denied (on_timeout = deny)", got)
	}
	if got := steps["hold"].Status; got != protocol.StepFailed {
		t.Errorf("hold: %s after its timeout; want failed", got)
	}
	if got := steps["gave_up"].Status; got != protocol.StepCompleted {
		t.Errorf("gave_up (the error edge of hold): %s; want completed", got)
	}
}

// taskWait is a run whose step waits for the NotBefore of its next task.
type taskWait struct {
	id    string
	due   time.Time
	ended chan taskEnding
}

type taskEnding struct {
	rec *client.Record
	at  time.Time
}

// watchTaskWait waits until the step "loop" of run id is ready (its task dispatched with a
// NotBefore), then keeps watching the run in the background to see when it ends.
func watchTaskWait(t *testing.T, ctx context.Context, cl *client.Client, id, what string, ready func(*engine.StepRun) bool) *taskWait {
	t.Helper()
	rec := awaitRecord(t, ctx, cl, id, what, func(rec *client.Record) bool { return ready(rec.Run.Steps["loop"]) })
	w := &taskWait{id: id, due: rec.Run.Steps["loop"].NotBefore, ended: make(chan taskEnding, 1)}
	if w.due.IsZero() {
		t.Fatalf("run %s: %s, but the step has no NotBefore", id, what)
	}
	go func() {
		for u, err := range cl.Watch(ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
			rec := u.Record
			if err != nil || rec.Finished() {
				w.ended <- taskEnding{rec, time.Now()}
				return
			}
		}
	}()
	return w
}

// TestApprovalAcrossEngineRestarts pauses an agent on a call that needs approval, restarts the
// engine and workers, approves the call through the CLI, restarts them again while the
// approval step waits, and denies it through the CLI: the run completes with the approved
// call run once, without calling the model again, and the approval step labelled denied.
func TestApprovalAcrossEngineRestarts(t *testing.T) {
	c := newCluster(t)
	srv := serveAll(t, c.url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(ctx)
	id := reins(t, "run", "testdata/human.toml", "--nats", c.url, "--detach", "--run-id", "human-1", "--input", `{"order_id":"O-104"}`)
	rec := awaitRecord(t, ctx, cl, id, "the agent waits", func(rec *client.Record) bool {
		return rec.Run.Status == protocol.RunWaiting && rec.Run.Steps["investigate"].Status == protocol.StepWaiting
	})
	pending := rec.Run.Steps["investigate"].Pending
	if len(pending) != 1 || pending[0].Tool != "draft_refund" {
		t.Fatalf("pending calls %+v; want the one draft_refund call", pending)
	}
	if list := reins(t, "runs", "list", "--status", "waiting", "--nats", c.url); !strings.Contains(list, id) {
		t.Errorf("reins runs list --status waiting does not list %s:\n%s", id, list)
	}

	srv.kill()
	srv = serveAll(t, c.url)
	reins(t, "approve", id, pending[0].CallID, "--nats", c.url)
	rec = awaitRecord(t, ctx, cl, id, "the approval step waits", func(rec *client.Record) bool {
		return rec.Run.Steps["ask"] != nil && rec.Run.Steps["ask"].Status == protocol.StepWaiting
	})
	inv := rec.Run.Steps["investigate"]
	if inv.Status != protocol.StepCompleted || inv.StopReason != "completed" {
		t.Fatalf("investigate: %s stop=%s after the approval; want completed", inv.Status, inv.StopReason)
	}
	if inv.Usage.ModelCalls != 2 {
		t.Errorf("investigate made %d model calls; want 2 (the approved turn is acted on without calling the model)", inv.Usage.ModelCalls)
	}
	if got := rec.Run.Steps["ask"].Prompt; got != "Send the refund of order O-104?" {
		t.Errorf("ask prompt %q", got)
	}

	srv.kill()
	serveAll(t, c.url)
	reins(t, "deny", id, "ask", "--nats", c.url, "--message", "not before the audit")
	final, err := cl.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if final.Run.Status != protocol.RunCompleted {
		t.Fatalf("run ended %s: %+v", final.Run.Status, final.Run.Error)
	}
	ask := final.Run.Steps["ask"]
	if ask.Label != "denied" || string(ask.Output) != `"not before the audit"` {
		t.Errorf("ask: label %q output %s; want denied with the message", ask.Label, ask.Output)
	}
	results := toolResults(t, ctx, c, id, "investigate")
	if got := results["draft_refund"]; len(got) != 1 || !strings.Contains(got[0], `"drafted":true`) {
		t.Errorf("draft_refund results %q; want one, the tool's output", got)
	}
}

// TestDenyCallThroughCLI denies the pending call: the tool does not run and the model sees the
// message as its result.
func TestDenyCallThroughCLI(t *testing.T) {
	c := newCluster(t)
	serveAll(t, c.url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(ctx)
	id := reins(t, "run", "testdata/human.toml", "--nats", c.url, "--detach", "--run-id", "human-2", "--input", `{"order_id":"O-104"}`)
	rec := awaitRecord(t, ctx, cl, id, "the agent waits", func(rec *client.Record) bool {
		return rec.Run.Steps["investigate"].Status == protocol.StepWaiting
	})
	call := rec.Run.Steps["investigate"].Pending[0].CallID
	reins(t, "deny", id, call, "--nats", c.url, "--message", "amount needs a second look")
	awaitRecord(t, ctx, cl, id, "the approval step waits", func(rec *client.Record) bool {
		return rec.Run.Steps["ask"] != nil && rec.Run.Steps["ask"].Status == protocol.StepWaiting
	})
	results := toolResults(t, ctx, c, id, "investigate")
	if got := results["draft_refund"]; len(got) != 1 || !strings.Contains(got[0], "amount needs a second look") {
		t.Errorf("draft_refund results %q; want the denial message as its only result", got)
	}
	if got := results["read_order"]; len(got) != 1 {
		t.Errorf("read_order results %q; want one (it needs no approval)", got)
	}
}

// TestPauseAndResumeOnEmbeddedData runs the workflow with reins run on its own data directory:
// the command stops at the pause; reins approve continues the run from the data directory (a
// new engine on the same store) until the approval step, and a second one completes it.
func TestPauseAndResumeOnEmbeddedData(t *testing.T) {
	data := t.TempDir()
	out := reins(t, "run", "testdata/human.toml", "--data", data, "--run-id", "human-3", "--input", `{"order_id":"O-104"}`, "--json")
	var res protocol.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("reins run --json: %v\n%s", err, out)
	}
	if res.Status != protocol.RunWaiting || len(res.Waiting) != 1 || len(res.Waiting[0].Pending) != 1 {
		t.Fatalf("reins run stopped with %s waiting for %+v; want waiting for one call", res.Status, res.Waiting)
	}
	out = reins(t, "approve", "human-3", "--data", data, "--json")
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("reins approve --json: %v\n%s", err, out)
	}
	if res.Status != protocol.RunWaiting || len(res.Waiting) != 1 || res.Waiting[0].Step != "ask" {
		t.Fatalf("after the approval the run is %s waiting for %+v; want waiting at ask", res.Status, res.Waiting)
	}
	out = reins(t, "approve", "human-3", "ask", "--data", data, "--json", "--message", "ok")
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("reins approve --json: %v\n%s", err, out)
	}
	if res.Status != protocol.RunCompleted {
		t.Fatalf("the run ended %s; want completed", res.Status)
	}
	for _, s := range res.Steps {
		if s.ID == "ask" && s.Label != "approved" {
			t.Errorf("ask: label %q; want approved", s.Label)
		}
	}
}

// toolResults reads the agent step's checkpointed loop state and returns the results of each
// tool's calls, in order, as the model saw them.
func toolResults(t *testing.T, ctx context.Context, c *cluster, runID, step string) map[string][]string {
	t.Helper()
	names := map[string]string{}
	out := map[string][]string{}
	for _, m := range loopState(t, ctx, c, runID, step).Messages {
		for _, tc := range m.Calls {
			names[tc.ID] = tc.Name
		}
		if m.CallID != "" {
			out[names[m.CallID]] = append(out[names[m.CallID]], m.Content)
		}
	}
	return out
}

// TestResumeAndSignalAcrossEngineRestart pauses an agent that escalated (on_needs_human =
// "pause"), restarts the engine and workers, resumes it through the CLI with a human's message
// (the model's next turn sees it), and sends the event its wait_event step waits for, which
// the step takes as its output.
func TestResumeAndSignalAcrossEngineRestart(t *testing.T) {
	c := newCluster(t)
	srv := serveAll(t, c.url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.client(ctx)
	id := reins(t, "run", "testdata/escalate.toml", "--nats", c.url, "--detach", "--run-id", "escalate-1", "--input", `{"order_id":"O-9"}`)
	rec := awaitRecord(t, ctx, cl, id, "the agent pauses", func(rec *client.Record) bool {
		return rec.Run.Steps["investigate"].Status == protocol.StepWaiting
	})
	if sr := rec.Run.Steps["investigate"]; sr.Wait != protocol.WaitInput || sr.StopReason != "needs_human" {
		t.Fatalf("investigate waits for %q with stop reason %q; want input after needs_human", sr.Wait, sr.StopReason)
	}
	srv.kill()
	serveAll(t, c.url)
	reins(t, "resume", id, "--input", `"The customer confirmed the invoice by phone."`, "--nats", c.url)
	rec = awaitRecord(t, ctx, cl, id, "the wait_event step waits", func(rec *client.Record) bool {
		return rec.Run.Steps["restock"] != nil && rec.Run.Steps["restock"].Status == protocol.StepWaiting
	})
	inv := rec.Run.Steps["investigate"]
	if inv.Status != protocol.StepCompleted || inv.StopReason != "completed" || inv.Iteration != 2 {
		t.Errorf("investigate: %s stop=%s iteration %d; want completed at iteration 2", inv.Status, inv.StopReason, inv.Iteration)
	}
	heard := false
	msgs := loopState(t, ctx, c, id, "investigate").Messages
	for _, m := range msgs {
		heard = heard || strings.Contains(m.Content, "The customer confirmed the invoice by phone.")
	}
	if !heard {
		t.Errorf("the conversation has no message with the human's input: %+v", msgs)
	}
	reins(t, "signal", id, "restocked", "--payload", `{"sku":"A-1","units":3}`, "--nats", c.url)
	final, err := cl.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if final.Run.Status != protocol.RunCompleted {
		t.Fatalf("run ended %s: %+v", final.Run.Status, final.Run.Error)
	}
	if got := string(final.Run.Steps["restock"].Output); got != `{"sku":"A-1","units":3}` {
		t.Errorf("restock output %s; want the event's data", got)
	}
}

// loopState returns the agent loop's state as the step's first activation last checkpointed it.
func loopState(t *testing.T, ctx context.Context, c *cluster, runID, step string) *loop.State {
	t.Helper()
	box, err := natsbox.Open(ctx, natsbox.Options{URL: c.url, Name: "e2e-checkpoints"})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	return finalState(t, ctx, box.JetStream(), runID, step)
}
