package mcpserver_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/mcptool"
)

// TestListTools: a submitter sees every registered workflow as a tool of its name, with its
// description and input_schema (an open object schema without one), callable as a task; a
// principal that may not start runs sees none.
func TestListTools(t *testing.T) {
	s := newStack(t)
	res, err := s.connect("sam", nil).ListTools(s.Ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		byName[tool.Name] = tool
	}
	slices.Sort(names)
	if want := []string{"anything", "echo", "refuse", "review", "sleeper", "think"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	echo := byName["echo"]
	if echo.Description != "Echo the order back." {
		t.Errorf("echo's description %q", echo.Description)
	}
	schema, _ := json.Marshal(echo.InputSchema)
	if !strings.Contains(string(schema), `"required":["order_id"]`) || !strings.Contains(string(schema), `"qty":{"type":"integer"}`) {
		t.Errorf("echo's input schema %s is not its input_schema", schema)
	}
	if schema, _ := json.Marshal(byName["anything"].InputSchema); string(schema) != `{"type":"object"}` {
		t.Errorf("the input schema of a workflow without input_schema is %s, want an open object", schema)
	}

	// The SDK's Tool has no execution: read it from the wire.
	cs := s.connect("sam", nil)
	var raw struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	s.call("sam", cs.ID(), "tools/list", map[string]any{}, &raw)
	for _, tool := range raw.Tools {
		if tool.Execution.TaskSupport != "optional" {
			t.Errorf("tool %s: taskSupport %q, want optional", tool.Name, tool.Execution.TaskSupport)
		}
	}

	viewer, err := s.connect("vera", nil).ListTools(s.Ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(viewer.Tools) != 0 {
		t.Errorf("a viewer sees tools %v", viewer.Tools)
	}
}

// TestCallTool: a call starts a run as its principal and answers with its output as
// structured content; a failed run is a tool error with its stop reason.
func TestCallTool(t *testing.T) {
	s := newStack(t)
	cs := s.connect("sam", nil)
	res, err := cs.CallTool(s.Ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"order_id": "A-1", "qty": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("echo failed: %v", res.Content[0])
	}
	got, _ := json.Marshal(res.StructuredContent)
	if string(got) != `{"order_id":"A-1","qty":2}` {
		t.Errorf("structured content %s, want the run's output", got)
	}
	runID, _ := res.Meta["reins/run_id"].(string)
	rec, err := s.Admin.Get(s.Ctx, runID)
	if err != nil {
		t.Fatalf("the run the answer names: %v", err)
	}
	if rec.Run.StartedBy != "sam" || rec.Run.Workflow != "echo" {
		t.Errorf("run %s: started by %q, workflow %q; want sam's run of echo", runID, rec.Run.StartedBy, rec.Run.Workflow)
	}

	res, err = cs.CallTool(s.Ctx, &mcp.CallToolParams{Name: "refuse", Arguments: map[string]any{"order_id": "B-2"}})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !res.IsError || !strings.Contains(text, "E_FAIL") || !strings.Contains(text, "No refund for B-2.") {
		t.Errorf("a failed run's answer: isError %v, %q; want a tool error with its stop reason", res.IsError, text)
	}
}

// TestCallToolBadInput: arguments that fail the input schema are a tool error naming the
// field, and start nothing; an unknown tool is a JSON-RPC error of one sentence.
func TestCallToolBadInput(t *testing.T) {
	s := newStack(t)
	cs := s.connect("sam", nil)
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"qty": 2}, "missing property 'order_id'"},
		{map[string]any{"order_id": "A-1", "qty": "two"}, "at /qty: got string, want integer"},
	} {
		res, err := cs.CallTool(s.Ctx, &mcp.CallToolParams{Name: "echo", Arguments: tc.args})
		if err != nil {
			t.Fatal(err)
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("arguments %v: isError %v, %q; want a tool error naming %s", tc.args, res.IsError, text, tc.want)
		}
	}
	if ids := s.runs("echo"); len(ids) != 0 {
		t.Errorf("bad arguments started runs %v", ids)
	}

	_, err := cs.CallTool(s.Ctx, &mcp.CallToolParams{Name: "nothing", Arguments: map[string]any{}})
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpc.Message, `there is no tool "nothing"`) {
		t.Errorf("an unknown tool: %v, want a JSON-RPC error naming it", err)
	}
}

// TestCallToolRetried: a call sent again (the same request id in the same session, or the same
// idempotency key from another session) starts one run.
func TestCallToolRetried(t *testing.T) {
	s := newStack(t)
	cs := s.connect("sam", nil)
	args := map[string]any{"name": "anything", "arguments": map[string]any{"n": 1}}
	var first, again mcp.CallToolResult
	s.call("sam", cs.ID(), "tools/call", args, &first)
	s.call("sam", cs.ID(), "tools/call", args, &again)
	if first.Meta["reins/run_id"] != again.Meta["reins/run_id"] || first.Meta["reins/run_id"] == nil {
		t.Errorf("the same request twice ran %v and %v", first.Meta["reins/run_id"], again.Meta["reins/run_id"])
	}
	if ids := s.runs("anything"); len(ids) != 1 {
		t.Errorf("runs %v, want one", ids)
	}

	keyed := &mcp.CallToolParams{Meta: mcp.Meta{mcptool.IdempotencyMetaKey: "k-1"}, Name: "anything", Arguments: map[string]any{"n": 2}}
	a, err := cs.CallTool(s.Ctx, keyed)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.connect("sam", nil).CallTool(s.Ctx, keyed)
	if err != nil {
		t.Fatal(err)
	}
	if a.Meta["reins/run_id"] != b.Meta["reins/run_id"] {
		t.Errorf("the same idempotency key in two sessions ran %v and %v", a.Meta["reins/run_id"], b.Meta["reins/run_id"])
	}
	if ids := s.runs("anything"); len(ids) != 2 {
		t.Errorf("runs %v, want two", ids)
	}
}

// TestCallToolRefused: a principal without the submitter role may not call a tool; a request
// without a known token is 401.
func TestCallToolRefused(t *testing.T) {
	s := newStack(t)
	for _, name := range []string{"vera", "alice"} {
		_, err := s.connect(name, nil).CallTool(s.Ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"order_id": "A-1"}})
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, "principal "+name) || !strings.Contains(rpc.Message, "submitter") {
			t.Errorf("%s's call: %v, want a refusal naming the principal and the role", name, err)
		}
	}
	vera := s.connect("vera", nil)
	if _, a := s.post("vera", vera.ID(), "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"order_id": "A-1"}, "task": map[string]any{}}); a.Error == nil || !strings.Contains(a.Error.Message, "principal vera") {
		t.Errorf("vera's call as a task: %+v, want a refusal", a.Error)
	}
	if ids := s.runs("echo"); len(ids) != 0 {
		t.Errorf("refused calls started runs %v", ids)
	}
	for _, token := range []string{"", "nobody's"} {
		req, _ := http.NewRequest("POST", s.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", token, resp.StatusCode)
		}
	}
}
