package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// TestServeConfigProblems: a configuration with an unknown key or role names the file, line and
// key; one that references a missing variable or file fails at start naming it; neither quotes
// a value of the file; serve and worker exit 1 with one sentence per problem.
func TestServeConfigProblems(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Setenv("REINS_TEST_UNSET_TOKEN", "")
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"unknown key", write("key.toml", "[providers.openai]\nkind = \"openai\"\napi_key_env = \"K\"\nkynd = \"sk-live-0123456789\"\n"),
			[]string{"key.toml:4: key providers.openai.kynd: unknown key"}},
		{"unknown role", write("role.toml", "[principals.bo]\ntoken_env = \"T\"\nroles = [\"aprover\"]\n"),
			[]string{`role.toml:3: key principals.bo.roles[0]: unknown role "aprover"`}},
		{"missing variable", write("env.toml", "[principals.bo]\ntoken_env = \"REINS_TEST_UNSET_TOKEN\"\nroles = [\"viewer\"]\n"),
			[]string{"env.toml: key principals.bo.token_env: the environment variable REINS_TEST_UNSET_TOKEN is not set"}},
		{"missing file", write("file.toml", "[providers.p]\nkind = \"openai\"\napi_key_file = \"/nonexistent/key\"\n"),
			[]string{"file.toml: key providers.p.api_key_file: the file /nonexistent/key does not exist"}},
		{"no such config", filepath.Join(dir, "none.toml"), []string{"none.toml: cannot read the operator's configuration"}},
	} {
		for _, cmd := range []string{"serve", "worker"} {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				code, out, errOut := cli(t, cmd, "--config", tc.file, "--data", t.TempDir())
				if code != exitFailed {
					t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
				}
				for _, w := range tc.want {
					if !strings.Contains(errOut, w) {
						t.Errorf("stderr %q does not say %q", errOut, w)
					}
				}
				if strings.Contains(errOut, "sk-live") {
					t.Errorf("stderr quotes a value of the file: %s", errOut)
				}
				assertNoStackTrace(t, errOut)
			})
		}
	}
}

// TestRunMCPWorkflow: reins run honours a workflow's own MCP server: its agent calls the
// server's tool, whose schema and result come from the server; the same file on a server is
// refused before it is submitted.
func TestRunMCPWorkflow(t *testing.T) {
	bin := buildMCPOrders(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "mcp.toml")
	wf := `name = "mcp"

[mcp.orders]
command = ["` + bin + `"]

[models.m]
provider = "scripted"
script = [
  { tool_calls = [{ name = "read_order", arguments = { order_id = "O-104" } }] },
  { text = "O-104 is delivered." },
]

[tools.read_order]
mcp = "orders"

[[steps]]
id = "investigate"
type = "agent"
model = "m"
goal = "Read order O-104."
tools = ["read_order"]
`
	if err := os.WriteFile(file, []byte(wf), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "run", file, "--data", filepath.Join(dir, "data"), "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	r := decodeResult(t, out)
	if s := r.step(t, "investigate"); s.StopReason != "completed" || s.Iterations != 2 {
		t.Fatalf("investigate %+v", s)
	}

	srv := startServe(t, t.TempDir())
	code, out, errOut = cli(t, "run", file, "--nats", srv.url)
	if code != exitFailed || !strings.Contains(errOut, "E_OPERATOR_ONLY mcp.orders.command") {
		t.Fatalf("on a server: exit %d, want 1 naming mcp.orders.command\n%s%s", code, out, errOut)
	}
}

// TestRolesEndToEnd: with an operator's configuration, a worker process authenticated as a
// worker principal serves the built-in steps, a submitter starts runs, a viewer reads them and
// may not start one: each role has the permissions its work needs, and no more.
func TestRolesEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ops.toml")
	if err := os.WriteFile(cfg, []byte(`
[principals.wanda]
token_env = "TEST_WORKER_TOKEN"
roles = ["worker"]

[principals.sam]
token_env = "TEST_SUBMITTER_TOKEN"
roles = ["submitter"]

[principals.val]
token_env = "TEST_VIEWER_TOKEN"
roles = ["viewer"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_WORKER_TOKEN", "worker-token-0123456789")
	t.Setenv("TEST_SUBMITTER_TOKEN", "submitter-token-0123456789")
	t.Setenv("TEST_VIEWER_TOKEN", "viewer-token-0123456789")
	srv := startServe(t, filepath.Join(dir, "data"), "--no-workers", "--config", cfg)

	var wout, werr syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := background(ctx, &wout, &werr, "worker", "--nats", srv.url, "--token", "worker-token-0123456789")
	awaitText(t, &werr, "reins worker serving", done, "reins worker")

	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--nats", srv.url, "--token", "submitter-token-0123456789", "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("the submitter's run: exit %d\n%s%s", code, out, errOut)
	}
	if r := decodeResult(t, out); r.Status != "completed" {
		t.Fatalf("the submitter's run: %+v", r)
	}
	code, out, errOut = cli(t, "runs", "list", "--nats", srv.url, "--token", "viewer-token-0123456789")
	if code != exitOK || len(lines(out)) == 0 {
		t.Fatalf("the viewer lists runs: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "run", refundFile, "--input", refundInput, "--nats", srv.url, "--token", "viewer-token-0123456789", "--detach")
	if code != exitFailed || !strings.Contains(errOut, "principal val may not start runs: it needs the submitter role") {
		t.Fatalf("the viewer starts a run: exit %d\n%s%s", code, out, errOut)
	}
	cancel()
	if code := awaitExit(t, done, "reins worker"); code != exitOK {
		t.Fatalf("the worker exited %d\n%s", code, werr.String())
	}
}

// TestAdmit: a server's engine refuses, before any step runs, an input past max_input_bytes
// and a workflow its operator does not allow, with the code of the first problem.
func TestAdmit(t *testing.T) {
	cfg, err := operator.Parse("ops.toml", []byte("[providers.corp]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n[limits]\nmax_input_bytes = 16\n"))
	if err != nil {
		t.Fatal(err)
	}
	def, ps := workflow.Parse("wf.toml", []byte("name = \"wf\"\n[models.m]\nprovider = \"openai\"\nmodel = \"x\"\n[[steps]]\nid = \"s\"\ntype = \"terminate\"\n"))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	ok, _ := workflow.Parse("ok.toml", []byte("name = \"ok\"\n[[steps]]\nid = \"s\"\ntype = \"terminate\"\n"))
	a := admit(cfg)
	if e := a(t.Context(), []*workflow.Definition{ok}, []byte(`"0123456789abcdef"`)); e == nil || e.Code != protocol.CodeInputTooLarge || !strings.Contains(e.Message, "18 bytes, more than the server's max_input_bytes of 16") {
		t.Errorf("a large input: %+v", e)
	}
	if e := a(t.Context(), []*workflow.Definition{ok, def}, []byte(`1`)); e == nil || e.Code != "E_UNKNOWN_PROVIDER" || !strings.Contains(e.Message, "wf.toml:3: E_UNKNOWN_PROVIDER models.m.provider") {
		t.Errorf("an unknown provider in a sub-workflow: %+v", e)
	}
	if e := a(t.Context(), []*workflow.Definition{ok}, []byte(`1`)); e != nil {
		t.Errorf("an allowed run was refused: %+v", e)
	}
}
