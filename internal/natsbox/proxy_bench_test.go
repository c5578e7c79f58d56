package natsbox

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkWorkerRoundTrip is a worker's hot path on the embedded server over loopback: the
// engine publishes a task, the worker fetches it from its durable consumer, acknowledges it
// (confirmed) and publishes its answer to the events stream (waiting for the PubAck). Each
// iteration runs it twice, alternated so that both see the same load: once with the worker on
// the process's own connection (the server's account, no permissions: the path every
// principal took before accounts), once with the worker a principal in its own account, whose
// every request crosses an import. It reports the median of each and their ratio
// (BENCHMARKS.md, "Principals in accounts of their own").
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
	type path struct {
		w    *Box
		task string
		cons jetstream.Consumer
		took []time.Duration
	}
	var paths []*path
	for _, tc := range []struct{ token, handler string }{{testToken, "bench.engine"}, {"tok-worker", "bench.principal"}} {
		p := &path{w: openB(b, Options{URL: box.ClientURL(), Token: tc.token})}
		p.task, _ = TaskSubject(tc.handler)
		var err error
		if p.cons, err = p.w.JetStream().CreateOrUpdateConsumer(ctx, TasksStream, jetstream.ConsumerConfig{
			Durable: WorkerConsumerName(tc.handler), FilterSubject: p.task, AckPolicy: jetstream.AckExplicitPolicy,
		}); err != nil {
			b.Fatal(err)
		}
		paths = append(paths, p)
	}
	answer, _ := Names{}.EventSubject("r-bench")
	payload := make([]byte, 512)
	trip := func(p *path) {
		start := time.Now()
		if _, err := box.JetStream().Publish(ctx, p.task, payload); err != nil {
			b.Fatal(err)
		}
		msg, err := p.cons.Next()
		if err != nil {
			b.Fatal(err)
		}
		if err := msg.DoubleAck(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := p.w.JetStream().Publish(ctx, answer, payload); err != nil {
			b.Fatal(err)
		}
		p.took = append(p.took, time.Since(start))
	}
	for i := 0; b.Loop(); i++ {
		trip(paths[i%2])
		trip(paths[(i+1)%2])
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	e, p := median(paths[0].took), median(paths[1].took)
	b.ReportMetric(e, "engine-µs-p50")
	b.ReportMetric(p, "principal-µs-p50")
	b.ReportMetric(p/e, "ratio")
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
