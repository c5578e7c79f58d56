package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestAgentContextFlags: reins agent runs its loop under the context policy of its flags, and
// prints what the policy does; flags that cannot make a policy are usage errors.
func TestAgentContextFlags(t *testing.T) {
	// A model that calls a tool nobody declared, with long arguments, every time: each call is
	// an invalid action answered with an error, and the conversation grows until the policy
	// leaves the first turn out; the third invalid action in a row refuses.
	args, _ := json.Marshal(`{"q":"` + strings.Repeat("x", 1200) + `"}`)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"local","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c_`+strconv.Itoa(int(n))+`","type":"function","function":{"name":"lookup","arguments":`+string(args)+`}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	}))
	defer srv.Close()
	model := []string{"agent", "--model", "openai:local", "--base-url", srv.URL + "/v1", "--api-key", "k", "--goal", "Look it up."}

	code, out, errOut := cli(t, append(model, "--context-max-tokens", "500", "--keep-last", "2")...)
	if code != exitFailed || !strings.Contains(out, "   context (drop_oldest): left out 2 message(s): ") || !strings.Contains(out, "stop: refused") {
		t.Fatalf("exit %d, want 1 with the policy's line and the refusal\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	calls.Store(0)
	code, out, _ = cli(t, append(model, "--goal", strings.Repeat("a long goal ", 300), "--context-max-tokens", "500", "--json")...)
	var res struct {
		StopReason string `json:"stop_reason"`
		Detail     string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != exitFailed || res.StopReason != "context_exhausted" || calls.Load() != 0 {
		t.Fatalf("exit %d, %d model calls, result %s (%v); want context_exhausted before any call", code, calls.Load(), out, err)
	}

	missing := filepath.Join(t.TempDir(), "none.json")
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("the cassette exists")
	}
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"strategy without max tokens", []string{"--context-strategy", "summarize"}, "--context-strategy, --keep-last and --summarizer need --context-max-tokens"},
		{"summarize without a summarizer", []string{"--context-max-tokens", "500", "--context-strategy", "summarize"}, "strategy summarize needs a summarizer model"},
		{"unknown strategy", []string{"--context-max-tokens", "500", "--context-strategy", "forget"}, `strategy "forget" is none of drop_oldest, truncate_tool_results, summarize`},
		{"a summarizer that cannot be opened", []string{"--context-max-tokens", "500", "--context-strategy", "summarize", "--summarizer", "replay:" + missing}, "--summarizer: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, append(model, tc.args...)...)
			if code != exitUsage || !strings.Contains(errOut, tc.msg) {
				t.Errorf("exit %d, want 2 saying %q\nstdout:\n%s\nstderr:\n%s", code, tc.msg, out, errOut)
			}
		})
	}
}

// TestRunRoutesContextExhausted: context_exhausted is an agent step's stop reason like any
// other, and so the label an edge routes on, through the durable engine.
func TestRunRoutesContextExhausted(t *testing.T) {
	wf := filepath.Join(t.TempDir(), "context.toml")
	if err := os.WriteFile(wf, []byte(`name = "context"
[models.m]
provider = "scripted"
script = [{ tool_calls = [{ name = "read", arguments = {} }] }, { text = "never reached" }]

[tools.read]
mock = [{ output = { text = "`+strings.Repeat("long ", 400)+`" } }]

[[steps]]
id = "investigate"
type = "agent"
model = "m"
goal = "Read it."
tools = ["read"]
context = { max_tokens = 300 }

[[steps]]
id = "too_long"
type = "terminate"
input = "investigate.output.detail"

[[steps]]
id = "done"
type = "terminate"

[[edges]]
from = "investigate"
to = "too_long"
when = "context_exhausted"

[[edges]]
from = "investigate"
to = "done"
when = "completed"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "run", wf, "--data", t.TempDir(), "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	r := decodeResult(t, out)
	if s := r.step(t, "investigate"); s.Label != "context_exhausted" || strings.Join(r.Path, " ") != "investigate too_long" ||
		!strings.Contains(compactJSON(r.Output), "over the context policy's max_tokens 300") {
		t.Errorf("step %+v, path %v, output %s; want context_exhausted routed to too_long", s, r.Path, r.Output)
	}
}
