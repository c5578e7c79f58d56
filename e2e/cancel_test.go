//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
)

// TestCancelMidIteration cancels a run through the CLI while its handler is in the middle of
// iteration 3: the handler's context ends at once (well before the 30 s iteration timeout), the
// step and the run end cancelled at iteration 3, and no later iteration is ever started.
func TestCancelMidIteration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t)
	serve(t, c.url)
	w := loopWorker(t, c.url, c.state, 3)
	id := c.startRun("cancel-1", 50)
	w.waitFor("hang "+id+" 3", 30*time.Second)
	reins(t, "runs", "cancel", id, "--nats", c.url, "--reason", "the operator stopped it")
	line := w.waitFor("stopped "+id+" 3", 10*time.Second)
	if !strings.Contains(line, "cancel") {
		t.Errorf("the handler's context ended with %q; want the run's cancellation as the cause", line)
	}
	rec, err := c.client(ctx).Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCancelled || rec.Run.Error == nil || !strings.Contains(rec.Run.Error.Message, "the operator stopped it") {
		t.Fatalf("run %s (%+v); want cancelled with the reason", rec.Run.Status, rec.Run.Error)
	}
	sr := rec.Run.Steps["loop"]
	if sr.Status != protocol.StepCancelled || sr.StopReason != "cancelled" || sr.Iteration != 3 {
		t.Errorf("step loop: %s stop=%s iteration %d; want cancelled at iteration 3", sr.Status, sr.StopReason, sr.Iteration)
	}
	// Nothing is dispatched afterwards: the worker's consumer ends with nothing pending and
	// nothing unacknowledged (the cancelled iteration's task is settled), and no later
	// iteration ever started.
	box, err := natsbox.Open(ctx, natsbox.Options{URL: c.url, Name: "e2e-consumer"})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	cons, err := box.JetStream().Consumer(ctx, natsbox.TasksStream, "reins-worker-count")
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the worker's consumer still has %d pending and %d unacknowledged tasks", info.NumPending, info.NumAckPending)
		case <-tick.C:
		}
	}
	if hasLine(w, "start "+id+" 4") {
		t.Errorf("iteration 4 started after the cancel")
	}
	out := reins(t, "runs", "show", id, "--nats", c.url)
	if !strings.Contains(out, "cancelled") {
		t.Errorf("runs show does not say cancelled:\n%s", out)
	}
}
