package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpEchoTOML is the workflow the tests of reins as an MCP server register as echo.
const mcpEchoTOML = `name = "echo"
description = "Echo the order back."
input_schema = { type = "object", properties = { order_id = { type = "string" } }, required = ["order_id"] }

[[steps]]
id = "done"
type = "terminate"
`

// registerOver registers the workflow text as name through the API at base, as token's.
func registerOver(t *testing.T, base, token, name, text string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, base+"/v1/workflows/"+name, strings.NewReader(text))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/toml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("register %s: %d %s", name, resp.StatusCode, body)
	}
}

// bearerRT adds a token to every request.
type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// stdioMCP runs `reins mcp` with args in-process on pipes, and returns its standard input and
// output; it stops when the test ends.
func stdioMCP(t *testing.T, args ...string) (io.WriteCloser, io.Reader) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncBuffer{}
	root := newRoot()
	root.SetArgs(append([]string{"mcp"}, args...))
	root.SetIn(inR)
	root.SetOut(outW)
	root.SetErr(stderr)
	done := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		outW.Close()
		done <- err
	}()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("reins mcp: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("reins mcp did not stop within 30s:\n%s", stderr.String())
		}
	})
	return inW, outR
}

// callEcho lists the tools of cs and calls echo, failing the test unless it answers with its
// input.
func callEcho(t *testing.T, cs *mcp.ClientSession, orderID string) {
	t.Helper()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "echo" {
		t.Fatalf("tools/list: %v %+v", err, tools)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"order_id": orderID}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(res.StructuredContent)
	if res.IsError || string(out) != `{"order_id":"`+orderID+`"}` {
		t.Fatalf("echo answered isError %v %s", res.IsError, out)
	}
}

// TestMCP: reins serve serves MCP at /mcp on --listen as the principal of a bearer token;
// reins mcp serves it over stdio on the data directory (as its admin) and carries it to a
// server's /mcp with --server and --token.
func TestMCP(t *testing.T) {
	srv, base := remoteServe(t)
	registerOver(t, base, srv.token, "echo", mcpEchoTOML)

	t.Run("serve", func(t *testing.T) {
		c := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
		cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{samToken}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		callEcho(t, cs, "H-1")
		resp, err := http.Post(base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("/mcp without a token: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("server", func(t *testing.T) {
		in, out := stdioMCP(t, "--server", base, "--token", samToken)
		c := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
		cs, err := c.Connect(t.Context(), &mcp.IOTransport{Reader: io.NopCloser(out), Writer: in}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		callEcho(t, cs, "S-1")
	})

	t.Run("data", func(t *testing.T) {
		in, out := stdioMCP(t, "--data", srv.data)
		lines := bufio.NewScanner(out)
		lines.Buffer(nil, 1<<20)
		send := func(id int, method string, params any) {
			msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
			if id != 0 {
				msg["id"] = id
			}
			b, _ := json.Marshal(msg)
			if _, err := fmt.Fprintf(in, "%s\n", b); err != nil {
				t.Fatal(err)
			}
		}
		// answer reads messages until the answer to request id, and returns its result; the
		// notifications read on the way are returned too.
		answer := func(id int) (json.RawMessage, []string) {
			var notes []string
			for lines.Scan() {
				var m struct {
					ID     *int            `json:"id"`
					Method string          `json:"method"`
					Result json.RawMessage `json:"result"`
					Error  json.RawMessage `json:"error"`
				}
				if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
					t.Fatalf("reins mcp wrote what is not JSON-RPC: %q", lines.Text())
				}
				if m.ID == nil {
					notes = append(notes, m.Method)
					continue
				}
				if *m.ID == id {
					if m.Error != nil {
						t.Fatalf("request %d: error %s", id, m.Error)
					}
					return m.Result, notes
				}
			}
			t.Fatalf("reins mcp's output ended before the answer to %d: %v", id, lines.Err())
			return nil, nil
		}
		send(1, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"}})
		if init, _ := answer(1); !strings.Contains(string(init), `"tasks":{`) {
			t.Errorf("initialize says no tasks: %s", init)
		}
		send(0, "notifications/initialized", map[string]any{})
		send(2, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"order_id": "D-1"}, "task": map[string]any{}})
		created, _ := answer(2)
		var c struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		}
		if json.Unmarshal(created, &c) != nil || !strings.HasPrefix(c.Task.TaskID, "mcp-") {
			t.Fatalf("a call as a task answered %s", created)
		}
		send(3, "tasks/result", map[string]any{"taskId": c.Task.TaskID})
		result, notes := answer(3)
		if !strings.Contains(string(result), `"structuredContent":{"order_id":"D-1"}`) {
			t.Errorf("tasks/result: %s", result)
		}
		// The task's status notification comes on its own, before or after the result.
		seen := strings.Contains(strings.Join(notes, " "), "notifications/tasks/status")
		for !seen && lines.Scan() {
			seen = strings.Contains(lines.Text(), `"method":"notifications/tasks/status"`)
		}
		if !seen {
			t.Errorf("no status notification of the task came: %v", lines.Err())
		}
	})
}

// TestMCPUsage: reins mcp --server needs a token, and takes no NATS flag beside it.
func TestMCPUsage(t *testing.T) {
	t.Setenv(tokenEnv, "")
	t.Setenv(serverEnv, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--server", "http://127.0.0.1:1"}, "--server needs the token of a principal"},
		{[]string{"mcp", "--server", "http://127.0.0.1:1", "--token", "t", "--nats", "nats://127.0.0.1:1"}, "give one of them"},
		{[]string{"mcp", "extra"}, "unknown command"},
	} {
		var stdout, stderr strings.Builder
		code := run(t.Context(), tc.args, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("reins %s: exit %d, stderr %q, stdout %q; want %d saying %q", strings.Join(tc.args, " "), code, stderr.String(), stdout.String(), exitUsage, tc.want)
		}
	}
}
