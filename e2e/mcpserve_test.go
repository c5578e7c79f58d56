//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/internal/testkit/natstest"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
)

// mcpSamToken is the token of sam, a submitter of the MCP server's tests.
const mcpSamToken = "mcp-sam-token-0123456789"

// mcpWorkflows are the workflows the MCP server's tests register.
var mcpWorkflows = map[string]string{
	"echo": `name = "echo"
description = "Echo the order back."
input_schema = { type = "object", properties = { order_id = { type = "string" } }, required = ["order_id"] }

[[steps]]
id = "done"
type = "terminate"
`,
	"review": `name = "review"

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship it?"
`,
}

// mcpServe is reins serve as a process, its MCP server at base+"/mcp".
type mcpServe struct {
	t          *testing.T
	data, base string
	cfg, nats  string
	proc       *proc
}

// startMCPServe starts reins serve on data (a new one when ""), with sam a submitter, and
// registers the tests' workflows when it is new.
func startMCPServe(t *testing.T, s *mcpServe) *mcpServe {
	t.Helper()
	if s == nil {
		s = &mcpServe{t: t, data: t.TempDir(), nats: fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))}
		s.cfg = filepath.Join(t.TempDir(), "ops.toml")
		if err := os.WriteFile(s.cfg, []byte("[principals.sam]\ntoken_env = \"REINS_TOKEN_SAM\"\nroles = [\"submitter\"]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		defer func() {
			for name, text := range mcpWorkflows {
				s.register(name, text)
			}
		}()
	}
	s.proc = start(t, "reins serve", []string{"REINS_TOKEN_SAM=" + mcpSamToken}, bins.reins, "serve", "--data", s.data,
		"--listen", "127.0.0.1:0", "--nats-listen", s.nats, "--config", s.cfg)
	line := s.proc.waitFor("reins serving", 60*time.Second)
	m := httpAddrLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("reins serve names no HTTP address: %s", line)
	}
	s.base = "http://" + m[1]
	return s
}

// register registers a workflow through the API, as sam.
func (s *mcpServe) register(name, text string) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPut, s.base+"/v1/workflows/"+name, strings.NewReader(text))
	req.Header.Set("Authorization", "Bearer "+mcpSamToken)
	req.Header.Set("Content-Type", "application/toml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		s.t.Fatalf("register %s: %d %s", name, resp.StatusCode, body)
	}
}

// session initializes an MCP session as sam with the Go SDK's client, and returns its id.
func (s *mcpServe) session(ctx context.Context) string {
	s.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.base + "/mcp", HTTPClient: &http.Client{Transport: samBearer{}}}, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = cs.Close() })
	return cs.ID()
}

// rpc sends one JSON-RPC request in session as sam and decodes its result into v.
func (s *mcpServe) rpc(ctx context.Context, session, method string, params, v any) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/mcp", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+mcpSamToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var a struct {
		Result json.RawMessage `json:"result"`
		Error  any             `json:"error"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &a) != nil || a.Error != nil {
		s.t.Fatalf("%s: %d %s", method, resp.StatusCode, b)
	}
	if err := json.Unmarshal(a.Result, v); err != nil {
		s.t.Fatalf("%s: %v %s", method, err, a.Result)
	}
}

// samBearer sends sam's token.
type samBearer struct{}

func (samBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+mcpSamToken)
	return http.DefaultTransport.RoundTrip(r)
}

// waitFor waits, watching the run's record as the data directory's admin, until run id has
// status st.
func (s *mcpServe) waitFor(ctx context.Context, id string, st protocol.RunStatus) {
	s.t.Helper()
	token, err := operator.ReadAdminToken(s.data)
	if err != nil {
		s.t.Fatal(err)
	}
	box, err := natsbox.Open(ctx, natsbox.Options{URL: "nats://" + s.nats, Token: token})
	if err != nil {
		s.t.Fatal(err)
	}
	defer box.Close()
	for rec, err := range client.New(client.Config{Conn: (*conn.Conn)(box)}).Watch(ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		if err != nil {
			s.t.Fatal(err)
		}
		if rec.Record.Run.Status == st {
			return
		}
	}
	s.t.Fatalf("run %s never was %s", id, st)
}

// mcpTask is a task as the tests read it.
type mcpTask struct {
	TaskID string `json:"taskId"`
	Status string `json:"status"`
}

// TestMCPTaskSurvivesCrash: a task whose run waits for a person outlives a SIGKILL of
// reins serve: after the restart a new session of the same principal finds it by id,
// input_required, and, once a person approves, polls it to its result.
func TestMCPTaskSurvivesCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startMCPServe(t, nil)
	var created struct {
		Task mcpTask `json:"task"`
	}
	s.rpc(ctx, s.session(ctx), "tools/call", map[string]any{"name": "review", "arguments": map[string]any{}, "task": map[string]any{}}, &created)
	id := created.Task.TaskID
	if !strings.HasPrefix(id, "mcp-") {
		t.Fatalf("a call as a task answered %+v", created)
	}
	s.waitFor(ctx, id, protocol.RunWaiting)
	s.proc.kill()
	<-s.proc.exited
	startMCPServe(t, s)

	session := s.session(ctx)
	var got mcpTask
	s.rpc(ctx, session, "tasks/get", map[string]any{"taskId": id}, &got)
	if got.Status != "input_required" {
		t.Fatalf("after the restart the task is %+v, want input_required", got)
	}
	reins(t, "approve", id, "ask", "--data", s.data)
	var res mcp.CallToolResult
	s.rpc(ctx, session, "tasks/result", map[string]any{"taskId": id}, &res)
	if res.IsError {
		t.Fatalf("the approved task's result is an error: %+v", res.Content)
	}
	s.rpc(ctx, session, "tasks/get", map[string]any{"taskId": id}, &got)
	if got.Status != "completed" {
		t.Errorf("after the approval the task is %s", got.Status)
	}
}

// inspectorPackage is the MCP Inspector of the protocol's maintainers, from npm, pinned.
const inspectorPackage = "@modelcontextprotocol/inspector@2.12.0"

// ensureInspector returns the Inspector's command, installing the package with npm into the
// user's cache when it is missing (as root, Debian's nodejs and npm first; elsewhere the test
// skips, or fails in CI, naming them: buildtest.Need).
func ensureInspector(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "reins-test", "inspector")
	bin := filepath.Join(dir, "node_modules", ".bin", "mcp-inspector")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	npm := buildtest.Need(t, buildtest.System{What: "npm", Debian: "nodejs npm", Paths: []string{"npm"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--prefix", dir, inspectorPackage).CombinedOutput(); err != nil {
		t.Fatalf("npm install --prefix %s %s: %v\n%s", dir, inspectorPackage, err, out)
	}
	return bin
}

// TestMCPInspector: the MCP Inspector's CLI lists reins serve's tools at /mcp and calls one,
// with a principal's bearer token.
func TestMCPInspector(t *testing.T) {
	inspector := ensureInspector(t)
	s := startMCPServe(t, nil)
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		argv := append([]string{"--cli", s.base + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + mcpSamToken}, args...)
		out, err := exec.CommandContext(ctx, inspector, argv...).CombinedOutput()
		if err != nil {
			t.Fatalf("mcp-inspector %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var list struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	out := run("--method", "tools/list")
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &list); err != nil {
		t.Fatalf("tools/list printed %s: %v", out, err)
	}
	names := map[string]bool{}
	for _, tool := range list.Tools {
		names[tool.Name] = true
	}
	if !names["echo"] || !names["review"] {
		t.Errorf("the Inspector lists %v, want echo and review", names)
	}
	out = run("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "order_id=I-1")
	if !strings.Contains(out, `"structuredContent"`) || !strings.Contains(out, "I-1") || strings.Contains(out, `"isError": true`) {
		t.Errorf("the Inspector's call of echo printed %s", out)
	}
}
