package bench

import (
	"context"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamFloor measures the floor every durable figure is compared with: one message published
// to a file-backed JetStream stream (waiting for its PubAck), fetched by a durable pull consumer,
// and acknowledged with a confirmed ack, on an embedded server in this process. A durable
// iteration cannot cost less than this round trip. Its p50 and p99 say how long the round trip's
// own tail is: the stream's writes to its file store and the garbage collector's pauses make
// the floor's p99 several times its median, and an iteration of reins, two such round trips
// and a save, meets them more often.
func JetStreamFloor(b B) {
	ctx := context.Background()
	ns, err := server.NewServer(&server.Options{
		JetStream: true, StoreDir: b.TempDir(), DontListen: true, NoLog: true, NoSigs: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		b.Fatal("embedded NATS server did not start within 10s")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"run":"bench","step":"loop","iteration":1}`)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuMeter()
	defer func() { cpu(b, b.Loops()) }()
	lat := make([]float64, 0, b.Loops())
	defer func() { reportLatencies(b, lat) }() // lat as it is at the end
	for range b.Loops() {
		t0 := time.Now()
		if _, err := js.Publish(ctx, "floor.task", payload); err != nil {
			b.Fatal(err)
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for msg := range batch.Messages() {
			if err := msg.DoubleAck(ctx); err != nil {
				b.Fatal(err)
			}
			got++
		}
		if got != 1 {
			b.Fatalf("fetched %d messages, want 1 (%v)", got, batch.Error())
		}
		lat = append(lat, float64(time.Since(t0).Nanoseconds()))
	}
}
