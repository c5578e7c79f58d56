package runner

import (
	"fmt"
	"testing"

	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
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

// BenchmarkConcurrencyKey measures runs of one task step end to end on an embedded server, a
// worker (in the benchmark) completing each task at once: b.N runs started together and waited
// for. "without" has no concurrency key; "distinct keys" gives every run a key of its own, so
// that the difference is the cost of acquiring and releasing a key (its records in
// reins_concurrency); "one key, limit 1" runs them one at a time, each started by the end of
// the one before (the handoff: release, grant, granted event, dispatch).
func BenchmarkConcurrencyKey(b *testing.B) {
	for _, bc := range []struct {
		name  string
		limit int
		input func(i int) string
	}{
		{"without", 0, func(i int) string { return fmt.Sprintf(`{"c":"c%d"}`, i) }},
		{"distinct keys", 1, func(i int) string { return fmt.Sprintf(`{"c":"c%d"}`, i) }},
		{"one key, limit 1", 1, func(int) string { return `{"c":"same"}` }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := newEnv(b)
			v.Worker("serve").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `1`) })
			wf := workflow.New("per-key")
			if bc.limit > 0 {
				wf.Concurrency("{{input.c}}", bc.limit)
			}
			wf.Task("serve", "serve")
			_, bs := runtest.Bundles(b, wf)
			b.ResetTimer()
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = v.Start(bs, bc.input(i), "")
			}
			for _, id := range ids {
				if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
					b.Fatalf("run %s %s", id, rec.Run.Status)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
		})
	}
}

// BenchmarkSubRun measures runs of testdata/parent.toml end to end on an embedded server (a task,
// then a call step whose sub-run runs one task), workers in the benchmark completing each task
// at once: b.N runs started together and waited for. Each run is two runs for the engine: the
// parent's start, the sub-run's start (which reads the parent's record to check that it awaits
// the sub-run), the sub-run's task and end, child_finished, the parent's end.
func BenchmarkSubRun(b *testing.B) {
	v := newEnv(b)
	v.Worker("prep").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `{"x":1}`) })
	v.Worker("child-work").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `"done"`) })
	bs := runtest.LoadBundles(b, "testdata/parent.toml")
	b.ResetTimer()
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = v.Start(bs, `{}`, "")
	}
	for _, id := range ids {
		if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
			b.Fatalf("run %s %s: %+v", id, rec.Run.Status, rec.Run.Error)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
	b.ReportMetric(float64(v.eng.stats.held.Load())/float64(b.N), "held/run")
}
