package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
)

// remoteServe starts reins serve with an operator's configuration of a submitter (sam), an
// approver (ada) and a viewer (val), and returns it with the URL of its HTTP API.
func remoteServe(t *testing.T) (*server, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ops.toml")
	if err := os.WriteFile(cfg, []byte(`
[principals.sam]
token_env = "TEST_REMOTE_SAM"
roles = ["submitter"]

[principals.ada]
token_env = "TEST_REMOTE_ADA"
roles = ["approver"]

[principals.val]
token_env = "TEST_REMOTE_VAL"
roles = ["viewer"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_REMOTE_SAM", samToken)
	t.Setenv("TEST_REMOTE_ADA", adaToken)
	t.Setenv("TEST_REMOTE_VAL", valToken)
	t.Setenv(serverEnv, "")
	srv := startServe(t, filepath.Join(dir, "data"), "--config", cfg)
	return srv, "http://" + httpAddr(t, srv.stderr.String())
}

const (
	samToken = "sam-token-0123456789"
	adaToken = "ada-token-0123456789"
	valToken = "val-token-0123456789"
)

// drafterRefund is the refund example whose agent drafts a recommendation that a person
// approves: the run waits for the approval of draft_refund_recommendation.
func drafterRefund(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(refundFile)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), `model = "investigator"`, `model = "drafter"`, 1)
	return writeTestFile(t, "refund.toml", text)
}

// TestRemote: the refund flow end to end through a server's HTTP API, with no NATS: a
// submitter starts the run (--detach), a viewer lists it and may not approve (403, exit 1), an
// approver approves, and runs show --json over the API prints what it prints over NATS; a
// run followed through the API prints its progress and result as over NATS.
func TestRemote(t *testing.T) {
	srv, url := remoteServe(t)
	c := srv.client(t)
	file := drafterRefund(t)

	code, out, errOut := cli(t, "run", file, "--input", refundInput, "--server", url, "--token", samToken, "--detach")
	if code != exitOK || len(lines(out)) != 1 {
		t.Fatalf("run --detach: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	for u, err := range c.Watch(t.Context(), id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			t.Fatal(err)
		}
		if rec.Run.Status == protocol.RunWaiting {
			break
		}
		if rec.Run.Finished() {
			t.Fatalf("run %s ended %s: %v", id, rec.Run.Status, rec.Run.Error)
		}
	}

	// The viewer lists runs ($REINS_SERVER is --server's default).
	t.Setenv(serverEnv, url)
	code, out, errOut = cli(t, "runs", "list", "--json", "--token", valToken)
	if code != exitOK {
		t.Fatalf("runs list: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, `"run_id": "`+id+`"`) || !strings.Contains(out, `"status": "waiting"`) {
		t.Errorf("runs list --json does not list the waiting run %s:\n%s", id, out)
	}
	t.Setenv(serverEnv, "")
	if code, out, errOut = cli(t, "runs", "list", "--server", url, "--token", valToken); code != exitOK || !strings.Contains(out, id) {
		t.Errorf("runs list: exit %d\n%s%s", code, out, errOut)
	}

	// A viewer may not decide: the API's 403 detail, exit 1.
	code, out, errOut = cli(t, "approve", id, "--server", url, "--token", valToken)
	if code != exitFailed || !strings.Contains(errOut, "principal val") || len(lines(errOut)) != 1 {
		t.Errorf("the viewer's approve: exit %d, want 1 with the 403's detail\n%s%s", code, out, errOut)
	}
	// The approver approves every pending call.
	code, out, errOut = cli(t, "approve", id, "--server", url, "--token", adaToken)
	if code != exitOK || !strings.Contains(errOut, "draft_refund_recommendation") || !strings.Contains(errOut, "approved") {
		t.Fatalf("the approver's approve: exit %d\n%s%s", code, out, errOut)
	}
	if rec := wait(t, c, id); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s ended %s: %v", id, rec.Run.Status, rec.Run.Error)
	}

	// runs show --json: the same over the API as over NATS.
	code, viaAPI, errOut := cli(t, "runs", "show", id, "--json", "--server", url, "--token", valToken)
	if code != exitOK {
		t.Fatalf("runs show --server: exit %d\n%s%s", code, viaAPI, errOut)
	}
	code, viaNATS, errOut := cli(t, "runs", "show", id, "--json", "--nats", srv.url)
	if code != exitOK {
		t.Fatalf("runs show --nats: exit %d\n%s%s", code, viaNATS, errOut)
	}
	if viaAPI != viaNATS {
		t.Errorf("runs show --json over the API:\n%s\nover NATS:\n%s", viaAPI, viaNATS)
	}
	if !strings.Contains(viaAPI, `"registered": {`) { // reins run --server started a registered version
		t.Errorf("runs show --json does not say which registered version ran:\n%s", viaAPI)
	}
	if r := decodeResult(t, viaAPI, "trace_id", "trace", "registered"); r.Status != "completed" || strings.Join(r.Path, ",") != "investigate,route,recommend" {
		t.Errorf("runs show: %+v", r)
	}
	// The approval is the approver's: the trace says by=ada.
	code, out, _ = cli(t, "runs", "show", id, "--server", url, "--token", valToken)
	if code != exitOK || !strings.Contains(out, "decision investigate") || !strings.Contains(out, "by=ada") {
		t.Errorf("runs show: exit %d, want the decision by ada in the trace\n%s", code, out)
	}
	// One iteration: the same over both.
	_, itAPI, errOut := cli(t, "runs", "show", id, "--iteration", "investigate:3", "--json", "--server", url, "--token", valToken)
	_, itNATS, _ := cli(t, "runs", "show", id, "--iteration", "investigate:3", "--json", "--nats", srv.url)
	if itAPI != itNATS || !strings.Contains(itAPI, "draft_refund_recommendation") {
		t.Errorf("runs show --iteration over the API:\n%s%s\nover NATS:\n%s", itAPI, errOut, itNATS)
	}

	// A run followed through the API: progress on stderr, the result on stdout.
	code, out, errOut = cli(t, "run", refundFile, "--input", refundInput, "--server", url, "--token", samToken, "--json")
	if code != exitOK {
		t.Fatalf("run --server: exit %d\n%s%s", code, out, errOut)
	}
	if r := decodeResult(t, out); r.Status != "completed" || strings.Join(r.Path, ",") != "investigate,route,recommend" {
		t.Errorf("run --server: %+v", r)
	}
	if !strings.Contains(errOut, "investigate          iteration 1 continued") || !strings.Contains(errOut, "recommend            completed") {
		t.Errorf("run --server shows no progress:\n%s", errOut)
	}
}

// TestRemoteWaitAndCancel: a run followed through the API that waits for a person keeps being
// followed until a decision ends it; runs cancel goes through the API; a finished run's cancel
// fails with the API's 409.
func TestRemoteWaitAndCancel(t *testing.T) {
	srv, url := remoteServe(t)
	c := srv.client(t)
	gate := writeTestFile(t, "gate.toml", gateApprovalWorkflow)
	done := make(chan struct{})
	var code int
	var out, errOut string
	go func() {
		defer close(done)
		code, out, errOut = cli(t, "run", gate, "--input", `{"order_id":"O-7"}`, "--server", url, "--token", samToken, "--run-id", "gate-remote")
	}()
	for u, err := range c.Watch(t.Context(), "gate-remote", client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			t.Fatal(err)
		}
		if rec.Run.Status == protocol.RunWaiting {
			break
		}
	}
	if code, out, errOut := cli(t, "deny", "gate-remote", "ask", "--message", "no stock", "--server", url, "--token", adaToken); code != exitOK {
		t.Fatalf("deny: exit %d\n%s%s", code, out, errOut)
	}
	<-done
	if code != exitFailed || !strings.Contains(out, "run gate-remote failed") || !strings.Contains(out, "not shipped: no stock") {
		t.Errorf("the followed run: exit %d, want 1 and the failed result\n%s%s", code, out, errOut)
	}

	// signal --follow: the answer, then the run followed through its stream to its end.
	hold := writeTestFile(t, "hold.toml", holdForAda)
	code, out, errOut = cli(t, "run", hold, "--server", url, "--token", samToken, "--detach")
	if code != exitOK {
		t.Fatalf("run --detach: exit %d\n%s%s", code, out, errOut)
	}
	holdID := strings.TrimSpace(out)
	for u, err := range c.Watch(t.Context(), holdID, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			t.Fatal(err)
		}
		if rec.Run.Status == protocol.RunWaiting {
			break
		}
	}
	code, out, errOut = cli(t, "signal", holdID, "go", "--payload", `{"n": 7}`, "--server", url, "--token", adaToken, "--follow", "--json")
	if code != exitOK || !strings.Contains(errOut, "run "+holdID+": event go sent") {
		t.Fatalf("signal --follow: exit %d\n%s%s", code, out, errOut)
	}
	if r := decodeResult(t, out); r.Status != "completed" || string(r.Output) != `{"n":7}` && !strings.Contains(string(r.Output), `"n": 7`) {
		t.Errorf("signal --follow: %+v %s", r, r.Output)
	}

	wf := writeWorkflow(t, "task.toml", taskWorkflow)
	code, out, errOut = cli(t, "run", wf, "--server", url, "--token", samToken, "--detach")
	if code != exitOK {
		t.Fatalf("run --detach: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	// The run waits for a worker of handler nobody; wait until the engine dispatched.
	dispatched(t, c, id)
	code, out, errOut = cli(t, "runs", "cancel", id, "--server", url, "--token", samToken, "--reason", "no worker today")
	if code != exitOK || out != "run "+id+": cancel requested\n" {
		t.Fatalf("runs cancel: exit %d\n%s%s", code, out, errOut)
	}
	if rec := wait(t, c, id); rec.Run.Status != protocol.RunCancelled || rec.Run.Error == nil || rec.Run.Error.Message != "no worker today" {
		t.Errorf("run %s: %s %+v", id, rec.Run.Status, rec.Run.Error)
	}
	code, _, errOut = cli(t, "runs", "cancel", id, "--server", url, "--token", samToken)
	if code != exitFailed || len(lines(errOut)) != 1 {
		t.Errorf("a second cancel: exit %d, want 1 with one sentence: %q", code, errOut)
	}
}

// TestRemoteUsage: --server's usage errors (exit 2) and a server that cannot be reached or a
// URL that is not one (exit 1), each one sentence that never shows the token.
func TestRemoteUsage(t *testing.T) {
	t.Setenv(serverEnv, "")
	t.Setenv(tokenEnv, "")
	const token = "secret-token-0123456789"
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"nats", []string{"runs", "list", "--server", "http://127.0.0.1:1", "--nats", "nats://127.0.0.1:1", "--token", token}, exitUsage, "--server goes through a server's HTTP API and --nats through NATS"},
		{"data", []string{"run", refundFile, "--server", "http://127.0.0.1:1", "--data", t.TempDir(), "--token", token}, exitUsage, "and --data through NATS"},
		{"signal data-dir", []string{"signal", "r", "go", "--server", "http://127.0.0.1:1", "--data-dir", t.TempDir(), "--token", token}, exitUsage, "and --data-dir through NATS"},
		{"no token", []string{"runs", "show", "r", "--server", "http://127.0.0.1:1"}, exitUsage, "--server needs the token"},
		{"listen", []string{"run", refundFile, "--server", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--token", token}, exitUsage, "--listen applies when the command reaches NATS itself"},
		{"by", []string{"approve", "r", "--server", "http://127.0.0.1:1", "--by", "bob", "--token", token}, exitUsage, "--by decides on behalf"},
		{"corrupt", []string{"runs", "list", "--status", "corrupt", "--server", "http://127.0.0.1:1", "--token", token}, exitUsage, "--status corrupt"},
		{"unreachable", []string{"runs", "list", "--server", "http://127.0.0.1:1", "--token", token}, exitFailed, "the reins server at http://127.0.0.1:1 cannot be reached"},
		{"unreachable run", []string{"run", refundFile, "--input", refundInput, "--server", "http://127.0.0.1:1", "--token", token, "--detach"}, exitFailed, "cannot be reached"},
		{"not a URL", []string{"approve", "r", "c", "--server", "127.0.0.1:7400", "--token", token}, exitFailed, `the server URL "127.0.0.1:7400" is not an http:// or https:// URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || len(lines(errOut)) != 1 {
				t.Errorf("exit %d, want %d with %q\n%s%s", code, tc.code, tc.want, out, errOut)
			}
			if strings.Contains(out+errOut, token) {
				t.Errorf("the token is printed:\n%s%s", out, errOut)
			}
			assertNoStackTrace(t, errOut)
		})
	}
	// --nats given explicitly wins over $REINS_SERVER, a default only.
	t.Setenv(serverEnv, "http://127.0.0.1:1")
	code, out, errOut := cli(t, "runs", "list", "--data", filepath.Join(t.TempDir(), "none"))
	if code != exitOK || slices.Contains(lines(errOut), "cannot be reached") {
		t.Errorf("runs list --data with $REINS_SERVER set: exit %d\n%s%s", code, out, errOut)
	}
}

// remotePause's agent escalates, waits for a person's answer, then ends.
const remotePause = `name = "pause"

[models.m]
provider = "scripted"
script = [
  { escalate = "the invoice differs from the order" },
  { text = "Thanks, all clear." },
]

[[steps]]
id = "think"
type = "agent"
model = "m"
goal = "Check the order."
on_needs_human = "pause"
policy = { approvers = ["ada"] }
`

// holdForAda waits for the event "go" and ends with its data; it names ada as an approver (of
// a check its runs never reach), who may then signal its runs.
const holdForAda = `name = "hold"

[[steps]]
id = "hold"
type = "wait_event"
event = "go"

[[steps]]
id = "check"
type = "approval"
prompt = "Check?"
approvers = ["ada"]

[[steps]]
id = "done"
type = "terminate"

[[edges]]
from = "hold"
to = "done"

[[edges]]
from = "hold"
to = "check"
when = "never"
`

// TestRemoteResumeAndPages: resume --follow through the API continues an agent paused on
// needs_human to its end; runs list --limit prints one page of the API's and the next page's
// --after on stderr, and the pages cover the runs once.
func TestRemoteResumeAndPages(t *testing.T) {
	srv, url := remoteServe(t)
	c := srv.client(t)
	file := writeTestFile(t, "pause.toml", remotePause)
	var ids []string
	for range 3 {
		code, out, errOut := cli(t, "run", file, "--server", url, "--token", samToken, "--detach")
		if code != exitOK {
			t.Fatalf("run --detach: exit %d\n%s%s", code, out, errOut)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	for _, id := range ids {
		for u, err := range c.Watch(t.Context(), id, client.WatchOptions{Only: client.WatchRecords}) {
			rec := u.Record
			if err != nil {
				t.Fatal(err)
			}
			if rec.Run.Status == protocol.RunWaiting {
				break
			}
		}
	}
	// The waiting run says how to answer it through the same server.
	code, out, errOut := cli(t, "runs", "show", ids[0], "--server", url, "--token", valToken)
	if code != exitOK || !strings.Contains(out, "run "+ids[0]+" waiting") {
		t.Errorf("runs show: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "resume", ids[0], "--input", `"the invoice is right"`, "--server", url, "--token", adaToken, "--follow")
	if code != exitOK || !strings.Contains(errOut, "run "+ids[0]+": step think resumed") || !strings.Contains(out, "run "+ids[0]+" completed") {
		t.Fatalf("resume --follow: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "Thanks, all clear.") {
		t.Errorf("resume --follow: the output is not the agent's answer:\n%s", out)
	}

	// Pages of two, newest first, then the rest.
	code, out, errOut = cli(t, "runs", "list", "--limit", "2", "--json", "--server", url, "--token", valToken)
	if code != exitOK {
		t.Fatalf("runs list --limit: exit %d\n%s%s", code, out, errOut)
	}
	var page []listEntry
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page) != 2 {
		t.Fatalf("runs list --limit 2: %v\n%s", err, out)
	}
	next, ok := strings.CutPrefix(strings.TrimSpace(errOut), "reins: more runs follow: the next page is --after ")
	if !ok || next == "" {
		t.Fatalf("runs list --limit 2 names no next page: %q", errOut)
	}
	code, out, errOut = cli(t, "runs", "list", "--limit", "2", "--after", next, "--json", "--server", url, "--token", valToken)
	var rest []listEntry
	if code != exitOK || json.Unmarshal([]byte(out), &rest) != nil || len(rest) != 1 || errOut != "" {
		t.Fatalf("the second page: exit %d\n%s%s", code, out, errOut)
	}
	got := []string{page[0].RunID, page[1].RunID, rest[0].RunID}
	if want := []string{ids[2], ids[1], ids[0]}; !slices.Equal(got, want) {
		t.Errorf("pages %v, want %v (newest first)", got, want)
	}
	// Without --limit: every run, newest first, as over NATS.
	all := listRuns(t, "--server", url, "--token", valToken)
	natsAll := listRuns(t, "--nats", srv.url)
	if len(all) != 3 || all[0].RunID != ids[2] || len(natsAll) != 3 || natsAll[0].RunID != all[0].RunID || natsAll[2].RunID != all[2].RunID {
		t.Errorf("runs list over the API %+v, over NATS %+v", all, natsAll)
	}
}

// TestRemoteNoSuchRun: over the API too, a run that is not there is reported with where the
// command looked.
func TestRemoteNoSuchRun(t *testing.T) {
	_, url := remoteServe(t)
	want := "reins: there is no run nope (looked on the reins server at " + url + "; a run kept elsewhere needs --data DIR or --nats URL)\n"
	for _, args := range [][]string{
		{"runs", "show", "nope", "--token", valToken},
		{"runs", "cancel", "nope", "--token", adaToken},
		{"approve", "nope", "call_1", "--token", adaToken},
	} {
		code, out, errOut := cli(t, append(args, "--server", url)...)
		if code != exitFailed || out != "" || errOut != want {
			t.Errorf("reins %s: exit %d, stdout %q, stderr %q; want 1 and %q", strings.Join(args, " "), code, out, errOut, want)
		}
	}
}

// A server without a configuration whose OPENAI_API_KEY was unset when it started answers the
// start of a workflow calling an openai model with what to set, before the run exists: reins
// run --server says so and exits 1, and no run is left behind.
func TestRemoteRunChecksKeys(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv(serverEnv, "")
	srv := startServe(t, t.TempDir())
	url := "http://" + httpAddr(t, srv.stderr.String())
	file := writeWorkflow(t, "keyed.toml", `name = "keyed"

[models.writer]
provider = "openai"
model = "gpt-4.1-mini"

[[steps]]
id = "write"
type = "llm"
model = "writer"
prompt = "Write one line."
`)
	code, out, errOut := cli(t, "run", file, "--server", url, "--token", srv.token, "--run-id", "keyed-1")
	want := "model writer of step write cannot be called on this server: provider openai has no key: set OPENAI_API_KEY (in the environment of reins serve, which it reads at start); the run did not start"
	if code != exitFailed || !strings.Contains(errOut, want) {
		t.Errorf("reins run --server: exit %d\n%s%s\nwant exit 1 and %q", code, out, errOut, want)
	}
	if code, out, errOut := cli(t, "runs", "show", "keyed-1", "--server", url, "--token", srv.token); code == exitOK {
		t.Errorf("the refused run exists:\n%s%s", out, errOut)
	}
}
