package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/promtest"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// meteredWorkflow runs an agent for three iterations (two turns of tool calls, three calls in
// all, then an answer) and an llm step: every count of the metrics is known from its scripts.
const meteredWorkflow = `name = "metered"

[models.investigator]
provider = "scripted"
script = [
  { tool_calls = [{ name = "read_order", arguments = { order_id = "O-1" } }], usage = { input_tokens = 100, output_tokens = 10 }, cost_usd = 0.25 },
  { tool_calls = [{ name = "read_order", arguments = { order_id = "O-2" } }, { name = "read_policy", arguments = {} }], usage = { input_tokens = 200, output_tokens = 20 }, cost_usd = 0.5 },
  { text = "refund O-1", usage = { input_tokens = 300, output_tokens = 30 }, cost_usd = 0.75 },
]

[models.writer]
provider = "scripted"
script = [{ text = "done", usage = { input_tokens = 50, output_tokens = 5 }, cost_usd = 0.125 }]

[tools.read_order]
description = "Read an order."
input_schema = { type = "object", properties = { order_id = { type = "string" } }, required = ["order_id"] }
mock = [{ output = { total = 1 } }, { output = { total = 2 } }]

[tools.read_policy]
description = "Read the policy."
input_schema = { type = "object" }
mock = [{ output = { refund = "late" } }]

[[steps]]
id = "investigate"
type = "agent"
model = "investigator"
goal = "Investigate."
tools = ["read_order", "read_policy"]

[[steps]]
id = "report"
type = "llm"
model = "writer"
prompt = "Report {{investigate.output.answer}}."

[[edges]]
from = "investigate"
to = "report"
`

// httpAddrRE finds the HTTP address serve logs, in either format.
var httpAddrRE = regexp.MustCompile(`"?http"?[=:]"?(127\.0\.0\.1:\d+)`)

// httpAddr is the address of the HTTP listener the log of a process names.
func httpAddr(t *testing.T, log string) string {
	t.Helper()
	m := httpAddrRE.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the log names no HTTP address:\n%s", log)
	}
	return m[1]
}

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return getAs(t, url, "")
}

// getAs returns the status and body of GET url with the bearer token (none when "").
func getAs(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// scrape reads /metrics at addr, as the principal of token, with the Prometheus text parser.
func scrape(t *testing.T, addr, token string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := getAs(t, "http://"+addr+"/metrics", token)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	fams, err := promtest.Parse(body)
	if err != nil {
		t.Fatalf("/metrics: %v\n%s", err, body)
	}
	return fams
}

// scrapeUntil scrapes addr until done says the metrics are what the test waits for (at most
// 10 s), and returns the last scrape.
func scrapeUntil(t *testing.T, addr, token string, done func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		fams := scrape(t, addr, token)
		if done(fams) || time.Now().After(deadline) {
			return fams
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeMetrics runs a workflow of known iterations, tokens and tool calls on `reins serve
// --listen 127.0.0.1:0 --log-format json --log-level debug`, scrapes /metrics with the
// Prometheus text parser and checks every count against the run; /healthz and /readyz answer;
// every line of the log is a JSON object, and the lines about the run carry its id, step and
// iteration.
func TestServeMetrics(t *testing.T) {
	srv := startServe(t, t.TempDir(), "--log-format", "json", "--log-level", "debug")
	addr := httpAddr(t, srv.stderr.String())
	code, out, errOut := cli(t, "run", writeTestFile(t, "metered.toml", meteredWorkflow), "--nats", srv.url, "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	res := decodeResult(t, out)
	if res.Status != "completed" {
		t.Fatalf("the run ended %s", res.Status)
	}

	// The worker counts a task once it acknowledged it, after the answer that may end the run:
	// wait until the last tasks are counted.
	fams := scrapeUntil(t, addr, srv.token, func(fams map[string]*dto.MetricFamily) bool {
		a, _ := promtest.Value(fams, "reins_worker_tasks_total", "handler", "reins-agent", "outcome", "completed")
		l, _ := promtest.Value(fams, "reins_worker_tasks_total", "handler", "reins-llm", "outcome", "completed")
		return a+l == 2
	})
	wf := "metered"
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"reins_runs_started_total", []string{"workflow", wf}, 1},
		{"reins_runs_ended_total", []string{"workflow", wf, "status", "completed"}, 1},
		{"reins_steps_ended_total", []string{"workflow", wf, "status", "completed", "stop_reason", "completed"}, 1},    // the agent
		{"reins_steps_ended_total", []string{"workflow", wf, "status", "completed", "stop_reason", metrics.NoStop}, 1}, // the llm step
		{"reins_step_duration_seconds", []string{"workflow", wf}, 2},
		{"reins_iterations_total", []string{"workflow", wf, "stop_reason", metrics.NoStop}, 2},
		{"reins_iterations_total", []string{"workflow", wf, "stop_reason", "completed"}, 1},
		{"reins_iteration_duration_seconds", []string{"workflow", wf}, 3},
		{"reins_model_calls_total", []string{"provider", "scripted", "model", "investigator", "outcome", "ok"}, 3},
		{"reins_model_calls_total", []string{"provider", "scripted", "model", "writer", "outcome", "ok"}, 1},
		{"reins_model_tokens_total", []string{"provider", "scripted", "model", "investigator", "type", "input"}, 600},
		{"reins_model_tokens_total", []string{"provider", "scripted", "model", "investigator", "type", "output"}, 60},
		{"reins_model_tokens_total", []string{"provider", "scripted", "model", "writer", "type", "input"}, 50},
		{"reins_model_tokens_total", []string{"provider", "scripted", "model", "writer", "type", "output"}, 5},
		{"reins_model_cost_usd_total", []string{"provider", "scripted", "model", "investigator"}, 1.5},
		{"reins_model_cost_usd_total", []string{"provider", "scripted", "model", "writer"}, 0.125},
		{"reins_model_call_duration_seconds", []string{"provider", "scripted", "model", "investigator"}, 3},
		{"reins_tool_calls_total", []string{"tool", "read_order", "outcome", "ok"}, 2},
		{"reins_tool_calls_total", []string{"tool", "read_policy", "outcome", "ok"}, 1},
		{"reins_worker_tasks_total", []string{"handler", "reins-agent", "outcome", "continued"}, 2},
		{"reins_worker_tasks_total", []string{"handler", "reins-agent", "outcome", "completed"}, 1},
		{"reins_worker_tasks_total", []string{"handler", "reins-llm", "outcome", "completed"}, 1},
		{"reins_worker_task_duration_seconds", []string{"handler", "reins-agent"}, 3},
		{"reins_engine_partitions_owned", nil, 16},
		{"reins_engine_events_total", []string{"outcome", "dropped"}, 0},
		{"reins_tasks_pending", []string{"handler", "reins-agent"}, 0},
	} {
		got, ok := promtest.Value(fams, c.name, c.labels...)
		if !ok || math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s%v = %v (present: %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// The events that changed the run: at least its start and the four answers.
	if n, _ := promtest.Value(fams, "reins_engine_events_total", "outcome", "decided"); n < 5 {
		t.Errorf("reins_engine_events_total{outcome=decided} = %v, want 5 or more", n)
	}
	for _, name := range []string{"reins_engine_saves_total", "go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}

	// /metrics needs a principal's token (docs/reference/http-api.md); the other two need none.
	for _, token := range []string{"", "not-a-token"} {
		code, body := getAs(t, "http://"+addr+"/metrics", token)
		var problem struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal([]byte(body), &problem); code != http.StatusUnauthorized || err != nil || problem.Status != 401 ||
			!strings.Contains(problem.Detail, "Authorization: Bearer") || strings.Contains(body, "reins_") {
			t.Errorf("GET /metrics with token %q: %d %s, want 401 and a problem document", token, code, body)
		}
	}
	if code, body := get(t, "http://"+addr+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if code, _ := get(t, "http://"+addr+"/nothing"); code != http.StatusNotFound {
		t.Errorf("/nothing: %d, want 404", code)
	}
	if c := srv.stop(t); c != exitOK {
		t.Fatalf("serve: exit %d", c)
	}
	checkRunLog(t, srv.stderr.String(), res.RunID)
}

// checkRunLog checks that every line of log is a JSON object with a time, level and message,
// and that the lines about the run id carry it, with the step and iteration of the lines about
// a step: at least one such line from the engine, the worker and each built-in handler.
func checkRunLog(t *testing.T, log, id string) {
	t.Helper()
	seen := map[string]int{}
	about := map[string]bool{"runner: event decided": false, "worker: task settled": true, "agent iteration": true, "agent stopped": true, "llm step completed": true}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %d is not JSON: %v\n%s", n, err, sc.Text())
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := line[k]; !ok {
				t.Errorf("log line %d has no %q: %s", n, k, sc.Text())
			}
		}
		msg, _ := line["msg"].(string)
		stepped, ok := about[msg]
		if !ok || line["run_id"] != id {
			continue
		}
		seen[msg]++
		if _, ok := line["step"]; !ok && stepped {
			t.Errorf("log line %d about a step of run %s has no step: %s", n, id, sc.Text())
		}
		if it, ok := line["iteration"].(float64); line["step"] != nil && (!ok || it < 1) {
			t.Errorf("log line %d about step %v has no iteration: %s", n, line["step"], sc.Text())
		}
	}
	for msg := range about {
		if seen[msg] == 0 {
			t.Errorf("no log line %q about run %s:\n%s", msg, id, log)
		}
	}
	if seen["agent iteration"] != 2 || seen["agent stopped"] != 1 {
		t.Errorf("log lines of the agent's iterations: %v, want 2 iterations and 1 stop", seen)
	}
}

// TestReadyz: /readyz is 503 with the reason before the engine and workers consume, 200 once
// they do, and 503 again when the NATS connection is down; /healthz answers throughout.
func TestReadyz(t *testing.T) {
	srvBox, err := natsbox.Open(t.Context(), natsbox.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srvBox.Close()
	box, err := srvBox.Connect(t.Context(), "readyz-test")
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	o, err := observe("--listen", "127.0.0.1:0", box, &operator.Resolved{}, slog.New(slog.DiscardHandler), operator.HTTPLimits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.stop()
	base := "http://" + o.addr
	want := func(status int, body string) {
		t.Helper()
		code, got := get(t, base+"/readyz")
		if code != status || !strings.Contains(got, body) {
			t.Errorf("/readyz: %d %q, want %d with %q", code, got, status, body)
		}
		if code, got := get(t, base+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d %q", code, got)
		}
	}
	want(http.StatusServiceUnavailable, "not ready: the engine and workers are starting")
	o.ready.ready()
	want(http.StatusOK, "ready")
	srvBox.Close() // the server goes down; the connection finds out and tries to reconnect
	deadline := time.Now().Add(10 * time.Second)
	for box.Conn().IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	want(http.StatusServiceUnavailable, "not ready: NATS is not connected")
}

// TestObserveFlags: bad log and listen flags are usage errors of one sentence naming the flag
// and what it takes; an address in use fails in one sentence naming it.
func TestObserveFlags(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	inUse := taken.Addr().String()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"serve format", []string{"serve", "--data", t.TempDir(), "--log-format", "xml"}, exitUsage, `reins: --log-format "xml": want one of text, json`},
		{"serve level", []string{"serve", "--data", t.TempDir(), "--log-level", "loud"}, exitUsage, `reins: --log-level "loud": want one of debug, info, warn, error`},
		{"serve -v and level", []string{"serve", "--data", t.TempDir(), "-v", "--log-level", "warn"}, exitUsage, "reins: -v logs at debug level: it cannot be used with --log-level warn"},
		{"serve listen", []string{"serve", "--data", t.TempDir(), "--listen", "7400"}, exitUsage, `reins: --listen "7400": want HOST:PORT, such as 127.0.0.1:7400 ("" serves no HTTP)`},
		{"serve listen in use", []string{"serve", "--data", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--listen", inUse}, exitFailed,
			"reins: --listen " + inUse + ": the address is in use by another process: pass another --listen ADDR, or --listen \"\" to serve no HTTP"},
		{"worker format", []string{"worker", "--nats", "nats://127.0.0.1:1", "--log-format", "logfmt"}, exitUsage, `reins: --log-format "logfmt": want one of text, json`},
		{"worker level", []string{"worker", "--nats", "nats://127.0.0.1:1", "--log-level", "trace"}, exitUsage, `reins: --log-level "trace": want one of debug, info, warn, error`},
		{"worker listen", []string{"worker", "--nats", "nats://127.0.0.1:1", "--metrics-listen", "localhost"}, exitUsage, `reins: --metrics-listen "localhost": want HOST:PORT`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, tc.args...)
			ls := lines(errOut)
			if last := ls[len(ls)-1]; code != tc.code || !strings.HasPrefix(last, tc.want) || strings.Count(errOut, "reins: ") != 1 {
				t.Errorf("exit %d, want %d with one error line %q\n%s%s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}

// TestWorkerMetricsListen: reins worker --metrics-listen serves the worker's metrics, with the
// task queues of its handlers, and is ready once its handlers consume.
func TestWorkerMetricsListen(t *testing.T) {
	srv := startServe(t, t.TempDir(), "--no-workers")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &syncBuffer{}
	// The worker's scraper is a principal of the operator's configuration it is given.
	const scraper = "scraper-token-of-the-test"
	t.Setenv("REINS_TEST_SCRAPER", scraper)
	config := writeTestFile(t, "operator.toml", "[principals.prometheus]\ntoken_env = \"REINS_TEST_SCRAPER\"\nroles = [\"viewer\"]\n")
	done := background(ctx, &syncBuffer{}, stderr, "worker", "--nats", srv.url, "--config", config, "--metrics-listen", "127.0.0.1:0", "--handlers", "reins-llm", "--log-format", "json")
	awaitText(t, stderr, "reins worker serving", done, "reins worker")
	addr := httpAddr(t, stderr.String())
	if code, body := get(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if code, _ := get(t, "http://"+addr+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("the worker's /metrics without a token: %d, want 401", code)
	}
	fams := scrape(t, addr, scraper)
	if _, ok := promtest.Value(fams, "reins_tasks_pending", "handler", "reins-llm"); !ok {
		t.Errorf("the worker's /metrics has no reins_tasks_pending of its handler")
	}
	if _, ok := fams["reins_engine_partitions_owned"]; ok {
		t.Errorf("a worker reports an engine's partitions")
	}
	cancel()
	if code := awaitExit(t, done, "reins worker"); code != exitOK {
		t.Errorf("worker: exit %d\n%s", code, stderr.String())
	}
	if slices.ContainsFunc(lines(stderr.String()), func(l string) bool { return !json.Valid([]byte(l)) }) {
		t.Errorf("a line of the worker's log is not JSON:\n%s", stderr.String())
	}
}

// TestServeWaitingRuns: a run waiting for a person counts in reins_runs_waiting of its
// workflow, and leaves it once approved.
func TestServeWaitingRuns(t *testing.T) {
	srv := startServe(t, t.TempDir())
	addr := httpAddr(t, srv.stderr.String())
	code, out, errOut := cli(t, "run", writeTestFile(t, "ask.toml", approvalWorkflow), "--nats", srv.url, "--detach")
	if code != exitOK {
		t.Fatalf("run --detach: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	c := srv.client(t)
	for u, err := range c.Watch(t.Context(), id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			t.Fatal(err)
		}
		if rec.Run.Status == protocol.RunWaiting {
			break
		}
	}
	// The status index holds the waiting key before the record says waiting.
	if n, ok := promtest.Value(scrape(t, addr, srv.token), "reins_runs_waiting", "workflow", "ask"); !ok || n != 1 {
		t.Errorf("reins_runs_waiting{workflow=ask} = %v (present %v), want 1", n, ok)
	}
	if code, out, errOut := cli(t, "approve", id, "--nats", srv.url); code != exitOK {
		t.Fatalf("approve: exit %d\n%s%s", code, out, errOut)
	}
	if rec := wait(t, c, id); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s ended %s", id, rec.Run.Status)
	}
	// The engine removes the old status key right after it saved the record.
	fams := scrapeUntil(t, addr, srv.token, func(fams map[string]*dto.MetricFamily) bool {
		_, ok := promtest.Value(fams, "reins_runs_waiting", "workflow", "ask")
		return !ok
	})
	if n, ok := promtest.Value(fams, "reins_runs_waiting", "workflow", "ask"); ok {
		t.Errorf("reins_runs_waiting{workflow=ask} = %v after the run ended, want none", n)
	}
	if n, _ := promtest.Value(fams, "reins_runs_ended_total", "workflow", "ask", "status", "completed"); n != 1 {
		t.Errorf("reins_runs_ended_total{workflow=ask,status=completed} = %v, want 1", n)
	}
}

// TestServeMetricsAtZero: scraped right after `reins serve` starts, before any run, the
// counters of what it knows are present at 0 (a registered workflow's runs, the built-in
// handlers' tasks, the side-effect claims), so that Prometheus's increase() counts the first
// run, task and claim.
func TestServeMetricsAtZero(t *testing.T) {
	data := t.TempDir()
	first := startServe(t, data)
	box, err := natsbox.Open(t.Context(), natsbox.Options{URL: first.url, Token: first.token})
	if err != nil {
		t.Fatal(err)
	}
	src := "name = \"orders\"\n[[steps]]\nid = \"done\"\ntype = \"terminate\"\n"
	def, ps := workflow.Parse("orders.toml", []byte(src))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	def.Normalize()
	if _, _, err := client.New(client.Config{Conn: (*conn.Conn)(box)}).Register(t.Context(), "orders", []byte(src), def); err != nil {
		t.Fatal(err)
	}
	box.Close()
	if c := first.stop(t); c != exitOK {
		t.Fatalf("serve: exit %d", c)
	}

	srv := startServe(t, data)
	fams := scrape(t, httpAddr(t, srv.stderr.String()), srv.token)
	want := [][]string{{"reins_runs_started_total", "workflow", "orders"}}
	for _, st := range metrics.RunStatuses {
		want = append(want, []string{"reins_runs_ended_total", "workflow", "orders", "status", st})
	}
	for _, h := range []string{"reins-agent", "reins-llm"} {
		for _, o := range metrics.TaskOutcomes {
			want = append(want, []string{"reins_worker_tasks_total", "handler", h, "outcome", o})
		}
	}
	for _, o := range metrics.EffectOutcomes {
		want = append(want, []string{"reins_effect_claims_total", "outcome", o})
	}
	for _, w := range want {
		if got, ok := promtest.Value(fams, w[0], w[1:]...); !ok || got != 0 {
			t.Errorf("%s%v = %v (present: %v), want present at 0 right after start", w[0], w[1:], got, ok)
		}
	}

	// A workflow registered while the server runs has its series at 0 before its first run too.
	box, err = natsbox.Open(t.Context(), natsbox.Options{URL: srv.url, Token: srv.token})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	later := strings.Replace(src, `"orders"`, `"refunds"`, 1)
	if _, _, err := client.New(client.Config{Conn: (*conn.Conn)(box)}).Register(t.Context(), "refunds", []byte(later), def); err != nil {
		t.Fatal(err)
	}
	// The server makes the new workflow's series one after another, and a scrape may come
	// between two of them: wait until every one is there, then check each is at 0.
	present := func(fams map[string]*dto.MetricFamily) bool {
		if _, ok := promtest.Value(fams, "reins_runs_started_total", "workflow", "refunds"); !ok {
			return false
		}
		for _, st := range metrics.RunStatuses {
			if _, ok := promtest.Value(fams, "reins_runs_ended_total", "workflow", "refunds", "status", st); !ok {
				return false
			}
		}
		return true
	}
	fams = scrapeUntil(t, httpAddr(t, srv.stderr.String()), srv.token, present)
	for _, st := range metrics.RunStatuses {
		if got, ok := promtest.Value(fams, "reins_runs_ended_total", "workflow", "refunds", "status", st); !ok || got != 0 {
			t.Errorf("reins_runs_ended_total of refunds, registered after start, status %s = %v (present: %v), want 0", st, got, ok)
		}
	}
	if got, ok := promtest.Value(fams, "reins_runs_started_total", "workflow", "refunds"); !ok || got != 0 {
		t.Errorf("reins_runs_started_total of refunds, registered after start = %v (present: %v), want 0", got, ok)
	}
}
