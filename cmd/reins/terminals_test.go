package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

const (
	// napWorkflow sleeps an hour: a run that holds its command until it is stopped.
	napWorkflow = `name = "nap"

[[steps]]
id = "nap"
type = "sleep"
duration = "1h"
`
	// quickWorkflow ends at once.
	quickWorkflow = `name = "quick"

[[steps]]
id = "rest"
type = "sleep"
duration = "1ms"
`
)

// holdData starts `reins run` of napWorkflow on data with run id, in-process, and returns once
// the run runs; cancelling the context interrupts it.
func holdData(t *testing.T, data, id string) (cancel context.CancelFunc, done <-chan int, stdout *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done = background(ctx, stdout, stderr, "run", writeWorkflow(t, "nap.toml", napWorkflow), "--data", data, "--run-id", id)
	awaitText(t, stderr, "running", done, "the reins run holding "+data)
	return cancel, done, stdout
}

// While reins run holds a data directory, the other commands on it work from a second
// terminal: runs list and show, a second run (to its end, or to a wait that approve then
// continues); the holder records its URL in DATA/nats.url (0600) and removes it on exit.
func TestSecondTerminal(t *testing.T) {
	data := t.TempDir()
	cancel, done, stdout := holdData(t, data, "first")

	h, ok := readHolder(data)
	if !ok || !h.run || !strings.HasPrefix(h.url, "nats://127.0.0.1:") {
		t.Fatalf("%s says %+v (%t), want the loopback URL of a reins run", urlFile, h, ok)
	}
	if info, err := os.Stat(filepath.Join(data, urlFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, %v; want mode 0600", urlFile, info.Mode(), err)
	}

	entries := listRuns(t, "--data", data)
	if len(entries) != 1 || entries[0].RunID != "first" || entries[0].Status != protocol.RunRunning || entries[0].Orphaned {
		t.Errorf("runs list: %+v; want the first run running, not orphaned", entries)
	}
	if code, out, errOut := cli(t, "runs", "show", "first", "--data", data); code != exitOK || !strings.Contains(out, "run first running") || strings.Contains(errOut, "orphaned") {
		t.Errorf("runs show: exit %d\n%s%s", code, out, errOut)
	}

	quick := writeWorkflow(t, "quick.toml", quickWorkflow)
	code, out, errOut := cli(t, "run", quick, "--data", data, "--run-id", "second", "--json", "--quiet")
	if code != exitOK || decodeResult(t, out).Status != "completed" {
		t.Fatalf("a second reins run: exit %d\n%s%s", code, out, errOut)
	}

	want := "reins: --price configures the built-in workers of this command, but the run goes to those of the reins process holding --data " + data + ": give it to that command, or use another --data\n"
	if code, out, errOut := cli(t, "run", quick, "--data", data, "--price", "m=1,2"); code != exitUsage || errOut != want {
		t.Errorf("a second reins run with --price: exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}

	// A run that waits stops the second command as it would stop the first; approve, through
	// the first command's server, continues it to its end.
	gate := writeWorkflow(t, "gate.toml", gateApprovalWorkflow)
	pauseRun(t, gate, data, "gate", `{"order_id":"O-7"}`)
	code, out, errOut = cli(t, "approve", "gate", "--data", data, "--json", "--quiet")
	if code != exitOK || decodeResult(t, out).Status != "completed" {
		t.Fatalf("approve from a second terminal: exit %d\n%s%s", code, out, errOut)
	}

	cancel()
	if code := awaitExit(t, done, "the first reins run"); code != exitFailed || !strings.Contains(stdout.String(), "run first cancelled") {
		t.Errorf("the interrupted first run: exit %d\n%s", code, stdout.String())
	}
	if _, err := os.Stat(filepath.Join(data, urlFile)); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the command ended: %v", urlFile, err)
	}
}

// A second reins run follows its run through the first; when the first stops, the second takes
// the data directory over and its engine carries the run on: interrupting it then cancels the
// run, which only an engine can do.
func TestSecondTerminalTakesOver(t *testing.T) {
	data := t.TempDir()
	cancelFirst, firstDone, _ := holdData(t, data, "first")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := background(ctx, stdout, stderr, "run", writeWorkflow(t, "nap2.toml", napWorkflow), "--data", data, "--run-id", "second")
	awaitText(t, stderr, "running", done, "the second reins run")
	if h, _ := readHolder(data); !h.run {
		t.Fatalf("the first command no longer holds %s", data)
	}

	cancelFirst()
	awaitExit(t, firstDone, "the first reins run")
	awaitText(t, stderr, "this command carries run second on", done, "the second reins run")
	if h, ok := readHolder(data); !ok || !h.run {
		t.Errorf("the second command does not record its server: %+v", h)
	}
	cancel()
	if code := awaitExit(t, done, "the second reins run"); code != exitFailed || !strings.Contains(stdout.String(), "run second cancelled") {
		t.Errorf("the interrupted second run: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	for _, e := range listRuns(t, "--data", data) {
		if e.Status != protocol.RunCancelled {
			t.Errorf("run %s is %s, want cancelled", e.RunID, e.Status)
		}
	}
}

// A nats.url left by a process killed with SIGKILL (its lock free) is ignored; one whose
// holder lives but records no server (a short command) is waited for, then named.
func TestStaleHolderFile(t *testing.T) {
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, urlFile), []byte("nats://127.0.0.1:1\n"+holdsRun+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	quick := writeWorkflow(t, "quick.toml", quickWorkflow)
	if code, out, errOut := cli(t, "run", quick, "--data", data, "--json", "--quiet"); code != exitOK {
		t.Fatalf("reins run beside a stale %s: exit %d\n%s%s", urlFile, code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(data, urlFile)); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the command ended: %v", urlFile, err)
	}
	if entries := listRuns(t, "--data", data); len(entries) != 1 || entries[0].Status != protocol.RunCompleted {
		t.Errorf("runs list: %+v", entries)
	}

	// A holder that records nothing, and a stale file of an earlier one.
	box, err := natsbox.Open(t.Context(), natsbox.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	old := holderWait
	holderWait = 10 * holderPoll
	t.Cleanup(func() { holderWait = old })
	for _, tc := range []struct {
		name, file, want string
	}{
		{"none", "", "is in use by another reins process, which records no server in " + filepath.Join(data, urlFile)},
		{"stale", "nats://127.0.0.1:1\n", "is in use by another reins process, and the server recorded in " + filepath.Join(data, urlFile) + " (nats://127.0.0.1:1) does not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(data, urlFile), []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errOut := cli(t, "runs", "list", "--data", data)
			if code != exitFailed || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d\n%s%s\nwant %q", code, out, errOut, tc.want)
			}
		})
	}
}

// A run left running by a command that stopped without ending it is named orphaned by runs
// list and runs show, with the command that finishes it; not while a process serves the data
// directory.
func TestOrphanedRun(t *testing.T) {
	data := t.TempDir()
	def, problems := workflow.Parse("nap.toml", []byte(napWorkflow))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	// An engine that stops with the run in flight, as a killed reins run does.
	r, err := reins.New(t.Context(), reins.Config{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.StartWith(t.Context(), def, nil, reins.StartOptions{RunID: "left"}); err != nil {
		t.Fatal(err)
	}
	running(t, r, "left")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	entries := listRuns(t, "--data", data)
	if len(entries) != 1 || entries[0].Status != protocol.RunRunning || !entries[0].Orphaned {
		t.Errorf("runs list --json: %+v; want run left running and orphaned", entries)
	}
	note := "no process runs the engine on the data directory " + data + " (the command that ran it was stopped); reins serve --data " + data + " carries it on to the end"
	code, out, errOut := cli(t, "runs", "list", "--data", data)
	if code != exitOK || !strings.Contains(out, "running (orphaned)") || !strings.Contains(errOut, "reins: 1 run is orphaned: "+note) {
		t.Errorf("runs list: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "runs", "show", "left", "--data", data)
	if code != exitOK || !strings.Contains(errOut, "reins: run left is orphaned: "+note) {
		t.Errorf("runs show: exit %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = cli(t, "runs", "cancel", "left", "--data", data)
	if want := "reins: note: no process runs the engine on the data directory " + data + ": the cancel takes effect when one does (reins serve --data " + data + ", or the next reins run there)\n"; code != exitOK || errOut != want {
		t.Errorf("runs cancel: exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}

	// While a command holds the directory its engine runs the run, and carries out the cancel.
	holdData(t, data, "holder")
	for _, e := range listRuns(t, "--data", data) {
		if e.Orphaned {
			t.Errorf("run %s is orphaned while reins run serves the data directory", e.RunID)
		}
	}
	h, _ := readHolder(data)
	token, err := operator.ReadAdminToken(data)
	if err != nil {
		t.Fatal(err)
	}
	box, err := natsbox.Open(t.Context(), natsbox.Options{URL: h.url, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	if rec := wait(t, client.New(client.Config{Conn: (*conn.Conn)(box)}), "left"); rec.Run.Status != protocol.RunCancelled {
		t.Errorf("the orphan cancelled while no engine ran ended %s under reins run, want cancelled", rec.Run.Status)
	}
}

// running waits until run id of r runs its step.
func running(t *testing.T, r *reins.Reins, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for u, err := range r.Client().Watch(ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			t.Fatal(err)
		}
		if rec.Run.Status == protocol.RunRunning {
			return
		}
	}
	t.Fatalf("run %s never ran", id)
}

// --nats URL with no credentials, on the server's machine, authenticates with the admin token
// of --data when that data directory records the server; a refusal says what to give, true for
// the flags given.
func TestNATSFindsAdminToken(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, data)
	t.Setenv(tokenEnv, "") // startServe set it
	quick := writeWorkflow(t, "quick.toml", quickWorkflow)
	other := t.TempDir()
	port := s.url[strings.LastIndex(s.url, ":")+1:]
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"data", []string{"run", quick, "--nats", s.url, "--data", data, "--detach"}, exitOK, ""},
		{"localhost", []string{"runs", "list", "--nats", "nats://localhost:" + port, "--data", data}, exitOK, "quick"},
		{"no url", []string{"runs", "list", "--nats", s.url, "--data", other}, exitFailed,
			"reins: the NATS server refused the credentials at " + s.url + ": it requires credentials: pass --token (or set $REINS_TOKEN), or, on the server's machine, --data DIR, the data directory of its reins serve (--data " + other + " records no server on this machine: no " + filepath.Join(other, urlFile) + ")\n"},
		{"another server", []string{"runs", "list", "--nats", "nats://127.0.0.1:1", "--data", data}, exitFailed, "reins: natsbox: cannot connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("exit %d, want %d\n%s%s\nwant %q", code, tc.code, out, errOut, tc.want)
			}
		})
	}
	if err := os.WriteFile(filepath.Join(other, urlFile), []byte("nats://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "(--data " + other + " records the server nats://127.0.0.1:1, not this one)"
	if code, out, errOut := cli(t, "runs", "list", "--nats", s.url, "--data", other); code != exitFailed || !strings.Contains(errOut, want) {
		t.Errorf("exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}
}

// sameServer sends the admin token only to the loopback server the data directory records.
func TestSameServer(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222", true},
		{"nats://localhost:4222", "nats://127.0.0.1:4222", true},
		{"127.0.0.1", "nats://127.0.0.1:4222", true},
		{"nats://[::1]:4222", "nats://[::1]:4222", true},
		{"nats://127.0.0.1:4223", "nats://127.0.0.1:4222", false},
		{"nats://10.0.0.1:4222", "nats://10.0.0.1:4222", false},
		{"nats://example.com:4222", "nats://example.com:4222", false},
		{"nats://user:pw@127.0.0.1:4222", "nats://127.0.0.1:4222", false},
		{" nats://127.0.0.1:4222", "nats://127.0.0.1:4222", true},
	} {
		if got := sameServer(tc.a, tc.b); got != tc.same {
			t.Errorf("sameServer(%q, %q) = %t, want %t", tc.a, tc.b, got, tc.same)
		}
	}
}

// twoModels has two scripted models; its step calls a unless --model says otherwise.
const twoModels = `name = "two_models"

[models.a]
provider = "scripted"
script = [{ text = "from a" }]

[models.b]
provider = "scripted"
script = [{ text = "from b" }]

[[steps]]
id = "write"
type = "llm"
model = "a"
prompt = "Write one line."
`

// --model picks the run's model wherever its workers run when it names one of the workflow's
// [models]: the choice goes with the run's definition. --model PROVIDER:NAME is a model this
// command's own workers open with its keys: when the run goes to another process's workers (the
// server of --nats, or the reins run holding --data) it is refused, saying why and what to do.
func TestRunModelWhereWorkersRun(t *testing.T) {
	file := writeWorkflow(t, "two.toml", twoModels)
	for _, tc := range []struct {
		name string
		// reach starts the process whose workers run the run, and returns the flags that reach
		// it, where the refusal says the run goes, and what it advises.
		reach func(t *testing.T) (flags []string, says, do string)
	}{
		{"--nats", func(t *testing.T) ([]string, string, string) {
			srv := startServe(t, t.TempDir()) // sets the admin token of this subtest's commands
			return []string{"--nats", srv.url}, "the server of --nats " + srv.url, "run without --nats"
		}},
		{"a held --data", func(t *testing.T) ([]string, string, string) {
			held := t.TempDir()
			holdData(t, held, "first")
			return []string{"--data", held}, "the reins process holding --data " + held, "use another --data"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			where, says, do := tc.reach(t)
			code, out, errOut := cli(t, append([]string{"run", file, "--model", "b", "--json", "--quiet"}, where...)...)
			if res := decodeResult(t, out); code != exitOK || res.Status != "completed" || compactJSON(res.Output) != `"from b"` {
				t.Errorf("--model b: exit %d, run %s with output %s; want completed on model b\n%s", code, res.Status, res.Output, errOut)
			}
			want := "reins: --model openai:gpt-4o-mini is a model for the built-in workers of this command to open with its keys, but the run goes to those of " +
				says + ", which open the workflow's own models with theirs: declare it in the workflow's [models] and give --model NAME, or " + do + "\n"
			code, out, errOut = cli(t, append([]string{"run", file, "--model", "openai:gpt-4o-mini"}, where...)...)
			if code != exitUsage || out != "" || errOut != want {
				t.Errorf("--model openai:gpt-4o-mini: exit %d\n%s%s\nwant exit 2 and %q", code, out, errOut, want)
			}
		})
	}
}
