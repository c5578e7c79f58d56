//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// Stray messages do not wedge a run: a core-NATS reins.cancel.RUN for a run that goes on makes
// the worker drop the iteration it runs (as for a run that ended), and a forged answer for an
// attempt nobody was given changes nothing. The engine's watch times the dropped attempt out
// (its 5s timeout plus 30s of grace) and runs it again; the worker takes the tasks sent after
// the stray message; the run completes.
func TestStrayMessages(t *testing.T) {
	c := newCluster(t)
	serve(t, c.url)
	w := loopWorker(t, c.url, c.state, 3)
	id := reins(t, "run", "testdata/stray.toml", "--nats", c.url, "--detach", "--run-id", "stray-1", "--input", `{"until":5}`)
	w.waitFor("hang "+id+" 3", 30*time.Second)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a wedged run fails the test here
	defer cancel()
	box, err := natsbox.Open(ctx, natsbox.Options{URL: c.url, Name: "e2e-stray"})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	forged := wire.Answer(&protocol.Task{RunID: id, Step: "loop", Item: -1, Activation: 1, Iteration: 3, Attempt: 7}, protocol.EvCompleted, time.Now())
	forged.Output = json.RawMessage(`"forged"`)
	data, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	subj, err := natsbox.Names{}.EventSubject(forged.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := box.JetStream().Publish(ctx, subj, data); err != nil {
		t.Fatal(err)
	}
	cancelSubj, err := natsbox.CancelSubject(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := box.Conn().Publish(cancelSubj, []byte(id)); err != nil {
		t.Fatal(err)
	}
	w.waitFor("stopped "+id+" 3", 10*time.Second) // the worker dropped the iteration

	rec, err := c.client(ctx).Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) == `"forged"` {
		t.Fatalf("run %s: %s, output %s (%+v); want completed by the loop", id, rec.Run.Status, rec.Run.Output, rec.Run.Error)
	}
	sr := rec.Run.Steps["loop"]
	if sr.Iteration != 5 || sr.Attempts != 6 {
		t.Errorf("step loop: iteration %d after %d tasks; want 5 iterations and one retry (6 tasks)", sr.Iteration, sr.Attempts)
	}
	if !strings.Contains(strings.Join(w.output(), "\n"), "start "+id+" 3 2") {
		t.Errorf("iteration 3 did not run again as attempt 2")
	}
}
