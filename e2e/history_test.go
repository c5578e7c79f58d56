//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
)

// reinsExit runs the reins binary and returns its exit status, stdout and stderr.
func reinsExit(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.reins, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("reins %s: %v", strings.Join(args, " "), err)
	}
	return code, stdout.String(), stderr.String()
}

// TestReplayForkPrune replays a finished run through the CLI (the same, then against a changed
// workflow), forks it from iteration 3 (the new run starts there with the copied checkpoint
// and the old run is untouched), and prunes the finished runs while a waiting one stays.
func TestReplayForkPrune(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t)
	serve(t, c.url)
	w := loopWorker(t, c.url, c.state, 0)
	cl := c.client(ctx)
	id := c.startRun("history-1", 5)
	checkRun(t, ctx, cl, id, 5, w)

	if code, out, errOut := reinsExit(t, "runs", "replay", id, "--nats", c.url); code != 0 {
		t.Fatalf("replay of the run itself: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := reinsExit(t, "runs", "replay", id, "--workflow", "testdata/count3.toml", "--nats", c.url)
	if code != 1 || !strings.Contains(out+errOut, `step "loop" iteration 4`) {
		t.Errorf("replay on max_iterations 3: exit %d, want 1 naming iteration 4 of loop\n%s%s", code, out, errOut)
	}

	before, err := cl.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut = reinsExit(t, "runs", "fork", id, "--from", "loop:3", "--run-id", "history-1-f", "--nats", c.url, "--json", "--quiet")
	if code != 0 {
		t.Fatalf("fork: exit %d\n%s%s", code, out, errOut)
	}
	var res protocol.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("fork --json: %v\n%s", err, out)
	}
	if res.Status != protocol.RunCompleted || len(res.Steps) != 1 || res.Steps[0].Iterations != 5 {
		t.Fatalf("the fork ended %s with %+v; want completed at iteration 5", res.Status, res.Steps)
	}
	if hasLine(w, "start history-1-f 1 1") || hasLine(w, "start history-1-f 2 1") || !hasLine(w, "start history-1-f 3 1") {
		t.Errorf("the fork did not start at iteration 3:\n%s", strings.Join(w.output(), "\n"))
	}
	after, err := cl.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision != before.Revision {
		t.Errorf("the forked run's record changed (revision %d → %d)", before.Revision, after.Revision)
	}

	gate := reins(t, "run", "testdata/gate.toml", "--nats", c.url, "--detach", "--run-id", "gate-1")
	awaitRecord(t, ctx, cl, gate, "it waits", func(rec *client.Record) bool { return rec.Run.Status == protocol.RunWaiting })
	out = reins(t, "runs", "prune", "--older-than", "0s", "--nats", c.url, "--json")
	var pruned struct {
		Runs int `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &pruned); err != nil || pruned.Runs != 2 {
		t.Errorf("prune: %s (%v); want the 2 finished runs removed", out, err)
	}
	list := reins(t, "runs", "list", "--nats", c.url)
	if !strings.Contains(list, gate) || strings.Contains(list, "history-1") {
		t.Errorf("after the prune, runs list shows:\n%s\nwant only the waiting run %s", list, gate)
	}
	if code, _, errOut := reinsExit(t, "runs", "replay", id, "--nats", c.url); code != 1 || !strings.Contains(errOut, id) {
		t.Errorf("replay of a pruned run: exit %d\n%s; want 1 naming the run", code, errOut)
	}
}
