//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/internal/testkit/natstest"
	"github.com/reins-run/reins/internal/testkit/protocoltest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
)

// The Python worker (python/reins_worker, docs/protocol.md "SDKs"): its unit tests, and the
// worker process serving the agent_loop handler "count" (testdata/pycount.py) against real
// servers: killed with SIGKILL mid-iteration, refusing a task of a newer protocol version, and
// everything it sends held to the JSON Schemas of docs/protocol.

// debianPython is Debian's python3, what a fresh CI machine installs.
const debianPython = "/usr/bin/python3"

// ensurePython returns a python3 (3.10 or later), installing Debian's package when there is none
// and the test runs as root (.ci/run installs it first). Elsewhere the test skips, or fails in
// CI, naming the package and the command (buildtest.Need).
func ensurePython(t testing.TB) string {
	t.Helper()
	py := buildtest.Need(t, buildtest.System{What: "python3", Debian: "python3", Paths: []string{debianPython, "python3"}})
	out, err := exec.Command(py, "-c", "import sys; print(sys.version_info >= (3, 10))").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "True" {
		t.Fatalf("%s is not a Python 3.10 or later (%v: %s): install one (apt-get install -y python3)", py, err, out)
	}
	return py
}

// pyEnv keeps the checkout free of bytecode and the output of the processes unbuffered.
var pyEnv = []string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}

// TestPythonUnitTests runs the tests of the package (python/tests): the protocol's functions,
// and the NATS client, JetStream, KV, object store and effect leases against a real nats-server
// (REINS_TEST_NATS_URL, with a token: a wrong one is refused). None may be skipped.
func TestPythonUnitTests(t *testing.T) {
	py := ensurePython(t)
	token := randomToken(t, "unit")
	port := natstest.FreePort(t)
	ns := start(t, "nats-server", nil, bins.natsServer, "-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", fmt.Sprint(port), "--auth", token)
	ns.waitFor("Server is ready", 30*time.Second)
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests")
	cmd.Dir = filepath.Join("..", "python")
	cmd.Env = append(os.Environ(), append(pyEnv, fmt.Sprintf("REINS_TEST_NATS_URL=nats://%s@127.0.0.1:%d", token, port))...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Ran (\d+) tests?`).FindSubmatch(out)
	if m == nil || string(m[1]) == "0" || strings.Contains(string(out), "skipped") {
		t.Fatalf("python3 -m unittest ran no test, or skipped some:\n%s", out)
	}
}

// pyWorker starts testdata/pycount.py with args and waits until it consumes tasks.
func pyWorker(t testing.TB, py string, args ...string) *proc {
	t.Helper()
	p := start(t, "pycount", pyEnv, append([]string{py, filepath.Join("testdata", "pycount.py")}, args...)...)
	p.waitFor("ready", time.Minute)
	return p
}

// captured holds the messages of core subscriptions: what processes publish, as the server
// received it.
type captured struct {
	mu   sync.Mutex
	msgs []*nats.Msg
	grew chan struct{}
}

func capture(t *testing.T, nc *nats.Conn, subjects ...string) *captured {
	t.Helper()
	c := &captured{grew: make(chan struct{})}
	for _, s := range subjects {
		sub, err := nc.Subscribe(s, func(m *nats.Msg) {
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			close(c.grew)
			c.grew = make(chan struct{})
			c.mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// all returns the messages captured so far.
func (c *captured) all() []*nats.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

// await returns the first message captured that match accepts, failing the test after timeout.
func (c *captured) await(t *testing.T, what string, match func(*nats.Msg) bool, timeout time.Duration) *nats.Msg {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		grew := c.grew
		for _, m := range c.msgs {
			if match(m) {
				c.mu.Unlock()
				return m
			}
		}
		c.mu.Unlock()
		select {
		case <-grew:
		case <-deadline.C:
			t.Fatalf("no %s within %s", what, timeout)
		}
	}
}

// answer is what the tests read of an answer's body.
type answer struct {
	RunID      string          `json:"run_id"`
	Type       string          `json:"type"`
	Step       string          `json:"step"`
	Item       int             `json:"item"`
	Activation int             `json:"activation"`
	Iteration  int             `json:"iteration"`
	Attempt    int             `json:"attempt"`
	Output     json.RawMessage `json:"output"`
	Error      string          `json:"error"`
	Permanent  bool            `json:"permanent"`
	Nonce      string          `json:"nonce"`
	Protocol   int             `json:"protocol"`
}

var answerTypes = []string{"continued", "completed", "waiting", "failed", "timed_out"}

// answers decodes the answers among the captured events (other events are the engine's and
// clients'), checking each against the schemas and its message id against docs/protocol.md.
func answers(t *testing.T, events []*nats.Msg) []answer {
	t.Helper()
	var out []answer
	for _, m := range events {
		var a answer
		if json.Unmarshal(m.Data, &a) != nil || !slices.Contains(answerTypes, a.Type) {
			continue
		}
		protocoltest.Validate(t, "answer.schema.json", m.Data)
		protocoltest.Validate(t, "answer-"+a.Type+".schema.json", m.Data)
		want := fmt.Sprintf("%s/%s/%d/%d/%d/%s", a.RunID, protocol.StepKey(a.Step, a.Item), a.Activation, a.Iteration, a.Attempt, a.Type)
		if a.Type == "continued" {
			want += "/" + a.Nonce
		}
		if got := m.Header.Get(jetstream.MsgIDHeader); got != want {
			t.Errorf("answer %s: Nats-Msg-Id %q, want %q", m.Data, got, want)
		}
		if subj, _ := (natsbox.Names{}).EventSubject(a.RunID); !strings.HasSuffix(m.Subject, subj) {
			t.Errorf("answer of run %s on %s, want its partition's subject %s", a.RunID, m.Subject, subj)
		}
		out = append(out, a)
	}
	return out
}

// pyServer is reins serve with its embedded NATS server listening, in a namespace, with an
// operator configuration naming a submitter and a worker principal: the Python worker connects
// with the worker's token and so has the worker role's permissions only.
type pyServer struct {
	t                        *testing.T
	url, ns                  string
	submitter, worker, admin string
	box                      *natsbox.Box
	client                   *client.Client
}

func startPyServer(t *testing.T, ctx context.Context, ns string) *pyServer {
	t.Helper()
	s := &pyServer{t: t, ns: ns, submitter: randomToken(t, "sam"), worker: randomToken(t, "pyworker")}
	cfg := `
[principals.sam]
token_env = "REINS_TOKEN_SAM"
roles = ["submitter"]

[principals.pyworker]
token_env = "REINS_TOKEN_PYWORKER"
roles = ["worker"]
`
	file := filepath.Join(t.TempDir(), "ops.toml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	port := natstest.FreePort(t)
	s.url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	p := start(t, "reins serve", []string{"REINS_TOKEN_SAM=" + s.submitter, "REINS_TOKEN_PYWORKER=" + s.worker},
		bins.reins, "serve", "--data", data, "--listen", "127.0.0.1:0", "--nats-listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--config", file, "--namespace", ns)
	p.waitFor("reins serving", 30*time.Second)
	admin, err := operator.ReadAdminToken(data)
	if err != nil {
		t.Fatal(err)
	}
	s.admin = admin
	if s.box, err = natsbox.Open(ctx, natsbox.Options{URL: s.url, Token: admin, Namespace: ns, Name: "e2e-test"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.box.Close() })
	s.client = client.New(client.Config{Conn: (*conn.Conn)(s.box)})
	return s
}

// startRun starts testdata/count.toml as the submitter.
func (s *pyServer) startRun(id, input string) {
	s.t.Helper()
	cmd := exec.Command(bins.reins, "run", filepath.Join("testdata", "count.toml"), "--nats", s.url, "--namespace", s.ns,
		"--detach", "--run-id", id, "--input", input)
	cmd.Env = append(os.Environ(), "REINS_TOKEN="+s.submitter)
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("reins run %s: %v\n%s", id, err, out)
	}
}

// TestPythonWorkerCrash: a Python worker serving the agent_loop handler "count" is killed with
// SIGKILL in the middle of iteration 3, after the iteration wrote its checkpoint and ran its
// side effect; a new worker gets the iteration again (the same attempt) and the run completes
// with every iteration in the checkpoint once (the killed attempt's write purged), each
// answered once, and the side effect done once per iteration (the second worker reads the
// recorded result). A second run's input, checkpoint and outputs are larger than a message may
// hold inline and travel by reference through the object store. The worker connects to the
// embedded server of reins serve with a worker principal's token, in a namespace, and
// everything it publishes (answers, checkpoint writes, effect claims and results) conforms to
// docs/protocol's schemas.
func TestPythonWorkerCrash(t *testing.T) {
	py := ensurePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startPyServer(t, ctx, "pyteam")
	names := s.box.Names()
	nc := s.box.Conn()
	events := capture(t, nc, names.EventSubjects())
	checkpoints := capture(t, nc, "$KV."+names.CheckpointsBucket()+".>")
	effects := capture(t, nc, "$KV."+names.EffectsBucket()+".>")

	state, effectsFile := t.TempDir(), filepath.Join(t.TempDir(), "effects")
	args := []string{"--nats", s.url, "--token", s.worker, "--namespace", s.ns, "--ack-wait", "1",
		"--state", state, "--effects", effectsFile, "--hang", "3"}
	w1 := pyWorker(t, py, args...)
	const id = "py-crash"
	s.startRun(id, `{"until":5}`)
	w1.waitFor("hang "+id+" 3", time.Minute)
	w1.kill()
	w2 := pyWorker(t, py, args...)

	rec, err := s.client.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %s (error %v), want completed", id, rec.Run.Status, rec.Run.Error)
	}
	if got, want := string(rec.Run.Output), `{"iterations":5,"seen":[1,2,3,4,5]}`; got != want {
		t.Errorf("run %s: output %s, want %s: every iteration in the checkpoint once", id, got, want)
	}
	if sr := rec.Run.Steps["loop"]; sr.Iteration != 5 || sr.Attempts != 5 || sr.Usage.ToolCalls != 5 {
		t.Errorf("run %s: step loop at iteration %d after %d tasks, %d tool calls reported; want 5, 5 and 5 (one per answer)", id, sr.Iteration, sr.Attempts, sr.Usage.ToolCalls)
	}
	for i := 1; i <= 5; i++ {
		if line := fmt.Sprintf("done %s %d", id, i); !awaitAny([]*proc{w1, w2}, line, 10*time.Second) {
			t.Errorf("no worker printed %q", line)
		}
	}
	for i, n := range doneLines(id, w1, w2) {
		if n != 1 {
			t.Errorf("iteration %d answered %d times, want once", i, n)
		}
	}
	if !hasLine(w2, "start "+id+" 3 1") {
		t.Errorf("iteration 3 was not delivered again to the second worker as the same attempt")
	}
	if hasLine(w2, "effect "+id+" 3") {
		t.Errorf("the second worker ran the side effect of iteration 3 again instead of reading its recorded result")
	}
	data, err := os.ReadFile(effectsFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var want []string
	for i := 1; i <= 5; i++ {
		want = append(want, fmt.Sprintf("%s %d %s/loop/-1/1/%d/append", id, i, id, i))
	}
	if !slices.Equal(lines, want) {
		t.Errorf("side effects:\n%s\nwant each iteration's once, with its idempotency key:\n%s", data, strings.Join(want, "\n"))
	}

	// Values larger than 64 KiB: the input, the checkpoint and each output go by reference.
	pad := strings.Repeat("x", 100_000)
	s.startRun("py-big", fmt.Sprintf(`{"until":2,"pad":%q}`, pad))
	rec, err = s.client.Wait(ctx, "py-big")
	if err != nil {
		t.Fatal(err)
	}
	var big struct {
		Iterations, Pad int
		Seen            []int
	}
	if err := json.Unmarshal(rec.Run.Output, &big); rec.Run.Status != protocol.RunCompleted || err != nil ||
		big.Iterations != 2 || big.Pad != len(pad) || !slices.Equal(big.Seen, []int{1, 2}) {
		t.Errorf("run py-big: %s with output %.200s (error %v), want completed with 2 iterations, seen [1,2] and the pad read back whole", rec.Run.Status, rec.Run.Output, rec.Run.Error)
	}

	// Everything the worker published.
	byType := map[string]int{}
	refOutputs := 0
	for _, a := range answers(t, events.all()) {
		if a.Protocol != protocol.Version {
			t.Errorf("answer %+v declares protocol %d, want %d", a, a.Protocol, protocol.Version)
		}
		switch a.RunID {
		case id:
			byType[a.Type]++
		case "py-big":
			if a.Type == "continued" && wire.IsRef(a.Output) {
				refOutputs++
			}
		}
	}
	if byType["continued"] != 4 || byType["completed"] != 1 || len(byType) != 2 {
		t.Errorf("answers of run %s by type: %v, want 4 continued and 1 completed", id, byType)
	}
	if refOutputs != 1 {
		t.Errorf("run py-big: %d continued answers with their output by reference, want 1", refOutputs)
	}
	scope := wire.CheckpointScope(id, "loop", -1, 1)
	purged, refWrites := false, 0
	for _, m := range checkpoints.all() {
		key := strings.TrimPrefix(m.Subject, "$KV."+names.CheckpointsBucket()+".")
		if op := m.Header.Get("KV-Operation"); op != "" {
			purged = purged || (op == "PURGE" && key == scope+".3.0")
			continue
		}
		if _, err := wire.ParseCheckpointWrite(key); err != nil {
			t.Errorf("checkpoint write: %v", err)
		}
		protocoltest.Validate(t, "checkpoint.schema.json", m.Data)
		if wire.IsRef(m.Data) {
			refWrites++
		}
	}
	if !purged {
		t.Errorf("the write %s.3.0 of the killed attempt was not purged before iteration 3 ran again", scope)
	}
	if refWrites == 0 {
		t.Errorf("run py-big: no checkpoint write by reference")
	}
	// Every write of the effects' records was published (a create refused by the bucket too).
	keys := map[string]int{}
	for i := 1; i <= 5; i++ {
		keys[wire.EffectKey(fmt.Sprintf("%s/loop/-1/1/%d/append", id, i))] = i
	}
	claims, results := map[int]int{}, map[int]int{}
	for _, m := range effects.all() {
		if m.Header.Get("KV-Operation") != "" {
			continue
		}
		protocoltest.Validate(t, "effect.schema.json", m.Data)
		i, ok := keys[strings.TrimPrefix(m.Subject, "$KV."+names.EffectsBucket()+".")]
		if !ok {
			continue
		}
		var r struct {
			Holder string `json:"holder"`
			Done   bool   `json:"done"`
		}
		_ = json.Unmarshal(m.Data, &r)
		if strings.HasPrefix(r.Holder, fmt.Sprintf("%s/loop/1/%d/1@", id, i)) {
			claims[i]++
		}
		if r.Done {
			results[i]++
		}
	}
	for i := 1; i <= 5; i++ {
		if claims[i] < 1 || results[i] != 1 {
			t.Errorf("run %s, iteration %d: %d claims and %d results of its effect written, want a claim or more and one result", id, i, claims[i], results[i])
		}
	}
}

// TestPythonWorkerRefusesNewerProtocol: a task of protocol version 2 is refused by the Python
// worker without running its handler, for good, in one sentence naming both versions, as the Go
// worker does (worker TestProtocolVersions); a task without the member (version 1) runs; a task
// whose handler does not answer within its timeout is answered timed_out by the worker. The
// worker connects to an external NATS server with a user and password.
func TestPythonWorkerRefusesNewerProtocol(t *testing.T) {
	py := ensurePython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pass := randomToken(t, "pass")
	port := natstest.FreePort(t)
	ns := start(t, "nats-server", nil, bins.natsServer, "-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", fmt.Sprint(port),
		"--user", "reins", "--pass", pass)
	ns.waitFor("Server is ready", 30*time.Second)
	url := fmt.Sprintf("nats://reins:%s@127.0.0.1:%d", pass, port)
	serve(t, url)
	// Every run's iteration 1 hangs (--hang 1) but those whose marker is there already.
	state := t.TempDir()
	for _, run := range []string{"py-v1", "py-newer"} {
		if err := os.WriteFile(filepath.Join(state, "hang-"+run), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w := pyWorker(t, py, "--nats", fmt.Sprintf("nats://127.0.0.1:%d", port), "--user", "reins", "--password", pass, "--ack-wait", "1",
		"--hang", "1", "--state", state)
	box, err := natsbox.Open(ctx, natsbox.Options{URL: url, Name: "e2e-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	events := capture(t, box.Conn(), box.Names().EventSubjects())

	for _, tc := range []struct {
		run      string
		version  int
		timeout  time.Duration
		wantType string
		wantErr  string
	}{
		{"py-v1", 0, 0, "completed", ""},
		{"py-newer", 2, 0, "failed", "worker: task py-newer/loop/1/1/1 speaks reins protocol version 2, and this worker speaks version 1: upgrade the worker (workers are upgraded before engines)"},
		// The handler hangs: the worker answers timed_out itself at the task's timeout.
		{"py-slow", 1, 300 * time.Millisecond, "timed_out", "the handler did not answer within 300ms"},
	} {
		task := &protocol.Task{RunID: tc.run, Step: "loop", Item: -1, Body: "loop", Type: "agent_loop", Handler: "count",
			Activation: 1, Iteration: 1, Attempt: 1, Input: json.RawMessage(`{"until":1}`), MsgID: tc.run + "/loop/1/1/1",
			Protocol: tc.version, Timeout: tc.timeout}
		data, err := wire.EncodeTask(task)
		if err != nil {
			t.Fatal(err)
		}
		subject, _ := box.Names().TaskSubject("count")
		if _, err := box.JetStream().PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data,
			Header: nats.Header{jetstream.MsgIDHeader: []string{task.MsgID}}}); err != nil {
			t.Fatal(err)
		}
		m := events.await(t, "answer to "+tc.run, func(m *nats.Msg) bool {
			var a answer
			return json.Unmarshal(m.Data, &a) == nil && a.RunID == tc.run && slices.Contains(answerTypes, a.Type)
		}, time.Minute)
		got := answers(t, []*nats.Msg{m})
		if len(got) != 1 {
			t.Fatalf("answer %s not decoded", m.Data)
		}
		a := got[0]
		permanent := tc.wantType == "failed"
		if a.Type != tc.wantType || a.Error != tc.wantErr || a.Permanent != permanent || a.Protocol != protocol.Version {
			t.Errorf("answer to task %s: %s, want type %s, error %q, permanent %v, protocol %d",
				task.MsgID, m.Data, tc.wantType, tc.wantErr, permanent, protocol.Version)
		}
		// The handler prints its start line before it answers; a refused task's never runs.
		if ran := tc.version != 2; ran && !w.awaitLine("start "+tc.run+" 1 1", 10*time.Second) {
			t.Errorf("the handler did not run task %s", task.MsgID)
		} else if !ran && hasLine(w, "start "+tc.run+" ") {
			t.Errorf("the handler ran task %s, of version %d", task.MsgID, tc.version)
		}
	}
}

// BenchmarkPythonWorker reports the time per iteration of the count workflow's agent_loop step
// (each iteration a checkpoint append and a side effect through the effect leases), from the
// run's start to its end as the engine saw them, served by the Python worker and, for
// comparison, by the Go worker; and the worker process's CPU per iteration. Each b.N is one
// run of 50 iterations (the step's max_iterations).
//
//	go test -tags e2e ./e2e -run '^$' -bench PythonWorker -benchtime 5x
func BenchmarkPythonWorker(b *testing.B) {
	py := ensurePython(b)
	const until = 50
	for _, kind := range []string{"python", "go"} {
		b.Run("worker="+kind, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			c := newCluster(b)
			serve(b, c.url)
			effects := filepath.Join(b.TempDir(), "effects")
			var w *proc
			if kind == "python" {
				w = pyWorker(b, py, "--nats", c.url, "--ack-wait", "1", "--effects", effects)
			} else {
				w = start(b, "loopworker", nil, bins.loopworker, "-nats", c.url, "-ack-wait", "1s", "-effects", effects)
				w.waitFor("ready", 30*time.Second)
			}
			cl := c.client(ctx)
			var took time.Duration
			cpu0 := cpuOf(b, w)
			for i := range b.N {
				id := c.startRun(fmt.Sprintf("bench-%s-%d", kind, i), until)
				rec, err := cl.Wait(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				took += time.Since(rec.Run.StartedAt)
				if rec.Run.Status != protocol.RunCompleted {
					b.Fatalf("run %s: %s (error %v)", id, rec.Run.Status, rec.Run.Error)
				}
			}
			n := float64(b.N * until)
			b.ReportMetric(us(took)/n, "µs/iteration")
			b.ReportMetric(us(cpuOf(b, w)-cpu0)/n, "worker-cpu-µs/iteration")
		})
	}
}

// debianVenv makes a fresh venv with Debian's python3 and installs the package in it as
// python/README.md says (pip install ./python, from the checkout's root), with every package
// index pointed at a local HTTP server that answers nothing: the install must need no network.
// It installs python3 and python3-venv with apt-get when they are missing and the test runs as
// root (.ci/run installs them first; buildtest.Need). It returns the venv's python.
func debianVenv(t *testing.T) string {
	t.Helper()
	py := buildtest.Need(t, buildtest.System{What: "Debian's python3", Debian: "python3", Paths: []string{debianPython}})
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
		if !strings.Contains(string(out), "ensurepip") {
			t.Fatalf("%s -m venv: %v\n%s", py, err, out)
		}
		// Debian's python3 makes venvs only with python3-venv (ensurepip).
		buildtest.Need(t, buildtest.System{What: "python3-venv (venvs of Debian's python3)", Debian: "python3-venv", Paths: []string{"/usr/share/doc/python3-venv"}})
		if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
			t.Fatalf("%s -m venv, python3-venv installed: %v\n%s", py, err, out)
		}
	}
	var asked []string
	var mu sync.Mutex
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(index.Close)
	env := []string{"PIP_INDEX_URL=" + index.URL + "/simple/", "PIP_NO_CACHE_DIR=1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PIP_") { // this machine's pip settings (extra indexes, links) stay out
			env = append(env, kv)
		}
	}
	out := inRoot(t, append(env, pyEnv...), filepath.Join(venv, "bin", "pip"), "install", "./python")
	if !strings.Contains(out, "Successfully installed reins-worker-0.1.0") {
		t.Fatalf("pip install ./python installed no reins-worker 0.1.0:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) > 0 {
		t.Fatalf("pip install ./python asked the package index for %v: it must install with no network", asked)
	}
	// The package comes from the venv, not from the checkout.
	vpy := filepath.Join(venv, "bin", "python3")
	cmd := exec.Command(vpy, "-c", "import reins_worker; print(reins_worker.__file__)")
	cmd.Dir, cmd.Env = t.TempDir(), append(os.Environ(), pyEnv...)
	if where, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(where), venv+"/") {
		t.Fatalf("import reins_worker in the venv: %v: %s, want a module under %s", err, where, venv)
	}
	return vpy
}

// inRoot runs argv from the repository's root, as the READMEs' commands are run, with env as
// its whole environment, and returns its output; a failure fails the test.
func inRoot(t *testing.T, env []string, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = "..", env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// startInRoot starts argv from the repository's root with env added to the environment.
func startInRoot(t *testing.T, name string, env []string, argv ...string) *proc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = "..", append(os.Environ(), env...)
	return startCmd(t, name, cmd)
}

// exitCode waits for p to exit and returns its exit status.
func (p *proc) exitCode(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %s", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// The runnable pair of python/README.md, what its commands print.
const (
	pyExampleInput = `{"topic":"durable agent loops"}`
	pyExampleStep  = "  outline              completed stop=done iterations=3 attempts=3 label=done"
	pyExampleOut   = `output: {"topic":"durable agent loops","sections":["durable agent loops: why","durable agent loops: how","durable agent loops: what to try first"]}`
	pyUnserved     = `reins: warning: no worker serves the handler "outline" that step outline of workflow py_outline needs: its runs wait until one does`
)

// TestPythonExample installs the Python package in a fresh venv of Debian's python3 with no
// package index reachable, and runs the runnable pair of python/README.md (the workflow
// python/examples/outline.toml and the worker python/examples/outline_worker.py) as the README
// says, from the checkout's root: on reins run's embedded server (--listen, the worker with the
// data directory's admin token), then on reins serve --config python/examples/ops.toml, the
// worker with the worker principal's token and reins run with the submitter's. A Python worker
// announces its handler as the Go workers do: reins run warns that no worker serves "outline"
// while none does (before the worker started, and after it stopped), and not while one does.
func TestPythonExample(t *testing.T) {
	vpy := debianVenv(t)
	worker := []string{vpy, filepath.Join("python", "examples", "outline_worker.py")}
	wf := filepath.Join("python", "examples", "outline.toml")

	t.Run("reins run", func(t *testing.T) {
		data := t.TempDir()
		url := fmt.Sprintf("nats://127.0.0.1:%d", natstest.FreePort(t))
		run := startInRoot(t, "reins run", nil, bins.reins, "run", wf, "--data", data,
			"--listen", strings.TrimPrefix(url, "nats://"), "--input", pyExampleInput)
		run.waitFor("workers can connect to "+url, 30*time.Second)
		token, err := operator.ReadAdminToken(data)
		if err != nil {
			t.Fatal(err)
		}
		w := startInRoot(t, "outline_worker", append([]string{"REINS_TOKEN=" + token}, pyEnv...), append(worker, "--nats", url)...)
		if code := run.exitCode(time.Minute); code != 0 {
			t.Fatalf("reins run exited %d, want 0", code)
		}
		out := strings.Join(run.output(), "\n")
		hasLines(t, "reins run's output", out, pyUnserved, pyExampleStep, "path: outline", pyExampleOut)
		// The worker goes with the embedded server, saying so.
		if code := w.exitCode(30 * time.Second); code != 1 || !hasLine(w, "outline_worker: the connection to NATS was lost") {
			t.Errorf("the worker exited %d when reins run ended, want 1 saying the connection was lost", code)
		}
		for i, s := range []string{"why", "how", "what to try first"} {
			if !hasLine(w, fmt.Sprintf("iteration %d: durable agent loops: %s", i+1, s)) {
				t.Errorf("the worker printed no line for iteration %d", i+1)
			}
		}
	})

	t.Run("reins serve", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		me, pyworker := randomToken(t, "me"), randomToken(t, "pyworker")
		data := t.TempDir()
		url := fmt.Sprintf("nats://127.0.0.1:%d", natstest.FreePort(t))
		srv := startInRoot(t, "reins serve", []string{"REINS_TOKEN_ME=" + me, "REINS_TOKEN_PYWORKER=" + pyworker},
			bins.reins, "serve", "--data", data, "--listen", "127.0.0.1:0", "--nats-listen", strings.TrimPrefix(url, "nats://"),
			"--config", filepath.Join("python", "examples", "ops.toml"))
		srv.waitFor("reins serving", 30*time.Second)
		submit := append(os.Environ(), "REINS_TOKEN="+me)
		runArgs := []string{bins.reins, "run", wf, "--nats", url, "--input", pyExampleInput}

		// No worker serves "outline" yet: warned, and the run waits for one.
		out := inRoot(t, submit, append(runArgs, "--detach")...)
		hasLines(t, "reins run's output before the worker started", out, pyUnserved)
		early := lastLine(out)
		w := startInRoot(t, "outline_worker", append([]string{"REINS_TOKEN=" + pyworker}, pyEnv...), append(worker, "--nats", url)...)
		w.waitFor("ready: serving outline on "+url, time.Minute)
		// A worker serves it: no warning, and the run completes as the README shows.
		out = inRoot(t, submit, runArgs...)
		if strings.Contains(out, "no worker serves") {
			t.Errorf("reins run warned while the Python worker serves the handler:\n%s", out)
		}
		hasLines(t, "reins run's output", out, pyExampleStep, "path: outline", pyExampleOut)

		// The run submitted before the worker came is served too.
		admin, err := operator.ReadAdminToken(data)
		if err != nil {
			t.Fatal(err)
		}
		box, err := natsbox.Open(ctx, natsbox.Options{URL: url, Token: admin, Name: "e2e-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { box.Close() })
		cl := client.New(client.Config{Conn: (*conn.Conn)(box)})
		rec, err := cl.Wait(ctx, early)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Run.Status != protocol.RunCompleted {
			t.Errorf("run %s, submitted before the worker started: %s (error %v), want completed", early, rec.Run.Status, rec.Run.Error)
		}

		// The worker stops (SIGTERM): it takes its announcement back, and reins run warns again.
		w.signal(syscall.SIGTERM)
		if code := w.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("the worker exited %d on SIGTERM, want 0", code)
		}
		late := inRoot(t, submit, append(runArgs, "--detach")...)
		hasLines(t, "reins run's output after the worker stopped", late, pyUnserved)
	})
}

// lastLine is the last line of out that is not empty.
func lastLine(out string) string {
	ls := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(ls[len(ls)-1])
}
