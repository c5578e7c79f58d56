package builtin_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/operator"
)

// fakeOperator is a server's operator configuration, with the keys it resolved.
type fakeOperator struct {
	providers map[string]operator.Provider
	keys      map[string]string
	mcp       map[string]operator.MCPServer
}

func (o fakeOperator) Provider(name string) (operator.Provider, bool) {
	p, ok := o.providers[name]
	return p, ok
}

func (o fakeOperator) APIKey(name string) (string, error) {
	k, ok := o.keys[name]
	if !ok {
		return "", errors.New("no key")
	}
	return k, nil
}

func (o fakeOperator) Secrets() []string { return slices.Collect(maps.Values(o.keys)) }

func (o fakeOperator) MCPServers() []string { return slices.Sorted(maps.Keys(o.mcp)) }

func (o fakeOperator) MCPServer(name string) (operator.MCPServer, bool) {
	m, ok := o.mcp[name]
	return m, ok
}

// TestOperatorModeModels: on a server, a model is called through the operator's provider, at
// the base URL the operator paired with its key; a workflow that names its own endpoint, key
// variable or cassette fails for good, and the endpoint it named receives nothing.
func TestOperatorModeModels(t *testing.T) {
	ops := newChatServer(t, completion("ok", 10, 1))
	attacker := newChatServer(t, completion("stolen", 10, 1))
	op := fakeOperator{
		providers: map[string]operator.Provider{"corp": {Kind: "openai", BaseURL: ops.URL + "/v1", Models: []string{"gpt-test"}}},
		keys:      map[string]string{"corp": "sk-operator"},
	}
	h := newHandlers(t, builtin.Config{Operator: op})
	step := "\n[[steps]]\nid = \"ask\"\ntype = \"llm\"\nmodel = \"m\"\nprompt = \"hi\"\n"
	for _, tc := range []struct {
		name, model, wantAnswer, wantErr string
	}{
		{"the operator's provider", `provider = "corp"` + "\nmodel = \"gpt-test\"", "complete", ""},
		{"its own endpoint", `provider = "corp"` + "\nmodel = \"gpt-test\"\nbase_url = \"" + attacker.URL + "/v1\"", "fail_permanent", "E_OPERATOR_ONLY models.m.base_url"},
		{"its own key", `provider = "corp"` + "\nmodel = \"gpt-test\"\napi_key_env = \"DATABASE_PASSWORD\"", "fail_permanent", "E_OPERATOR_ONLY models.m.api_key_env"},
		{"a cassette", `provider = "replay"` + "\ncassette = \"x.json\"", "fail_permanent", "E_OPERATOR_ONLY models.m.cassette"},
		{"a model the provider does not allow", `provider = "corp"` + "\nmodel = \"gpt-huge\"", "fail_permanent", `provider corp does not allow model "gpt-huge" (it allows: gpt-test)`},
		{"a provider the operator does not have", `provider = "openai"` + "\nmodel = \"gpt-test\"", "fail_permanent", `the server has no provider "openai"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, hash := bundleOf(t, "name = \"t\"\n[models.m]\n"+tc.model+"\n"+step, "")
			ft := newTask(b, hash, "ask", 1, "null")
			if err := h.LLM(ft); err != nil {
				t.Fatal(err)
			}
			if ft.answer != tc.wantAnswer || (tc.wantErr != "" && (ft.err == nil || !strings.Contains(ft.err.Error(), tc.wantErr))) {
				t.Fatalf("answer %s %v; want %s with %q", ft.answer, ft.err, tc.wantAnswer, tc.wantErr)
			}
		})
	}
	if len(attacker.requests) != 0 {
		t.Fatalf("the workflow's own endpoint received %d requests", len(attacker.requests))
	}
	if len(ops.auth) != 1 || ops.auth[0] != "Bearer sk-operator" {
		t.Fatalf("the operator's endpoint got %q; want one request with the operator's key", ops.auth)
	}
}

// buildMCPOrders returns the example MCP server: prebuilt, or built for the test (buildtest.Program).
func buildMCPOrders(t *testing.T) string {
	t.Helper()
	return buildtest.Program(t, "github.com/reins-run/reins/examples/mcp-orders")
}

// mcpWorkflow is an agent step whose read_order tool is served by the MCP server orders: the
// workflow's own [mcp.orders] when decl is set.
func mcpWorkflow(decl string) string {
	return `name = "mcp"
` + decl + `
[models.m]
provider = "scripted"
script = [` + readOrder + `, { text = "done" }]

[tools.read_order]
mcp = "orders"

[[steps]]
id = "investigate"
type = "agent"
model = "m"
goal = "Read the order."
tools = ["read_order"]
`
}

// TestMCPTools: a workflow tool served by an MCP server, the workflow's own with reins run and
// the operator's on a server, gets the server's schema and result; a connection is made once
// and closed with the handlers.
func TestMCPTools(t *testing.T) {
	bin := buildMCPOrders(t)
	for _, tc := range []struct {
		name string
		decl string
		op   builtin.Operator
	}{
		{"the workflow's own, with reins run", "[mcp.orders]\ncommand = [" + quote(bin) + "]\n", nil},
		{"the operator's, on a server", "", fakeOperator{mcp: map[string]operator.MCPServer{"orders": {Command: []string{bin}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandlers(t, builtin.Config{Operator: tc.op})
			b, hash := bundleOf(t, mcpWorkflow(tc.decl), t.TempDir())
			tasks := drive(t, h, b, hash, "null")
			last := tasks[len(tasks)-1]
			if last.answer != "complete" || last.stopReason != "completed" {
				t.Fatalf("answer %s %s (%v)", last.answer, last.stopReason, last.err)
			}
			if !strings.Contains(string(tasks[0].saved), `\"status\":\"delivered\"`) && !strings.Contains(string(tasks[0].saved), `"status":"delivered"`) {
				t.Fatalf("the MCP server's result is not in the conversation: %s", tasks[0].saved)
			}
			if err := h.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}

// TestMCPToolsRefused: a workflow [mcp] server is not honoured on a server, and a tool the MCP
// server does not have fails for good naming what it has.
func TestMCPToolsRefused(t *testing.T) {
	bin := buildMCPOrders(t)
	h := newHandlers(t, builtin.Config{Operator: fakeOperator{}})
	b, hash := bundleOf(t, mcpWorkflow("[mcp.orders]\ncommand = ["+quote(bin)+"]\n"), t.TempDir())
	ft := newTask(b, hash, "investigate", 1, "null")
	if err := h.Agent(ft); err != nil {
		t.Fatal(err)
	}
	if ft.answer != "fail_permanent" || !strings.Contains(ft.err.Error(), `the server runs no MCP server "orders"`) {
		t.Fatalf("answer %s %v", ft.answer, ft.err)
	}

	local := newHandlers(t, builtin.Config{})
	defer local.Close()
	b, hash = bundleOf(t, strings.Replace(mcpWorkflow("[mcp.orders]\ncommand = ["+quote(bin)+"]\n"), "[tools.read_order]", "[tools.cancel_order]", 1), t.TempDir())
	b.Definition.StepByID("investigate").Tools = []string{"cancel_order"}
	ft = newTask(b, hash, "investigate", 1, "null")
	if err := local.Agent(ft); err != nil {
		t.Fatal(err)
	}
	if ft.answer != "fail_permanent" || !strings.Contains(ft.err.Error(), "the MCP server orders has no tool cancel_order (it has: read_delivery_status, read_order)") {
		t.Fatalf("answer %s %v", ft.answer, ft.err)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
