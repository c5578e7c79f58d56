package runner

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
)

// consumerInfo reads a consumer of the events stream from the server.
func consumerInfo(t *testing.T, v *env, name string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := v.Box.JetStream().Consumer(v.Ctx, natsbox.EventsStream, name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	return c.CachedInfo()
}

// waitAcked waits until consumer name has nothing delivered and unacknowledged: the engine's
// acknowledgements of what it decided reached the server (they leave after the saves that
// end the runs a test waits for).
func waitAcked(t *testing.T, v *env, name string) *jetstream.ConsumerInfo {
	t.Helper()
	for {
		if info := consumerInfo(t, v, name); info.NumAckPending == 0 && info.NumPending == 0 {
			return info
		}
		select {
		case <-v.Ctx.Done():
			t.Fatalf("events stay unacknowledged at %s", name)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// An engine alone consumes every partition through one consumer, filtered on exactly the
// partitions' subjects: the runs of every partition go on through it, and the partitions' own
// consumers deliver nothing meanwhile. An event on a subject of the events stream that no
// partition holds (an earlier layout's) is not delivered to it.
func TestAloneConsumesEveryPartitionThroughOneConsumer(t *testing.T) {
	v := newEnv(t)
	waitPulling(t, v, natsbox.EngineAllConsumer)
	if got := v.eng.stats.partitions.Load(); got != 1<<natsbox.Partitions-1 {
		t.Fatalf("the engine alone consumes partitions %b, want all of them", got)
	}
	all := consumerInfo(t, v, natsbox.EngineAllConsumer)
	var want []string
	for p := range natsbox.Partitions {
		want = append(want, natsbox.PartitionSubjects(p))
	}
	if !slices.Equal(all.Config.FilterSubjects, want) || all.Config.FilterSubject != "" {
		t.Errorf("the consumer of every partition filters %q %q, want the partitions' subjects %q", all.Config.FilterSubject, all.Config.FilterSubjects, want)
	}
	delivered := make([]uint64, natsbox.Partitions)
	for p := range natsbox.Partitions {
		delivered[p] = consumerInfo(t, v, consumerName(p)).Delivered.Stream
	}

	if _, err := v.Box.JetStream().Publish(v.Ctx, "reins.event.legacy-run", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	v.ServeThink(2)
	ids := runIDs("alone-")
	for _, id := range ids {
		v.Start(runtest.LoopWorkflow(t, 3), "", id)
	}
	for _, id := range ids {
		if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s: %s", id, rec.Run.Status)
		}
	}
	for p := range natsbox.Partitions {
		if got := consumerInfo(t, v, consumerName(p)).Delivered.Stream; got != delivered[p] {
			t.Errorf("partition %d's own consumer delivered up to %d while the engine was alone, from %d", p, got, delivered[p])
		}
	}
	after := consumerInfo(t, v, natsbox.EngineAllConsumer)
	if n := after.Delivered.Consumer - all.Delivered.Consumer; n < 3*natsbox.Partitions {
		t.Errorf("the consumer of every partition delivered %d events for %d runs of 3 iterations", n, natsbox.Partitions)
	}
	if after.NumPending != 0 {
		t.Errorf("%d events wait at the consumer of every partition: the one of no partition was taken in", after.NumPending)
	}
	if v.eng.stats.dropped.Load() != 0 {
		t.Errorf("the engine terminated %d events: it was given one of no partition", v.eng.stats.dropped.Load())
	}
}

// An engine alone that another engine joins goes back to the partitions' own consumers, each
// moved past what the consumer of every partition acknowledged: nothing it decided alone is
// delivered again, to it or to the other. The two share the partitions, and once the other
// stops the engine is alone again.
func TestAloneSplitsWhenAnotherEngineJoins(t *testing.T) {
	v := newEnv(t)
	v.stop()
	d := &decidedBy{runs: map[string]map[string]bool{}}
	start := func(id string) (*Engine, func()) {
		return v.startEngine(func(e *Engine) { e.id, e.leaseTTL = id, ttl; d.attach(e) })
	}
	a, _ := start("engine-a")
	waitPulling(t, v, natsbox.EngineAllConsumer)
	v.ServeThink(3)
	for _, id := range runIDs("alone-") {
		if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 3), "", id)); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s: %s", id, rec.Run.Status)
		}
	}
	floor := waitAcked(t, v, natsbox.EngineAllConsumer).AckFloor.Stream
	decided, acked := a.stats.decided.Load(), a.stats.acked.Load()

	b, stopB := start("engine-b")
	live := []string{"engine-a", "engine-b"}
	awaitOwners(t, v, func(p int) string { return rendezvous(p, live) })
	for p := range natsbox.Partitions {
		if info := consumerInfo(t, v, consumerName(p)); info.AckFloor.Stream < floor {
			t.Errorf("partition %d's consumer stands at %d, below the floor %d the engine alone reached", p, info.AckFloor.Stream, floor)
		}
	}
	if n := a.stats.decided.Load() + a.stats.acked.Load() - decided - acked; n != 0 {
		t.Errorf("the engine that was alone got %d events again", n)
	}
	if n := b.stats.decided.Load() + b.stats.acked.Load(); n != 0 {
		t.Errorf("the engine that joined got %d events of the runs that were over", n)
	}
	if a.stats.partitions.Load() == 1<<natsbox.Partitions-1 {
		t.Error("the engine that was alone still consumes every partition")
	}

	for p, id := range runIDs("shared-") {
		if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 3), "", id)); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s: %s", id, rec.Run.Status)
		}
		if got, want := d.engines(id), []string{rendezvous(p, live)}; !slices.Equal(got, want) {
			t.Errorf("run %s (partition %d) decided by %v, want %v", id, p, got, want)
		}
	}

	stopB()
	awaitOwners(t, v, func(int) string { return "engine-a" })
	waitPulling(t, v, natsbox.EngineAllConsumer)
	id := v.Start(runtest.LoopWorkflow(t, 3), "", "alone-again")
	if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %s", id, rec.Run.Status)
	}
	if got := d.engines(id); !slices.Equal(got, []string{"engine-a"}) {
		t.Errorf("run %s decided by %v, want engine-a alone", id, got)
	}
}

// An engine that goes alone leaves nothing unacknowledged at the partitions' own consumers,
// which it does not consume: an event the server delivered there as an engine's consumption of
// the partition was drained (reaching no one) is dropped from it, and decided through the
// consumer of every partition. Such a delivery is made here by hand: a pull no engine sees.
func TestAloneLeavesNothingPendingAtThePartitions(t *testing.T) {
	v := newEnv(t)
	v.stop()
	id := runIDs("pending-")[3]
	p := natsbox.Partition(id)
	v.Start(runtest.LoopWorkflow(t, 2), "", id)
	cons, err := v.Box.JetStream().Consumer(v.Ctx, natsbox.EventsStream, consumerName(p))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(1)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++
	}
	if err := batch.Error(); err != nil || n != 1 {
		t.Fatalf("fetched %d events of partition %d (%v), want the run's first", n, p, err)
	}
	if got := consumerInfo(t, v, consumerName(p)).NumAckPending; got != 1 {
		t.Fatalf("partition %d's consumer has %d events unacknowledged, want the one fetched", p, got)
	}

	// A long AckWait: were the engine to consume the partition on its own consumer first, it
	// would not get the event again from it.
	v.startEngine(func(e *Engine) { e.ackWait = time.Hour })
	v.ServeThink(2)
	if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %s", id, rec.Run.Status)
	}
	waitPulling(t, v, natsbox.EngineAllConsumer)
	if got := consumerInfo(t, v, consumerName(p)).NumAckPending; got != 0 {
		t.Errorf("partition %d's own consumer, no longer consumed, has %d events unacknowledged", p, got)
	}
}
