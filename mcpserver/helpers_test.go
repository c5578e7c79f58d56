package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/auth"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/mcpserver"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// The workflows of the tests, registered under their names.
var testWorkflows = map[string]string{
	// echo answers with its input, which its input_schema describes.
	"echo": `name = "echo"
description = "Echo the order back."
input_schema = { type = "object", properties = { order_id = { type = "string" }, qty = { type = "integer" } }, required = ["order_id"] }

[[steps]]
id = "done"
type = "terminate"
`,
	// anything takes any input (no input_schema).
	"anything": `name = "anything"

[[steps]]
id = "done"
type = "terminate"
`,
	// refuse fails with a stop reason.
	"refuse": `name = "refuse"

[[steps]]
id = "no"
type = "fail"
message = "No refund for {{input.order_id}}."
`,
	// review waits for a person's approval.
	"review": `name = "review"

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship it?"
`,
	// sleeper runs for an hour without waiting for anyone.
	"sleeper": `name = "sleeper"

[[steps]]
id = "nap"
type = "sleep"
duration = "1h"
`,
	// think's agent calls a mocked tool, then answers: two iterations.
	"think": `name = "think"

[models.m]
provider = "scripted"
script = [
  { tool_calls = [{ name = "lookup", arguments = { id = "A-1" } }] },
  { text = "Found it." },
]

[tools.lookup]
description = "Look an order up."
input_schema = { type = "object", properties = { id = { type = "string" } } }
mock = [{ output = { found = true } }]

[[steps]]
id = "act"
type = "agent"
model = "m"
goal = "Look order A-1 up."
tools = ["lookup"]
`,
}

// The principals of the tests, by name, with their roles (separated by commas).
var testPrincipals = map[string]string{"admin": operator.RoleAdmin, "sam": operator.RoleSubmitter, "sue": operator.RoleSubmitter,
	"vera": operator.RoleViewer, "alice": operator.RoleApprover, "pat": operator.RoleSubmitter + "," + operator.RoleApprover}

// stack is reins serve's MCP server over HTTP on a real embedded NATS server, with the engine
// and the built-in workers, and the test's workflows registered.
type stack struct {
	t      *testing.T
	Ctx    context.Context
	URL    string // the MCP endpoint
	Tokens map[string]string
	Admin  *client.Client
	MCP    *mcpserver.Server
	API    *api.Server
	// Said receives the messages the MCP server logs at warning level and above.
	Said chan string
}

// tee is a log handler that also hands the messages of warning level and above to said.
type tee struct {
	slog.Handler
	said chan string
}

func (t tee) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		select {
		case t.said <- r.Message:
		default:
		}
	}
	return t.Handler.Handle(ctx, r)
}
func (t tee) WithAttrs(as []slog.Attr) slog.Handler { return tee{t.Handler.WithAttrs(as), t.said} }
func (t tee) WithGroup(g string) slog.Handler       { return tee{t.Handler.WithGroup(g), t.said} }

// said waits until the MCP server logs msg at warning level or above.
func (s *stack) said(msg string) {
	s.t.Helper()
	for {
		select {
		case m := <-s.Said:
			if m == msg {
				return
			}
		case <-s.Ctx.Done():
			s.t.Fatalf("the server never logged %q", msg)
		}
	}
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	res, err := (&operator.Config{}).Resolve(func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, Ctx: ctx, Tokens: map[string]string{}}
	for name, role := range testPrincipals {
		s.Tokens[name] = "tok-" + name + "-" + client.NewRunID()
		res.AddPrincipal(name, s.Tokens[name], strings.Split(role, ",")...)
	}
	log := runtest.Logger(t)
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir(), Authenticate: auth.Authenticator(res), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	h, err := host.Start(ctx, host.Config{Conn: (*conn.Conn)(box), Engine: true, Logger: log,
		Register: func(w *worker.Worker) error { return builtin.Register(w, builtin.Config{}) },
		Roles: func(name string) []string {
			p, _ := res.Principal(name)
			return p.Roles
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	s.API = api.New(api.Config{Conn: (*conn.Conn)(box), Principals: res, Log: log})
	s.Said = make(chan string, 64)
	s.MCP = mcpserver.New(mcpserver.Config{As: s.API.As, Principals: res, Log: slog.New(tee{log.Handler(), s.Said}), Version: "test"})
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.MCP.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/mcp"
	s.Admin = client.New(client.Config{Conn: (*conn.Conn)(box)})
	for name, text := range testWorkflows {
		s.register(name, text)
	}
	return s
}

// register registers the workflow text under name, as the admin.
func (s *stack) register(name, text string) {
	s.t.Helper()
	file := filepath.Join(s.t.TempDir(), name+".toml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		s.t.Fatal(err)
	}
	def, ps := workflow.LoadAndValidate(file, workflow.Options{})
	if len(ps) > 0 {
		s.t.Fatalf("workflow %s: %v", name, ps)
	}
	if _, _, err := s.Admin.Register(s.Ctx, name, []byte(text), def); err != nil {
		s.t.Fatal(err)
	}
}

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connect returns an MCP session of the Go SDK's client over HTTP as principal name.
func (s *stack) connect(name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	s.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, opts)
	cs, err := c.Connect(s.Ctx, &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: &http.Client{Transport: bearer{s.Tokens[name]}}}, nil)
	if err != nil {
		s.t.Fatalf("connect as %s: %v", name, err)
	}
	s.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// rpcAnswer is a JSON-RPC answer as the test reads it.
type rpcAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// post sends one JSON-RPC request of method with params in session (as principal name) and
// returns the HTTP status and the answer.
func (s *stack) post(name, session, method string, params any) (int, rpcAnswer) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	req, _ := http.NewRequestWithContext(s.Ctx, "POST", s.URL, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Authorization", "Bearer "+s.Tokens[name])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var a rpcAnswer
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") { // one event: the answer
		for line := range strings.Lines(string(b)) {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				b = []byte(data)
			}
		}
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &a); err != nil {
			s.t.Fatalf("%s: the answer is not JSON-RPC: %v: %s", method, err, b)
		}
	}
	return resp.StatusCode, a
}

// call sends method and fails the test unless it is answered with a result, decoded into v.
func (s *stack) call(name, session, method string, params, v any) {
	s.t.Helper()
	status, a := s.post(name, session, method, params)
	if status != http.StatusOK || a.Error != nil {
		s.t.Fatalf("%s: status %d, error %+v", method, status, a.Error)
	}
	if err := json.Unmarshal(a.Result, v); err != nil {
		s.t.Fatalf("%s: %v: %s", method, err, a.Result)
	}
}

// task is a task as the tests read it.
type task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
}

// runs returns the ids of the runs of workflow name.
func (s *stack) runs(name string) []string {
	s.t.Helper()
	page, err := s.Admin.Query(s.Ctx, client.Query{Workflow: name})
	if err != nil {
		s.t.Fatal(err)
	}
	var ids []string
	for _, r := range page.Records {
		ids = append(ids, r.Run.ID)
	}
	return ids
}

// waitStatus waits until run id has status st.
func (s *stack) waitStatus(id string, st protocol.RunStatus) {
	s.t.Helper()
	for rec, err := range s.Admin.Watch(s.Ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		if err != nil {
			s.t.Fatal(err)
		}
		if rec.Record.Run.Status == st {
			return
		}
	}
	s.t.Fatalf("run %s never was %s", id, st)
}
