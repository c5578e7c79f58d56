package runner

import (
	"testing"

	"github.com/reins-run/reins/internal/runtest"
	"github.com/reins-run/reins/protocol"
)

// BenchmarkAgentLoopIteration measures one durable agent_loop iteration end to end on an
// embedded server: the engine publishes the task, a worker (in the benchmark) takes it and
// answers continued, the engine decides the answer and saves the run. Iterations run one after
// the other (one run of b.N iterations), so this is the latency of an iteration, not the
// engine's throughput over many runs.
func BenchmarkAgentLoopIteration(b *testing.B) {
	v := newEnv(b)
	v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event {
		return runtest.Continued(task, `{"notes":"looked at one more file"}`)
	})
	bs := runtest.LoopWorkflow(b, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	id := v.Start(bs, `{"pr":42}`, "")
	rec := v.Wait(id)
	b.StopTimer()
	if got := rec.Run.Steps["think"].Iteration; rec.Run.Status != protocol.RunCompleted || got != b.N {
		b.Fatalf("run %s after %d iterations, want completed after %d", rec.Run.Status, got, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "iterations/s")
}
