package bench_test

import (
	"testing"
	"time"

	"github.com/reins-run/reins/cmd/reins/internal/bench"
)

func BenchmarkLoopIteration(b *testing.B) {
	bench.LoopIterations(bench.TB(b, func() int { return b.N }))
}

func BenchmarkJetStreamFloor(b *testing.B) {
	bench.JetStreamFloor(bench.TB(b, func() int { return b.N }))
}

func BenchmarkHTTPPost(b *testing.B) { bench.HTTPPost(bench.TB(b, func() int { return b.N })) }

func BenchmarkOpenAICall(b *testing.B) { bench.OpenAICall(bench.TB(b, func() int { return b.N })) }

func BenchmarkAnthropicCall(b *testing.B) {
	bench.AnthropicCall(bench.TB(b, func() int { return b.N }))
}

func BenchmarkEngineIteration(b *testing.B) {
	bench.EngineIteration(bench.TB(b, func() int { return b.N }))
}

func BenchmarkAgentLoopIteration(b *testing.B) {
	bench.AgentLoopIteration(bench.TB(b, func() int { return b.N }))
}

func BenchmarkAgentLoopIterationTraced(b *testing.B) {
	bench.AgentLoopIterationTraced(bench.TB(b, func() int { return b.N }))
}

func BenchmarkAgentLoopThroughput64(b *testing.B) {
	bench.AgentLoopThroughput(64)(bench.TB(b, func() int { return b.N }))
}

func BenchmarkAgentLoopThroughput1000(b *testing.B) {
	bench.AgentLoopThroughput(1000)(bench.TB(b, func() int { return b.N }))
}

func BenchmarkCheckpointGrowth(b *testing.B) {
	bench.CheckpointGrowth(bench.TB(b, func() int { return b.N }))
}

func BenchmarkWaitingRuns(b *testing.B) { bench.WaitingRuns(bench.TB(b, func() int { return b.N })) }

func BenchmarkLimiterOverhead(b *testing.B) {
	bench.LimiterOverhead(bench.TB(b, func() int { return b.N }))
}

func BenchmarkLimiterFairness64(b *testing.B) {
	bench.LimiterFairness64(bench.TB(b, func() int { return b.N }))
}

func BenchmarkWorkflowLoad1k(b *testing.B) {
	bench.LoadValidate(1000)(bench.TB(b, func() int { return b.N }))
}

func BenchmarkWorkflowLoad10k(b *testing.B) {
	bench.LoadValidate(10000)(bench.TB(b, func() int { return b.N }))
}

// TestSuiteMeasures runs the suite as `reins bench` does, so the benchmarks cannot rot unnoticed:
// each must complete and report a positive time, and the floor's ratio to itself is 1.
func TestSuiteMeasures(t *testing.T) {
	// The runs of thousands of loops take most of a minute; they are measured by reins bench
	// and go test -bench, not here.
	heavy := map[string]bool{"agent_loop_1000": true, "checkpoint_growth": true, "waiting_runs": true, "waiting_runs_100k": true, "agent_long": true}
	// A short benchtime: this checks that each benchmark runs and reports, not its figures.
	results, err := bench.Run(bench.RunConfig{Keep: func(name string) bool { return !heavy[name] }, Benchtime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(bench.Suite())-len(heavy) {
		t.Fatalf("%d results for %d benchmarks", len(results), len(bench.Suite())-len(heavy))
	}
	for _, r := range results {
		if r.N <= 0 || r.NsPerOp <= 0 || r.RatioToFloor <= 0 {
			t.Errorf("%s: n=%d ns/op=%.0f ratio=%.3f", r.Name, r.N, r.NsPerOp, r.RatioToFloor)
		}
	}
	if results[0].RatioToFloor != 1 {
		t.Errorf("the floor's ratio to itself is %.3f", results[0].RatioToFloor)
	}
	only, err := bench.Run(bench.RunConfig{Keep: func(name string) bool { return name == "loop_iteration" }, Benchtime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(only) != 2 || only[0].Name != "jetstream_floor" || only[1].Name != "loop_iteration" {
		t.Errorf("keeping loop_iteration measured %v, want the floor and loop_iteration", only)
	}
}

func BenchmarkComposedLoopIteration(b *testing.B) {
	bench.ComposedLoopIterations(bench.TB(b, func() int { return b.N }))
}

func BenchmarkComposedFuncIteration(b *testing.B) {
	bench.ComposedFuncIterations(bench.TB(b, func() int { return b.N }))
}

func BenchmarkAgentLong(b *testing.B) { bench.AgentLong(bench.TB(b, func() int { return b.N })) }

func BenchmarkWaitingRuns100k(b *testing.B) {
	bench.WaitingRuns100k(bench.TB(b, func() int { return b.N }))
}
