package bench_test

import (
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/cmd/reins/internal/bench"
)

var sink []byte

// Measure grows the loops until a run takes the benchtime (a second by default), counts the
// allocations of the timed part only, keeps the metrics reported, and ends a benchmark that
// fails with its message.
func TestMeasure(t *testing.T) {
	m := bench.Measure(func(b bench.B) {
		b.StopTimer()
		sink = make([]byte, 1<<20) // not timed
		b.StartTimer()
		for range b.Loops() {
			sink = make([]byte, 64)
		}
		b.ReportMetric(42, "answers/op")
	}, 0)
	if m.Failed || m.N < 1000 || m.Allocs/uint64(m.N) != 1 || m.Extra["answers/op"] != 42 || m.T.Seconds() < 1 {
		t.Errorf("%+v: want many loops, one allocation each, the metric, at least a second", m)
	}
	failed := bench.Measure(func(b bench.B) {
		b.Fatalf("no %s", "server")
		t.Error("Fatalf returned")
	}, 0)
	if !failed.Failed || strings.Join(failed.Messages, "") != "no server" {
		t.Errorf("%+v: want failed with the message", failed)
	}
	short := bench.Measure(func(b bench.B) {
		for range b.Loops() {
			sink = make([]byte, 64)
		}
	}, 20*time.Millisecond)
	if short.T < 20*time.Millisecond || short.T >= time.Second {
		t.Errorf("a benchtime of 20ms ran %s", short.T)
	}
}
