package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/runner"
)

// server is `reins serve` running in-process on a data directory.
type server struct {
	data   string
	url    string
	stderr *syncBuffer
	cancel context.CancelFunc
	done   <-chan int
	exited bool // stop received the exit status
	token  string
}

// startServe starts `reins serve` on a free loopback port, with the flags extra, and returns
// once it serves: it logs "reins serving" after it wrote DATA/nats.url and its engine and
// workers consume.
func startServe(t *testing.T, data string, extra ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{data: data, stderr: &syncBuffer{}, cancel: cancel}
	s.done = background(ctx, &syncBuffer{}, s.stderr, append([]string{"serve", "--data", data, "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"}, extra...)...)
	t.Cleanup(func() {
		cancel()
		if s.exited {
			return
		}
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Errorf("reins serve did not stop within 30s")
		}
	})
	awaitText(t, s.stderr, "reins serving", s.done, "reins serve")
	raw, err := os.ReadFile(filepath.Join(data, urlFile))
	if err != nil {
		t.Fatalf("reins serve serves but wrote no URL: %v", err)
	}
	s.url = strings.TrimSpace(string(raw))
	if !strings.HasPrefix(s.url, "nats://127.0.0.1:") || strings.HasSuffix(s.url, ":0") {
		t.Fatalf("%s holds %q, want the loopback URL of the chosen port", urlFile, s.url)
	}
	// Commands given --nats URL authenticate as the data directory's admin.
	if s.token, err = operator.ReadAdminToken(data); err != nil {
		t.Fatal(err)
	}
	t.Setenv(tokenEnv, s.token)
	if log := s.stderr.String(); !strings.Contains(log, "nats="+s.url) && !strings.Contains(log, `"nats":"`+s.url+`"`) {
		t.Errorf("the log does not name the URL %s:\n%s", s.url, s.stderr.String())
	}
	return s
}

// stop interrupts serve and returns its exit status.
func (s *server) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	code := awaitExit(t, s.done, "reins serve")
	s.exited = true
	return code
}

// client connects to the server as a client of package runner would.
func (s *server) client(t *testing.T) *client.Client {
	t.Helper()
	box, err := natsbox.Open(t.Context(), natsbox.Options{URL: s.url, Token: s.token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	return client.New(client.Config{Conn: (*conn.Conn)(box)})
}

// wait waits for a run to finish.
func wait(t *testing.T, c *client.Client, id string) *client.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rec, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait for run %s: %v", id, err)
	}
	return rec
}

// dispatched waits until the engine dispatched step work of run id (taskWorkflow's, which waits
// for a worker of handler nobody).
func dispatched(t *testing.T, c *client.Client, id string) {
	t.Helper()
	for u, err := range c.Watch(t.Context(), id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			t.Fatal(err)
		}
		if sr := rec.Run.Steps["work"]; sr != nil && sr.Status == protocol.StepRunning {
			return
		}
	}
}

func TestServe(t *testing.T) {
	data := t.TempDir()
	srv := startServe(t, data)
	c := srv.client(t)

	t.Run("detach", func(t *testing.T) {
		code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--nats", srv.url, "--detach")
		if code != exitOK {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		ls := lines(out)
		if len(ls) != 1 {
			t.Fatalf("--detach printed %q, want only the run id", out)
		}
		id := ls[0]
		if err := wire.CheckRunID(id); err != nil {
			t.Fatalf("--detach printed %q: %v", id, err)
		}
		if rec := wait(t, c, id); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s ended %s: %v", id, rec.Run.Status, rec.Run.Error)
		}
		code, out, errOut = cli(t, "runs", "show", id, "--nats", srv.url, "--json")
		if code != exitOK {
			t.Fatalf("runs show: exit %d\n%s%s", code, out, errOut)
		}
		r := decodeResult(t, out, "trace_id", "trace")
		if r.RunID != id || r.Status != "completed" || strings.Join(r.Path, ",") != "investigate,route,recommend" {
			t.Errorf("runs show: %+v", r)
		}
		if s := r.step(t, "investigate"); s.StopReason != "completed" || s.Iterations != 4 {
			t.Errorf("step investigate %+v", s)
		}
	})

	t.Run("follow over nats", func(t *testing.T) {
		code, out, errOut := cli(t, "run", researchFile, "--input", researchInput, "--nats", srv.url, "--json")
		if code != exitOK {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		if r := decodeResult(t, out); r.Status != "completed" || strings.Join(r.Path, ",") != "research,combine,done" {
			t.Errorf("result %+v", r)
		}
		if !strings.Contains(errOut, "research#2           completed iteration 2 tools=1") || !strings.Contains(errOut, "combine              completed") {
			t.Errorf("no progress:\n%s", errOut)
		}
	})

	// A command given serve's data directory finds the server through nats.url.
	t.Run("data dir in use", func(t *testing.T) {
		code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--json", "--quiet")
		if code != exitOK {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		r := decodeResult(t, out)
		if rec := wait(t, c, r.RunID); rec.Run.Status != protocol.RunCompleted {
			t.Errorf("the run is not on serve's server: %+v", rec.Run)
		}
		if n := len(listRuns(t, "--data", data)); n != 3 {
			t.Errorf("runs list --data: %d runs, want 3", n)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		wf := writeWorkflow(t, "task.toml", taskWorkflow)
		code, out, errOut := cli(t, "run", wf, "--nats", srv.url, "--detach")
		if code != exitOK {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		id := strings.TrimSpace(out)
		// The run waits for a worker of handler nobody; wait until the engine dispatched.
		dispatched(t, c, id)
		code, out, errOut = cli(t, "runs", "cancel", id, "--data", data, "--reason", "no worker today")
		if code != exitOK || out != "run "+id+": cancel requested\n" {
			t.Fatalf("runs cancel: exit %d\n%s%s", code, out, errOut)
		}
		rec := wait(t, c, id)
		if rec.Run.Status != protocol.RunCancelled || rec.Run.Error == nil || rec.Run.Error.Code != protocol.CodeCancelled || rec.Run.Error.Message != "no worker today" {
			t.Errorf("run %s: %s, %+v; want cancelled with the reason", id, rec.Run.Status, rec.Run.Error)
		}
		code, _, errOut = cli(t, "runs", "cancel", id, "--nats", srv.url)
		if code != exitFailed || !strings.Contains(errOut, "it ended cancelled: the run has already finished") {
			t.Errorf("second cancel: exit %d, %q", code, errOut)
		}
	})

	t.Run("worker", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stderr syncBuffer
		done := background(ctx, &syncBuffer{}, &stderr, "worker", "--data", data, "--handlers", protocol.HandlerLLM)
		awaitText(t, &stderr, "reins worker serving", done, "reins worker")
		if !strings.Contains(stderr.String(), "nats="+srv.url) {
			t.Errorf("the worker did not connect through %s:\n%s", urlFile, stderr.String())
		}
		cancel()
		if code := awaitExit(t, done, "reins worker"); code != exitOK {
			t.Errorf("worker: exit %d, want 0\n%s", code, stderr.String())
		}
	})

	// A second serve on the same server, with --nats: its engine stands by.
	t.Run("serve with nats", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stderr syncBuffer
		done := background(ctx, &syncBuffer{}, &stderr, "serve", "--nats", srv.url, "--no-workers", "--listen", "127.0.0.1:0")
		awaitText(t, &stderr, "reins serving", done, "reins serve --nats")
		if !strings.Contains(stderr.String(), "nats="+srv.url+" builtin_workers=false") {
			t.Errorf("the log does not name the server:\n%s", stderr.String())
		}
		cancel()
		if code := awaitExit(t, done, "reins serve --nats"); code != exitOK {
			t.Errorf("exit %d, want 0\n%s", code, stderr.String())
		}
	})

	t.Run("second serve", func(t *testing.T) {
		code, out, errOut := cli(t, "serve", "--data", data, "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")
		if code != exitFailed || !strings.Contains(errOut, "the data directory "+data+" is in use by another reins process (reins serve, or a reins run in another terminal)") {
			t.Errorf("exit %d, want 1 naming the data directory\n%s%s", code, out, errOut)
		}
	})

	if code := srv.stop(t); code != exitOK {
		t.Fatalf("serve: exit %d, want 0\n%s", code, srv.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(data, urlFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there after serve stopped: %v", urlFile, err)
	}
	// The runs stay in the data directory.
	if n := len(listRuns(t, "--data", data)); n != 4 {
		t.Errorf("after serve: %d runs, want 4", n)
	}
}

// TestServeRetention drives serve's retention through its clock: a prune at start, then one
// each time the wait between prunes ends; finished runs older than --retention go, a running
// run stays.
func TestServeRetention(t *testing.T) {
	var offset atomic.Int64 // how far the retention's clock is ahead of the real one
	waits := make(chan time.Duration, 1)
	ticks := make(chan time.Time)
	saved := retentionClock
	retentionClock.now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	retentionClock.after = func(d time.Duration) <-chan time.Time { waits <- d; return ticks }
	t.Cleanup(func() { retentionClock = saved })
	nextWait := func() time.Duration {
		t.Helper()
		select {
		case d := <-waits:
			return d
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not wait for its next prune")
			return 0
		}
	}

	data := t.TempDir()
	srv := startServe(t, data, "--retention", "1h", "-v")
	if d := nextWait(); d != 6*time.Minute { // after the prune at start
		t.Fatalf("serve waits %s between prunes, want 6m (a tenth of --retention)", d)
	}
	code, out, errOut := cli(t, "run", writeTestFile(t, "gate.toml", gateWorkflow), "--input", `{"kind":"good"}`, "--nats", srv.url, "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	old := decodeResult(t, out)
	code, out, errOut = cli(t, "run", writeTestFile(t, "task.toml", taskWorkflow), "--nats", srv.url, "--detach")
	if code != exitOK {
		t.Fatalf("run --detach: exit %d\n%s%s", code, out, errOut)
	}
	running := strings.TrimSpace(out)
	c := srv.client(t)
	dispatched(t, c, running)
	code, _, errOut = cli(t, "runs", "replay", running, "--nats", srv.url)
	if code != exitFailed || !strings.Contains(errOut, "run "+running+" is running: only a run that has ended can be replayed") {
		t.Errorf("replay of a running run: exit %d\n%s", code, errOut)
	}

	// Two hours later, the finished run is older than the retention.
	offset.Store(int64(2 * time.Hour))
	ticks <- time.Now()
	nextWait()
	awaitText(t, srv.stderr, `reins pruned runs" runs=1 sub_runs=0`, srv.done, "reins serve")
	if _, err := c.Get(t.Context(), old.RunID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the finished run is still there: %v", err)
	}
	if rec, err := c.Get(t.Context(), running); err != nil || rec.Run.Finished() {
		t.Errorf("the running run: %v", err)
	}
	if code := srv.stop(t); code != exitOK {
		t.Fatalf("serve: exit %d\n%s", code, srv.stderr.String())
	}
	if !strings.Contains(srv.stderr.String(), "reins pruned no run") {
		t.Errorf("no log of the prune at start:\n%s", srv.stderr.String())
	}
}

func TestServeUsage(t *testing.T) {
	code, out, errOut := cli(t, "serve", "--nats", "nats://127.0.0.1:1", "--nats-listen", "127.0.0.1:0")
	if code != exitUsage || !strings.Contains(errOut, "--nats-listen applies to the embedded server") {
		t.Errorf("exit %d, want 2\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "serve", "--data", t.TempDir(), "--retention", "-1h")
	if code != exitUsage || !strings.Contains(errOut, "--retention -1h0m0s: want a duration of 0 (keep forever) or more") {
		t.Errorf("exit %d, want 2\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "serve", "--data", t.TempDir(), "--save-window", "soon")
	if code != exitUsage || !strings.Contains(errOut, `invalid argument "soon" for "--save-window" flag: want a duration (0: the default, 100ms) or off (save after every decision)`) {
		t.Errorf("exit %d, want 2\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "serve", "--data", t.TempDir(), "--lease-ttl", "0s")
	if code != exitUsage || !strings.Contains(errOut, "--lease-ttl 0s: want a duration of more than 0") {
		t.Errorf("exit %d, want 2\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "serve", "--data", t.TempDir(), "--nats-listen", "0.0.0.0:0")
	if code != exitFailed || !strings.Contains(errOut, `Listen "0.0.0.0:0" is not a loopback address`) {
		t.Errorf("exit %d, want 1 refusing a non-loopback address\n%s%s", code, out, errOut)
	}
	// The embedded server is one server: three replicas are refused before it starts.
	data := t.TempDir()
	code, out, errOut = cli(t, "serve", "--data", data, "--replicas", "3")
	if code != exitFailed || !strings.Contains(errOut, "3 replicas need a NATS cluster of at least 3 servers; the embedded server is one") {
		t.Errorf("serve --replicas 3 on the embedded server: exit %d, want 1 with the reason\n%s%s", code, out, errOut)
	}
	if entries, _ := os.ReadDir(filepath.Join(data, "jetstream")); len(entries) != 0 {
		t.Errorf("the refused serve started a server: %v", entries)
	}
}

func TestWorkerUsage(t *testing.T) {
	data := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bogus handler", []string{"--handlers", "bogus"}, exitUsage, `--handlers: "bogus" is not a built-in handler`},
		{"no server", nil, exitFailed, "no server runs on the data directory " + data},
		{"unreachable", []string{"--nats", "nats://127.0.0.1:1"}, exitFailed, "natsbox: cannot connect to NATS at nats://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, append([]string{"worker", "--data", data}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, "reins: "+tc.want) {
				t.Errorf("exit %d, want %d with %q\n%s%s", code, tc.code, tc.want, out, errOut)
			}
			assertNoStackTrace(t, errOut)
		})
	}
}

// TestHostFailsBeforeReady: on a server where the reins layout cannot be made (a stream of its
// name belongs to someone else), worker and serve exit 1 with the reason instead of hanging.
func TestHostFailsBeforeReady(t *testing.T) {
	auth := func(token string) (natsbox.Identity, bool) {
		return natsbox.Identity{Name: "ops", Roles: []string{natsbox.RoleAdmin}}, token == "ops-token"
	}
	box, err := natsbox.Open(t.Context(), natsbox.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: auth})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	if _, err := box.JetStream().CreateStream(t.Context(), jetstream.StreamConfig{Name: natsbox.TasksStream, Subjects: []string{"theirs.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"worker", "--nats", box.ClientURL(), "--token", "ops-token"},
		{"serve", "--nats", box.ClientURL(), "--token", "ops-token", "--listen", "127.0.0.1:0"},
	} {
		t.Run(args[0], func(t *testing.T) {
			var stdout, stderr syncBuffer
			done := background(t.Context(), &stdout, &stderr, args...)
			code := awaitExit(t, done, "reins "+args[0])
			if code != exitFailed || !strings.Contains(stderr.String(), "stream REINS_TASKS exists with subjects [theirs.>] and was not created by reins") {
				t.Errorf("exit %d, want 1 naming the stream\n%s", code, stderr.String())
			}
			if stdout.String() != "" {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}

// A token given in the URL of --nats is a secret like --token: the processes' logs name the
// server without it.
func TestTokenInNATSURLNotLogged(t *testing.T) {
	const token = "s3cret-ops-token"
	auth := func(tok string) (natsbox.Identity, bool) {
		return natsbox.Identity{Name: "ops", Roles: []string{natsbox.RoleAdmin}}, tok == token
	}
	box, err := natsbox.Open(t.Context(), natsbox.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: auth})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	withToken := strings.Replace(box.ClientURL(), "nats://", "nats://"+token+"@", 1)
	for _, tc := range []struct {
		args  []string
		ready string
	}{
		{[]string{"serve", "--nats", withToken, "--no-workers", "--listen", "127.0.0.1:0", "--log-level", "debug"}, "reins serving"},
		{[]string{"worker", "--nats", withToken, "--log-level", "debug"}, "reins worker serving"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			var stdout, stderr syncBuffer
			done := background(ctx, &stdout, &stderr, tc.args...)
			awaitText(t, &stderr, tc.ready, done, "reins "+tc.args[0])
			cancel()
			awaitExit(t, done, "reins "+tc.args[0])
			if out := stdout.String() + stderr.String(); strings.Contains(out, token) {
				t.Errorf("the token of the NATS URL was written out:\n%s", out)
			}
			if !strings.Contains(stderr.String(), "nats://xxxxx@127.0.0.1:") {
				t.Errorf("the server is not named with its token hidden:\n%s", stderr.String())
			}
		})
	}
}

// --memory-limit sets the process's soft memory limit (what GOMEMLIMIT sets), leaves the
// runtime's without it, and refuses what is not a size before anything starts.
func TestServeMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	for _, tc := range []struct {
		flag string
		want int64
	}{
		{"", prev},
		{"80MiB", 80 << 20},
		{"1GB", 1e9},
		{"", 1e9}, // not given: the limit stays what it was
	} {
		if err := memoryLimit(tc.flag, func() (uint64, error) { return 0, memlimit.ErrNoLimit }, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatalf("--memory-limit %q: %v", tc.flag, err)
		}
		if got := debug.SetMemoryLimit(-1); got != tc.want {
			t.Errorf("--memory-limit %q: the limit is %d, want %d", tc.flag, got, tc.want)
		}
	}
	for _, bad := range []string{"0", "-1MiB", "lots", "80 MB MB"} {
		code, out, errOut := cli(t, "serve", "--data", t.TempDir(), "--memory-limit", bad)
		if code != exitUsage || !strings.Contains(errOut, "--memory-limit "+bad+": want a size") {
			t.Errorf("--memory-limit %q: exit %d, want 2 with the reason\n%s%s", bad, code, out, errOut)
		}
	}
}

// Without --memory-limit and GOMEMLIMIT, serve's soft limit is 90% of the limit its control
// group reports (memlimit.FromCgroup reads the group; its reading of v1 and v2 hierarchies is
// the library's); a group without a limit leaves the runtime's, and so does one that cannot be
// read, GOMEMLIMIT, or AUTOMEMLIMIT=off.
func TestServeMemoryLimitOfTheContainer(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	t.Setenv("GOMEMLIMIT", "")
	os.Unsetenv("GOMEMLIMIT") // the library reads whether it is set at all
	const mib = 1 << 20
	limit := func(n uint64, err error) memlimit.Provider {
		return func() (uint64, error) { return n, err }
	}
	for _, tc := range []struct {
		name  string
		group memlimit.Provider
		env   map[string]string
		want  int64 // 0: the limit stays the runtime's
		log   string
	}{
		{name: "a group of 512 MiB", group: limit(512*mib, nil), want: 512 * mib * 9 / 10, log: "a share of the control group's"},
		{name: "a group of 200 MiB", group: limit(200*mib, nil), want: 200 * mib * 9 / 10},
		{name: "no limit", group: limit(0, memlimit.ErrNoLimit)},
		{name: "not readable: logged", group: limit(0, errors.New("/sys/fs/cgroup/memory.max: lots")), log: "the control group's limit cannot be read"},
		{name: "GOMEMLIMIT wins", group: limit(512*mib, nil), env: map[string]string{"GOMEMLIMIT": "300MiB"}},
		{name: "AUTOMEMLIMIT=off", group: limit(512*mib, nil), env: map[string]string{"AUTOMEMLIMIT": "off"}},
		{name: "AUTOMEMLIMIT=0.5", group: limit(512*mib, nil), env: map[string]string{"AUTOMEMLIMIT": "0.5"}, want: 256 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			debug.SetMemoryLimit(math.MaxInt64)
			var logs strings.Builder
			if err := memoryLimit("", tc.group, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == 0 {
				want = math.MaxInt64
			}
			if got := debug.SetMemoryLimit(-1); got != want {
				t.Errorf("the limit is %d, want %d", got, want)
			}
			if tc.log != "" && !strings.Contains(logs.String(), tc.log) {
				t.Errorf("the log does not say %q:\n%s", tc.log, logs.String())
			}
		})
	}
}

// TestServeSaveWindow: --save-window means what runner.Config.SaveWindow means (0: the
// default; negative: save after every decision), and off is -1.
func TestServeSaveWindow(t *testing.T) {
	for _, tt := range []struct {
		arg  string
		want time.Duration
	}{
		{"", runner.DefaultSaveWindow},
		{"0", 0},
		{"250ms", 250 * time.Millisecond},
		{"off", -1},
		{"-1ms", -time.Millisecond},
	} {
		serve, _, err := commandTree().Find([]string{"serve"})
		if err != nil {
			t.Fatal(err)
		}
		args := []string{}
		if tt.arg != "" {
			args = append(args, "--save-window", tt.arg)
		}
		if err := serve.ParseFlags(args); err != nil {
			t.Fatalf("--save-window %q: %v", tt.arg, err)
		}
		got := time.Duration(*serve.Flags().Lookup("save-window").Value.(*saveWindowFlag))
		if got != tt.want {
			t.Errorf("--save-window %q gives the engine a window of %s, want %s", tt.arg, got, tt.want)
		}
	}
}
