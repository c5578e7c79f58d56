//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/otlptest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/telemetry"
)

// workerSecret is an API key the worker process has in its environment: no span may carry it.
const workerSecret = "sk-e2e-WORKER-SECRET-0c41"

// spansWithin bounds the wait for the spans once the run ended: they are batched for 50 ms.
const spansWithin = 30 * time.Second

// receiver starts an OTLP receiver and returns it with the environment that points a process
// at it (spans batched for 50 ms, so that the test does not wait the default 5 s).
func receiver(t *testing.T) (*otlptest.Receiver, []string) {
	t.Helper()
	r, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.Endpoint(), "OTEL_BSP_SCHEDULE_DELAY=50"}
}

// spanTree indexes the spans of one trace.
type spanTree struct {
	byID   map[string]otlptest.Span
	byName map[string][]otlptest.Span
}

func treeOf(spans []otlptest.Span, traceID string) spanTree {
	tr := spanTree{byID: map[string]otlptest.Span{}, byName: map[string][]otlptest.Span{}}
	for _, s := range spans {
		if s.TraceID == traceID {
			tr.byID[s.SpanID] = s
			tr.byName[s.Name] = append(tr.byName[s.Name], s)
		}
	}
	return tr
}

// one returns the only span named name, failing the test when there is not exactly one.
func (tr spanTree) one(t *testing.T, name string) otlptest.Span {
	t.Helper()
	if n := len(tr.byName[name]); n != 1 {
		t.Fatalf("%d spans named %q in the trace, want 1 (names: %v)", n, name, tr.names())
	}
	return tr.byName[name][0]
}

func (tr spanTree) names() []string {
	var out []string
	for n, ss := range tr.byName {
		out = append(out, fmt.Sprintf("%s×%d", n, len(ss)))
	}
	return out
}

// parentOf checks that child's parent is parent.
func parentOf(t *testing.T, child, parent otlptest.Span) {
	t.Helper()
	if child.ParentID != parent.SpanID {
		t.Errorf("span %q (%s) has parent %s, want %q (%s)", child.Name, child.Service, child.ParentID, parent.Name, parent.SpanID)
	}
}

// A run across an engine process (reins serve --no-workers) and a worker process (reins
// worker) is one trace: the run span and its step spans from the engine, an iteration span
// per task from the worker under its step's span, and the model and tool calls under their
// iteration, with the GenAI attributes; nothing of the prompts, tool payloads or the worker's
// secrets is exported.
func TestTracesAcrossProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, env := receiver(t)
	c := newCluster(t)
	serve(t, c.url, env...)
	w := start(t, "reins worker", append(env, "OPENAI_API_KEY="+workerSecret),
		bins.reins, "worker", "--nats", c.url, "--ack-wait", "1s")
	w.waitFor("reins worker serving", 30*time.Second)
	id := reins(t, "run", "testdata/traced.toml", "--nats", c.url, "--detach", "--run-id", "traced-1",
		"--input", `{"order_id":"GOAL-PRIVATE-9154"}`)
	rec, err := c.client(ctx).Wait(ctx, id)
	if err != nil || rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %v %+v", id, err, rec)
	}
	tid := telemetry.TraceID(id).String()
	wctx, wcancel := context.WithTimeout(ctx, spansWithin)
	defer wcancel()
	spans, err := r.Wait(wctx, func(spans []otlptest.Span) bool {
		tr := treeOf(spans, tid)
		return len(tr.byName["run traced"]) > 0 && len(tr.byName["iteration reply"]) > 0 && len(tr.byName["chat writer"]) > 0
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := treeOf(spans, tid)
	run, support, reply := tr.one(t, "run traced"), tr.one(t, "step support"), tr.one(t, "step reply")
	if run.ParentID != "" || run.Service != "reins-serve" || run.Str("reins.run_id") != id || run.Str("reins.status") != "completed" {
		t.Errorf("run span: %+v", run)
	}
	if run.Int("reins.input_tokens") != 290 || run.Int("reins.output_tokens") != 29 || run.Int("reins.model_calls") != 3 {
		t.Errorf("run span usage: %v", run.Attrs)
	}
	// Usage is on the chat spans only (the other spans carry sums under reins.* names), and
	// every attribute name is reins's own or one of the semconv package.
	for _, s := range tr.byID {
		for k := range s.Attrs {
			if !strings.HasPrefix(k, "reins.") && !otlptest.SemconvName(k) {
				t.Errorf("span %q (%s): attribute %q is neither reins.* nor a semconv name", s.Name, s.Service, k)
			}
			if strings.HasPrefix(k, "gen_ai.usage.") && !strings.HasPrefix(s.Name, "chat ") {
				t.Errorf("span %q (%s) carries %s: a backend summing the trace would count its tokens again", s.Name, s.Service, k)
			}
		}
	}
	parentOf(t, support, run)
	parentOf(t, reply, run)
	if support.Str("reins.step") != "support" || support.Int("reins.iteration") != 2 || support.Str("reins.stop_reason") == "" || support.Service != "reins-serve" {
		t.Errorf("step span: %+v", support)
	}
	iters := tr.byName["iteration support"]
	if len(iters) != 2 {
		t.Fatalf("%d iteration spans of step support, want 2 (names: %v)", len(iters), tr.names())
	}
	seen := map[int64]otlptest.Span{}
	for _, it := range iters {
		parentOf(t, it, support)
		if it.Service != "reins-worker" || it.Str("reins.run_id") != id || it.Kind != "CONSUMER" {
			t.Errorf("iteration span: %+v", it)
		}
		seen[it.Int("reins.iteration")] = it
	}
	if len(seen) != 2 || seen[1].Str("reins.answer") != "continued" || seen[2].Str("reins.answer") != "completed" {
		t.Errorf("iterations: %+v", seen)
	}
	if len(support.Links) != 1 || support.Links[0] != seen[2].SpanID {
		t.Errorf("step support links %v, want the iteration that ended it (%s): the answer carries its trace context back", support.Links, seen[2].SpanID)
	}
	chats := tr.byName["chat clerk"]
	if len(chats) != 2 {
		t.Fatalf("%d chat spans of the agent, want 2 (names: %v)", len(chats), tr.names())
	}
	for _, ch := range chats {
		it := tr.byID[ch.ParentID]
		if it.Name != "iteration support" {
			t.Errorf("chat span under %q, want an iteration of support", it.Name)
		}
		if ch.Str("gen_ai.operation.name") != "chat" || ch.Str("gen_ai.provider.name") != "scripted" || ch.Str("gen_ai.request.model") != "clerk" {
			t.Errorf("chat span: %v", ch.Attrs)
		}
		// A scripted model names no model that answered and no reason the reply ended: the
		// span says none rather than one made up.
		for _, k := range []string{"gen_ai.response.model", "gen_ai.response.finish_reasons"} {
			if v, ok := ch.Attrs[k]; ok {
				t.Errorf("chat span has %s = %v, which the reply did not say", k, v)
			}
		}
		want := map[int64][2]int64{1: {100, 10}, 2: {150, 15}}[it.Int("reins.iteration")]
		if ch.Int("gen_ai.usage.input_tokens") != want[0] || ch.Int("gen_ai.usage.output_tokens") != want[1] {
			t.Errorf("chat span of iteration %d: tokens %d/%d, want %v", it.Int("reins.iteration"), ch.Int("gen_ai.usage.input_tokens"), ch.Int("gen_ai.usage.output_tokens"), want)
		}
	}
	tool := tr.one(t, "execute_tool lookup")
	parentOf(t, tool, seen[1])
	if tool.Str("gen_ai.tool.name") != "lookup" || tool.Str("gen_ai.tool.call.id") != "c1" || tool.Str("gen_ai.operation.name") != "execute_tool" {
		t.Errorf("tool span: %v", tool.Attrs)
	}
	parentOf(t, tr.one(t, "iteration reply"), reply)
	parentOf(t, tr.one(t, "chat writer"), tr.one(t, "iteration reply"))
	for _, private := range []string{"GOAL-PRIVATE-9154", "ARGS-PRIVATE-7731", "RESULT-PRIVATE-5519", "The order shipped", workerSecret} {
		if r.Contains(private) {
			t.Errorf("the exported spans hold %q", private)
		}
	}
}

// A worker killed with SIGKILL in the middle of an iteration: the redelivered iteration runs on
// another worker under the same step span of the same trace, from the trace context JetStream
// stored with the task.
func TestTracesSurviveWorkerKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, env := receiver(t)
	c := newCluster(t)
	serve(t, c.url, env...)
	worker := func(name string) *proc {
		p := start(t, name, env, bins.loopworker, "-nats", c.url, "-ack-wait", "1s", "-state", c.state, "-hang", "3")
		p.waitFor("ready", 30*time.Second)
		return p
	}
	w1 := worker("loopworker 1")
	id := c.startRun("traced-kill", 5)
	w1.waitFor("hang "+id+" 3", 30*time.Second)
	w1.kill()
	w2 := worker("loopworker 2")
	checkRun(t, ctx, c.client(ctx), id, 5, w1, w2)
	tid := telemetry.TraceID(id).String()
	wctx, wcancel := context.WithTimeout(ctx, spansWithin)
	defer wcancel()
	spans, err := r.Wait(wctx, func(spans []otlptest.Span) bool {
		tr := treeOf(spans, tid)
		iters := map[int64]bool{}
		for _, it := range tr.byName["iteration loop"] {
			iters[it.Int("reins.iteration")] = true
		}
		return len(tr.byName["run count"]) > 0 && iters[3] && iters[4] && iters[5]
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := treeOf(spans, tid)
	run, step := tr.one(t, "run count"), tr.one(t, "step loop")
	parentOf(t, step, run)
	if want := telemetry.StepSpan(id, "loop", 1).SpanID().String(); step.SpanID != want {
		t.Errorf("step span id %s, want the derived %s", step.SpanID, want)
	}
	var redelivered []otlptest.Span
	for _, it := range tr.byName["iteration loop"] {
		parentOf(t, it, step)
		if it.Int("reins.iteration") == 3 {
			redelivered = append(redelivered, it)
		}
	}
	// The killed worker never ended its span of iteration 3: the one exported is the
	// redelivery's, by the second worker.
	if len(redelivered) != 1 || redelivered[0].Service != "loopworker" || redelivered[0].Attrs["reins.redelivered"] != true ||
		redelivered[0].Int("reins.attempt") != 1 || redelivered[0].Str("reins.answer") != "continued" {
		t.Fatalf("iteration 3's spans: %+v", redelivered)
	}
	if !strings.Contains(strings.Join(w2.output(), "\n"), "start "+id+" 3 1") {
		t.Error("iteration 3 did not run on the second worker")
	}
}
