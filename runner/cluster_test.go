package runner

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/natstest"
	"github.com/reins-run/reins/internal/runtest"
	"github.com/reins-run/reins/protocol"
)

// When the NATS node that leads a partition's consumer dies, the engine looks the consumer up
// as soon as the cluster elected another leader (the server's advisory), not at its next look
// every lookEvery: a consumption the library left pulling from the dead leader is judged
// stallAfter later. Then the partition's runs go on.
func TestConsumerLeaderLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers, url := natstest.Cluster(t, ctx, 3)
	box, err := natsbox.Open(ctx, natsbox.Options{URL: url, Replicas: 3, Logger: runtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	v := &env{Env: &runtest.Env{T: t, Ctx: ctx, Box: box, Client: client.NewClient(client.ClientConfig{Box: box})}}
	id := "r-leader-lost"
	p := natsbox.Partition(id)
	type look struct {
		why    lookCause
		leader string // "": no answer
	}
	looks := make(chan look, 1024)
	v.eng, v.stop = v.startEngine(func(e *Engine) {
		e.looked = func(q int, why lookCause, info *jetstream.ConsumerInfo, _ bool) {
			if q != p {
				return
			}
			l := look{why: why}
			if info != nil && info.Cluster != nil {
				l.leader = info.Cluster.Leader
			}
			select {
			case looks <- l:
			default:
			}
		}
	})
	js := box.JetStream()
	cons, err := js.Consumer(ctx, natsbox.EventsStream, consumerName(p))
	if err != nil {
		t.Fatal(err)
	}
	info := cons.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("the consumer of partition %d has no leader: %+v", p, info.Cluster)
	}
	dead := info.Cluster.Leader
	for _, ns := range servers {
		if ns.Name() == dead {
			ns.Shutdown()
			ns.WaitForShutdown()
		}
	}
	for {
		var l look
		select {
		case l = <-looks:
		case <-ctx.Done():
			t.Fatalf("the engine never looked up the consumer of partition %d because it elected a leader after %s died", p, dead)
		}
		if l.why == lookLeader && l.leader != "" && l.leader != dead {
			t.Logf("the consumer of partition %d is led by %s, and the engine looked it up for that", p, l.leader)
			break
		}
	}
	v.ServeThink(3)
	if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 5), "", id)); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s", rec.Run.Status)
	}
}
