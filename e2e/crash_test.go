//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/natstest"
	"github.com/reins-run/reins/protocol"
)

// cluster is one NATS server process with the engine and worker processes around it.
type cluster struct {
	t     testing.TB
	dir   string
	port  int
	url   string
	nats  *proc
	state string // the workers' hang markers
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), port: natstest.FreePort(t), state: t.TempDir()}
	c.url = fmt.Sprintf("nats://127.0.0.1:%d", c.port)
	c.nats = natsServer(t, c.dir, c.port)
	return c
}

// client connects the test itself to the server, for waiting on runs.
func (c *cluster) client(ctx context.Context) *client.Client {
	c.t.Helper()
	box, err := natsbox.Open(ctx, natsbox.Options{URL: c.url, Name: "e2e-test"})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { box.Close() })
	return client.New(client.Config{Conn: (*conn.Conn)(box)})
}

// startRun starts the count workflow to until and returns the run id.
func (c *cluster) startRun(id string, until int) string {
	c.t.Helper()
	return reins(c.t, "run", "testdata/count.toml", "--nats", c.url, "--detach", "--run-id", id,
		"--input", fmt.Sprintf(`{"until":%d}`, until))
}

// checkRun waits for the run and checks that it completed with until iterations, each
// dispatched once (attempts) and answered once (the workers' done lines).
func checkRun(t *testing.T, ctx context.Context, c *client.Client, id string, until int, workers ...*proc) {
	t.Helper()
	checkCompleted(t, ctx, c, id, until)
	// A worker prints "done" after its answer is stored, so the run may end before those lines
	// are printed (any of them: the handlers of later iterations may print theirs first).
	for i := 1; i <= until; i++ {
		if line := fmt.Sprintf("done %s %d", id, i); !awaitAny(workers, line, 10*time.Second) {
			t.Errorf("no worker printed %q", line)
		}
	}
	done := doneLines(id, workers...)
	for i := 1; i <= until; i++ {
		if done[i] != 1 {
			t.Errorf("run %s: iteration %d ran to completion %d times, want once", id, i, done[i])
		}
	}
}

// checkCompleted waits for the run and checks that it completed with until iterations, each
// dispatched once (attempts) and counted once by the engine.
func checkCompleted(t *testing.T, ctx context.Context, c *client.Client, id string, until int) {
	t.Helper()
	rec, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	if rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: status %s (error %v), want completed", id, rec.Run.Status, rec.Run.Error)
	}
	var out struct{ Iterations int }
	if err := json.Unmarshal(rec.Run.Output, &out); err != nil || out.Iterations != until {
		t.Errorf("run %s: output %s, want {\"iterations\":%d}", id, rec.Run.Output, until)
	}
	sr := rec.Run.Steps["loop"]
	if sr.Iteration != until || sr.Attempts != until {
		t.Errorf("run %s: step loop at iteration %d after %d tasks, want %d and %d", id, sr.Iteration, sr.Attempts, until, until)
	}
}

// doneLines counts, by iteration, the done lines the workers printed for run id: the answers
// their handlers saw stored.
func doneLines(id string, workers ...*proc) map[int]int {
	done := map[int]int{}
	for _, w := range workers {
		for _, line := range w.output() {
			var run string
			var iter int
			if n, _ := fmt.Sscanf(line, "done %s %d", &run, &iter); n == 2 && run == id {
				done[iter]++
			}
		}
	}
	return done
}

// A worker killed in the middle of an iteration: the iteration is redelivered after the
// AckWait to another worker and the run completes with the right count, every iteration
// completed once.
func TestCrashWorkerMidIteration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t)
	serve(t, c.url)
	w1 := loopWorker(t, c.url, c.state, 3)
	id := c.startRun("worker-crash", 5)
	w1.waitFor("hang "+id+" 3", 30*time.Second)
	w1.kill()
	w2 := loopWorker(t, c.url, c.state, 3)
	checkRun(t, ctx, c.client(ctx), id, 5, w1, w2)
	if !hasLine(w2, "start "+id+" 3 1") {
		t.Errorf("iteration 3 was not redelivered to the second worker as the same attempt")
	}
}

// The engine killed after it carried out a decision and before it saved the state: the
// restarted engine decides the redelivered event again (its tasks are deduplicated) and
// continues every run.
func TestCrashEngineBeforeSave(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t)
	w := loopWorker(t, c.url, c.state, 0)
	e1 := start(t, "reins serve (faulty)", []string{"REINS_FAULT=kill-before-save:6"},
		bins.reins, "serve", "--nats", c.url, "--listen", "127.0.0.1:0", "--no-workers", "--ack-wait", "1s")
	e1.waitFor("reins serving", 30*time.Second)
	ids := []string{c.startRun("engine-crash-a", 4), c.startRun("engine-crash-b", 4), c.startRun("engine-crash-c", 4)}
	<-e1.exited // it killed itself before its sixth save
	serve(t, c.url)
	cl := c.client(ctx)
	for _, id := range ids {
		checkRun(t, ctx, cl, id, 4, w)
	}
}

// The NATS server killed with SIGKILL mid-run and restarted on its file store: the engine and
// the worker reconnect and the runs complete; the engine counted every iteration once.
func TestCrashNATSServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t)
	serve(t, c.url)
	w := loopWorker(t, c.url, c.state, 0)
	id := c.startRun("nats-crash", 12)
	w.waitFor("done "+id+" 4", 30*time.Second)
	c.nats.kill()
	c.nats = natsServer(t, c.dir, c.port)
	rec, err := c.client(ctx).Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sr := rec.Run.Steps["loop"]
	if rec.Run.Status != protocol.RunCompleted || sr.Iteration != 12 || sr.Attempts != 12 {
		t.Fatalf("run %s: %s at iteration %d after %d tasks (error %v), want completed at 12 after 12", id, rec.Run.Status, sr.Iteration, sr.Attempts, rec.Run.Error)
	}
	if !strings.Contains(string(rec.Run.Output), `"iterations":12`) {
		t.Errorf("output %s, want 12 iterations", rec.Run.Output)
	}
}

func hasLine(p *proc, want string) bool {
	for _, l := range p.output() {
		if strings.Contains(l, want) {
			return true
		}
	}
	return false
}
