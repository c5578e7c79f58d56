package builtin_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/registry"
)

// llmWorkflow is a workflow with one llm step "write" on the scripted model "writer".
func llmWorkflow(script, stepKeys string) string {
	return `name = "t"
[models.writer]
provider = "scripted"
script = ` + script + `

[[steps]]
id = "write"
type = "llm"
model = "writer"
instructions = "Be brief."
prompt = "Write."
` + stepKeys
}

const verdictSchema = `output_schema = { type = "object", properties = { verdict = { type = "string", enum = ["accept", "retry"] } }, required = ["verdict"], additionalProperties = false }`

func TestLLMScripted(t *testing.T) {
	tests := []struct {
		name                string
		script, keys        string
		activation, attempt int
		wantAnswer          string
		wantOutput          string
		wantErr             string
		wantUsage           protocol.Usage
	}{
		{name: "text output", script: `[{ text = "hello", usage = { input_tokens = 10, output_tokens = 2 }, cost_usd = 0.5 }]`,
			wantAnswer: "complete", wantOutput: `"hello"`,
			wantUsage: protocol.Usage{ModelCalls: 1, InputTokens: 10, OutputTokens: 2, CostUSD: 0.5}},
		{name: "JSON output with output_schema", script: `[{ text = '{"verdict": "accept"}' }]`, keys: verdictSchema,
			wantAnswer: "complete", wantOutput: `{"verdict":"accept"}`, wantUsage: protocol.Usage{ModelCalls: 1}},
		{name: "JSON in a code fence", script: "[{ text = \"```json\\n{\\\"verdict\\\": \\\"retry\\\"}\\n```\" }]", keys: verdictSchema,
			wantAnswer: "complete", wantOutput: `{"verdict":"retry"}`, wantUsage: protocol.Usage{ModelCalls: 1}},
		{name: "a repair that succeeds", keys: verdictSchema,
			script:     `[{ text = "Accept.", usage = { input_tokens = 5 } }, { text = '{"verdict": "maybe"}', usage = { input_tokens = 7 } }, { text = '{"verdict": "accept"}', usage = { input_tokens = 9 } }]`,
			wantAnswer: "complete", wantOutput: `{"verdict":"accept"}`, wantUsage: protocol.Usage{ModelCalls: 3, InputTokens: 21}},
		{name: "repairs exhausted", keys: verdictSchema + "\noutput_repairs = 1",
			script:     `[{ text = "Accept." }, { text = '{"verdict": "maybe"}' }, { text = '{"verdict": "accept"}' }]`,
			wantAnswer: "fail_permanent", wantUsage: protocol.Usage{ModelCalls: 2},
			wantErr: "step write: after 1 repair, the reply does not match the output schema: at /verdict: value must be one of"},
		{name: "no repairs", keys: verdictSchema + "\noutput_repairs = 0", script: `[{ text = "Accept." }]`,
			wantAnswer: "fail_permanent", wantUsage: protocol.Usage{ModelCalls: 1},
			wantErr: "step write: the reply is not JSON"},
		{name: "retryable model error fails the attempt", script: `[{ error = "overloaded" }, { text = "hello" }]`,
			wantAnswer: "fail", wantErr: "step write: model call failed (retryable): overloaded", wantUsage: protocol.Usage{ModelCalls: 1}},
		{name: "the retried attempt reads the next turn", script: `[{ error = "overloaded" }, { text = "hello" }]`, attempt: 2,
			wantAnswer: "complete", wantOutput: `"hello"`, wantUsage: protocol.Usage{ModelCalls: 1}},
		{name: "non-retryable model error", script: `[{ error = "bad request", retryable = false }]`,
			wantAnswer: "fail_permanent", wantErr: "step write: model call failed (non-retryable): bad request", wantUsage: protocol.Usage{ModelCalls: 1}},
		{name: "the second activation reads the second turn", script: `[{ text = "draft 1" }, { text = "draft 2" }]`, activation: 2,
			wantAnswer: "complete", wantOutput: `"draft 2"`, wantUsage: protocol.Usage{ModelCalls: 1}},
		{name: "an exhausted script escalates", script: `[]`,
			wantAnswer: "fail_permanent", wantErr: "step write: the model escalated instead of answering: script_exhausted", wantUsage: protocol.Usage{ModelCalls: 1}},
		{name: "tool calls are not an answer", script: `[{ tool_calls = [{ name = "x" }] }]`,
			wantAnswer: "fail_permanent", wantErr: "step write: the model proposed 1 tool call(s) (x first), but an llm step offers no tools", wantUsage: protocol.Usage{ModelCalls: 1}},
		{name: "an invalid script", script: `[{ txt = "hello" }]`,
			wantAnswer: "fail_permanent", wantErr: "step write: model writer: models.writer.script[0].txt: unknown key"},
		{name: "an invalid output schema", script: `[{ text = "{}" }]`, keys: `output_schema = { type = 3 }`,
			wantAnswer: "fail_permanent", wantErr: "step write: output_schema is not a valid JSON Schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, hash := bundleOf(t, llmWorkflow(tt.script, tt.keys), "")
			ft := newTask(b, hash, "write", 1, `{"topic": "reins"}`)
			ft.task.Activation, ft.task.Attempt = max(tt.activation, 1), max(tt.attempt, 1)
			if err := newHandlers(t, builtin.Config{}).LLM(ft); err != nil {
				t.Fatalf("LLM returned %v", err)
			}
			if ft.answer != tt.wantAnswer {
				t.Fatalf("answer %s (%v), want %s", ft.answer, ft.err, tt.wantAnswer)
			}
			if tt.wantOutput != "" && string(ft.output) != tt.wantOutput {
				t.Errorf("output %s, want %s", ft.output, tt.wantOutput)
			}
			if tt.wantErr != "" && (ft.err == nil || !strings.Contains(ft.err.Error(), tt.wantErr)) {
				t.Errorf("error %v, want one containing %q", ft.err, tt.wantErr)
			}
			if ft.usage != tt.wantUsage {
				t.Errorf("usage %+v, want %+v", ft.usage, tt.wantUsage)
			}
		})
	}
}

// Failures of the bundle itself: every one is permanent and names the step.
func TestLLMMissingDefinitions(t *testing.T) {
	tests := []struct {
		name, toml, step, model, wantErr string
	}{
		{name: "missing step", toml: llmWorkflow(`[]`, ""), step: "nope", wantErr: `step nope: workflow t has no step "nope"`},
		{name: "missing model", toml: strings.Replace(llmWorkflow(`[]`, ""), `model = "writer"`, `model = "ghost"`, 1), step: "write",
			wantErr: `step write: model "ghost" is not declared in the workflow's models`},
		{name: "openai without key", step: "write", toml: `name = "t"
[models.writer]
provider = "openai"
model = "gpt-test"
api_key_env = "REINS_TEST_NO_SUCH_KEY"
[[steps]]
id = "write"
type = "llm"
model = "writer"
prompt = "Write."`, wantErr: "step write: model writer: the environment variable REINS_TEST_NO_SUCH_KEY named by api_key_env is empty"},
		{name: "bad override", toml: llmWorkflow(`[]`, ""), step: "write", model: "replay:/nonexistent/cassette.json",
			wantErr: "step write: model replay:/nonexistent/cassette.json:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, hash := bundleOf(t, tt.toml, "")
			ft := newTask(b, hash, tt.step, 1, "null")
			h := newHandlers(t, builtin.Config{Model: tt.model, Registry: registry.Options{Getenv: func(string) string { return "" }}})
			if err := h.LLM(ft); err != nil {
				t.Fatal(err)
			}
			if ft.answer != "fail_permanent" || ft.err == nil || !strings.Contains(ft.err.Error(), tt.wantErr) {
				t.Fatalf("answer %s with %v, want fail_permanent containing %q", ft.answer, ft.err, tt.wantErr)
			}
		})
	}
}

// chatServer is a local server speaking the OpenAI Chat Completions protocol: it records every
// request and answers the n-th with replies[n].
type chatServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []map[string]any
	auth     []string
}

func newChatServer(t *testing.T, replies ...string) *chatServer {
	t.Helper()
	s := &chatServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil || r.URL.Path != "/v1/chat/completions" {
			t.Errorf("server: %s %s with body %s", r.Method, r.URL.Path, raw)
		}
		s.mu.Lock()
		s.requests = append(s.requests, body)
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		n := len(s.requests) - 1
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, replies[min(n, len(replies)-1)])
	}))
	t.Cleanup(s.Close)
	return s
}

// completion is a reply with the assistant's text and usage.
func completion(text string, in, out int) string {
	content, _ := json.Marshal(text)
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-test",`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, content, in, out, in+out)
}

// An llm step against a real local server through the registry: the base URL and the key's
// environment variable come from the workflow, the request has the documented layout, a reply
// that fails the schema is repaired in the same conversation, and usage and cost are reported.
func TestLLMOpenAIServer(t *testing.T) {
	srv := newChatServer(t, completion("Sure! The verdict is accept.", 100, 10), completion(`{"verdict":"accept"}`, 130, 6))
	toml := `name = "t"
[models.critic]
provider = "openai"
model = "gpt-test"
base_url = "` + srv.URL + `/v1"
api_key_env = "CRITIC_KEY"

[[steps]]
id = "judge"
type = "llm"
model = "critic"
instructions = "You judge drafts."
prompt = "Judge the draft."
` + verdictSchema
	b, hash := bundleOf(t, toml, "")
	ft := newTask(b, hash, "judge", 1, `{"draft": "Reins 1.0"}`)
	env := map[string]string{"CRITIC_KEY": "sk-critic"}
	h := newHandlers(t, builtin.Config{Registry: registry.Options{
		Getenv: func(k string) string { return env[k] },
		Prices: provider.Prices{"gpt-test": {InputPerMTok: 1, OutputPerMTok: 2}},
	}})
	if err := h.LLM(ft); err != nil {
		t.Fatal(err)
	}
	if ft.answer != "complete" || string(ft.output) != `{"verdict":"accept"}` {
		t.Fatalf("answer %s %s (%v), want complete {\"verdict\":\"accept\"}", ft.answer, ft.output, ft.err)
	}
	wantCost := (230*1.0 + 16*2.0) / 1e6
	if u := ft.usage; u.ModelCalls != 2 || u.InputTokens != 230 || u.OutputTokens != 16 || abs(u.CostUSD-wantCost) > 1e-12 {
		t.Errorf("usage %+v, want 2 calls, 230 in, 16 out, $%g", u, wantCost)
	}
	if len(srv.requests) != 2 || srv.auth[0] != "Bearer sk-critic" {
		t.Fatalf("%d requests with authorization %q, want 2 with the key of CRITIC_KEY", len(srv.requests), srv.auth)
	}
	first := "Judge the draft.\n\nInput:\n{\"draft\":\"Reins 1.0\"}\n\n" +
		"Reply with only a JSON value that validates against this JSON Schema:\n" +
		`{"additionalProperties":false,"properties":{"verdict":{"enum":["accept","retry"],"type":"string"}},"required":["verdict"],"type":"object"}`
	want := []map[string]any{
		{"role": "system", "content": "You judge drafts."},
		{"role": "user", "content": first},
		{"role": "assistant", "content": "Sure! The verdict is accept."},
		{"role": "user", "content": "reins: your reply was not accepted: the reply is not JSON (" + notJSON(t, "Sure! The verdict is accept.") + "); reply again with only the JSON value."},
	}
	if got := messages(srv.requests[0]); !reflect.DeepEqual(got, want[:2]) {
		t.Errorf("first request messages:\n%v\nwant\n%v", got, want[:2])
	}
	if got := messages(srv.requests[1]); !reflect.DeepEqual(got, want) {
		t.Errorf("repair request messages:\n%v\nwant\n%v", got, want)
	}
	if _, ok := srv.requests[0]["tools"]; ok {
		t.Error("an llm step offered tools")
	}
}

// messages keeps the role and content of each message of a request body.
func messages(body map[string]any) []map[string]any {
	var out []map[string]any
	list, _ := body["messages"].([]any)
	for _, m := range list {
		mm, _ := m.(map[string]any)
		out = append(out, map[string]any{"role": mm["role"], "content": mm["content"]})
	}
	return out
}

// notJSON is the parser's complaint about text, as the repair message quotes it.
func notJSON(t *testing.T, text string) string {
	t.Helper()
	var v any
	err := json.Unmarshal([]byte(text), &v)
	if err == nil {
		t.Fatalf("%q is JSON", text)
	}
	return err.Error()
}

func abs(x float64) float64 { return max(x, -x) }
