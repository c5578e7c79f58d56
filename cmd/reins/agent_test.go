package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/trace"
)

var update = flag.Bool("update", false, "rewrite the example cassettes in examples/cassettes from the local protocol servers")

const (
	exampleGoal   = "Decide whether refund evidence is sufficient for order O-104."
	exampleAnswer = "Evidence is sufficient: O-104 was promised on 2026-11-10 and delivered on 2026-11-14, 4 days late, so the $42.50 order qualifies for a late-delivery refund."
	exampleKey    = "sk-example-0000-not-a-real-key"
)

// buildMCPOrders returns the example MCP server: prebuilt, or built for the test (buildtest.Program).
func buildMCPOrders(t *testing.T) string {
	t.Helper()
	return buildtest.Program(t, "github.com/reins-run/reins/examples/mcp-orders")
}

// hasToolResults reports whether a chat request already carries tool results: the local model
// then answers, else it calls both order tools in one turn.
func hasToolResults(body []byte) bool {
	return bytes.Contains(body, []byte(`"role":"tool"`)) || bytes.Contains(body, []byte(`"type":"tool_result"`))
}

// openaiServer speaks Chat Completions like a hosted model would in the refund example.
func openaiServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+exampleKey {
			http.Error(w, `{"error":{"message":"unexpected request","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if hasToolResults(body) {
			answer, _ := json.Marshal(exampleAnswer)
			io.WriteString(w, `{"id":"chatcmpl-2","object":"chat.completion","created":1763740000,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":`+string(answer)+`},"finish_reason":"stop"}],"usage":{"prompt_tokens":412,"completion_tokens":41,"total_tokens":453}}`)
			return
		}
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1763740000,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_order","type":"function","function":{"name":"read_order","arguments":"{\"order_id\":\"O-104\"}"}},{"id":"call_delivery","type":"function","function":{"name":"read_delivery_status","arguments":"{\"order_id\":\"O-104\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":298,"completion_tokens":52,"total_tokens":350}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// anthropicServer speaks the Messages API the same way.
func anthropicServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != exampleKey {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"unexpected request"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if hasToolResults(body) {
			answer, _ := json.Marshal(exampleAnswer)
			io.WriteString(w, `{"id":"msg_2","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":`+string(answer)+`}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":530,"output_tokens":44}}`)
			return
		}
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Let me check the order and its delivery."},{"type":"tool_use","id":"toolu_order","name":"read_order","input":{"order_id":"O-104"}},{"type":"tool_use","id":"toolu_delivery","name":"read_delivery_status","input":{"order_id":"O-104"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":380,"output_tokens":61}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

type agentJSON struct {
	StopReason string `json:"stop_reason"`
	Detail     string `json:"detail"`
	Answer     string `json:"answer"`
	Iterations int    `json:"iterations"`
	ToolCalls  int    `json:"tool_calls"`
	Usage      struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
	CostUSD float64 `json:"cost_usd"`
	Trace   []struct {
		Type string `json:"type"`
		Tool string `json:"tool"`
	} `json:"trace"`
	Records []trace.Iteration `json:"records"`
}

func runAgentJSON(t *testing.T, args ...string) agentJSON {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"agent", "--json"}, args...), &out, &errb)
	if code != exitOK {
		t.Fatalf("reins agent %v: exit %d\nstdout: %s\nstderr: %s", args, code, out.String(), errb.String())
	}
	var res agentJSON
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out.String())
	}
	return res
}

// checkRefundRun asserts what the refund example does: two order tools executed through MCP in
// one turn, then the recorded answer.
func checkRefundRun(t *testing.T, res agentJSON, wantTokens int64) {
	t.Helper()
	if res.StopReason != "completed" || res.Answer != exampleAnswer {
		t.Fatalf("stop %s (%s), answer %q", res.StopReason, res.Detail, res.Answer)
	}
	if res.Iterations != 2 || res.ToolCalls != 2 {
		t.Errorf("%d iterations and %d tool calls, want 2 and 2", res.Iterations, res.ToolCalls)
	}
	if got := res.Usage.InputTokens + res.Usage.OutputTokens; got != wantTokens {
		t.Errorf("%d tokens, want %d from the recorded usage", got, wantTokens)
	}
	if res.CostUSD <= 0 {
		t.Errorf("cost %v: the model's list price should apply", res.CostUSD)
	}
	executed := map[string]bool{}
	for _, e := range res.Trace {
		if e.Type == "tool_call" {
			executed[e.Tool] = true
		}
	}
	if !executed["read_order"] || !executed["read_delivery_status"] {
		t.Errorf("executed tools %v, want read_order and read_delivery_status", executed)
	}
	// One record per iteration: the first proposes both calls, executed; the second answers.
	if len(res.Records) != 2 {
		t.Fatalf("%d iteration records, want 2", len(res.Records))
	}
	first, last := res.Records[0], res.Records[1]
	if len(first.Calls) != 2 || first.Calls[0].Tool != "read_order" || !first.Calls[0].Executed || first.Calls[0].Arguments != `{"order_id":"O-104"}` || first.Calls[0].Output == "" {
		t.Errorf("iteration 1's record: %+v", first.Calls)
	}
	if last.Proposal == nil || last.Proposal.Text != exampleAnswer || last.StopReason != "completed" || last.InputTokens+last.OutputTokens == 0 {
		t.Errorf("iteration 2's record: %+v", last)
	}
}

// TestExampleCassettes records the refund example through reins agent against local servers that
// speak each provider's protocol, requires the committed cassette to be identical (so SDK or
// request changes are noticed), then replays the committed cassette with no server at all.
func TestExampleCassettes(t *testing.T) {
	mcpOrders := buildMCPOrders(t)
	for _, tt := range []struct {
		name, model string
		server      func(*testing.T) *httptest.Server
		suffix      string
		tokens      int64
	}{
		{"openai", "openai:gpt-4.1-mini", openaiServer, "/v1", 298 + 52 + 412 + 41},
		{"anthropic", "anthropic:claude-sonnet-4-5", anthropicServer, "", 380 + 61 + 530 + 44},
	} {
		t.Run(tt.name, func(t *testing.T) {
			committed := filepath.Join("..", "..", "examples", "cassettes", "refund-"+tt.name+".json")
			fresh := filepath.Join(t.TempDir(), "fresh.json")
			srv := tt.server(t)
			live := runAgentJSON(t, "--model", tt.model, "--base-url", srv.URL+tt.suffix, "--api-key", exampleKey,
				"--goal", exampleGoal, "--mcp", mcpOrders, "--record", fresh)
			checkRefundRun(t, live, tt.tokens)
			recorded, err := os.ReadFile(fresh)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(recorded, []byte(exampleKey)) {
				t.Fatal("the recorded cassette contains the API key")
			}
			if *update {
				if err := os.WriteFile(committed, recorded, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(committed)
			if err != nil {
				t.Fatalf("%v (create it with: go test ./cmd/reins -run TestExampleCassettes -update)", err)
			}
			if !bytes.Equal(recorded, want) {
				t.Fatalf("%s differs from a fresh recording: the requests reins sends have changed; if that is intended, run go test ./cmd/reins -run TestExampleCassettes -update", committed)
			}
			srv.Close()
			iterations := filepath.Join(t.TempDir(), "iterations.jsonl")
			replayed := runAgentJSON(t, "--model", "replay:"+committed, "--goal", exampleGoal, "--mcp", mcpOrders, "--record-iterations", iterations)
			checkRefundRun(t, replayed, tt.tokens)
			// --record-iterations wrote the same records, a JSON line each.
			data, err := os.ReadFile(iterations)
			if err != nil {
				t.Fatal(err)
			}
			var lines []trace.Iteration
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				var it trace.Iteration
				if err := json.Unmarshal([]byte(line), &it); err != nil {
					t.Fatalf("--record-iterations line %q: %v", line, err)
				}
				lines = append(lines, it)
			}
			if len(lines) != 2 || lines[0].Iteration != 1 || lines[1].StopReason != "completed" {
				t.Errorf("--record-iterations wrote %d records: %+v", len(lines), lines)
			}
		})
	}
}

// A replay whose requests differ from the recording (another goal) fails with a clear sentence
// naming the cassette and where the request differs, and exit status 1.
func TestAgentReplayMiss(t *testing.T) {
	mcpOrders := buildMCPOrders(t)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"agent", "--model", "replay:../../examples/cassettes/refund-openai.json",
		"--goal", "Something else entirely.", "--mcp", mcpOrders}, &out, &errb)
	if code != exitFailed {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitFailed, out.String(), errb.String())
	}
	for _, want := range []string{"stop: failed", "refund-openai.json has no recorded exchange", "messages[0].content"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The live output prints every iteration, each tool call and result, and the stop reason.
func TestAgentLiveOutput(t *testing.T) {
	mcpOrders := buildMCPOrders(t)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"agent", "--model", "replay:../../examples/cassettes/refund-anthropic.json",
		"--goal", exampleGoal, "--mcp", mcpOrders}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"── iteration 1", "proposes 2 tool call(s)", "→ read_order (toolu_order)", "← read_delivery_status ok",
		"── iteration 2", "proposes an answer", "stop: completed", exampleAnswer} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestAgentUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--goal", "x"}, "--model is required"},
		{[]string{"agent", "--model", "openai:gpt-4.1-mini"}, "--goal is required"},
		{[]string{"agent", "--model", "gpt-4.1-mini", "--goal", "x"}, "PROVIDER:NAME"},
		{[]string{"agent", "--model", "openai:m", "--base-url", "http://127.0.0.1:1/v1", "--goal", "x", "--price", "m=cheap"}, "--price"},
		{[]string{"agent", "--model", "replay:/nonexistent/c.json", "--goal", "x"}, "/nonexistent/c.json"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), tt.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want exit 2 mentioning %q", tt.args, code, errb.String(), tt.want)
		}
	}
	// An MCP server that cannot start is the work failing (exit 1), named in one sentence.
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"agent", "--model", "replay:../../examples/cassettes/refund-openai.json",
		"--goal", exampleGoal, "--mcp", "/nonexistent/mcp-server --flag"}, &out, &errb)
	if code != exitFailed || !strings.Contains(errb.String(), "/nonexistent/mcp-server") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// reins eval --model runs each fixture against a real model (here a local OpenAI-compatible
// server) with the fixture's own tools, mocks, policy and budget.
func TestEvalWithRealModel(t *testing.T) {
	var seen [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen = append(seen, body)
		w.Header().Set("Content-Type", "application/json")
		if hasToolResults(body) {
			io.WriteString(w, `{"id":"c2","object":"chat.completion","created":1,"model":"local","choices":[{"index":0,"message":{"role":"assistant","content":"Delivered 4 days late: the evidence is sufficient."},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
			return
		}
		io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"local","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c_1","type":"function","function":{"name":"read_order","arguments":"{\"order_id\":\"O-104\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	}))
	defer srv.Close()
	// A fixture a sensible model passes: read the order (mocked: 4 days late), then answer.
	fixture := filepath.Join(t.TempDir(), "reads_then_answers.json")
	if err := os.WriteFile(fixture, []byte(`{
	  "case_id": "reads_then_answers",
	  "goal": "Decide whether refund evidence is sufficient for order O-104.",
	  "tools": [{"name": "read_order", "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}],
	  "policy": {"required_evidence": ["read_order"]},
	  "model": [{"text": "scripted, replaced by --model"}],
	  "mocked_tools": {"read_order": [{"output": {"status": "delivered", "late_days": 4}}]},
	  "expected": {"stop_reason": "completed", "answer_contains": "sufficient", "tool_calls": {"min": 1, "max": 1},
	               "iterations": {"min": 2, "max": 2}, "called_tools": ["read_order"]}
	}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"eval", fixture, "../../evals/completes_in_budget.json",
		"--model", "openai:local", "--base-url", srv.URL + "/v1"}, &out, &errb)
	text := out.String()
	if code != exitFailed {
		t.Fatalf("exit %d, want 1 (one case fails on a real model)\n%s%s", code, text, errb.String())
	}
	// completes_in_budget expects three tool calls; this model makes one → fails on its checks.
	for _, want := range []string{"PASS reads_then_answers", "FAIL completes_in_budget: tool_calls: expected at least 3, got 1", "1 passed, 1 failed"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// The fixture's mock, not a real tool, answered read_order: its output reached the model.
	if len(seen) < 2 || !bytes.Contains(seen[1], []byte(`late_days`)) {
		t.Errorf("the model never saw the fixture's mocked read_order result")
	}
}
