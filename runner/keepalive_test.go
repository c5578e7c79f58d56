package runner

import (
	"context"
	"math/rand/v2"
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

// TestFlightHoldsUntilSettled holds events in two partitions and settles them in a random
// order, some twice, against a model: what is held (heldSince), whether a partition settled
// (settledAll), and that a wait returns once its partition empties.
func TestFlightHoldsUntilSettled(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 38))
	for round := range 50 {
		var f flight
		t0 := time.Unix(1000, 0)
		model := map[*heldEvent]bool{} // held and not settled
		var all []*heldEvent
		for i := range 2 + rnd.IntN(20) {
			h := f.add(i%2, nil, t0.Add(time.Duration(i)*time.Second))
			model[h] = true
			all = append(all, h)
		}
		waited := make(chan bool, 1)
		go func() { waited <- f.wait(context.Background(), 1) }()
		for _, i := range rnd.Perm(len(all)) {
			h := all[i]
			f.done(h)
			delete(model, h)
			if rnd.IntN(4) == 0 {
				f.done(h) // settled again: nothing changes
			}
			for p := range 2 {
				held := 0
				for m := range model {
					if int(m.part) == p {
						held++
					}
				}
				if got := f.settledAll([]int{p}); got != (held == 0) {
					t.Fatalf("round %d: partition %d settled is %t with %d held", round, p, got, held)
				}
				if len(f.held[p]) != held {
					t.Fatalf("round %d: partition %d holds %d, want %d", round, p, len(f.held[p]), held)
				}
				for slot, h := range f.held[p] {
					if !model[h] || int(h.slot) != slot {
						t.Fatalf("round %d: partition %d place %d holds an event settled or placed at %d", round, p, slot, h.slot)
					}
				}
			}
			// heldSince: the events that came before the cutoff and are not settled.
			cutoff := t0.Add(time.Duration(rnd.IntN(22)) * time.Second)
			want := 0
			for m := range model {
				if m.at.Before(cutoff) {
					want++
				}
			}
			if got := len(f.heldSince(cutoff)); got != want {
				t.Fatalf("round %d: %d events held since before %s, want %d", round, got, cutoff, want)
			}
		}
		if !<-waited {
			t.Fatalf("round %d: the wait for partition 1 did not end", round)
		}
	}
}
