package builtin_test

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed" // natsbox.Open starts embedded servers
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// The example workflows run on the real engine and worker (embedded NATS) with the handlers
// Register puts on the worker: the agent step checkpoints through the worker between its
// iterations, the agents of a parallel step run side by side, and the llm steps read their
// scripts across the activations of a loop edge.
func TestRegisterRunsExamples(t *testing.T) {
	tests := []struct {
		dir, input string
		// check checks run id, which the test started, through the client.
		check func(t *testing.T, ctx context.Context, c *client.Client, id string)
	}{
		{dir: "refund", input: `{"order_id": "O-104"}`, check: func(t *testing.T, ctx context.Context, c *client.Client, id string) {
			run := waitCompleted(t, ctx, c, id)
			var out builtin.AgentOutput
			if err := json.Unmarshal(run.Output, &out); err != nil || out.StopReason != "completed" || out.Answer == nil ||
				!strings.HasPrefix(*out.Answer, "Recommend a refund") {
				t.Fatalf("output %s, want the completed investigation's recommendation", run.Output)
			}
			s := run.Steps["investigate"]
			cost := s.Usage.CostUSD
			s.Usage.CostUSD = 0
			want := protocol.Usage{ModelCalls: 4, ToolCalls: 3, InputTokens: 860, OutputTokens: 100}
			if s.Iteration != 4 || s.StopReason != "completed" || s.Usage != want || math.Abs(cost-0.0032) > 1e-9 {
				t.Errorf("investigate: iteration %d, stop reason %q, usage %+v, cost %v, want 4, completed, %+v, 0.0032", s.Iteration, s.StopReason, s.Usage, cost, want)
			}
		}},
		{dir: "research", input: `{"question": "automated refunds"}`, check: func(t *testing.T, ctx context.Context, c *client.Client, id string) {
			run := waitCompleted(t, ctx, c, id)
			if want := `"Brief: demand is real, rivals lack hard budgets, and large refunds need an approval step."`; string(run.Output) != want {
				t.Fatalf("output %s, want the editor's brief %s", run.Output, want)
			}
			var joined []builtin.AgentOutput
			if err := json.Unmarshal(run.Steps["research"].Output, &joined); err != nil || len(joined) != 3 {
				t.Fatalf("research output %s, want the 3 agents' outputs", run.Steps["research"].Output)
			}
			for i, prefix := range []string{"Market: ", "Competitors: ", "Regulation: "} {
				if a := joined[i]; a.StopReason != "completed" || a.Answer == nil || !strings.HasPrefix(*a.Answer, prefix) {
					t.Errorf("agent %d: %+v, want a completed answer starting %q", i, a, prefix)
				}
			}
		}},
		{dir: "delegate", input: `{"order_id": "O-104"}`, check: func(t *testing.T, ctx context.Context, c *client.Client, id string) {
			run := waitCompleted(t, ctx, c, id)
			var out builtin.AgentOutput
			if err := json.Unmarshal(run.Output, &out); err != nil || out.StopReason != "completed" || out.Answer == nil ||
				!strings.Contains(*out.Answer, "carrier lost it for 4 days") {
				t.Fatalf("output %s, want the lead's completed answer", run.Output)
			}
			// The lead's usage is its own (426 tokens, $0.005) and its two sub-runs' (224, $0.0016).
			s := run.Steps["lead"]
			cost := s.Usage.CostUSD
			s.Usage.CostUSD = 0
			want := protocol.Usage{ModelCalls: 2, ToolCalls: 2, InputTokens: 570, OutputTokens: 80}
			if s.Iteration != 2 || s.Usage != want || math.Abs(cost-0.0066) > 1e-9 {
				t.Errorf("lead: iteration %d, usage %+v, cost %v; want 2, %+v, 0.0066", s.Iteration, s.Usage, cost, want)
			}
			for _, child := range []string{id + "/lead/1/1/r1", id + "/lead/1/1/s1"} {
				sub, err := c.Get(ctx, child)
				if err != nil || sub.Run.Status != protocol.RunCompleted {
					t.Fatalf("sub-run %s: %v %+v, want completed", child, err, sub)
				}
			}
		}},
		{dir: "evaluator", input: `{"product": "Reins 1.0"}`, check: func(t *testing.T, ctx context.Context, c *client.Client, id string) {
			var rec *client.Record
			for u, err := range c.Watch(ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
				r := u.Record
				if err != nil {
					t.Fatal(err)
				}
				if r.Run.Status == protocol.RunWaiting || r.Run.Finished() {
					rec = r
					break
				}
			}
			if rec == nil || rec.Run.Status != protocol.RunWaiting {
				t.Fatalf("run %s did not stop at the review: %+v", id, rec)
			}
			if got := strings.Join(rec.Run.Path, ","); got != "generate,evaluate,generate,evaluate,generate,evaluate,generate,evaluate" {
				t.Errorf("path %s, want 4 drafts and 4 verdicts", got)
			}
			fourth := "Reins 1.0 is out: agent loops run inside workflows you declare, stay within hard budgets, and record why they stopped."
			if p := rec.Run.Steps["review"].Prompt; !strings.HasSuffix(p, "Publish this draft anyway? "+fourth) {
				t.Errorf("review prompt %q, want the fourth draft", p)
			}
			if _, err := c.Decide(ctx, id, "review", true, "", "test"); err != nil {
				t.Fatal(err)
			}
			run := waitCompleted(t, ctx, c, id)
			if want, _ := json.Marshal(fourth); string(run.Output) != string(want) {
				t.Fatalf("output %s, want the fourth draft", run.Output)
			}
		}},
	}
	client := startHost(t)
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			def, ps := workflow.LoadAndValidate(filepath.Join("..", "examples", tt.dir, "workflow.toml"), workflow.Options{})
			if len(ps) > 0 {
				t.Fatal(ps)
			}
			bundles, err := workflow.NewBundles(def, "")
			if err != nil {
				t.Fatal(err)
			}
			id, err := client.Start(ctx, bundles, json.RawMessage(tt.input), "")
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, ctx, client, id)
		})
	}
}

// waitCompleted waits for run id to end and fails unless it completed.
func waitCompleted(t *testing.T, ctx context.Context, c *client.Client, id string) *engine.Run {
	t.Helper()
	rec, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %s (%v)", id, rec.Run.Status, rec.Run.Error)
	}
	return rec.Run
}

// startHost runs an engine and a worker with the built-in handlers on an embedded NATS server
// for the test, and returns a client.
func startHost(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := runner.New(runner.Config{Conn: (*conn.Conn)(box)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New((*conn.Conn)(box), worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := builtin.Register(w, builtin.Config{}, "reins-nope"); err == nil {
		t.Fatal("Register accepted a handler name that is not built in")
	}
	if err := builtin.Register(w, builtin.Config{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- eng.Run(ctx) }()
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		_ = box.Close()
	})
	for _, ready := range []<-chan struct{}{eng.Ready(), w.Ready()} {
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("stopped before it was ready: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("not ready in 30s")
		}
	}
	return client.New(client.Config{Conn: (*conn.Conn)(box)})
}
