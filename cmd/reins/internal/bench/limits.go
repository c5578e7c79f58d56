package bench

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/ratelimit"
)

// limitsBox opens an embedded server in a temporary directory with the reins layout, and n
// limiters over its limits bucket, each on a connection of its own as the workers of n
// processes would be.
func limitsBox(b B, n int) ([]*ratelimit.Limiter, func()) {
	b.Helper()
	ctx := context.Background()
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	if err := natsbox.EnsureLayout(ctx, box.JetStream(), box.Layout()); err != nil {
		b.Fatal(err)
	}
	var limiters []*ratelimit.Limiter
	var conns []*natsbox.Box
	for range n {
		c, err := box.Connect(ctx, "bench-limiter")
		if err != nil {
			b.Fatal(err)
		}
		l, err := ratelimit.New(ratelimit.Config{JS: c.JetStream(), Bucket: c.Names().LimitsBucket()})
		if err != nil {
			b.Fatal(err)
		}
		limiters, conns = append(limiters, l), append(conns, c)
	}
	return limiters, func() {
		for i, l := range limiters {
			l.Close()
			_ = conns[i].Close()
		}
		_ = box.Close()
	}
}

// LimiterOverhead measures what the shared rate limits add to one model call that does not
// wait: acquiring capacity in a scope with rpm, tpm and max_concurrent (one compare-and-set
// write of its record: a request, the estimated tokens and a slot with its lease) and releasing
// it (one more: the slot freed and the tokens settled to a different usage), one call at a time.
func LimiterOverhead(b B) {
	limiters, stop := limitsBox(b, 1)
	defer stop()
	l := limiters[0]
	scope := ratelimit.Scope{Key: ratelimit.ModelKey("bench", "model"), Limits: ratelimit.Limits{RPM: 1 << 40, TPM: 1 << 50, MaxConcurrent: 1 << 20}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuMeter()
	defer func() { cpu(b, b.Loops()) }()
	for range b.Loops() {
		g, err := l.Acquire(ctx, scope, 1200)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Release(800); err != nil {
			b.Fatal(err)
		}
	}
}

// LimiterFairness64 measures how the shared limits serve 64 loops at once that share one
// scope of max_concurrent = 8, split over two limiters (two processes): each loop acquires,
// holds its slot for a moment (a yield), and releases, until the benchmark's calls are made.
// It reports the calls per second and the spread of the calls each loop was granted: the
// largest over the smallest share (1 is perfectly even) and Jain's fairness index (1 is
// perfectly even; 1/64 is one loop taking everything). ns/op is per call.
func LimiterFairness64(b B) {
	const loops, slots = 64, 8
	limiters, stop := limitsBox(b, 2)
	defer stop()
	scope := ratelimit.Scope{Key: ratelimit.ModelKey("bench", "shared"), Limits: ratelimit.Limits{MaxConcurrent: slots}}
	ctx := context.Background()
	// Every loop knows the scope before the timed part: its first read and watch are not what
	// is measured.
	for _, l := range limiters {
		g, err := l.Acquire(ctx, scope, 1)
		if err != nil {
			b.Fatal(err)
		}
		_ = g.Release(1)
	}
	total := int64(b.Loops())
	var granted atomic.Int64
	counts := make([]int64, loops)
	var running, most atomic.Int64
	var failed atomic.Pointer[error]
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range loops {
		l := limiters[i%len(limiters)]
		wg.Go(func() {
			for granted.Load() < total {
				g, err := l.Acquire(ctx, scope, 1)
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if n := running.Add(1); n > most.Load() {
					most.Store(n)
				}
				if granted.Add(1) <= total {
					counts[i]++
				}
				runtime.Gosched() // the call: a yield
				running.Add(-1)
				if err := g.Release(1); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	if most.Load() > slots {
		b.Fatalf("%d calls ran at once under max_concurrent = %d", most.Load(), slots)
	}
	var sum, squares float64
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, c := range counts {
		sum += float64(c)
		squares += float64(c) * float64(c)
		lo, hi = min(lo, c), max(hi, c)
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "calls/s")
	if squares > 0 {
		b.ReportMetric(sum*sum/(loops*squares), "jain")
	}
	if lo > 0 {
		b.ReportMetric(float64(hi)/float64(lo), "max/min")
	}
	starved := 0
	for _, c := range counts {
		if c == 0 {
			starved++
		}
	}
	b.ReportMetric(float64(starved), "loops-starved")
}
