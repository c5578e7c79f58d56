package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// longIterations and longResult shape AgentLong: a built-in agent of 1,000 iterations whose
// every tool call returns 30 KB.
const (
	longIterations = 1000
	longResult     = 30 << 10
)

// longWorkflow is the workflow of AgentLong: an agent step on a scripted model that calls
// fetch with a new page each turn, then answers; fetch is mocked with 30 KB. policy is the
// step's context key (empty: none).
func longWorkflow(policy string) string {
	var b strings.Builder
	b.WriteString("name = \"agent-long\"\ndeadline = \"24h\"\n\n[models.long]\nprovider = \"scripted\"\nscript = [\n")
	for i := 1; i < longIterations; i++ {
		fmt.Fprintf(&b, "  { tool_calls = [{ name = \"fetch\", arguments = { page = %d } }], usage = { input_tokens = 1000, output_tokens = 20 } },\n", i)
	}
	b.WriteString("  { text = \"done\" },\n]\n\n[tools.fetch]\ndescription = \"Fetch a page.\"\n")
	b.WriteString("input_schema = { type = \"object\", properties = { page = { type = \"integer\" } }, required = [\"page\"] }\n")
	fmt.Fprintf(&b, "mock = [{ output = %q }]\n\n", strings.Repeat("r", longResult-2))
	b.WriteString("[[steps]]\nid = \"long\"\ntype = \"agent\"\nmodel = \"long\"\ngoal = \"Read every page.\"\ntools = [\"fetch\"]\n")
	fmt.Fprintf(&b, "budget = { max_iterations = %d, max_tool_calls = %d, max_duration = \"1h\" }\n", longIterations, longIterations)
	if policy != "" {
		b.WriteString("context = " + policy + "\n")
	}
	return b.String()
}

// longContext is the context policy AgentLong runs with: about 100k tokens, the oldest left out.
const longContext = `{ max_tokens = 100000, strategy = "drop_oldest" }`

// AgentLong runs one built-in agent of 1,000 iterations with 30 KB tool results, durably, and
// reports what the issue asks to be flat: the bytes written per iteration (checkpoints and
// events) and the mean time between iterations, over the first and the last 100 iterations, and
// the resident memory of this process (engine, worker and embedded server) at iterations 100 and
// 1,000.
//
// With $REINS_BENCH_NATS=process the server is a nats-server process of its own (built from
// the module's nats-server): this process's resident set is then the engine's and the
// worker's alone, and the server's is reported beside it.
func AgentLong(b B) {
	def, problems := workflow.Parse("agent-long.toml", []byte(longWorkflow(longContext)))
	if len(problems) > 0 {
		b.Fatal(problems.Error())
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		b.Fatal(err)
	}
	cfg := host.Config{Engine: true, Concurrency: 16,
		Register: func(w *worker.Worker) error { return builtin.Register(w, builtin.Config{}) }}
	var m longMeter
	var h *host.Host
	if os.Getenv("REINS_BENCH_NATS") == "process" {
		var server *os.Process
		var box *natsbox.Box
		if box, server = serverProcess(b); server != nil {
			cfg.Conn = (*conn.Conn)(box)
			defer server.Kill()
			defer box.Close()
			m.server = server.Pid
		}
		h, err = host.Start(context.Background(), cfg)
	} else {
		h, err = host.StartEmbedded(context.Background(), b.TempDir(), cfg)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer h.Stop()
	c := client.New(client.Config{Conn: h.Conn()})
	b.ResetTimer()
	for range b.Loops() {
		m.run(b, (*natsbox.Box)(h.Conn()), c, bs)
	}
	b.StopTimer()
	m.report(b)
}

// longSample is what AgentLong reads as the run goes: the bytes of the checkpoints bucket and
// the events stream, and the resident memory.
type longSample struct {
	iteration       int
	checkpoint, evs uint64
	rss             int64
	serverRSS       int64  // of the nats-server process, when there is one
	live            uint64 // the heap the last collection kept
	at              time.Time
}

type longMeter struct {
	mu      sync.Mutex
	samples []longSample // of the last run: at iterations 100, 200, 900 and 1,000
	runs    int
	server  int // the pid of the nats-server process, 0 when embedded
}

// run runs the agent once and samples it at iterations 100, 200, 900 and its end.
func (m *longMeter) run(b B, box *natsbox.Box, c *client.Client, bs *workflow.Bundles) {
	ctx := context.Background()
	id, err := c.Start(ctx, bs, json.RawMessage(`null`), "")
	if err != nil {
		b.Fatal(err)
	}
	want := map[int]bool{100: true, 200: true, 900: true}
	var samples []longSample
	for u, err := range c.Watch(ctx, id, client.WatchOptions{}) {
		if err != nil {
			b.Fatal(err)
		}
		ev := u.Event
		if ev == nil || ev.Step != "long" || (ev.Type != protocol.EvContinued && ev.Type != protocol.EvCompleted) {
			if u.Record != nil && u.Record.Finished() && u.Record.Run.Status != protocol.RunCompleted {
				b.Fatalf("the agent ended %s: %+v", u.Record.Run.Status, u.Record.Run.Error)
			}
			continue
		}
		if want[ev.Iteration] || ev.Type == protocol.EvCompleted {
			s := sample(b, box, ev.Iteration)
			if m.server != 0 {
				s.serverRSS = rssOf(b, fmt.Sprintf("/proc/%d/status", m.server))
			}
			samples = append(samples, s)
		}
	}
	if len(samples) != 4 || samples[3].iteration != longIterations {
		b.Fatalf("the agent was sampled at %v, want iterations 100, 200, 900 and %d", samples, longIterations)
	}
	m.mu.Lock()
	m.samples, m.runs = samples, m.runs+1
	m.mu.Unlock()
}

func sample(b B, box *natsbox.Box, iteration int) longSample {
	ctx := context.Background()
	js := box.JetStream()
	kv, err := js.KeyValue(ctx, box.Names().CheckpointsBucket())
	if err != nil {
		b.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	s, err := js.Stream(ctx, box.Names().EventsStream())
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	return longSample{iteration: iteration, checkpoint: st.Bytes(), evs: info.State.Bytes, rss: rssBytes(b), live: live[0].Value.Uint64(), at: time.Now()}
}

func (m *longMeter) report(b B) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.samples
	if len(s) != 4 {
		return
	}
	per := func(a, z longSample, f func(longSample) uint64) float64 {
		return float64(f(z)-f(a)) / float64(z.iteration-a.iteration)
	}
	cp := func(x longSample) uint64 { return x.checkpoint }
	ev := func(x longSample) uint64 { return x.evs }
	b.ReportMetric(per(s[0], s[1], cp), "first100-checkpoint-B/iter")
	b.ReportMetric(per(s[2], s[3], cp), "last100-checkpoint-B/iter")
	b.ReportMetric(float64(s[3].checkpoint)/float64(s[3].iteration), "checkpoint-B/iter")
	b.ReportMetric(per(s[0], s[1], ev), "first100-events-B/iter")
	b.ReportMetric(per(s[2], s[3], ev), "last100-events-B/iter")
	b.ReportMetric(float64(s[1].at.Sub(s[0].at).Nanoseconds())/100, "first100-iter-ns")
	b.ReportMetric(float64(s[3].at.Sub(s[2].at).Nanoseconds())/100, "last100-iter-ns")
	b.ReportMetric(float64(s[0].rss)/(1<<20), "rss100-MB")
	b.ReportMetric(float64(s[3].rss)/(1<<20), "rss1000-MB")
	if m.server != 0 {
		b.ReportMetric(float64(s[0].serverRSS)/(1<<20), "server-rss100-MB")
		b.ReportMetric(float64(s[3].serverRSS)/(1<<20), "server-rss1000-MB")
	}
	b.ReportMetric(float64(s[0].live)/(1<<20), "live100-MB")
	b.ReportMetric(float64(s[3].live)/(1<<20), "live1000-MB")
}

// serverProcess builds nats-server from the module, starts it with JetStream on a free
// loopback port and a temporary store, and connects to it.
func serverProcess(b B) (*natsbox.Box, *os.Process) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "nats-server")
	build := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build nats-server: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-js", "-sd", filepath.Join(dir, "store"), "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go cmd.Wait() // reaps it once killed
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	for {
		box, err := natsbox.Open(ctx, natsbox.Options{URL: url})
		if err == nil {
			return box, cmd.Process
		}
		select {
		case <-ctx.Done():
			cmd.Process.Kill()
			b.Fatalf("nats-server on %s did not take connections: %v", url, err)
		case <-time.After(50 * time.Millisecond): // polling a process that is starting
		}
	}
}
