package natsbox

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkWorkerRoundTrip is a worker's hot path on the embedded server over loopback: the
// engine publishes a task, the worker fetches it from its durable consumer, acknowledges it
// (confirmed) and publishes its answer to the events stream (waiting for the PubAck). As
// "engine" the worker is the process's own connection (the server's account, no permissions:
// what every principal was before accounts); as "principal" it is a worker principal in its own
// account, whose every request crosses an import (BENCHMARKS.md, finding 6).
func BenchmarkWorkerRoundTrip(b *testing.B) {
	box := openB(b, Options{DataDir: b.TempDir(), Listen: "127.0.0.1:0", Authenticate: func(token string) (Identity, bool) {
		switch token {
		case "tok-worker":
			return Identity{Name: "wanda", Roles: []string{RoleWorker}}, true
		case testToken:
			return Identity{Name: "admin", Roles: []string{RoleAdmin}}, true
		}
		return Identity{}, false
	}})
	ctx := b.Context()
	if err := EnsureLayout(ctx, box.JetStream(), Layout{}); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, token, handler string }{{"engine", testToken, "bench.e"}, {"principal", "tok-worker", "bench.p"}} {
		b.Run(tc.name, func(b *testing.B) {
			w := openB(b, Options{URL: box.ClientURL(), Token: tc.token})
			task, _ := TaskSubject(tc.handler)
			cons, err := w.JetStream().CreateOrUpdateConsumer(ctx, TasksStream, jetstream.ConsumerConfig{
				Durable: WorkerConsumerName(tc.handler), FilterSubject: task, AckPolicy: jetstream.AckExplicitPolicy,
			})
			if err != nil {
				b.Fatal(err)
			}
			answer, _ := Names{}.EventSubject("r-bench")
			payload := make([]byte, 512)
			b.ResetTimer()
			for b.Loop() {
				if _, err := box.JetStream().Publish(ctx, task, payload); err != nil {
					b.Fatal(err)
				}
				msg, err := cons.Next()
				if err != nil {
					b.Fatal(err)
				}
				if err := msg.DoubleAck(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := w.JetStream().Publish(ctx, answer, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// openB opens a Box for a benchmark, closed at its end.
func openB(b *testing.B, opts Options) *Box {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), failsafe)
	defer cancel()
	box, err := Open(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { box.Close() })
	return box
}
