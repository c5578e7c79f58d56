package workflow_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

func TestPathOutside(t *testing.T) {
	for _, tc := range []struct {
		path    string
		outside bool
	}{
		{"", false},
		{"cassette.json", false},
		{"./b/c.toml", false},
		{"a/../b.toml", false},
		{"../x.toml", true},
		{"a/../../x.toml", true},
		{"..", true},
		{"/etc/passwd", true},
		{"C:\\x", false}, // a relative name on this system; it must not panic
	} {
		got := workflow.PathOutside(tc.path)
		if (got != "") != tc.outside || (got != "" && !strings.Contains(got, tc.path)) {
			t.Errorf("PathOutside(%q) = %q, want outside %t", tc.path, got, tc.outside)
		}
	}
}

func TestOperatorOnly(t *testing.T) {
	def, ps := workflow.Parse("wf.toml", []byte(`name = "wf"
[models.a]
provider = "openai"
model = "gpt-4.1-mini"
base_url = "http://attacker.example/v1"
api_key_env = "DATABASE_PASSWORD"
[models.b]
provider = "replay"
cassette = "rec.json"
[models.c]
provider = "scripted"
script = [{ text = "ok" }]
[mcp.run]
command = ["sh", "-c", "id"]
[mcp.far]
url = "http://attacker.example/mcp"
[[steps]]
id = "s"
type = "terminate"
`))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	var got []string
	for _, p := range workflow.OperatorOnly(def) {
		got = append(got, p.String())
	}
	want := []string{
		"wf.toml:5: E_OPERATOR_ONLY models.a.base_url",
		"wf.toml:6: E_OPERATOR_ONLY models.a.api_key_env",
		"wf.toml:9: E_OPERATOR_ONLY models.b.cassette",
		"wf.toml:16: E_OPERATOR_ONLY mcp.far.url",
		"wf.toml:14: E_OPERATOR_ONLY mcp.run.command",
	}
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]+": ") {
			t.Errorf("problem %d: %s\nwant %s: …", i, got[i], want[i])
		}
	}
}

// TestValidatePathsAndServers: E_PATH_OUTSIDE for every path out of the workflow's directory,
// through a symbolic link too, without reading the file; MCP servers, tools and approvers
// checked.
func TestValidatePathsAndServers(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.toml"), []byte("name = \"secret-content-xyz\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.toml"), filepath.Join(dir, "link.toml")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "wf.toml")
	if err := os.WriteFile(file, []byte(`name = "wf"
[models.r]
provider = "replay"
cassette = "../../etc/passwd"
[mcp.both]
command = ["x"]
url = "http://127.0.0.1:1/mcp"
[mcp.none]
[tools.t]
handler = "h"
mcp = "both"
[[steps]]
id = "a"
type = "call"
workflow = "link.toml"
[[steps]]
id = "b"
type = "call"
workflow = "/etc/hosts.toml"
[[steps]]
id = "c"
type = "approval"
prompt = "ok?"
approvers = ["alice", "role:fin ance", "alice"]
[[edges]]
from = "a"
to = "b"
[[edges]]
from = "b"
to = "c"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, ps := workflow.LoadAndValidate(file, workflow.Options{})
	want := map[string]workflow.Code{
		"models.r.cassette":     workflow.EPathOutside,
		"steps[0].workflow":     workflow.EPathOutside,
		"steps[1].workflow":     workflow.EPathOutside,
		"mcp.both":              workflow.EBadValue,
		"mcp.none":              workflow.EMissingKey,
		"tools.t.mcp":           workflow.EBadValue,
		"steps[2].approvers[1]": workflow.EBadValue,
		"steps[2].approvers[2]": workflow.EBadValue,
	}
	got := map[string]workflow.Code{}
	for _, p := range ps {
		got[p.Key] = p.Code
		if strings.Contains(p.Message, "secret-content") {
			t.Errorf("a problem quotes the file out of the directory: %s", p)
		}
	}
	for k, c := range want {
		if got[k] != c {
			t.Errorf("%s: %s, want %s\n%v", k, got[k], c, ps)
		}
	}
	if len(ps) != len(want) {
		t.Errorf("problems:\n%v\nwant %d", ps, len(want))
	}
}

// TestSharedServerKeysBuildLikeFiles: MCP servers, MCP tools and approvers built in Go give the
// definition, and hash, the same file gives.
func TestSharedServerKeysBuildLikeFiles(t *testing.T) {
	fromFile, ps := workflow.Parse("wf.toml", []byte(`name = "wf"
[models.m]
provider = "corp"
model = "gpt-4.1-mini"
[mcp.orders]
command = ["orders-mcp", "--db", "orders.db"]
[mcp.search]
url = "http://127.0.0.1:9000/mcp"
[tools.refund]
mcp = "orders"
side_effect = true
[[steps]]
id = "act"
type = "agent"
model = "m"
goal = "Refund."
tools = ["refund"]
policy = { require_approval = ["refund"], approvers = ["role:finance"] }
[[steps]]
id = "check"
type = "approval"
prompt = "Ship?"
approvers = ["alice", "role:finance"]
[[edges]]
from = "act"
to = "check"
`))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	fromFile.Normalize()
	if ps := workflow.Validate(fromFile, workflow.Options{}); len(ps) > 0 {
		t.Fatal(ps)
	}
	wf := workflow.New("wf")
	wf.Model("m", workflow.ModelDef{Provider: "corp", Model: "gpt-4.1-mini"})
	wf.MCP("orders", workflow.MCPDef{Command: []string{"orders-mcp", "--db", "orders.db"}})
	wf.MCP("search", workflow.MCPDef{URL: "http://127.0.0.1:9000/mcp"})
	wf.Tool("refund", workflow.ToolDef{MCP: "orders", SideEffect: true})
	wf.Agent("act", "m").WithGoal("Refund.").WithTools("refund").
		WithPolicy(workflow.Policy{RequireApproval: []string{"refund"}, Approvers: []string{"role:finance"}})
	wf.Approval("check", "Ship?").WithApprovers("alice", "role:finance")
	wf.Edge("act", "check")
	built, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := fromFile.CanonicalJSON()
	b, _ := built.CanonicalJSON()
	if string(a) != string(b) {
		t.Fatalf("the file and the builder differ:\nfile:    %s\nbuilder: %s", a, b)
	}
}

// TestValidateOneFile: a definition that must stand alone names no other file: every
// sub-workflow reference is E_PATH_OUTSIDE, and no file is read, not even one next to it in
// the working directory.
func TestValidateOneFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sub.toml"), []byte("name = \"sub-content-xyz\"\n[[steps]]\nid = \"s\"\ntype = \"bogus\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	def, ps := workflow.Parse("wf.toml", []byte(`name = "wf"
[tools.w]
description = "a workflow tool"
workflow = "sub.toml"
[[steps]]
id = "a"
type = "call"
workflow = "sub.toml"
[[steps]]
id = "b"
type = "parallel"
branches = [{ workflow = "./sub.toml" }, { workflow = "../up.toml" }]
[[edges]]
from = "a"
to = "b"
`))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	ps = workflow.Validate(def, workflow.Options{OneFile: true})
	want := map[string]int{"tools.w.workflow": 4, "steps[0].workflow": 8, "steps[1].branches[0].workflow": 12, "steps[1].branches[1].workflow": 12}
	got := map[string]int{}
	for _, p := range ps {
		if strings.Contains(p.Message, "sub-content") || strings.Contains(p.Message, "bogus") {
			t.Errorf("a problem shows the file it names was read: %s", p)
		}
		if p.Code != workflow.EPathOutside {
			t.Errorf("unexpected problem %s", p)
			continue
		}
		got[p.Key] = p.Line
	}
	for k, line := range want {
		if l, ok := got[k]; !ok || l != line {
			t.Errorf("%s: E_PATH_OUTSIDE at line %d (found %t), want line %d; problems:\n%s", k, l, ok, line, ps)
		}
	}
	if len(got) != len(want) {
		t.Errorf("problems at %v, want %v", got, want)
	}
}
