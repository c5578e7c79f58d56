//go:build e2e

package e2e

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
)

// The results lead's model sees from its agent tool (the researcher's output) and its workflow
// tool (summary.toml's output), in agenttools.toml.
const (
	researchResult  = `{"stop_reason":"completed","detail":"the model gave a final answer that passed validation","answer":"The carrier lost the parcel for 4 days."}`
	summarizeResult = `"Summary: a carrier delay."`
)

// checkAgentTools checks a completed run of agenttools.toml: lead saw each sub-run's output as
// its call's result, each sub-run ran its work once, and lead's usage is its own plus theirs.
func checkAgentTools(t *testing.T, ctx context.Context, c *cluster, cl *client.Client, id string) {
	t.Helper()
	rec, err := cl.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s ended %s: %+v", id, rec.Run.Status, rec.Run.Error)
	}
	seen := toolResults(t, ctx, c, id, "lead")
	if got := seen["research"]; len(got) != 1 || got[0] != researchResult {
		t.Errorf("research's result as lead's model saw it: %q; want %s", got, researchResult)
	}
	if got := seen["summarize"]; len(got) != 1 || got[0] != summarizeResult {
		t.Errorf("summarize's result as lead's model saw it: %q; want %s", got, summarizeResult)
	}
	// Each sub-run started once (its start event stored once) and did its work once.
	children := map[string]string{id + "/lead/1/1/r1": "researcher", id + "/lead/1/1/s1": "sum"}
	var spent protocol.Usage
	for child, step := range children {
		sub, err := cl.Get(ctx, child)
		if err != nil {
			t.Fatalf("sub-run %s: %v", child, err)
		}
		sr := sub.Run.Steps[step]
		if sub.Run.Status != protocol.RunCompleted || sr == nil || sr.Attempts != sr.Iteration {
			t.Fatalf("sub-run %s: %s, step %s %+v; want completed, every iteration once", child, sub.Run.Status, step, sr)
		}
		evs, err := cl.Events(ctx, child)
		if err != nil {
			t.Fatal(err)
		}
		starts := 0
		for _, ev := range evs {
			if ev.Type == protocol.EvStart {
				starts++
			}
		}
		if starts != 1 {
			t.Errorf("sub-run %s has %d start events, want 1", child, starts)
		}
		spent.Add(sub.Run.Usage())
	}
	// lead's own: two model calls of 110 and 220 tokens ($0.03); the researcher 121 ($0.011),
	// the summary 33 ($0.003).
	lead := rec.Run.Steps["lead"]
	want := protocol.Usage{ModelCalls: 2, ToolCalls: 2, InputTokens: 300 + spent.InputTokens, OutputTokens: 30 + spent.OutputTokens, CostUSD: 0.03 + spent.CostUSD}
	if spent.InputTokens != 140 || spent.OutputTokens != 14 {
		t.Errorf("the sub-runs spent %+v; want 140 and 14 tokens", spent)
	}
	got := lead.Usage
	if got.ModelCalls != want.ModelCalls || got.ToolCalls != want.ToolCalls || got.InputTokens != want.InputTokens ||
		got.OutputTokens != want.OutputTokens || math.Abs(got.CostUSD-want.CostUSD) > 1e-9 {
		t.Errorf("lead's usage %+v; want its own and its sub-runs' %+v", got, want)
	}
	if lead.Attempts != 3 || lead.Iteration != 2 {
		t.Errorf("lead: %d tasks for %d iterations; want 3 (iteration 1, its resume with the results, iteration 2)", lead.Attempts, lead.Iteration)
	}
}

// An agent whose tools are an agent and a sub-workflow, on reins serve: each call runs as a
// durable sub-run, and the results and the usage come back to it.
func TestAgentToolsEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t)
	serveAll(t, c.url)
	id := reins(t, "run", "testdata/agenttools.toml", "--nats", c.url, "--detach", "--run-id", "agt-1", "--input", `{"order_id":"O-9"}`)
	checkAgentTools(t, ctx, c, c.client(ctx), id)
}

// A child agent that stops needs_human waits in its own run (on_needs_human = "pause"): its
// parent's step keeps running, not escalated, until a human resumes the child by its own run
// id; then the parent goes on with the child's answer.
func TestAgentToolChildNeedsHuman(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t)
	serveAll(t, c.url)
	cl := c.client(ctx)
	id := reins(t, "run", "testdata/agenttools_pause.toml", "--nats", c.url, "--detach", "--run-id", "agt-pause", "--input", `{"order_id":"O-9"}`)
	child := id + "/lead/1/1/r1"
	awaitRecord(t, ctx, cl, child, "the child pauses", func(rec *client.Record) bool {
		sr := rec.Run.Steps["researcher"]
		return sr != nil && sr.Status == protocol.StepWaiting && sr.Wait == protocol.WaitInput
	})
	parent, err := cl.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if lead := parent.Run.Steps["lead"]; parent.Run.Status != protocol.RunRunning || lead.Status != protocol.StepRunning ||
		lead.Wait != protocol.WaitChildren || lead.StopReason != "" {
		t.Fatalf("parent %s, lead %s waiting for %q with stop reason %q; want the parent running, lead waiting for its child, not escalated",
			parent.Run.Status, lead.Status, lead.Wait, lead.StopReason)
	}
	// The parent shows the sub-run it waits for: sub-runs are not listed, and a person finds it so.
	if shown := reins(t, "runs", "show", id, "--nats", c.url); !strings.Contains(shown, "sub-run: "+child+" (step lead, agent researcher, call r1 of iteration 1)") {
		t.Errorf("reins runs show %s does not name the sub-run it waits for:\n%s", id, shown)
	}
	reins(t, "resume", child, "--input", `"The carrier confirmed the delay by phone."`, "--nats", c.url)
	rec, err := cl.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["lead"].StopReason != "completed" {
		t.Fatalf("run %s ended %s (lead %s): %+v", id, rec.Run.Status, rec.Run.Steps["lead"].StopReason, rec.Run.Error)
	}
	want := `{"stop_reason":"completed","detail":"the model gave a final answer that passed validation","answer":"The carrier confirmed a 4 day delay."}`
	if got := toolResults(t, ctx, c, id, "lead")["research"]; len(got) != 1 || got[0] != want {
		t.Errorf("research's result as lead's model saw it: %q; want %s", got, want)
	}
}

// The engine killed after it started the sub-runs of lead's calls and before it saved that it
// did: the restarted engine decides the waiting answer again, and no sub-run starts twice or
// loses its result.
func TestAgentToolsCrashMidChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t)
	// Save 1 creates the run; save 2 would record lead's waiting answer, whose sub-runs'
	// start events are already published.
	e1 := start(t, "reins serve (faulty)", []string{"REINS_FAULT=kill-before-save:2"},
		bins.reins, "serve", "--nats", c.url, "--listen", "127.0.0.1:0", "--ack-wait", "1s")
	e1.waitFor("reins serving", 30*time.Second)
	id := reins(t, "run", "testdata/agenttools.toml", "--nats", c.url, "--detach", "--run-id", "agt-crash", "--input", `{"order_id":"O-9"}`)
	<-e1.exited
	if !hasLine(e1, "killed before a save") || !hasLine(e1, "run_id=agt-crash save=2") {
		t.Fatalf("the engine did not die before saving lead's waiting answer: %q", e1.output())
	}
	serveAll(t, c.url)
	checkAgentTools(t, ctx, c, c.client(ctx), id)
}
