package main

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/otlptest"
)

// TestRunTraced: reins run, with the engine and the built-in workers in its process, exports
// the run's trace when OTEL_EXPORTER_OTLP_ENDPOINT names a receiver, and flushes it before it
// exits: the run span, a span per step under it, the iterations under their steps and the
// model calls under their iterations, in one trace.
func TestRunTraced(t *testing.T) {
	r, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint())
	data := t.TempDir()
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--run-id", "traced-run")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	spans := r.Spans() // flushed before run returned: no wait
	byID := map[string]otlptest.Span{}
	var run otlptest.Span
	for _, s := range spans {
		byID[s.SpanID] = s
		if s.Name == "run "+strings.TrimSpace(s.Str("reins.workflow")) && s.Str("reins.run_id") == "traced-run" {
			run = s
		}
	}
	if run.SpanID == "" || run.Service != "reins" {
		t.Fatalf("no run span of service reins among %d spans", len(spans))
	}
	kinds := map[string]int{}
	for _, s := range spans {
		if s.TraceID != run.TraceID {
			t.Errorf("span %s is in trace %s, not the run's %s", s.Name, s.TraceID, run.TraceID)
		}
		parent := byID[s.ParentID]
		kind, _, _ := strings.Cut(s.Name, " ")
		kinds[kind]++
		want := map[string]string{"step": "run", "iteration": "step", "chat": "iteration", "execute_tool": "iteration"}[kind]
		if got, _, _ := strings.Cut(parent.Name, " "); want != "" && got != want {
			t.Errorf("span %q is under %q, want a %s span", s.Name, parent.Name, want)
		}
	}
	// The agent step investigate: 4 iterations, 4 model calls, 3 tool calls; then the switch
	// route and the terminate step recommend, which the engine runs itself (no task).
	if want := map[string]int{"run": 1, "step": 3, "iteration": 4, "chat": 4, "execute_tool": 3}; !maps.Equal(kinds, want) {
		t.Errorf("spans by kind: %v", kinds)
	}
	// reins runs show prints the trace id the spans carry, in text and in JSON.
	code, out, errOut = cli(t, "runs", "show", "traced-run", "--data", data)
	if code != exitOK || !strings.Contains(out, "\ntrace id: "+run.TraceID+"\n") {
		t.Errorf("runs show: exit %d, want the line \"trace id: %s\"\n%s%s", code, run.TraceID, out, errOut)
	}
	code, out, errOut = cli(t, "runs", "show", "traced-run", "--data", data, "--json")
	var shown struct {
		TraceID string `json:"trace_id"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != exitOK || err != nil || shown.TraceID != run.TraceID {
		t.Errorf("runs show --json: exit %d, trace_id %q (%v), want %s\n%s", code, shown.TraceID, err, run.TraceID, errOut)
	}
}

// TestTracingRefused: a protocol reins cannot export with is a usage error, before anything runs.
func TestTracingRefused(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	code, _, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", t.TempDir())
	if code != exitUsage || !strings.Contains(errOut, "OTLP over HTTP only") {
		t.Errorf("exit %d, stderr %q; want %d and the protocol refused", code, errOut, exitUsage)
	}
}

// TestApproveTraced: reins approve on a data directory nobody serves runs the engine itself,
// and the steps and the run it ends are exported in the run's trace, as reins run's are.
func TestApproveTraced(t *testing.T) {
	data := t.TempDir()
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--model", "drafter", "--run-id", "drafted")
	if code != exitOK {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	r, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint())
	code, out, errOut = cli(t, "approve", "drafted", "call_2_0", "--data", data, "--quiet")
	if code != exitOK {
		t.Fatalf("approve: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	spans := r.Spans() // flushed before approve returned: no wait
	var run []otlptest.Span
	steps := map[string]bool{}
	for _, s := range spans {
		switch kind, _, _ := strings.Cut(s.Name, " "); kind {
		case "run":
			run = append(run, s)
		case "step":
			steps[s.Str("reins.step")] = true
		}
	}
	if len(run) != 1 || run[0].Str("reins.run_id") != "drafted" || !steps["investigate"] {
		t.Fatalf("approve exported %d run spans and the step spans of %v, want the run's and investigate's among them", len(run), steps)
	}
	for _, s := range spans {
		if s.TraceID != run[0].TraceID || s.Service != "reins" {
			t.Errorf("span %q in trace %s of service %q, want the run's trace %s", s.Name, s.TraceID, s.Service, run[0].TraceID)
		}
	}
}
