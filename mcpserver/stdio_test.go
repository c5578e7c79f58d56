package mcpserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/operator"
)

// TestServe: Serve answers one principal's host on any transport (reins mcp's stdio) with the
// Go SDK's client: its tools, a call, a retried call starting one run, a bad argument naming
// the field, and a refusal for a principal without the submitter role.
func TestServe(t *testing.T) {
	s := newStack(t)
	connect := func(p operator.Principal) *mcp.ClientSession {
		t.Helper()
		ct, st := mcp.NewInMemoryTransports()
		ctx, cancel := context.WithCancel(s.Ctx)
		done := make(chan error, 1)
		go func() { done <- s.MCP.Serve(ctx, p, st) }()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(s.Ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.Close()
			cancel()
			<-done
		})
		return cs
	}
	sam := connect(operator.Principal{Name: "sam", Roles: []string{operator.RoleSubmitter}})
	if init := sam.InitializeResult(); init == nil || init.Capabilities.Tools == nil {
		t.Fatalf("initialize: %+v", init)
	}
	tools, err := sam.ListTools(s.Ctx, nil)
	if err != nil || len(tools.Tools) != len(testWorkflows) {
		t.Fatalf("tools/list: %v %d tools", err, len(tools.Tools))
	}
	args := map[string]any{"order_id": "O-1"}
	var ids []any
	for range 2 { // the same idempotency key twice: one run
		res, err := sam.CallTool(s.Ctx, &mcp.CallToolParams{Meta: mcp.Meta{"reins/idempotency_key": "once"}, Name: "echo", Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("echo: %v %+v", err, res)
		}
		out, _ := json.Marshal(res.StructuredContent)
		if string(out) != `{"order_id":"O-1"}` {
			t.Errorf("echo answered %s", out)
		}
		ids = append(ids, res.Meta["reins/run_id"])
	}
	if ids[0] != ids[1] || len(s.runs("echo")) != 1 {
		t.Errorf("a call made twice ran %v, runs %v", ids, s.runs("echo"))
	}
	res, err := sam.CallTool(s.Ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"order_id": 7}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "at /order_id") {
		t.Errorf("a bad argument: %v %+v", err, res)
	}

	// Two connections, each numbering its requests from 1, make the same call: two runs.
	for range 2 {
		c := connect(operator.Principal{Name: "sam", Roles: []string{operator.RoleSubmitter}})
		if _, err := c.CallTool(s.Ctx, &mcp.CallToolParams{Name: "anything", Arguments: map[string]any{"n": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if ids := s.runs("anything"); len(ids) != 2 {
		t.Errorf("the same first call of two connections ran %v, want two runs", ids)
	}

	vera := connect(operator.Principal{Name: "vera", Roles: []string{operator.RoleViewer}})
	if _, err := vera.CallTool(s.Ctx, &mcp.CallToolParams{Name: "echo", Arguments: args}); err == nil || !strings.Contains(err.Error(), "principal vera") {
		t.Errorf("a viewer's call: %v, want a refusal", err)
	}
}
