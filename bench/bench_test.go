package bench_test

import (
	"testing"

	"github.com/reins-run/reins/bench"
)

func BenchmarkLoopIteration(b *testing.B) { bench.LoopIterations(b) }

func BenchmarkJetStreamFloor(b *testing.B) { bench.JetStreamFloor(b) }
