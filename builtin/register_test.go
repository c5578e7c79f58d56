package builtin_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/natsbox"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/wire"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// The example workflows run on the real engine and worker (embedded NATS) with the handlers
// Register puts on the worker: the agent step checkpoints through the worker between its
// iterations, and the llm steps read their scripts across the activations of a loop edge.
func TestRegisterRunsExamples(t *testing.T) {
	tests := []struct {
		file, input string
		check       func(t *testing.T, run *engine.Run)
	}{
		{file: "refund_investigation.toml", input: `{"order_id": "O-104"}`, check: func(t *testing.T, run *engine.Run) {
			var out builtin.AgentOutput
			if err := json.Unmarshal(run.Output, &out); err != nil || out.StopReason != "completed" || out.Answer == nil ||
				!strings.HasPrefix(*out.Answer, "Recommend a refund") {
				t.Fatalf("output %s, want the completed investigation's recommendation", run.Output)
			}
			s := run.Steps["investigate"]
			want := engine.Usage{ModelCalls: 4, ToolCalls: 3, InputTokens: 860, OutputTokens: 100}
			if s.Iteration != 4 || s.StopReason != "completed" || s.Usage != want {
				t.Errorf("investigate: iteration %d, stop reason %q, usage %+v, want 4, completed, %+v", s.Iteration, s.StopReason, s.Usage, want)
			}
		}},
		{file: "draft_refiner.toml", input: `{"product": "Reins 1.0"}`, check: func(t *testing.T, run *engine.Run) {
			want := `"Reins 1.0 is out: every agent loop runs inside a workflow you declared, with hard budgets and a recorded reason for every stop."`
			if string(run.Output) != want {
				t.Fatalf("output %s, want the second draft %s", run.Output, want)
			}
			if got := strings.Join(run.Path, ","); got != "generate,evaluate,generate,evaluate,publish" {
				t.Errorf("path %s", got)
			}
		}},
	}
	client := startHost(t)
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			def, ps := workflow.LoadAndValidate(filepath.Join("..", "examples", "workflows", tt.file), workflow.Options{})
			if len(ps) > 0 {
				t.Fatal(ps)
			}
			bundles, err := wire.NewBundles(def, "")
			if err != nil {
				t.Fatal(err)
			}
			id, err := client.Start(ctx, bundles, json.RawMessage(tt.input), "")
			if err != nil {
				t.Fatal(err)
			}
			rec, err := client.Wait(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Run.Status != engine.RunCompleted {
				t.Fatalf("run %s: %s (%v)", id, rec.Run.Status, rec.Run.Error)
			}
			tt.check(t, rec.Run)
		})
	}
}

// startHost runs an engine and a worker with the built-in handlers on an embedded NATS server
// for the test, and returns a client.
func startHost(t *testing.T) *runner.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := runner.New(runner.Config{Box: box})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Box: box})
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
	return runner.NewClient(runner.ClientConfig{Box: box})
}
