package bench

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

// B is what a benchmark uses of *testing.B. `go test -bench` passes *testing.B through TB;
// `reins bench` runs the same functions with a runner of its own (Measure), so that the reins
// binary links no testing package.
type B interface {
	// Loops is the number of operations to run (testing.B's N).
	Loops() int
	TestingB
}

// TestingB is the part of *testing.B that B takes as it is.
type TestingB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	ResetTimer()
	StartTimer()
	StopTimer()
	ReportAllocs()
	ReportMetric(n float64, unit string)
	SetBytes(n int64)
	TempDir() string
}

// TB adapts a *testing.B (its N read through n) to B, for the benchmarks of go test.
func TB(b TestingB, n func() int) B { return tb{b, n} }

type tb struct {
	TestingB
	n func() int
}

func (t tb) Loops() int { return t.n() }

// Measurement is what Measure measured, as testing.BenchmarkResult says it.
type Measurement struct {
	N        int
	T        time.Duration
	Allocs   uint64
	Bytes    uint64
	Extra    map[string]float64
	Failed   bool
	Messages []string
}

// DefaultBenchtime is how long Measure runs a benchmark at least (testing's default
// -benchtime).
const DefaultBenchtime = time.Second

// Measure runs fn as testing.Benchmark does: once with 1 loop, then with more until a run takes
// benchtime (0: DefaultBenchtime), and returns the last run's figures.
func Measure(fn func(B), benchtime time.Duration) Measurement {
	if benchtime <= 0 {
		benchtime = DefaultBenchtime
	}
	var m Measurement
	for n := 1; ; {
		m = runOnce(fn, n)
		if m.Failed || m.T >= benchtime || n >= 1e9 {
			return m
		}
		prev, prevns := n, max(m.T.Nanoseconds(), 1)
		n = int(benchtime.Nanoseconds() * int64(prev) / prevns)
		n += n / 5
		n = min(max(n, prev+1), 100*prev, 1e9)
	}
}

// runOnce runs fn with n loops in a goroutine of its own (Fatal ends it, as testing's does).
func runOnce(fn func(B), n int) Measurement {
	r := &measurer{n: n, extra: map[string]float64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.cleanup()
		runtime.GC()
		r.ResetTimer()
		r.StartTimer()
		fn(r)
		r.StopTimer()
	}()
	<-done
	return Measurement{N: n, T: r.elapsed, Allocs: r.allocs, Bytes: r.bytes, Extra: r.extra, Failed: r.failed, Messages: r.messages}
}

// measurer is Measure's B.
type measurer struct {
	n int

	mu       sync.Mutex
	timing   bool
	start    time.Time
	startMem runtime.MemStats
	elapsed  time.Duration
	allocs   uint64
	bytes    uint64
	extra    map[string]float64
	failed   bool
	messages []string
	dirs     []string
}

func (r *measurer) Loops() int { return r.n }
func (r *measurer) Helper()    {}

func (r *measurer) Fatal(args ...any) { r.fail(fmt.Sprint(args...)) }

func (r *measurer) Fatalf(format string, args ...any) { r.fail(fmt.Sprintf(format, args...)) }

func (r *measurer) Skipf(format string, args ...any) {
	r.fail("skipped: " + fmt.Sprintf(format, args...))
}

// fail records msg and ends the benchmark's goroutine, as testing.B.FailNow does.
func (r *measurer) fail(msg string) {
	r.mu.Lock()
	r.failed = true
	r.messages = append(r.messages, msg)
	r.mu.Unlock()
	fmt.Fprintln(os.Stderr, "bench:", msg)
	runtime.Goexit()
}

func (r *measurer) ResetTimer() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timing {
		runtime.ReadMemStats(&r.startMem)
		r.start = time.Now()
	}
	r.elapsed, r.allocs, r.bytes = 0, 0, 0
}

func (r *measurer) StartTimer() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.timing {
		runtime.ReadMemStats(&r.startMem)
		r.start, r.timing = time.Now(), true
	}
}

func (r *measurer) StopTimer() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timing {
		r.elapsed += time.Since(r.start)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		r.allocs += ms.Mallocs - r.startMem.Mallocs
		r.bytes += ms.TotalAlloc - r.startMem.TotalAlloc
		r.timing = false
	}
}

func (r *measurer) ReportAllocs() {} // always reported

func (r *measurer) ReportMetric(n float64, unit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extra[unit] = n
}

func (r *measurer) SetBytes(int64) {}

func (r *measurer) TempDir() string {
	dir, err := os.MkdirTemp("", "reins-bench-")
	if err != nil {
		r.Fatalf("a temporary directory: %v", err)
	}
	r.mu.Lock()
	r.dirs = append(r.dirs, dir)
	r.mu.Unlock()
	return dir
}

func (r *measurer) cleanup() {
	r.mu.Lock()
	dirs := r.dirs
	r.mu.Unlock()
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
