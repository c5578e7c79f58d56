package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
)

var allTools = []string{"add", "chart", "echo", "fail", "idempotency_key", "read_only_lookup", "slow"}

func toolMap(t *testing.T, ts *Toolset) map[string]tool.Tool {
	t.Helper()
	m := map[string]tool.Tool{}
	for _, tl := range ts.Tools() {
		name := tl.Spec().Name
		if _, dup := m[name]; dup {
			t.Fatalf("tool %s listed twice", name)
		}
		m[name] = tl
	}
	return m
}

func call(t *testing.T, tl tool.Tool, args, key string) string {
	t.Helper()
	out, err := tl.Call(context.Background(), json.RawMessage(args), key)
	if err != nil {
		t.Fatalf("%s(%s): %v", tl.Spec().Name, args, err)
	}
	if !json.Valid(out) {
		t.Fatalf("%s(%s) returned invalid JSON: %s", tl.Spec().Name, args, out)
	}
	return string(out)
}

func wantToolError(t *testing.T, err error, retryable bool, contains ...string) *tool.Error {
	t.Helper()
	var te *tool.Error
	if !errors.As(err, &te) {
		t.Fatalf("error %v (%T) is not a *tool.Error", err, err)
	}
	if te.Retryable != retryable {
		t.Errorf("error %q: retryable = %v, want %v", te, te.Retryable, retryable)
	}
	if tool.IsRetryable(err) != retryable {
		t.Errorf("tool.IsRetryable(%q) = %v, want %v", err, !retryable, retryable)
	}
	for _, s := range contains {
		if !strings.Contains(te.Error(), s) {
			t.Errorf("error %q does not contain %q", te, s)
		}
	}
	return te
}

// checkTools checks the listing and the basic calls, the same over every transport.
func checkTools(t *testing.T, ts *Toolset, prefix string) {
	t.Helper()
	tools := toolMap(t, ts)
	var names []string
	for n := range tools {
		names = append(names, n)
	}
	slices.Sort(names)
	var want []string
	for _, n := range allTools {
		want = append(want, prefix+n)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v (every page listed, prefix applied, %s refused)", names, want, taskTool)
	}
	refused := ts.Refused()
	if why := refused[prefix+taskTool]; len(refused) != 1 || !strings.Contains(why, "tool "+taskTool+" of MCP server") || !strings.Contains(why, "requires MCP tasks") {
		t.Errorf("Refused() = %q, want %s refused for requiring tasks", refused, prefix+taskTool)
	}

	echo := tools[prefix+"echo"].Spec()
	if echo.Description != "Echo the text back." {
		t.Errorf("echo description = %q", echo.Description)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(echo.InputSchema, &schema); err != nil {
		t.Fatalf("echo schema %s: %v", echo.InputSchema, err)
	}
	if schema.Type != "object" || schema.Properties["text"] == nil || !slices.Contains(schema.Required, "text") {
		t.Errorf("echo schema = %s, want an object requiring text", echo.InputSchema)
	}
	for name, tl := range tools {
		spec := tl.Spec()
		if spec.NeedsApproval {
			t.Errorf("%s: NeedsApproval set; policy decides", name)
		}
		if want := name != prefix+"read_only_lookup"; spec.SideEffect != want {
			t.Errorf("%s: SideEffect = %v, want %v", name, spec.SideEffect, want)
		}
		if _, err := tool.NewValidator(name, spec.InputSchema); err != nil {
			t.Errorf("%s: the loop cannot use its schema: %v", name, err)
		}
	}

	if got := call(t, tools[prefix+"echo"], `{"text":"hello, world"}`, "k1"); got != `"hello, world"` {
		t.Errorf("echo = %s, want a JSON string", got)
	}
	if got := call(t, tools[prefix+"echo"], `{"text":"<b>&amp;</b>"}`, ""); got != `"<b>&amp;</b>"` {
		t.Errorf("echo = %s, want the text unescaped", got)
	}
	if got := call(t, tools[prefix+"echo"], `{"text":"[1, 2]"}`, ""); got != `[1, 2]` {
		t.Errorf("echo = %s, want text that is JSON as it is", got)
	}
	if got := call(t, tools[prefix+"add"], `{"a":2,"b":40}`, "k2"); got != `{"sum":42}` {
		t.Errorf("add = %s, want the structured content", got)
	}
	if got := call(t, tools[prefix+"read_only_lookup"], `{"key":"k"}`, ""); got != `{"key": "k", "found": true}` {
		t.Errorf("read_only_lookup = %s, want its JSON text as it is", got)
	}
	if got := call(t, tools[prefix+"chart"], ``, ""); got != `"sales by month\n[image/png content, 1234 bytes]"` {
		t.Errorf("chart = %s", got)
	}
	if got := call(t, tools[prefix+"idempotency_key"], `{}`, "run-7/3/1"); got != `"run-7/3/1"` {
		t.Errorf("the server received idempotency key %s, want run-7/3/1", got)
	}

	_, err := tools[prefix+"fail"].Call(context.Background(), json.RawMessage(`{}`), "k3")
	te := wantToolError(t, err, true, "the disk is on fire")
	if te.Message != "the disk is on fire" {
		t.Errorf("fail message = %q, want the tool's text", te.Message)
	}
	// Arguments the server rejects, and a tool the server does not know, are answers of a live
	// server: the model may adapt.
	_, err = tools[prefix+"echo"].Call(context.Background(), json.RawMessage(`{"text":5}`), "")
	wantToolError(t, err, true, "text")
	unknown := &mcpTool{ts: ts, remote: "no_such_tool", spec: tool.Spec{Name: "no_such_tool"}}
	_, err = unknown.Call(context.Background(), json.RawMessage(`{}`), "")
	wantToolError(t, err, true, "no_such_tool")
	_, err = tools[prefix+"echo"].Call(context.Background(), json.RawMessage(`{"text":`), "")
	wantToolError(t, err, true, "not valid JSON")
}

func TestStdio(t *testing.T) {
	ts, err := Connect(context.Background(), stdioCommand(), Options{Prefix: "files_", Env: serverEnvFor("stdio"), ClientName: "reins-test"})
	if err != nil {
		t.Fatal(err)
	}
	checkTools(t, ts, "files_")

	cmd := serverCmd(t, ts)
	if got, want := ts.Name(), filepath.Base(os.Args[0]); got != want {
		t.Errorf("Name() = %q, want the program's file name %q", got, want)
	}
	if err := ts.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if cmd.ProcessState == nil {
		t.Fatal("Close returned before the server process was waited for")
	}
	if !cmd.ProcessState.Exited() || cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("server process ended with %v, want exit status 0 (its input was closed)", cmd.ProcessState)
	}
	if err := ts.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err = toolMap(t, ts)["files_echo"].Call(context.Background(), json.RawMessage(`{"text":"x"}`), "")
	te := wantToolError(t, err, false, fmt.Sprintf("mcp server %q", ts.Name()), "closed")
	if strings.Contains(te.Error(), "-test.run") {
		t.Errorf("error %q shows the command line", te)
	}
}

func TestHTTP(t *testing.T) {
	srv := startHTTPServer(t, "")
	ts, err := Connect(context.Background(), srv.URL, Options{Prefix: "web_"})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	checkTools(t, ts, "web_")
	if err := ts.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestConnectContext checks that the context given to Connect bounds only the connection: the
// session outlives it.
func TestConnectContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ts, err := Connect(ctx, stdioCommand(), Options{Env: serverEnvFor("stdio")})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	if got := call(t, toolMap(t, ts)["echo"], `{"text":"still here"}`, ""); got != `"still here"` {
		t.Errorf("echo = %s", got)
	}
}

func TestConcurrentCalls(t *testing.T) {
	ts := connectStdio(t, "")
	tools := toolMap(t, ts)
	var wg sync.WaitGroup
	errs := make([]error, 16)
	outs := make([]string, 16)
	for i := range errs {
		wg.Go(func() {
			out, err := tools["add"].Call(context.Background(), json.RawMessage(fmt.Sprintf(`{"a":%d,"b":1}`, i)), fmt.Sprintf("r/1/%d", i))
			outs[i], errs[i] = string(out), err
		})
	}
	wg.Wait()
	for i := range errs {
		if want := fmt.Sprintf(`{"sum":%d}`, i+1); errs[i] != nil || outs[i] != want {
			t.Errorf("call %d = %s, %v; want %s", i, outs[i], errs[i], want)
		}
	}
}

func TestConnectErrors(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   []string
	}{
		{"reins-no-such-command-4711 --token sk-secret-4711", []string{`mcp server "reins-no-such-command-4711": cannot start`, "executable file not found"}},
		{`server --name "unclosed --token sk-secret`, []string{`mcp server "server": cannot parse the command line`}},
		{"", []string{`mcp server "(empty command)": empty command line`}},
		{"   ", []string{`mcp server "(empty command)": empty command line`}},
		{"http://", []string{`mcp server "http server": invalid URL`}},
		{"https://user:secret@[::1", []string{`mcp server "https server": invalid URL`}},
		{"https://user:secret@[::1]:0/mcp?token=secret", []string{`mcp server "https://[::1]:0/mcp": cannot connect`}},
	} {
		ts, err := Connect(context.Background(), tc.target, Options{})
		if err == nil {
			ts.Close()
			t.Errorf("Connect(%q) succeeded", tc.target)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Connect(%q) = %q, want it to contain %q", tc.target, err, w)
			}
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "--") {
			t.Errorf("Connect(%q) = %q shows the command line or a password", tc.target, err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("Connect(%q) error spans several lines: %q", tc.target, err)
		}
	}
	// A name given is the name errors use.
	_, err := Connect(context.Background(), "reins-no-such-command-4711 --token sk-secret-4711", Options{Name: "orders"})
	if err == nil || !strings.HasPrefix(err.Error(), `mcp server "orders": cannot start`) {
		t.Errorf("Connect with Name orders = %v, want it named orders", err)
	}
}

// TestConnectCancelled connects with a context that is already cancelled: the server process is
// started, the handshake fails, and the process is ended before Connect returns.
func TestConnectCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ts, err := Connect(ctx, stdioCommand(), Options{Env: serverEnvFor("stdio")})
	if err == nil {
		ts.Close()
		t.Fatal("Connect with a cancelled context succeeded")
	}
	if want := fmt.Sprintf("mcp server %q: waiting for it to start: context canceled", filepath.Base(os.Args[0])); err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestConnectBrokenServer starts a command that exits without speaking MCP: the error says so
// and quotes the last line of its standard error.
func TestConnectBrokenServer(t *testing.T) {
	_, err := Connect(context.Background(), stdioCommand(), Options{Env: serverEnvFor("broken")})
	if err == nil {
		t.Fatal("Connect to a server that exits succeeded")
	}
	for _, w := range []string{fmt.Sprintf("mcp server %q: cannot connect", filepath.Base(os.Args[0])), "fatal: no API key configured"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestLoopEndToEnd(t *testing.T) {
	ts := connectStdio(t, "srv_")
	answer := "2 + 40 = 42"
	m, err := model.NewScripted([]model.Turn{
		{ToolCalls: []model.ToolCall{{Name: "srv_echo", Arguments: json.RawMessage(`{"text":"hi"}`)}}},
		{ToolCalls: []model.ToolCall{{Name: "srv_add", Arguments: json.RawMessage(`{"a":2,"b":40}`)}}},
		{Text: &answer},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loop.New(loop.Config{
		Model:  m,
		Tools:  ts.Tools(),
		Policy: loop.Policy{RequiredEvidence: []string{"srv_add"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "run-1", "Add 2 and 40.")
	if res.StopReason != loop.Completed || res.Answer != answer {
		t.Fatalf("stop reason %s (%s), answer %q", res.StopReason, res.Detail, res.Answer)
	}
	var results []string
	for _, msg := range res.State.Messages {
		if msg.Role == model.RoleTool {
			if msg.IsError {
				t.Errorf("tool result %s is an error: %s", msg.CallID, msg.Content)
			}
			results = append(results, msg.Content)
		}
	}
	if want := []string{`"hi"`, `{"sum":42}`}; !slices.Equal(results, want) {
		t.Errorf("tool results = %q, want %q", results, want)
	}
	if res.State.ToolCalls != 2 {
		t.Errorf("tool calls = %d, want 2", res.State.ToolCalls)
	}
}
