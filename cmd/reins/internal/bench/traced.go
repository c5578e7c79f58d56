package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"

	"github.com/reins-run/reins/telemetry"
)

// AgentLoopIterationTraced is AgentLoopIteration with tracing on: the worker's span of every
// iteration, the trace context in each task and answer, exported over OTLP/HTTP to a receiver
// in this process that reads and discards what it gets.
func AgentLoopIterationTraced(b B) {
	stop := traceLocally(b)
	defer stop()
	AgentLoopIteration(b)
}

// traceLocally turns tracing on for the process, exporting to a local receiver; the function it
// returns flushes, turns tracing off and restores the environment.
func traceLocally(b B) func() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf") // an empty body: a full success
	})}
	go func() { _ = srv.Serve(ln) }()
	const key = "OTEL_EXPORTER_OTLP_ENDPOINT"
	prev, had := os.LookupEnv(key)
	if err := os.Setenv(key, "http://"+ln.Addr().String()); err != nil {
		b.Fatal(err)
	}
	p, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "reins-bench"})
	if err != nil || p == nil {
		b.Fatalf("tracing did not start: %v", err)
	}
	return func() {
		if err := p.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		_ = srv.Close()
		if had {
			_ = os.Setenv(key, prev)
		} else {
			_ = os.Unsetenv(key)
		}
	}
}
