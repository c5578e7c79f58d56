package runner

import (
	"testing"
	"time"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
)

// A partition's consumer deleted under the engine, "at once" (most likely before the server
// registered the engine's first pull request, which then reaches no one and the library does
// not report) or "while pulling" (through a pull request the server holds, answered "409
// Consumer Deleted"), is made again: the engine keeps the partition and decides its events.
func TestConsumerDeleted(t *testing.T) {
	for _, pulling := range []bool{false, true} {
		name := "at once"
		if pulling {
			name = "while pulling"
		}
		t.Run(name, func(t *testing.T) {
			v := newEnv(t)
			v.ServeThink(2)
			id := "r-deleted"
			p := natsbox.Partition(id)
			if pulling {
				waitPulling(t, v, p)
			}
			js := v.Box.JetStream()
			if err := js.DeleteConsumer(v.Ctx, natsbox.EventsStream, consumerName(p)); err != nil {
				t.Fatal(err)
			}
			if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 5), "", id)); rec.Run.Status != protocol.RunCompleted {
				t.Fatalf("run %s", rec.Run.Status)
			}
			if _, err := js.Consumer(v.Ctx, natsbox.EventsStream, consumerName(p)); err != nil {
				t.Fatalf("the consumer of partition %d was not made again: %v", p, err)
			}
		})
	}
}

// waitPulling waits until the server holds a pull request of the engine's consumer.
func waitPulling(t *testing.T, v *env, p int) {
	t.Helper()
	c, err := v.Box.JetStream().Consumer(v.Ctx, natsbox.EventsStream, consumerName(p))
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := c.Info(v.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumWaiting > 0 {
			return
		}
		select {
		case <-v.Ctx.Done():
			t.Fatal("the engine's consumer never had a pull request waiting")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
