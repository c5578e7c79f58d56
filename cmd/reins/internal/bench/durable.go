package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// stack is the engine and a worker in this process on an embedded server, as `reins serve`
// runs them.
type stack struct {
	box    *natsbox.Box
	client *client.Client
	stop   func()
}

// newStack starts an embedded server in a temporary directory, the engine, and a worker with
// the given handlers on a connection of its own, as reins serve hosts them (host.Start's
// defaults: the engine's saves wait up to the save window).
func newStack(b B, handlers map[string]worker.Handler) *stack {
	b.Helper()
	h, err := host.StartEmbedded(context.Background(), b.TempDir(), host.Config{Engine: true, Handlers: handlers, Concurrency: 256})
	if err != nil {
		b.Fatal(err)
	}
	return &stack{box: (*natsbox.Box)(h.Conn()), client: client.New(client.Config{Conn: h.Conn()}), stop: h.Stop}
}

// loopBundles is a workflow of one agent_loop step running handler.
func loopBundles(b B, handler string, maxIter int, loopDelay time.Duration) *workflow.Bundles {
	b.Helper()
	wb := workflow.New("bench-loop").Deadline(24 * time.Hour).MaxSteps(1 << 30)
	s := wb.AgentLoop("loop", handler).WithMaxIterations(maxIter)
	if loopDelay > 0 {
		s.WithLoopDelay(loopDelay)
	}
	def, err := wb.Build()
	if err != nil {
		b.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		b.Fatal(err)
	}
	return bs
}

// runLoops starts n runs of bs and waits for each to complete. When lasts is not nil, the
// handler sends on it the run id of each last iteration it answered: runLoops waits for the n
// runs to get there before it reads their records, so that it does not watch (and decode) every
// intermediate record while the loops run. A run counts only once it is saved completed.
func runLoops(b B, s *stack, bs *workflow.Bundles, n int, lasts <-chan string) {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		id, err := s.client.Start(ctx, bs, json.RawMessage(`null`), "")
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = id
	}
	if lasts != nil {
		seen := make(map[string]bool, n)
		for len(seen) < n {
			seen[<-lasts] = true
		}
	}
	mine := make(map[string]bool, n)
	for _, id := range ids {
		mine[id] = true
	}
	watchRuns(b, s, n, func(rec *client.Record) bool {
		if !mine[rec.Run.ID] || !rec.Finished() {
			return false
		}
		if rec.Run.Status != protocol.RunCompleted {
			b.Fatalf("run %s ended %s: %v", rec.Run.ID, rec.Run.Status, rec.Run.Error)
		}
		return true
	})
}

// continueUntil is an agent_loop handler that always asks for another iteration (the step ends
// at its max_iterations, last); after answering iteration last it sends the run id on lasts.
func continueUntil(last int, lasts chan<- string) worker.Handler {
	return func(t worker.TaskContext) error {
		err := t.Continue(nil)
		if t.Iteration() >= last {
			select {
			case lasts <- t.RunID():
			default: // a copy (a task delivered again): runLoops counts each run once
			}
		}
		return err
	}
}

// AgentLoopIteration measures one durable agent_loop iteration with a no-op handler, one loop
// at a time: the worker answers Continue, the engine decides and dispatches the next iteration
// through JetStream. It reports the p50 and p99 of the time between the starts of successive
// iterations. With REINS_BENCH_TAIL=1 it also reports how many of the slowest 1% of those gaps
// saw a garbage collection cycle end (slow-with-gc, a share), reading the runtime's GC count
// at each start (a cost left out of the default figures).
func AgentLoopIteration(b B) {
	var mu sync.Mutex
	var starts []time.Time
	var gcs []uint64
	tail := os.Getenv("REINS_BENCH_TAIL") == "1"
	gcCount := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	iters := max(b.Loops(), 2)
	lasts := make(chan string, 1)
	loop := continueUntil(iters, lasts)
	s := newStack(b, map[string]worker.Handler{"noop": func(t worker.TaskContext) error {
		mu.Lock()
		starts = append(starts, time.Now())
		if tail {
			metrics.Read(gcCount)
			gcs = append(gcs, gcCount[0].Value.Uint64())
		}
		mu.Unlock()
		return loop(t)
	}})
	defer s.stop()
	bs := loopBundles(b, "noop", iters, 0)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuMeter()
	runLoops(b, s, bs, 1, lasts)
	b.StopTimer()
	cpu(b, iters)
	gaps := make([]float64, 0, len(starts))
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, float64(starts[i].Sub(starts[i-1]).Nanoseconds()))
	}
	if tail {
		reportSlowWithGC(b, gaps, gcs)
	}
	reportLatencies(b, gaps)
}

// reportSlowWithGC reports the share of the slowest 1% of gaps (gaps[i] ends at the start whose
// GC count is gcs[i+1]) during which a GC cycle ended, as slow-with-gc.
func reportSlowWithGC(b B, gaps []float64, gcs []uint64) {
	idx := make([]int, len(gaps))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(x, y int) int { return cmp.Compare(gaps[y], gaps[x]) })
	slow := idx[:max(1, len(idx)/100)]
	withGC := 0
	for _, i := range slow {
		if gcs[i+1] > gcs[i] {
			withGC++
		}
	}
	b.ReportMetric(float64(withGC)/float64(len(slow)), "slow-with-gc")
}

// reportLatencies reports the p50 and p99 of ds (nanoseconds), as p50-ns and p99-ns; it sorts
// ds.
func reportLatencies(b B, ds []float64) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(ds[len(ds)/2], "p50-ns")
	b.ReportMetric(ds[min(len(ds)-1, len(ds)*99/100)], "p99-ns")
}

// AgentLoopThroughput returns a benchmark of loops concurrent agent_loop runs with a no-op
// handler: b.Loops() iterations in all, reported as iterations per second.
func AgentLoopThroughput(loops int) func(B) {
	return func(b B) {
		// Each loop runs at least 100 iterations, so that starting and waiting for runs is a
		// small part of the figure.
		per := max(100, b.Loops()/loops)
		lasts := make(chan string, 2*loops)
		s := newStack(b, map[string]worker.Handler{"noop": continueUntil(per, lasts)})
		defer s.stop()
		bs := loopBundles(b, "noop", per, 0)
		b.ReportAllocs()
		b.ResetTimer()
		start, cpu := time.Now(), cpuMeter()
		runLoops(b, s, bs, loops, lasts)
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(per*loops)/elapsed.Seconds(), "iterations/s")
		// ns/op is per iteration, whatever b.Loops() rounded to.
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(per*loops), "ns/iteration")
		cpu(b, per*loops)
	}
}

// CheckpointGrowth runs one agent_loop of 1,000 iterations, each loading its checkpoint and
// appending 1 KB to it. It reports the bytes the checkpoint bucket gained against the final
// history (1,000 KB), and, for the first ten and the last ten iterations, the mean time between
// the starts of successive iterations (the whole durable iteration) and the mean time of
// AppendCheckpoint alone.
func CheckpointGrowth(b B) {
	const iterations, item, window = 1000, 1024, 10
	payload := strings.Repeat("x", item-2) // a JSON string of 1 KB
	var mu sync.Mutex
	starts := make([]time.Time, iterations+1)
	appends := make([]time.Duration, iterations+1)
	s := newStack(b, map[string]worker.Handler{"append": func(t worker.TaskContext) error {
		mu.Lock()
		starts[t.Iteration()] = time.Now()
		mu.Unlock()
		if _, err := t.LoadCheckpoint(); err != nil {
			return err
		}
		begin := time.Now()
		if err := t.AppendCheckpoint(payload); err != nil {
			return err
		}
		mu.Lock()
		appends[t.Iteration()] = time.Since(begin)
		mu.Unlock()
		return t.Continue(nil)
	}})
	defer s.stop()
	bs := loopBundles(b, "append", iterations, 0)
	ctx := context.Background()
	var bytesWritten uint64
	var gapFirst, gapLast, appFirst, appLast time.Duration
	b.ResetTimer()
	for range b.Loops() {
		kv, err := s.box.JetStream().KeyValue(ctx, s.box.Names().CheckpointsBucket())
		if err != nil {
			b.Fatal(err)
		}
		before, err := kv.Status(ctx)
		if err != nil {
			b.Fatal(err)
		}
		runLoops(b, s, bs, 1, nil)
		after, err := kv.Status(ctx)
		if err != nil {
			b.Fatal(err)
		}
		bytesWritten += after.Bytes() - before.Bytes()
		for i := 2; i <= 1+window; i++ {
			gapFirst += starts[i].Sub(starts[i-1])
			appFirst += appends[i-1]
		}
		for i := iterations - window + 1; i <= iterations; i++ {
			gapLast += starts[i].Sub(starts[i-1])
			appLast += appends[i]
		}
	}
	b.StopTimer()
	n := float64(b.Loops() * window)
	b.ReportMetric(float64(bytesWritten)/float64(b.Loops()), "bytes-written/run")
	b.ReportMetric(float64(bytesWritten)/float64(b.Loops())/float64(iterations*item), "bytes/history")
	b.ReportMetric(float64(gapFirst.Nanoseconds())/n, "first10-iter-ns")
	b.ReportMetric(float64(gapLast.Nanoseconds())/n, "last10-iter-ns")
	b.ReportMetric(float64(appFirst.Nanoseconds())/n, "first10-append-ns")
	b.ReportMetric(float64(appLast.Nanoseconds())/n, "last10-append-ns")
}

// WaitingRuns starts 10,000 agent_loop runs that wait an hour in loop_delay after their first
// iteration and reports the resident memory of this process (engine, worker and embedded NATS
// server together) once all of them wait, and once the process is idle.
func WaitingRuns(b B) { waitingRuns(b, 10_000) }

// WaitingRuns100k is WaitingRuns with 100,000 runs.
func WaitingRuns100k(b B) { waitingRuns(b, 100_000) }

func waitingRuns(b B, runs int) {
	firsts := make(chan struct{}, runs)
	s := newStack(b, map[string]worker.Handler{"wait": func(t worker.TaskContext) error {
		err := t.Continue(nil)
		if t.Iteration() == 1 {
			firsts <- struct{}{}
		}
		return err
	}})
	defer s.stop()
	bs := loopBundles(b, "wait", 2, time.Hour)
	ctx := context.Background()
	delayed := watchDelayed(b, s, b.Loops()*runs)
	b.ResetTimer()
	for range b.Loops() {
		for range runs {
			if _, err := s.client.Start(ctx, bs, json.RawMessage(`null`), ""); err != nil {
				b.Fatal(err)
			}
		}
		for range runs {
			<-firsts
		}
	}
	b.StopTimer()
	// The engine decides the last continued events after the worker answered them; wait until
	// every run is saved waiting for iteration 2.
	if err := <-delayed; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(statusBytes(b, "/proc/self/status", "VmHWM:"))/(1<<20), "peak-rss-MB")
	runtime.GC()
	writeHeapProfile(b, "waiting")
	writeStreams(b, s, "waiting")
	b.ReportMetric(float64(rssBytes(b))/(1<<20), "rss-MB")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
	// The runs wait an hour: what they cost is the memory of an idle process. The embedded
	// server keeps a stream's block buffers (1–8 MB each) for 10 s after its last activity,
	// then returns them to a sync.Pool, which the second GC after empties; Go's scavenger
	// returns freed memory to the system over minutes, which FreeOSMemory does at once.
	time.Sleep(idleAfter)
	runtime.GC() // the buffers expired went back to sync.Pools: the first GC keeps them a cycle
	debug.FreeOSMemory()
	writeHeapProfile(b, "idle")
	b.ReportMetric(float64(rssBytes(b))/(1<<20), "idle-rss-MB")
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "idle-heap-MB")
}

// idleAfter is how long WaitingRuns lets the process idle: past the file store's cache
// expiration (nats-server's defaultCacheBufferExpiration, 10 s).
const idleAfter = 12 * time.Second

// watchDelayed watches the runs bucket's new records from now on and sends nil on the channel
// it returns once n runs are saved waiting at iteration 2 (an error if the watch ends first).
// Each record is read as it is saved, from the block the server is writing: a watch of every
// record once the runs wait would load the bucket's blocks again (4 MB each) and queue all
// 10,000 records in the client, which the peak resident set would count as the runs' memory.
func watchDelayed(b B, s *stack, n int) <-chan error {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := s.box.JetStream().KeyValue(ctx, s.box.Names().RunsBucket())
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		defer cancel()
		defer w.Stop()
		done <- countDelayed(w.Updates(), n)
	}()
	return done
}

// delayedRecord is what countDelayed reads of a run record.
type delayedRecord struct {
	Run struct {
		Status protocol.RunStatus `json:"status"`
		Steps  map[string]struct {
			Iteration int `json:"iteration"`
		} `json:"steps"`
	} `json:"run"`
}

// countDelayed reads updates until n distinct runs were saved running at iteration 2 of their
// loop.
func countDelayed(updates <-chan jetstream.KeyValueEntry, n int) error {
	seen := make(map[string]bool, n)
	for e := range updates {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var rec delayedRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return fmt.Errorf("run record %s: %w", e.Key(), err)
		}
		if rec.Run.Status == protocol.RunRunning && rec.Run.Steps["loop"].Iteration == 2 {
			seen[e.Key()] = true
		}
		if len(seen) >= n {
			return nil
		}
	}
	return errors.New("the watch of the runs bucket ended early")
}

// watchRuns watches the runs bucket until n distinct runs had a saved record for which ok
// holds. One watch of the bucket costs far less than a watch (a consumer) per run, which
// would weigh on the figures of a thousand runs.
func watchRuns(b B, s *stack, n int, ok func(*client.Record) bool) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := s.box.JetStream().KeyValue(ctx, s.box.Names().RunsBucket())
	if err != nil {
		b.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	seen := map[string]bool{}
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue // the end of the initial values, or a deletion
		}
		var rec client.Record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			b.Fatal(err)
		}
		if ok(&rec) {
			seen[e.Key()] = true
		}
		if len(seen) >= n {
			return
		}
	}
	b.Fatal("the watch of the runs bucket ended early")
}

// rssBytes reads this process's resident set size from /proc.
func rssBytes(b B) int64 { return rssOf(b, "/proc/self/status") }

// rssOf reads VmRSS from a process's status file.
func rssOf(b B, status string) int64 { return statusBytes(b, status, "VmRSS:") }

// writeHeapProfile writes the heap profile of this moment to $REINS_BENCH_HEAP/name.pprof when
// that variable names a directory, for `go tool pprof -sample_index=inuse_space`, and beside it
// the process's status (name.status: resident set anonymous and file-backed, threads) and the
// runtime's memory statistics (name.memstats), which tell the resident set from the heap.
func writeHeapProfile(b B, name string) {
	dir := os.Getenv("REINS_BENCH_HEAP")
	if dir == "" {
		return
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	stats := fmt.Sprintf("HeapInuse %d\nHeapIdle %d\nHeapReleased %d\nStackInuse %d\nMSpanInuse %d\nGCSys %d\nOtherSys %d\nSys %d\nNextGC %d\nNumGC %d\nGoroutines %d\n",
		ms.HeapInuse, ms.HeapIdle, ms.HeapReleased, ms.StackInuse, ms.MSpanInuse, ms.GCSys, ms.OtherSys, ms.Sys, ms.NextGC, ms.NumGC, runtime.NumGoroutine())
	for _, f := range []struct{ name, text string }{{name + ".status", string(status)}, {name + ".memstats", stats}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// writeStreams writes, beside the heap profile (writeHeapProfile), what each stream of the
// layout holds (name.streams: messages, bytes, subjects, deleted), which tells what the runs
// wrote.
func writeStreams(b B, s *stack, name string) {
	dir := os.Getenv("REINS_BENCH_HEAP")
	if dir == "" {
		return
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%-28s %10s %12s %10s %10s\n", "stream", "msgs", "bytes", "subjects", "deleted")
	streams := s.box.JetStream().ListStreams(context.Background())
	for info := range streams.Info() {
		st := info.State
		fmt.Fprintf(&out, "%-28s %10d %12d %10d %10d\n", info.Config.Name, st.Msgs, st.Bytes, st.NumSubjects, st.NumDeleted)
	}
	if err := streams.Err(); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".streams"), []byte(out.String()), 0o644); err != nil {
		b.Fatal(err)
	}
}

// statusBytes reads a size in kB, such as VmRSS or VmHWM (the peak resident set), from a
// process's status file.
func statusBytes(b B, status, field string) int64 {
	data, err := os.ReadFile(status)
	if err != nil {
		b.Skipf("no %s: %v", status, err)
	}
	for line := range bytes.Lines(data) {
		if rest, ok := bytes.CutPrefix(line, []byte(field)); ok {
			f := strings.Fields(string(rest))
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in %s", field, status)
	return 0
}

// cpuMeter starts measuring the process's CPU time; the function it returns reports it per
// iteration as cpu-ns/iteration (engine, worker and embedded server together), when it can be
// read.
func cpuMeter() func(b B, iterations int) {
	before, ok := processCPU()
	return func(b B, iterations int) {
		after, ok2 := processCPU()
		if ok && ok2 && iterations > 0 {
			b.ReportMetric(float64((after-before).Nanoseconds())/float64(iterations), "cpu-ns/iteration")
		}
	}
}
