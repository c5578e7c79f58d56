package main

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/otlptest"
	"github.com/reins-run/reins/telemetry"
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

// datedModel is the name the local OpenAI-protocol server says answered: a dated version of
// the requested gpt-4.1-mini, as a hosted server resolves an alias.
const datedModel = "gpt-4.1-mini-2025-04-14"

// datedOpenAIServer speaks Chat Completions as openaiServer does, answering as datedModel.
func datedOpenAIServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/chat/completions" {
			http.Error(w, `{"error":{"message":"unexpected request","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if hasToolResults(body) {
			answer, _ := json.Marshal(exampleAnswer)
			io.WriteString(w, `{"id":"chatcmpl-2","object":"chat.completion","created":1763740000,"model":"`+datedModel+`","choices":[{"index":0,"message":{"role":"assistant","content":`+string(answer)+`},"finish_reason":"stop"}],"usage":{"prompt_tokens":412,"completion_tokens":41,"total_tokens":453}}`)
			return
		}
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1763740000,"model":"`+datedModel+`","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_order","type":"function","function":{"name":"read_order","arguments":"{\"order_id\":\"O-104\"}"}},{"id":"call_delivery","type":"function","function":{"name":"read_delivery_status","arguments":"{\"order_id\":\"O-104\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":298,"completion_tokens":52,"total_tokens":350}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRunTracedGenAI: the refund example on a local server speaking the OpenAI protocol, its
// trace exported over OTLP with contents captured and decoded as a collector would, checked
// attribute by attribute against the GenAI conventions: each chat span says which model was
// asked and which answered, why the reply ended (the server's words), its usage, and carries
// the conversation in the conventions' message format; no other span carries gen_ai.usage.*
// (the sums are reins.*); every attribute name is reins's own or the semconv package's; and
// reins runs show prints the trace id the spans carry.
func TestRunTracedGenAI(t *testing.T) {
	r, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint())
	t.Setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
	srv := datedOpenAIServer(t)
	data := t.TempDir()
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--run-id", "genai-run",
		"--model", "openai:gpt-4.1-mini", "--base-url", srv.URL+"/v1", "--api-key", exampleKey)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	spans := r.Spans()
	var chats []otlptest.Span
	var run otlptest.Span
	for _, s := range spans {
		for k := range s.Attrs {
			if !strings.HasPrefix(k, "reins.") && !otlptest.SemconvName(k) {
				t.Errorf("span %q: attribute %q is neither reins.* nor a name of the semconv package", s.Name, k)
			}
			if strings.HasPrefix(k, "gen_ai.usage.") && !strings.HasPrefix(s.Name, "chat ") {
				t.Errorf("span %q carries %s: a backend summing the trace would count its tokens again", s.Name, k)
			}
		}
		switch {
		case strings.HasPrefix(s.Name, "chat "):
			chats = append(chats, s)
		case strings.HasPrefix(s.Name, "run "):
			run = s
		}
	}
	if run.Int("reins.input_tokens") != 298+412 || run.Int("reins.output_tokens") != 52+41 {
		t.Errorf("run span's sums: %v", run.Attrs)
	}
	slices.SortFunc(chats, func(a, b otlptest.Span) int { return int(a.StartNano - b.StartNano) })
	if len(chats) != 2 {
		t.Fatalf("%d chat spans, want 2", len(chats))
	}
	for i, want := range []struct {
		finish        string
		input, output int64
	}{{"tool_calls", 298, 52}, {"stop", 412, 41}} {
		c := chats[i]
		if c.Name != "chat gpt-4.1-mini" || c.Kind != "CLIENT" || c.Str("gen_ai.operation.name") != "chat" || c.Str("gen_ai.provider.name") != "openai" ||
			c.Str("gen_ai.request.model") != "gpt-4.1-mini" || c.Str("gen_ai.response.model") != datedModel {
			t.Errorf("chat %d: %s %s %v; want the requested gpt-4.1-mini and the server's %s", i+1, c.Name, c.Kind, c.Attrs, datedModel)
		}
		if fr, _ := c.Attrs["gen_ai.response.finish_reasons"].([]any); len(fr) != 1 || fr[0] != want.finish {
			t.Errorf("chat %d: finish reasons %v, want the server's [%s]", i+1, c.Attrs["gen_ai.response.finish_reasons"], want.finish)
		}
		if c.Int("gen_ai.usage.input_tokens") != want.input || c.Int("gen_ai.usage.output_tokens") != want.output {
			t.Errorf("chat %d: usage %d/%d, want %d/%d", i+1, c.Int("gen_ai.usage.input_tokens"), c.Int("gen_ai.usage.output_tokens"), want.input, want.output)
		}
		if sys, err := otlptest.SystemInstructions(c.Str("gen_ai.system_instructions")); err != nil || len(sys) != 1 || !strings.HasPrefix(sys[0].Content, "You investigate refund requests.") {
			t.Errorf("chat %d: system instructions %+v, %v", i+1, sys, err)
		}
	}
	// The first call: the goal in; two tool calls out.
	in, err := otlptest.InputMessages(chats[0].Str("gen_ai.input.messages"))
	if err != nil || len(in) != 1 || in[0].Role != "user" || !strings.Contains(in[0].Parts[0].Content, "order O-104") {
		t.Errorf("chat 1 input %s: %+v, %v", chats[0].Str("gen_ai.input.messages"), in, err)
	}
	outMsgs, err := otlptest.OutputMessages(chats[0].Str("gen_ai.output.messages"))
	if err != nil || len(outMsgs) != 1 || outMsgs[0].FinishReason != "tool_call" || len(outMsgs[0].Parts) != 2 ||
		outMsgs[0].Parts[0].Type != "tool_call" || outMsgs[0].Parts[0].ID != "call_order" || outMsgs[0].Parts[0].Name != "read_order" ||
		compactJSON(outMsgs[0].Parts[0].Arguments) != `{"order_id":"O-104"}` {
		t.Errorf("chat 1 output %s: %+v, %v", chats[0].Str("gen_ai.output.messages"), outMsgs, err)
	}
	// The second: the calls and their results in; the answer out.
	in, err = otlptest.InputMessages(chats[1].Str("gen_ai.input.messages"))
	if err != nil || len(in) != 4 || in[1].Role != "assistant" || len(in[1].Parts) != 2 || in[1].Parts[1].ID != "call_delivery" ||
		in[2].Role != "tool" || in[2].Parts[0].Type != "tool_call_response" || in[2].Parts[0].ID != "call_order" || !strings.Contains(string(in[2].Parts[0].Response), "O-104") {
		t.Errorf("chat 2 input %s: %+v, %v", chats[1].Str("gen_ai.input.messages"), in, err)
	}
	outMsgs, err = otlptest.OutputMessages(chats[1].Str("gen_ai.output.messages"))
	if err != nil || len(outMsgs) != 1 || outMsgs[0].FinishReason != "stop" || outMsgs[0].Parts[0].Type != "text" || outMsgs[0].Parts[0].Content != exampleAnswer {
		t.Errorf("chat 2 output %s: %+v, %v", chats[1].Str("gen_ai.output.messages"), outMsgs, err)
	}
	code, out, errOut = cli(t, "runs", "show", "genai-run", "--data", data)
	if code != exitOK || !strings.Contains(out, "\ntrace id: "+run.TraceID+"\n") || run.TraceID != telemetry.TraceID("genai-run").String() {
		t.Errorf("runs show: exit %d, want the line \"trace id: %s\"\n%s%s", code, run.TraceID, out, errOut)
	}
}
