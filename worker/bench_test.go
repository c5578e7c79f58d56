package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// BenchmarkAppendCheckpoint runs one agent_loop step for b.N iterations (go test -bench
// AppendCheckpoint -benchtime 1000x for the 1,000 iterations of the issue): every iteration
// appends 1 KB to the checkpoint and continues; the benchmark plays the engine (dispatches the
// next iteration when it reads the continued event). One op is one whole iteration: task
// publish, delivery, checkpoint write, answer, acknowledgement. It reports the bytes each
// iteration wrote to the bucket and the mean latency of the first and last tenth of the
// iterations, which must be about the same: nothing is read back from the history.
// "append+load" also loads the checkpoint every iteration (a copy of the whole history).
func BenchmarkAppendCheckpoint(b *testing.B) {
	for _, load := range []bool{false, true} {
		name := "append"
		if load {
			name = "append+load"
		}
		b.Run(name, func(b *testing.B) { benchAppend(b, load) })
	}
}

func benchAppend(b *testing.B, load bool) {
	e := newEnv(b)
	item := strings.Repeat("x", 1024)
	r := e.start(Options{}, map[string]Handler{"bench": func(tc TaskContext) error {
		if err := tc.AppendCheckpoint(item); err != nil {
			return tc.FailPermanent(err)
		}
		if load {
			if _, err := tc.LoadCheckpoint(); err != nil {
				return tc.FailPermanent(err)
			}
		}
		return tc.Continue(nil)
	}})
	lat := make([]time.Duration, 0, b.N)
	tk := task("bench", "loop", "bench", 1, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		e.publish(tk)
		ev := e.event()
		if ev.Type != protocol.EvContinued {
			b.Fatalf("iteration %d: %s %s", tk.Iteration, ev.Type, ev.Error)
		}
		lat = append(lat, time.Since(start))
		tk = task("bench", "loop", "bench", tk.Iteration+1, 1)
	}
	b.StopTimer()
	vals := e.checkpointValues(wire.CheckpointScope("bench", "loop", -1, 1))
	written := 0
	for _, v := range vals {
		written += len(v)
	}
	b.ReportMetric(float64(written)/float64(b.N), "kv-bytes/iter")
	tenth := max(len(lat)/10, 1)
	b.ReportMetric(float64(mean(lat[:tenth]).Nanoseconds()), "first-tenth-ns/iter")
	b.ReportMetric(float64(mean(lat[len(lat)-tenth:]).Nanoseconds()), "last-tenth-ns/iter")
	if n := r.reloads.load(); n != 0 {
		b.Errorf("the checkpoint was read back %d times", n)
	}
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}
