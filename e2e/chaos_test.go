//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
)

// envInt reads a size of the chaos test from the environment, def when unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// chaosWorker starts a loopworker that appends each iteration's effect to effects, through
// effect leases, works pace per iteration, and completes a run once the file stop exists.
func chaosWorker(t *testing.T, url, effects, stop string, pace time.Duration) *proc {
	t.Helper()
	p := start(t, "loopworker", nil, bins.loopworker, "-nats", url, "-ack-wait", "1s",
		"-effects", effects, "-stop", stop, "-pace", pace.String())
	p.waitFor("ready", 30*time.Second)
	return p
}

// Chaos on a real cluster: three nats-server processes at R3, two engines and two workers whose
// every iteration has a side effect. While the runs count, a NATS node, an engine and a worker
// are SIGKILLed and started again in turn; once the last is back, the runs are told to finish
// (the workers complete each at its next iteration). Every run completes as the same workflow
// does without faults (run first, on the same cluster); every iteration up to its last is
// dispatched once and counted once, and its effect happened once: 0 lost iterations, 0
// duplicated effects, 0 failed or stuck runs.
//
// CI runs a small size; the longer one for a note:
//
//	REINS_CHAOS_RUNS=200 REINS_CHAOS_FAULTS=12 go test -tags e2e ./e2e -run TestChaos -v -timeout 40m
func TestChaos(t *testing.T) {
	runs := envInt(t, "REINS_CHAOS_RUNS", 24)
	faults := envInt(t, "REINS_CHAOS_FAULTS", 3)
	const until = 1_000_000 // never reached: the runs end when told
	const pace = 100 * time.Millisecond
	ctx, cancel := untilDeadline(t, 25*time.Minute)
	defer cancel()
	nc := newNATSCluster(t)
	c := &cluster{t: t, url: nc.url, state: t.TempDir()}
	f := watchFailover(t, ctx, c, 2, "--replicas", "3")
	f.file = "testdata/chaos.toml"
	effects, stop := filepath.Join(t.TempDir(), "effects.txt"), filepath.Join(t.TempDir(), "stop")
	workers := []*proc{chaosWorker(t, nc.url, effects, stop, 0), chaosWorker(t, nc.url, effects, stop, 0)}
	f.balanced()
	cl := c.client(ctx)

	// Without faults first: what a run of the workflow ends with.
	calm := f.startMore("calm-", 4, 20)
	var want []*client.Record
	for _, id := range calm {
		want = append(want, waitRecord(t, ctx, cl, id))
	}
	for _, w := range workers {
		w.kill()
	}
	all := []*proc{}
	all = append(all, workers...)
	for i := range workers {
		workers[i] = chaosWorker(t, nc.url, effects, stop, pace)
		all = append(all, workers[i])
	}

	ids := f.startMore("chaos-", runs, until)
	var did []string
	for k := range faults {
		f.progressed(ids)
		f.mu.Lock()
		for _, id := range ids {
			if f.ended[id] {
				f.mu.Unlock()
				rec := waitRecord(t, ctx, cl, id)
				t.Fatalf("run %s ended %s (%v) before fault %d, at iteration %d: only the stop ends a run", id, rec.Run.Status, rec.Run.Error, k+1, rec.Run.Steps["loop"].Iteration)
			}
		}
		f.mu.Unlock()
		switch i := k / 3; k % 3 {
		case 0:
			n := i % 3
			nc.procs[n].kill()
			nc.start(n)
			nc.procs[n].waitFor("Server is ready", 30*time.Second)
			did = append(did, fmt.Sprintf("node n%d", n+1))
		case 1:
			n := i % len(f.engines)
			f.engines[n].kill()
			f.engines[n] = f.startEngine()
			did = append(did, fmt.Sprintf("engine %d", n))
		case 2:
			n := i % len(workers)
			workers[n].kill()
			workers[n] = chaosWorker(t, nc.url, effects, stop, pace)
			all = append(all, workers[n])
			did = append(did, fmt.Sprintf("worker %d", n))
		}
	}
	t.Logf("SIGKILLed and started again: %s", strings.Join(did, ", "))
	f.progressed(ids) // the last fault's part is back and the runs go on
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	retried := 0
	last := map[string]int{} // the iteration each run completed at
	for _, id := range calm {
		last[id] = 20
	}
	for _, id := range ids {
		got := waitRecord(t, ctx, cl, id)
		last[id] = got.Run.Steps["loop"].Iteration
		retried += checkRetried(t, got, last[id])
		// As without faults, but for the count the input asks.
		w := want[0].Run
		if got.Run.Status != w.Status || got.Run.Steps["loop"].Status != w.Steps["loop"].Status ||
			got.Run.Steps["loop"].StopReason != w.Steps["loop"].StopReason {
			t.Errorf("run %s: %s, step %s (%s); without faults: %s, step %s (%s)", id, got.Run.Status,
				got.Run.Steps["loop"].Status, got.Run.Steps["loop"].StopReason, w.Status, w.Steps["loop"].Status, w.Steps["loop"].StopReason)
		}
	}
	for _, r := range want {
		checkCompleted(t, ctx, cl, r.Run.ID, 20)
	}
	again := checkEffects(t, effects, last)
	reran := 0
	for _, id := range ids {
		for _, n := range doneLines(id, all...) {
			reran += max(n-1, 0)
		}
	}
	iterations := 0
	for _, id := range ids {
		iterations += last[id]
	}
	t.Logf("%d runs, %d iterations in all, under %d faults: every effect applied once; %d calls made again with the same key (applied once by it); %d attempts retried by the step's policy, %d handlers ran again", runs, iterations, faults, again, retried, reran)
}

// checkRetried checks that run rec completed with until iterations, each counted once, and
// returns how many attempts the retry policy added (a failed attempt is dispatched again as
// the same iteration).
func checkRetried(t *testing.T, rec *client.Record, until int) int {
	t.Helper()
	id := rec.Run.ID
	if rec.Run.Status != protocol.RunCompleted {
		t.Errorf("run %s: status %s (error %v), want completed", id, rec.Run.Status, rec.Run.Error)
		return 0
	}
	var out struct{ Iterations int }
	if err := json.Unmarshal(rec.Run.Output, &out); err != nil || out.Iterations != until {
		t.Errorf("run %s: output %s, want {\"iterations\":%d}", id, rec.Run.Output, until)
	}
	sr := rec.Run.Steps["loop"]
	if sr.Iteration != until || sr.Attempts < until {
		t.Errorf("run %s: step loop at iteration %d after %d tasks, want %d and at least %d", id, sr.Iteration, sr.Attempts, until, until)
	}
	return sr.Attempts - until
}

// untilDeadline is a context that ends a minute before the test's deadline (-timeout), or after
// d when the test has none: a stuck run fails the test with what it waited for, not a panic.
func untilDeadline(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	if deadline, ok := t.Deadline(); ok {
		return context.WithDeadline(context.Background(), deadline.Add(-time.Minute))
	}
	return context.WithTimeout(context.Background(), d)
}

// waitRecord waits for run id to end and returns its record.
func waitRecord(t *testing.T, ctx context.Context, c *client.Client, id string) *client.Record {
	t.Helper()
	rec, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	return rec
}

// checkEffects checks that the system the effects change (FILE.keys, one file per idempotency
// key holding "RUN ITERATION") holds exactly one effect for every iteration of every run of
// last, up to the one it completed at, and none other. It returns how many calls were made
// again (FILE.calls): a holder killed after its effect and before its result was recorded has
// the call made again with the same key, which the system applies once.
func checkEffects(t *testing.T, file string, last map[string]int) (again int) {
	t.Helper()
	entries, err := os.ReadDir(file + ".keys")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(file+".keys", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		count[string(data)]++
	}
	want := 0
	for id, n := range last {
		for i := 1; i <= n; i++ {
			want++
			if k := count[fmt.Sprintf("%s %d", id, i)]; k != 1 {
				t.Errorf("run %s iteration %d: its effect was applied %d times, want once", id, i, k)
			}
		}
	}
	if len(count) != want {
		t.Errorf("%d distinct effects, want %d", len(count), want)
	}
	calls, err := os.ReadFile(file + ".calls")
	if err != nil {
		t.Fatal(err)
	}
	return len(bytes.Split(bytes.TrimSpace(calls), []byte("\n"))) - want
}
