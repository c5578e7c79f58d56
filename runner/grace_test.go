//go:build e2e

package runner

// Waits on the real clock for the engine's grace (30 s). A heavy test, under the build tag e2e:
// go test -tags e2e ./runner -run TestLostTaskTimedOutByTheEngine.

import (
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// A task that no answer ends (its worker took it and dropped it: a stray cancel, a lost
// answer) is timed out by the engine at its timeout plus the grace, and retried: the run does
// not wait for its deadline. (The test takes the grace: 31 s.)
func TestLostTaskTimedOutByTheEngine(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("lost")
	wf.Task("work", "work").WithTimeout(time.Second).WithRetry(workflow.Retry{MaxAttempts: 2, Backoff: "fixed", InitialDelay: clock.Duration(10 * time.Millisecond)})
	_, bs := runtest.Bundles(t, wf)
	w := v.Worker("work")
	id := v.Start(bs, `{}`, "lost-1")
	first := w.Next() // taken, never answered
	if first.Attempt != 1 {
		t.Fatalf("attempt %d, want 1", first.Attempt)
	}
	second := w.NextWithin(time.Minute)
	if second.Attempt != 2 {
		t.Fatalf("attempt %d, want 2: the engine retries the lost attempt", second.Attempt)
	}
	runtest.PublishEvent(v.Ctx, t, v.Box.JetStream(), runtest.Completed(second, `"done"`), "")
	rec := v.Wait(id)
	if rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["work"].Attempts != 2 {
		t.Fatalf("run %s, step %+v; want completed on the second attempt", rec.Run.Status, rec.Run.Steps["work"])
	}
}
