//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/testkit/natstest"
	"github.com/reins-run/reins/protocol"
)

// failover is a NATS server, engine processes (reins serve --no-workers, with the engine's
// default AckWait: a takeover does not wait for it) and a worker, with the test watching every
// save of the runs and every key of the engines' bucket.
type failover struct {
	t       testing.TB
	ctx     context.Context
	c       *cluster
	engines []*proc
	worker  *proc
	extra   []string // more arguments of reins serve
	file    string   // the workflow of the runs

	mu    sync.Mutex
	grew  chan struct{}   // closed and replaced at every change below
	iters map[string]int  // run → iteration of its last save
	ended map[string]bool // run → finished
	owner [natsbox.Partitions]string
	pids  map[string]int // engine id → process id (its member key says)
}

func newFailover(t testing.TB, ctx context.Context, engines int) *failover {
	t.Helper()
	f := watchFailover(t, ctx, newCluster(t), engines)
	f.worker = loopWorker(t, f.c.url, f.c.state, 0)
	return f
}

// watchFailover starts engines on c (with the extra arguments of reins serve) and watches
// them and the runs.
func watchFailover(t testing.TB, ctx context.Context, c *cluster, engines int, extra ...string) *failover {
	t.Helper()
	f := &failover{t: t, ctx: ctx, c: c, extra: extra, file: "testdata/failover.toml", grew: make(chan struct{}),
		iters: map[string]int{}, ended: map[string]bool{}, pids: map[string]int{}}
	for range engines {
		f.engines = append(f.engines, f.startEngine())
	}
	box, err := natsbox.Open(ctx, natsbox.Options{URL: f.c.url, Name: "e2e-failover"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	js := box.JetStream()
	for bucket, apply := range map[string]func(jetstream.KeyValueEntry){natsbox.RunsBucket: f.run, natsbox.EnginesBucket: f.engine} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		w, err := kv.WatchAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop() })
		go func() {
			for ent := range w.Updates() {
				if ent != nil {
					apply(ent)
				}
			}
		}()
	}
	return f
}

func (f *failover) startEngine() *proc {
	p := start(f.t, "reins serve", nil, append([]string{bins.reins, "serve", "--nats", f.c.url, "--listen", "127.0.0.1:0", "--no-workers"}, f.extra...)...)
	p.waitFor("reins serving", 30*time.Second)
	return p
}

// changed wakes the waiters; f.mu is held.
func (f *failover) changed() {
	close(f.grew)
	f.grew = make(chan struct{})
}

func (f *failover) run(ent jetstream.KeyValueEntry) {
	if ent.Operation() != jetstream.KeyValuePut {
		return
	}
	rec, err := runstore.DecodeRecord(ent)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.iters[rec.Run.ID] = rec.Run.Steps["loop"].Iteration
	f.ended[rec.Run.ID] = rec.Run.Finished()
	f.changed()
}

func (f *failover) engine(ent jetstream.KeyValueEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.changed()
	key, put := ent.Key(), ent.Operation() == jetstream.KeyValuePut
	if id, ok := strings.CutPrefix(key, "member."); ok && put {
		// "HOST pid N"
		if _, pid, ok := strings.Cut(string(ent.Value()), " pid "); ok {
			f.pids[id], _ = strconv.Atoi(pid)
		}
		return
	}
	if tok, ok := strings.CutPrefix(key, "partition."); ok {
		p, _ := strconv.Atoi(tok)
		f.owner[p] = ""
		if put {
			f.owner[p] = string(ent.Value())
		}
	}
}

// await waits until ok, called with f.mu held, holds.
func (f *failover) await(what string, ok func() bool) {
	f.t.Helper()
	for {
		f.mu.Lock()
		done, grew := ok(), f.grew
		f.mu.Unlock()
		if done {
			return
		}
		select {
		case <-grew:
		case <-f.ctx.Done():
			f.t.Fatalf("never: %s", what)
		}
	}
}

// partitionsOf returns the partitions the engine process p owns; f.mu is held.
func (f *failover) partitionsOf(p *proc) []int {
	var ps []int
	for n, id := range f.owner {
		if id != "" && f.pids[id] == p.cmd.Process.Pid {
			ps = append(ps, n)
		}
	}
	return ps
}

// balanced waits until every partition has an owner and every engine process owns some.
func (f *failover) balanced() {
	f.await("every engine owns partitions", func() bool {
		for _, id := range f.owner {
			if id == "" {
				return false
			}
		}
		for _, e := range f.engines {
			if len(f.partitionsOf(e)) == 0 {
				return false
			}
		}
		return true
	})
}

// startRuns starts one run per partition, counting to until.
func (f *failover) startRuns(prefix string, until int) []string {
	return f.startMore(prefix, natsbox.Partitions, until)
}

// startMore starts n runs counting to until, spread over every partition.
func (f *failover) startMore(prefix string, n, until int) []string {
	ids := make([]string, 0, n)
	var per [natsbox.Partitions]int
	for i := 0; len(ids) < n; i++ {
		id := prefix + strconv.Itoa(i)
		if p := natsbox.Partition(id); per[p] <= len(ids)/natsbox.Partitions {
			per[p]++
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return natsbox.Partition(a) - natsbox.Partition(b) })
	for _, id := range ids {
		reins(f.t, "run", f.file, "--nats", f.c.url, "--detach", "--run-id", id, "--input", fmt.Sprintf(`{"until":%d}`, until))
	}
	return ids
}

// kill kills engine i with SIGKILL and returns how long it took until every run of the
// partitions it owned was saved again further on: the failover.
func (f *failover) kill(i int, ids []string) time.Duration {
	f.t.Helper()
	e := f.engines[i]
	f.mu.Lock()
	mine := f.partitionsOf(e)
	var theirs []string
	for _, p := range mine {
		if f.ended[ids[p]] {
			f.t.Fatalf("run %s ended before the kill: the runs are too short for the test", ids[p])
		}
		theirs = append(theirs, ids[p])
	}
	f.mu.Unlock()
	if len(mine) == 0 {
		f.t.Fatalf("engine %d owns no partition", i)
	}
	since := f.at(theirs)
	t0 := time.Now()
	e.kill()
	f.past(fmt.Sprintf("the runs of partitions %v go on", mine), since)
	return time.Since(t0)
}

// at returns the iteration each run of ids was last saved at.
func (f *failover) at(ids []string) map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	since := map[string]int{}
	for _, id := range ids {
		since[id] = f.iters[id]
	}
	return since
}

// past waits until every run of since was saved at a later iteration, or finished.
func (f *failover) past(what string, since map[string]int) {
	f.t.Helper()
	f.await(what, func() bool {
		for id, it := range since {
			if f.iters[id] <= it && !f.ended[id] {
				return false
			}
		}
		return true
	})
}

// progressed waits until every run saved an iteration past the one it had.
func (f *failover) progressed(ids []string) {
	f.t.Helper()
	f.past("every run goes on", f.at(ids))
}

// cycle kills each engine in turn, kills times, restarting it after each kill and waiting
// until the partitions are shared again; it returns each failover.
func (f *failover) cycle(kills int, ids []string) []time.Duration {
	var took []time.Duration
	for k := range kills {
		i := k % len(f.engines)
		f.progressed(ids)
		took = append(took, f.kill(i, ids))
		f.engines[i] = f.startEngine()
		f.balanced()
	}
	return took
}

// Engines SIGKILLed one after another while 16 runs (one per partition) count: after each
// kill the runs of the killed engine's partitions go on (another engine took them), and when
// the runs are cancelled at the end, every iteration they reached was dispatched once, counted
// once and answered once. On one nats-server and on a three-node cluster at R3 (failoverOn).
func TestEngineFailover(t *testing.T) {
	for _, on := range failoverOn {
		t.Run(on.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			f := on.newF(t, ctx, 2)
			f.balanced()
			ids := f.startRuns("fo-", 900000)
			took := f.cycle(3, ids)
			t.Logf("failovers: %v", took)
			f.progressed(ids)
			f.cancelAndCheck(ids)
		})
	}
}

// failoverOn lists the servers the engines fail over on: one nats-server ("single"), and a
// three-node cluster with every stream, bucket and consumer at R3 (reins serve --replicas 3),
// the cluster people deploy ("r3").
var failoverOn = []struct {
	name string
	newF func(t testing.TB, ctx context.Context, engines int) *failover
}{
	{"single", newFailover},
	{"r3", func(t testing.TB, ctx context.Context, engines int) *failover {
		return onNATSCluster(t, ctx, newNATSCluster(t), engines)
	}},
}

// cancelAndCheck cancels the runs of ids and checks each (checkCancelled).
func (f *failover) cancelAndCheck(ids []string) {
	f.t.Helper()
	cl := f.c.client(f.ctx)
	for _, id := range ids {
		if err := cl.Cancel(f.ctx, id, "the test is over"); err != nil {
			f.t.Fatal(err)
		}
	}
	for _, id := range ids {
		checkCancelled(f.t, f.ctx, cl, id, f.worker)
	}
}

// checkCancelled waits for the cancelled run and checks that each iteration it reached was
// dispatched once (attempts), and answered once (the workers' done lines) but for the last,
// which the cancel may have caught before or after its answer.
func checkCancelled(t testing.TB, ctx context.Context, c *client.Client, id string, workers ...*proc) {
	t.Helper()
	rec, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	if rec.Run.Status != protocol.RunCancelled {
		t.Fatalf("run %s: status %s (error %v), want cancelled", id, rec.Run.Status, rec.Run.Error)
	}
	sr := rec.Run.Steps["loop"]
	if sr.Iteration < 2 || sr.Attempts != sr.Iteration {
		t.Errorf("run %s: step loop at iteration %d after %d tasks, want one task per iteration", id, sr.Iteration, sr.Attempts)
	}
	done := doneLines(id, workers...)
	for i := 1; i < sr.Iteration; i++ {
		if done[i] != 1 {
			t.Errorf("run %s: iteration %d ran to completion %d times, want once", id, i, done[i])
		}
	}
	for i, n := range done {
		if i > sr.Iteration || n > 1 {
			t.Errorf("run %s at iteration %d: iteration %d ran to completion %d times", id, sr.Iteration, i, n)
		}
	}
}

// The sole engine SIGKILLed and started again at once: its runs go on, and no iteration is
// lost or done twice.
func TestSoleEngineRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newFailover(t, ctx, 1)
	f.balanced()
	ids := f.startRuns("sole-", 900000)
	f.progressed(ids)
	f.engines[0].kill()
	f.engines[0] = f.startEngine()
	f.progressed(ids)
	f.cancelAndCheck(ids)
}

// BenchmarkEngineFailover reports, over 20 SIGKILLs of one of two engines, how long the runs
// of the killed engine's partitions waited before they went on (p50 and max), and the same
// for a sole engine killed and started again at once (10 times), on each server of
// failoverOn: "single" and "r3" sub-benchmarks. Run it with -benchtime 1x; REINS_E2E_LOGS=DIR
// keeps the processes' output (the engines' at debug level on the cluster).
func BenchmarkEngineFailover(b *testing.B) {
	for _, on := range failoverOn {
		b.Run(on.name, func(b *testing.B) {
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				engineFailover(b, ctx, func(engines int) *failover { return on.newF(b, ctx, engines) })
				cancel()
			}
		})
	}
}

// onNATSCluster is newFailover on the three-node cluster nc, at R3 (with the engines' debug
// logs).
func onNATSCluster(t testing.TB, ctx context.Context, nc *natsCluster, engines int) *failover {
	t.Helper()
	c := &cluster{t: t, url: nc.url, state: t.TempDir()}
	f := watchFailover(t, ctx, c, engines, "--replicas", "3", "-v")
	f.worker = loopWorker(t, nc.url, c.state, 0)
	return f
}

// engineFailover is one round of BenchmarkEngineFailover on the failovers that newF makes.
func engineFailover(b *testing.B, ctx context.Context, newF func(engines int) *failover) {
	f := newF(2)
	f.balanced()
	ids := f.startRuns("bench-", 900000)
	took := f.cycle(20, ids)
	report(b, "failover", took)

	g := newF(1)
	g.balanced()
	solo := g.startRuns("solo-", 900000)
	var restarts []time.Duration
	for range 10 {
		g.progressed(solo)
		since := g.at(solo)
		t0 := time.Now()
		g.engines[0].kill()
		g.engines[0] = g.startEngine()
		g.past("the runs go on after a restart", since)
		restarts = append(restarts, time.Since(t0))
	}
	report(b, "restart", restarts)
}

// report reports the p50 and max of ds, in milliseconds, as name-p50-ms and name-max-ms.
func report(b *testing.B, name string, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, name+"-max-ms")
	b.Logf("%s: %v", name, ds)
}

// BenchmarkNodeFailover reports, over 20 losses of a NATS node of a three-node cluster at R3
// (each node in turn, started again after each), how long the 16 runs (one per partition, two
// engines, one worker) went before every one of them went through an iteration dispatched
// after the loss (savedPast; p50 and max): the streams and buckets whose leader was lost elect
// another among the two nodes left. It reports the same from when the node was started again
// (and the cluster placed an R3 stream again) until the next loss: what a node that comes back
// costs ("rejoin").
//
// Its floor is measured first on the same cluster, with the same losses: 16 loops of raw
// JetStream iterations (floorLoops), publish, fetch and acknowledge. The figures are reported
// as ratios to it too. Two kinds of loss: "kill" SIGKILLs the node (its followers wait 4 to 9 s
// for an election), "stop" sends it SIGTERM, on which nats-server hands the leaders it has to
// another node before it exits (a rolling restart). Run it with -benchtime 1x -timeout 60m;
// each takes about 8 minutes.
func BenchmarkNodeFailover(b *testing.B) {
	for _, loss := range []struct {
		name string
		sig  syscall.Signal
	}{{"kill", syscall.SIGKILL}, {"stop", syscall.SIGTERM}} {
		b.Run(loss.name, func(b *testing.B) {
			for range b.N {
				nodeFailover(b, loss.sig)
			}
		})
	}
}

// nodeFailover is one round of BenchmarkNodeFailover, losing nodes to sig.
func nodeFailover(b *testing.B, sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	nc := newNATSCluster(b)
	js := natstest.JetStream(b, nc.url)

	fctx, stopFloor := context.WithCancel(ctx)
	floor := startFloorLoops(b, fctx, js)
	fk := nodeKills(b, ctx, nc, js, sig, floor.at, func(ctx context.Context, since map[string]int) { floor.past(b, ctx, since) })
	stopFloor()
	floor.wg.Wait()
	b.ReportMetric(float64(floor.republished), "floor-republished")
	if err := js.DeleteStream(ctx, floorStream); err != nil {
		b.Fatal(err)
	}

	f := onNATSCluster(b, ctx, nc, 2)
	f.balanced()
	ids := f.startRuns("node-", 900000)
	started := &startTracker{p: f.worker, last: map[string]int{}}
	b.Cleanup(func() {
		if b.Failed() {
			dumpConsumers(b, js)
		}
	})
	runs, err := js.KeyValue(ctx, natsbox.RunsBucket)
	if err != nil {
		b.Fatal(err)
	}
	rk := nodeKills(b, ctx, nc, js, sig, func() map[string]int { return started.at(ids) }, func(ctx context.Context, since map[string]int) { savedPast(b, ctx, runs, since) })

	report(b, "floor", fk.took)
	report(b, "node-failover", rk.took)
	report(b, "floor-rejoin", fk.rejoin)
	report(b, "rejoin", rk.rejoin)
	b.ReportMetric(p50(rk.took)/p50(fk.took), "p50/floor")
	b.ReportMetric(slices.Max(rk.took).Seconds()/slices.Max(fk.took).Seconds(), "max/floor")
	// One entry each: go test keeps the first lines of a benchmark's log; the whole of them
	// goes with the processes' logs.
	losses := "reins's losses:\n" + strings.Join(rk.kills, "\n") + "\nthe floor's losses:\n" + strings.Join(fk.kills, "\n") + "\n"
	b.Log(losses)
	if dir := os.Getenv("REINS_E2E_LOGS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "losses-"+sig.String()+".txt"), []byte(losses), 0o644); err != nil {
			b.Log(err)
		}
	}
}

// kills is what nodeKills measured.
type kills struct {
	took   []time.Duration // from each kill until the work went on
	rejoin []time.Duration // from each node's start again until the work went on
	kills  []string        // a line per kill: what it took, and what the node led
}

// nodeKills sends sig (SIGKILL or SIGTERM) to a node of nc 20 times, each node in turn, and
// starts it again after each. Before a kill it waits until the work went on (past what at says) since the node
// before was started again; after it, until the work went on past where it was at the kill.
// Each kill's line names what the node led, read just before the kill.
func nodeKills(b *testing.B, ctx context.Context, nc *natsCluster, js jetstream.JetStream, sig syscall.Signal, at func() map[string]int, past func(context.Context, map[string]int)) kills {
	b.Helper()
	var k kills
	back, placed := time.Now(), time.Now()
	for i := range 20 {
		// Work stuck for minutes fails at once (with the consumers' state dumped, for reins).
		kctx, kcancel := context.WithTimeout(ctx, 6*time.Minute)
		past(kctx, at())
		if i > 0 {
			d := time.Since(back)
			k.rejoin = append(k.rejoin, d)
			k.kills = append(k.kills, fmt.Sprintf("  n%d back at %s: %v; the cluster placed an R3 stream after %v", (i-1)%3+1, back.UTC().Format("15:04:05.000"), d, placed.Sub(back)))
		}
		// What the node led is read first: listing every stream and consumer takes long enough
		// for the runs to go several iterations further, which would count as progress after
		// the loss (runs 17 and 18 counted kills that stalled every run for 4 s as 60 ms).
		led := ledBy(ctx, js, fmt.Sprintf("n%d", i%3+1))
		since := at()
		t0 := time.Now()
		nc.procs[i%3].signal(sig)
		past(kctx, since)
		d := time.Since(t0)
		kcancel()
		k.took = append(k.took, d)
		k.kills = append(k.kills, fmt.Sprintf("loss %d of n%d at %s: %v; it led %d streams and consumers: %v", i+1, i%3+1, t0.UTC().Format("15:04:05.000"), d, len(led), led))
		nc.start(i % 3)
		back = time.Now()
		nc.procs[i%3].waitFor("Server is ready", 30*time.Second)
		natstest.WaitPlacement(b, ctx, nc.url, 3)
		placed = time.Now()
	}
	return k
}

// p50 is the median of ds in seconds.
func p50(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Seconds()
}

// dumpConsumers logs the state of every consumer and the keys of the engines' bucket: what a
// stuck run waits for.
func dumpConsumers(t testing.TB, js jetstream.JetStream) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, stream := range []string{natsbox.EventsStream, natsbox.TasksStream} {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Logf("stream %s: %v", stream, err)
			continue
		}
		info, err := s.Info(ctx)
		if err == nil {
			t.Logf("stream %s: %d messages, last %d, leader %v", stream, info.State.Msgs, info.State.LastSeq, info.Cluster)
		}
		consumers := s.ListConsumers(ctx)
		for ci := range consumers.Info() {
			leader := ""
			if ci.Cluster != nil {
				leader = ci.Cluster.Leader
			}
			t.Logf("consumer %s/%s: leader %s, pending %d, ack pending %d, waiting %d, redelivered %d, delivered %d, ack floor %d",
				stream, ci.Name, leader, ci.NumPending, ci.NumAckPending, ci.NumWaiting, ci.NumRedelivered, ci.Delivered.Stream, ci.AckFloor.Stream)
		}
		if err := consumers.Err(); err != nil {
			t.Logf("consumers of %s: %v", stream, err)
		}
	}
	kv, err := js.KeyValue(ctx, natsbox.EnginesBucket)
	if err != nil {
		t.Logf("bucket %s: %v", natsbox.EnginesBucket, err)
		return
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Logf("keys of %s: %v", natsbox.EnginesBucket, err)
		return
	}
	for k := range keys.Keys() {
		if ent, err := kv.Get(ctx, k); err == nil {
			t.Logf("%s = %s (revision %d)", k, ent.Value(), ent.Revision())
		}
	}
}

// ledBy lists the streams and consumers whose Raft leader is the node named node: their writes
// and deliveries wait for an election (4 to 9 s in nats-server) when the node dies.
func ledBy(ctx context.Context, js jetstream.JetStream, node string) []string {
	var led []string
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		if info.Cluster != nil && info.Cluster.Leader == node {
			led = append(led, info.Config.Name)
		}
		s, err := js.Stream(ctx, info.Config.Name)
		if err != nil {
			continue
		}
		consumers := s.ListConsumers(ctx)
		for ci := range consumers.Info() {
			if ci.Cluster != nil && ci.Cluster.Leader == node {
				led = append(led, info.Config.Name+"/"+ci.Name)
			}
		}
	}
	return led
}

// startTracker follows the "start RUN ITERATION ATTEMPT" lines of a loopworker: the last
// iteration of each run it started, as its output says.
type startTracker struct {
	p    *proc
	next int // the first line not read yet
	last map[string]int
}

// read reads the lines printed since the last read, and returns the channel closed when the
// next one comes.
func (d *startTracker) read() <-chan struct{} {
	d.p.mu.Lock()
	lines, grew := d.p.all[d.next:], d.p.grew
	d.next = len(d.p.all)
	d.p.mu.Unlock()
	for _, line := range lines {
		var run string
		var iter, attempt int
		if n, _ := fmt.Sscanf(line, "start %s %d %d", &run, &iter, &attempt); n == 3 && iter > d.last[run] {
			d.last[run] = iter
		}
	}
	return grew
}

// at returns the last iteration started of each run of ids.
func (d *startTracker) at(ids []string) map[string]int {
	d.read()
	since := map[string]int{}
	for _, id := range ids {
		since[id] = d.last[id]
	}
	return since
}
