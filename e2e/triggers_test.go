//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trigger"
	"github.com/reins-run/reins/workflow"
)

// TestScheduleAcrossEngines: two reins serve processes on one NATS server decide the same
// schedule (every minute, on the real clock): its first due time starts one run; then one
// engine is killed with SIGKILL and another starts, and the next due time starts one run
// too. Each due time's start is counted in the events stream: exactly one.
func TestScheduleAcrossEngines(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two minute boundaries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newCluster(t)
	a, _ := serve(t, c.url), serve(t, c.url)
	cl := c.client(ctx)
	src := "name = \"tick\"\n[[steps]]\nid = \"done\"\ntype = \"terminate\"\n[[triggers]]\nname = \"every-min\"\nschedule = \"* * * * *\"\n"
	def, ps := workflow.Parse("tick.toml", []byte(src))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	def.Normalize()
	if _, _, err := cl.Register(ctx, "tick", []byte(src), def); err != nil {
		t.Fatal(err)
	}
	// The engines saw the trigger: its state begins when the first of them saw it.
	box, err := natsbox.Open(ctx, natsbox.Options{URL: c.url, Name: "e2e-triggers"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	kv, err := box.JetStream().KeyValue(ctx, box.Names().TriggersBucket())
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, trigger.ScheduleKey("tick", "every-min"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var first trigger.State
	for ent := range w.Updates() {
		if ent != nil && ent.Operation() == jetstream.KeyValuePut {
			if err := json.Unmarshal(ent.Value(), &first); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	sch, _ := workflow.ParseSchedule("* * * * *", "")
	due1 := sch.Next(first.Last)
	due2 := sch.Next(due1)
	id := func(due time.Time) string { return trigger.RunID("schedule", "tick", "every-min", trigger.DueKey(due)) }

	waitRun(ctx, t, cl, id(due1))
	a.kill()
	serve(t, c.url) // a restarted engine, beside the one left
	waitRun(ctx, t, cl, id(due2))
	for _, due := range []time.Time{due1, due2} {
		evs, err := cl.Events(ctx, id(due))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ev := range evs {
			if ev.Type == protocol.EvStart {
				n++
			}
		}
		if n != 1 {
			t.Errorf("due time %s: %d starts, want 1", due.Format(time.RFC3339), n)
		}
	}
	if before := id(sch.Next(first.Last.Add(-time.Minute))); before != id(due1) {
		if _, err := cl.Get(ctx, before); err == nil {
			t.Errorf("a due time before the trigger was seen started a run")
		}
	}
}

// waitRun waits until run id exists and ended completed (a watch of a run not started yet
// waits for its first record).
func waitRun(ctx context.Context, t *testing.T, cl *client.Client, id string) {
	t.Helper()
	rec, err := cl.Wait(ctx, id)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	if rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %s", id, rec.Run.Status)
	}
}
