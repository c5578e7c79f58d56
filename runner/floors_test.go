package runner

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
)

// openEngine returns an engine of v's box that is open (its streams and buckets bound) and not
// running: one that never saw a partition's consumer.
func openEngine(t *testing.T, v *env) *Engine {
	t.Helper()
	eng, err := New(Config{Conn: (*conn.Conn)(v.Box), AckWait: runtest.AckWait, Logger: runtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.open(v.Ctx); err != nil {
		t.Fatal(err)
	}
	return eng
}

// ackEvents publishes n ticks of run id and acknowledges them through the partition's consumer,
// as an engine that decided them would, and returns the consumer's acknowledged floor.
func ackEvents(t *testing.T, v *env, id string, n int) uint64 {
	t.Helper()
	for i := range n {
		v.Publish(&protocol.Event{RunID: id, Type: protocol.EvTick, At: time.Unix(int64(i), 0), Item: -1}, "")
	}
	cons, err := v.Box.JetStream().Consumer(v.Ctx, natsbox.EventsStream, consumerName(natsbox.Partition(id)))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(v.Ctx); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	if acked != n {
		t.Fatalf("fetched %d events, want %d", acked, n)
	}
	info, err := cons.Info(v.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.AckFloor.Stream
}

// An engine that never saw a partition's consumer, and finds it missing, makes it again from the
// floor another engine kept in the engines' bucket, not from the partition's first event; and
// an engine that saw a lower floor does not lower the one kept.
func TestConsumerMadeAgainFromTheFloorKept(t *testing.T) {
	v := newEnv(t)
	v.stop()
	js := v.Box.JetStream()
	const id = "kept-1"
	p := natsbox.Partition(id)
	floor := ackEvents(t, v, id, 5)
	cons, err := js.Consumer(v.Ctx, natsbox.EventsStream, consumerName(p))
	if err != nil {
		t.Fatal(err)
	}
	v.eng.sawFloor(p, cons.CachedInfo())
	v.eng.keepFloor(v.Ctx, p)

	other := openEngine(t, v)
	other.floors[p].Store(1) // it saw an older floor
	other.keepFloor(v.Ctx, p)
	ent, err := v.KV(natsbox.EnginesBucket).Get(v.Ctx, floorKey(p))
	if err != nil {
		t.Fatalf("the floor kept: %v", err)
	}
	var kept keptFloor
	if err := json.Unmarshal(ent.Value(), &kept); err != nil || kept.Floor != floor {
		t.Fatalf("the floor kept is %s (%v), want %d: the higher one", ent.Value(), err, floor)
	}

	if err := js.DeleteConsumer(v.Ctx, natsbox.EventsStream, consumerName(p)); err != nil {
		t.Fatal(err)
	}
	fresh := openEngine(t, v)
	again, err := fresh.partitionConsumer(v.Ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	if start := again.CachedInfo().Config.OptStartSeq; start != floor+1 {
		t.Fatalf("the consumer made again by an engine that never saw it starts at %d, want %d: after the floor kept", start, floor+1)
	}
}

// A floor kept of an events stream that was made again since is not used, even when the new
// stream already holds more events than the floor (which the floor an engine saw cannot tell):
// none of the new stream's events is skipped. A key that cannot be read is written over.
func TestFloorKeptOfAnotherStream(t *testing.T) {
	v := newEnv(t)
	v.stop()
	js := v.Box.JetStream()
	const id = "kept-2"
	p := natsbox.Partition(id)
	floor := ackEvents(t, v, id, 3)
	v.eng.floors[p].Store(floor)
	v.eng.keepFloor(v.Ctx, p)

	if err := js.DeleteStream(v.Ctx, natsbox.EventsStream); err != nil {
		t.Fatal(err)
	}
	if err := natsbox.EnsureLayout(v.Ctx, js, v.Box.Layout()); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		v.Publish(&protocol.Event{RunID: id, Type: protocol.EvTick, At: time.Unix(int64(i), 0), Item: -1}, "")
	}
	fresh := openEngine(t, v)
	cons, err := fresh.partitionConsumer(v.Ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.DeliverPolicy; got != jetstream.DeliverAllPolicy {
		t.Fatalf("the consumer of the new stream delivers by %v from %d, want from its first event", got, cons.CachedInfo().Config.OptStartSeq)
	}

	kv := v.KV(natsbox.EnginesBucket)
	if _, err := kv.Put(v.Ctx, floorKey(p), []byte("not a floor")); err != nil {
		t.Fatal(err)
	}
	fresh.floors[p].Store(2)
	fresh.keepFloor(v.Ctx, p)
	ent, err := kv.Get(v.Ctx, floorKey(p))
	if err != nil {
		t.Fatal(err)
	}
	var kept keptFloor
	if err := json.Unmarshal(ent.Value(), &kept); err != nil || kept.Floor != 2 {
		t.Fatalf("the floor kept over a value that cannot be read is %s (%v), want 2", ent.Value(), err)
	}
}
