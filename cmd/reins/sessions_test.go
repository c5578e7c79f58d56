package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// sessionWorkflow is an agent step whose session is the input's customer, with a scripted
// model that answers at once.
const sessionWorkflow = `name = "support"
[models.main]
provider = "scripted"
script = [{ text = "We are on it." }]
[[steps]]
id = "reply"
type = "agent"
model = "main"
input = "{{input.customer}}"
goal = "{{input.q}}"
session = "{{input.customer}}"
`

// TestSessionsCommands: runs of a workflow with a session leave one session per customer,
// which reins sessions lists, shows and deletes, with the exit statuses of docs/reference/cli.md.
func TestSessionsCommands(t *testing.T) {
	data := t.TempDir()
	file := writeWorkflow(t, "support.toml", sessionWorkflow)
	for _, in := range []string{`{"customer":"c-7","q":"Where is my order?"}`, `{"customer":"c-7","q":"And my refund?"}`, `{"customer":"c-8","q":"Hello"}`} {
		if code, out, errOut := cli(t, "run", file, "--input", in, "--data", data, "--json", "--quiet"); code != exitOK {
			t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
		}
	}
	list := func(args ...string) []sessionEntry {
		t.Helper()
		code, out, errOut := cli(t, append([]string{"sessions", "list", "--json", "--data", data}, args...)...)
		var entries []sessionEntry
		if err := json.Unmarshal([]byte(out), &entries); code != exitOK || err != nil {
			t.Fatalf("list: exit %d, %v\n%s%s", code, err, out, errOut)
		}
		return entries
	}
	all := list()
	if len(all) != 2 {
		t.Fatalf("%d sessions, want 2: %+v", len(all), all)
	}
	var c7 sessionEntry
	for _, e := range all {
		if e.Session == "c-7" {
			c7 = e
		}
	}
	if c7.Messages != 4 || c7.Turns != 2 || c7.Workflow != "support" || c7.Step != "reply" || c7.Principal != "admin" || !c7.ExpiresAt.After(c7.UpdatedAt) {
		t.Fatalf("session c-7: %+v, want 4 messages of 2 turns of support's reply, by admin", c7)
	}
	if got := list("--session", "c-8"); len(got) != 1 || got[0].Session != "c-8" {
		t.Errorf("--session c-8: %+v", got)
	}
	if got := list("--workflow", "other"); len(got) != 0 {
		t.Errorf("--workflow other: %+v", got)
	}

	code, out, errOut := cli(t, "sessions", "list", "--data", data)
	if ls := lines(out); code != exitOK || len(ls) != 3 || strings.Join(strings.Fields(ls[0]), " ") != "KEY WORKFLOW STEP SESSION PRINCIPAL MESSAGES TURNS SAVED EXPIRES" {
		t.Fatalf("text list: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "sessions", "show", c7.Key, "--data", data)
	if code != exitOK || !strings.Contains(out, `"c-7" of step reply of workflow support`) || strings.Count(out, "[user]") != 2 || strings.Count(out, "We are on it.") != 2 ||
		strings.Index(out, "Where is my order?") > strings.Index(out, "And my refund?") {
		t.Fatalf("show: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = cli(t, "sessions", "show", c7.Key, "--data", data, "--json")
	var shown sessionShow
	if err := json.Unmarshal([]byte(out), &shown); code != exitOK || err != nil || len(shown.Conversation) != 4 || shown.Key != c7.Key {
		t.Fatalf("show --json: exit %d, %v\n%s", code, err, out)
	}

	if code, out, errOut = cli(t, "sessions", "delete", c7.Key, "--data", data); code != exitOK || out != "session "+c7.Key+" deleted\n" {
		t.Fatalf("delete: exit %d\n%s%s", code, out, errOut)
	}
	if got := list(); len(got) != 1 || got[0].Session != "c-8" {
		t.Errorf("after delete: %+v", got)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sessions", "show", c7.Key, "--data", data}, exitFailed, "session " + c7.Key + ": no such session"},
		{[]string{"sessions", "delete", c7.Key, "--data", data}, exitFailed, "no such session"},
		{[]string{"sessions", "show", "c-7", "--data", data}, exitUsage, `"c-7" is not a session key`},
		{[]string{"sessions", "show", "--data", data}, exitUsage, "accepts 1 arg"},
		{[]string{"sessions", "show", c7.Key, "--data", filepath.Join(data, "none")}, exitFailed, "no such session"},
	} {
		code, out, errOut := cli(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want %d and one sentence with %q (stdout %q)", tc.args, code, errOut, tc.code, tc.want, out)
		}
	}
	if code, out, _ = cli(t, "sessions", "prune", "--data", data); code != exitOK || out != "0 expired sessions removed\n" {
		t.Errorf("prune: exit %d, %q", code, out)
	}
	// The next run of c-7 starts afresh.
	if code, out, errOut := cli(t, "run", file, "--input", `{"customer":"c-7","q":"Hi again"}`, "--data", data, "--json", "--quiet"); code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	for _, e := range list("--session", "c-7") {
		if e.Messages != 2 || e.Turns != 1 {
			t.Errorf("c-7 after delete and a run: %+v, want one turn", e)
		}
	}
}
