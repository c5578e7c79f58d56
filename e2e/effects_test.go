//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/protocol"
)

// buildEffectWorker returns the effectworker program: prebuilt, or built for the test
// (buildtest.Program).
func buildEffectWorker(t *testing.T) string {
	t.Helper()
	return buildtest.Program(t, "github.com/reins-run/reins/e2e/testdata/effectworker")
}

// effectWorker starts the effectworker against url, appending to counter, with the fault
// injection fault ("" for none), and waits until it is ready.
func effectWorker(t *testing.T, bin, url, counter, fault string) *proc {
	t.Helper()
	env := []string{"REINS_COUNTER_FILE=" + counter, "REINS_FAULT=" + fault}
	p := start(t, "effectworker", env, bin, "-nats", url, "-ack-wait", "1s")
	p.waitFor("ready", 30*time.Second)
	return p
}

// A worker killed right after a side-effecting tool ran and its result was recorded, before
// the iteration was answered: the iteration is redelivered to a second worker, which gets the
// recorded result instead of running the tool again. The run completes, the effect happened
// once (one line in the counter file), and the model saw the recorded result.
func TestEffectOnceAcrossWorkerCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := buildEffectWorker(t)
	c := newCluster(t)
	serve(t, c.url)
	counter := filepath.Join(t.TempDir(), "counter.txt")
	w1 := effectWorker(t, bin, c.url, counter, "kill-after-effect:1")
	id := reins(t, "run", "testdata/effectworker/effects.toml", "--nats", c.url, "--detach", "--run-id", "effect-once", "--input", `{}`)
	select {
	case <-w1.exited:
	case <-time.After(time.Minute):
		t.Fatal("the first worker did not kill itself after the side effect")
	}
	if !hasLine(w1, "fault kill-after-effect 1") {
		t.Fatalf("the first worker exited without reaching the fault")
	}
	w2 := effectWorker(t, bin, c.url, counter, "")

	rec, err := c.client(ctx).Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %s (%+v), want completed", id, rec.Run.Status, rec.Run.Error)
	}
	var out builtin.AgentOutput
	if err := json.Unmarshal(rec.Run.Output, &out); err != nil || out.StopReason != "completed" || out.Answer == nil || *out.Answer != "Appended one line." {
		t.Fatalf("output %s, want the completed agent's answer", rec.Run.Output)
	}
	if sr := rec.Run.Steps["act"]; sr.Iteration != 2 || sr.Usage.ToolCalls != 1 {
		t.Errorf("step act: iteration %d, %d tool calls reported; want 2 and 1", sr.Iteration, sr.Usage.ToolCalls)
	}

	// The side effect happened once: one line, written by the first worker.
	data, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 1 || lines[0] == "" {
		t.Fatalf("the counter file holds %d lines, want 1:\n%s", len(lines), data)
	}
	if n := countLines(w1, "effect "); n != 1 {
		t.Errorf("the first worker ran the tool %d times, want once", n)
	}
	if n := countLines(w2, "effect "); n != 0 {
		t.Errorf("the second worker ran the tool %d times, want none: the result was recorded", n)
	}

	// The record and what the model saw are that line.
	box, err := natsbox.Open(ctx, natsbox.Options{URL: c.url, Name: "e2e-effects"})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	js := box.JetStream()
	records := kvValues(t, ctx, js, natsbox.EffectsBucket, ">")
	if len(records) != 1 {
		t.Fatalf("%d records in %s, want 1", len(records), natsbox.EffectsBucket)
	}
	var record struct {
		Done  bool `json:"done"`
		Value struct {
			Tool   string          `json:"tool"`
			Output json.RawMessage `json:"output"`
		} `json:"value"`
	}
	if err := json.Unmarshal(records[0].Value(), &record); err != nil || !record.Done {
		t.Fatalf("record %s is not a result (%v)", records[0].Value(), err)
	}
	var result struct {
		Line  string `json:"line"`
		Lines int    `json:"lines"`
	}
	if err := json.Unmarshal(record.Value.Output, &result); err != nil || record.Value.Tool != "append_line" || result.Line != lines[0] || result.Lines != 1 {
		t.Fatalf("record %s, want append_line's result with the counter file's line %q", records[0].Value(), lines[0])
	}
	st := finalState(t, ctx, js, id, "act")
	var seen []string
	for _, m := range st.Messages {
		if m.Role == model.RoleTool && m.Name == "append_line" {
			seen = append(seen, m.Content)
		}
	}
	if len(seen) != 1 || seen[0] != compactJSON(t, record.Value.Output) {
		t.Errorf("the model saw %q as append_line's result, want the recorded %s", seen, record.Value.Output)
	}
}

func countLines(p *proc, prefix string) int {
	n := 0
	for _, l := range p.output() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// kvValues returns the current entries of bucket whose keys match filter.
func kvValues(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket, filter string) []jetstream.KeyValueEntry {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.KeyValueEntry
	for e, err := range natsbox.Entries(ctx, kv, filter) {
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		out = append(out, e)
	}
	return out
}

// finalState is the agent's loop state as the checkpoint writes of the step's first activation
// fold to, in order (a set replaces the value, an append adds its items), read as the agent
// reads it (builtin.DecodeAgentState).
func finalState(t *testing.T, ctx context.Context, js jetstream.JetStream, runID, step string) *loop.State {
	t.Helper()
	scope := wire.CheckpointScope(runID, step, -1, 1)
	type write struct {
		w     wire.CheckpointWrite
		value []byte
	}
	var writes []write
	for _, e := range kvValues(t, ctx, js, natsbox.CheckpointsBucket, scope+".>") {
		w, err := wire.ParseCheckpointWrite(e.Key())
		if err != nil {
			t.Fatal(err)
		}
		writes = append(writes, write{w, e.Value()})
	}
	if len(writes) == 0 {
		t.Fatalf("no checkpoint of step %s of run %s", step, runID)
	}
	slices.SortFunc(writes, func(a, b write) int {
		return cmp.Or(cmp.Compare(a.w.Iteration, b.w.Iteration), cmp.Compare(a.w.Resume, b.w.Resume), cmp.Compare(a.w.N, b.w.N))
	})
	var items []json.RawMessage
	for _, w := range writes {
		var op struct {
			Set    json.RawMessage   `json:"set"`
			Append []json.RawMessage `json:"append"`
		}
		if err := json.Unmarshal(w.value, &op); err != nil {
			t.Fatalf("checkpoint %s: %v", w.w.Key(), err)
		}
		if op.Set != nil {
			items = nil
			if err := json.Unmarshal(op.Set, &items); err != nil { // a state set whole
				st, err := builtin.DecodeAgentState(op.Set)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		}
		items = append(items, op.Append...)
	}
	folded, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	st, err := builtin.DecodeAgentState(folded)
	if err != nil || st == nil {
		t.Fatalf("checkpoint of step %s of run %s: %s (%v)", step, runID, folded, err)
	}
	return st
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// effectsCluster starts nats-server and reins serve for a fault test of side effects, builds the
// effectworker, and returns a context bounding the test, the worker's binary, the cluster, the
// counter file and the environment that makes the worker append to it.
func effectsCluster(t *testing.T) (context.Context, string, *cluster, string, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	bin := buildEffectWorker(t)
	c := newCluster(t)
	serve(t, c.url)
	counter := filepath.Join(t.TempDir(), "counter.txt")
	return ctx, bin, c, counter, []string{"REINS_COUNTER_FILE=" + counter}
}

// effectsPerRun reads the counter file and returns how many times the effect happened for
// each of ids (a line starts with the call's idempotency key, which starts with the run id).
func effectsPerRun(t *testing.T, counter string, ids []string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		for _, id := range ids {
			if strings.HasPrefix(line, id+"/") {
				n[id]++
			}
		}
	}
	return n
}

// startRuns starts n runs of file, detached, and returns their ids.
func startRuns(t *testing.T, url, file, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = reins(t, "run", file, "--nats", url, "--detach", "--run-id", fmt.Sprintf("%s-%d", prefix, i), "--input", `{}`)
	}
	return ids
}

// checkOnce waits for every run and checks that each completed with its effect done once.
func checkOnce(t *testing.T, ctx context.Context, c *cluster, counter string, ids []string) {
	t.Helper()
	for _, id := range ids {
		rec, err := c.client(ctx).Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Run.Status != protocol.RunCompleted {
			t.Errorf("run %s: %s (%+v), want completed", id, rec.Run.Status, rec.Run.Error)
		}
	}
	counts := effectsPerRun(t, counter, ids)
	total := 0
	for _, id := range ids {
		total += counts[id]
		if counts[id] != 1 {
			t.Errorf("run %s: the effect happened %d times, want once", id, counts[id])
		}
	}
	t.Logf("%d runs: %d effects", len(ids), total)
}

// A side-effecting tool slower than its attempt's timeout (2s against 1s, 3 attempts): the
// attempts after the first find the call claimed by the first, still running, and wait for its
// result instead of calling again. 10 runs: 10 effects.
func TestEffectOnceAcrossTimeouts(t *testing.T) {
	ctx, bin, c, counter, env := effectsCluster(t)
	w := start(t, "effectworker", env, bin, "-nats", c.url, "-ack-wait", "1s", "-slow", "2s")
	w.waitFor("ready", 30*time.Second)
	ids := startRuns(t, c.url, "testdata/effectworker/slow.toml", "slow", 10)
	checkOnce(t, ctx, c, counter, ids)
	for _, id := range ids {
		rec, err := c.client(ctx).Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// Two iterations: a retry of the first makes three tasks or more.
		if a := rec.Run.Steps["act"].Attempts; a < 3 {
			t.Errorf("run %s: %d tasks for the step; want a retry after the timeout (the test would prove nothing)", id, a)
		}
	}
}

// A worker paused (SIGSTOP) in the middle of side effects, past AckWait, then resumed: the
// tasks go to a second worker, which finds the calls claimed and waits; the first records its
// results when it resumes, and the second answers with them. 10 runs: 10 effects.
func TestEffectOnceAcrossPause(t *testing.T) {
	ctx, bin, c, counter, env := effectsCluster(t)
	a := start(t, "effectworker-a", env, bin, "-nats", c.url, "-ack-wait", "1s", "-slow", "1s")
	a.waitFor("ready", 30*time.Second)
	ids := startRuns(t, c.url, "testdata/effectworker/paused.toml", "paused", 10)
	for range ids {
		a.waitFor("effect-start", 30*time.Second)
	}
	b := start(t, "effectworker-b", env, bin, "-nats", c.url, "-ack-wait", "1s")
	b.waitFor("ready", 30*time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The fault itself, not a synchronization: a pause three times AckWait, so that every task
	// of the paused worker is redelivered to the other.
	time.Sleep(3 * time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	checkOnce(t, ctx, c, counter, ids)
	if n := countLines(b, "effect-start"); n != 0 {
		t.Errorf("the second worker called the tool %d times, want none", n)
	}
	// The second worker got the tasks while the first was paused, and waited for its results.
	replayed := countLines(b, "effect-replayed")
	t.Logf("the second worker returned %d recorded results", replayed)
	if replayed == 0 {
		t.Errorf("the second worker returned no recorded result: the pause did not hand it the tasks (the test would prove nothing)")
	}
}
