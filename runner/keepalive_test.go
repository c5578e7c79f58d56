package runner

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
)

// An event the engine holds past its consumer's AckWait (a decision waiting for a stream
// between leaders) is not delivered again while keepAlive runs; the same event not held is
// delivered again after AckWait, which is what brings back an event lost with a NATS node.
func TestHeldEventsNotRedelivered(t *testing.T) {
	v := newEnv(t)
	v.stop()
	eng := openEngine(t, v)
	eng.ackWait = 600 * time.Millisecond
	const id = "keep-1"
	p := natsbox.Partition(id)
	cons, err := v.Box.JetStream().CreateConsumer(v.Ctx, natsbox.EventsStream, jetstream.ConsumerConfig{
		Durable: "keepalive-test", FilterSubject: eng.names.PartitionSubjects(p),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: eng.ackWait,
	})
	if err != nil {
		t.Fatal(err)
	}
	next := func(wait time.Duration) jetstream.Msg {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			return m
		}
		return nil
	}

	v.Publish(&protocol.Event{RunID: id, Type: protocol.EvTick, At: time.Unix(1, 0), Item: -1}, "")
	held := next(10 * time.Second)
	if held == nil {
		t.Fatal("the event was not delivered")
	}
	kept := eng.flight.add(p, held, time.Now())
	ctx, stop := context.WithCancel(v.Ctx)
	done := make(chan struct{})
	go func() { eng.keepAlive(ctx); close(done) }()
	if again := next(5 * eng.ackWait); again != nil {
		md, _ := again.Metadata()
		t.Fatalf("an event held by the engine was delivered again (%+v) within five AckWaits", md)
	}
	stop()
	<-done

	// Not kept any more: it comes again.
	again := next(10 * time.Second)
	if again == nil {
		t.Fatal("an event no longer kept was not delivered again after AckWait")
	}
	if md, err := again.Metadata(); err != nil || md.NumDelivered != 2 {
		t.Fatalf("the event delivered again: %+v (%v), want its second delivery", md, err)
	}
	eng.flight.done(kept)
	if !eng.flight.settledAll(each(p)) {
		t.Error("the event settled is still counted in flight")
	}
}
