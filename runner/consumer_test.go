package runner

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
)

// A consumer deleted under the engine, "at once" (most likely before the server registered
// the engine's first pull request, which then reaches no one and the library does not report)
// or "while pulling" (through a pull request the server holds, answered "409 Consumer
// Deleted"), is made again, and the engine keeps the partition and decides its events: a
// partition's own consumer (engines that share the partitions), or the consumer of every
// partition (an engine alone).
func TestConsumerDeleted(t *testing.T) {
	for _, alone := range []bool{false, true} {
		for _, pulling := range []bool{false, true} {
			name := "at once"
			if pulling {
				name = "while pulling"
			}
			if alone {
				name = "every partition's/" + name
			} else {
				name = "a partition's/" + name
			}
			t.Run(name, func(t *testing.T) {
				prepare := partitioned
				if alone {
					prepare = nil
				}
				v := newEnvWith(t, prepare)
				v.ServeThink(2)
				id := "r-deleted"
				consumer := consumerName(natsbox.Partition(id))
				if alone {
					consumer = natsbox.EngineAllConsumer
				}
				if pulling {
					waitPulling(t, v, consumer)
				}
				js := v.Box.JetStream()
				if err := js.DeleteConsumer(v.Ctx, natsbox.EventsStream, consumer); err != nil {
					t.Fatal(err)
				}
				if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 5), "", id)); rec.Run.Status != protocol.RunCompleted {
					t.Fatalf("run %s", rec.Run.Status)
				}
				// The run may have gone on through the partitions' own consumers meanwhile: the
				// consumer of every partition comes back with the next round of the leases.
				waitPulling(t, v, consumer)
			})
		}
	}
}

// waitPulling waits until the engine's consumer exists and the server holds a pull request of
// it.
func waitPulling(t *testing.T, v *env, consumer string) {
	t.Helper()
	js := v.Box.JetStream()
	for {
		c, err := js.Consumer(v.Ctx, natsbox.EventsStream, consumer)
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatal(err)
		}
		if err == nil && c.CachedInfo().NumWaiting > 0 {
			return
		}
		select {
		case <-v.Ctx.Done():
			t.Fatal("the engine's consumer never had a pull request waiting")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
