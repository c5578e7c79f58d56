//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/internal/testkit/natstest"
	"github.com/reins-run/reins/protocol"
)

// mcpSecret stands for a credential an operator put in an MCP server's command line: no run
// record, log line or error may show it.
const mcpSecret = "sk-mcp-operator-secret-4c3b2a1f0e9d"

// mcpWorkflow is an agent step that refunds an order through the MCP server server, retried
// when an attempt fails.
func mcpWorkflow(name, server, toolName string) string {
	return fmt.Sprintf(`name = %q

[models.m]
provider = "scripted"
script = [{ tool_calls = [{ name = %q, arguments = { order_id = "O-1" } }] }, { text = "done" }]

[tools.%s]
mcp = %q

[[steps]]
id = "pay"
type = "agent"
model = "m"
goal = "Refund order O-1."
tools = [%q]
retry = { max_attempts = 5, backoff = "fixed", initial_delay = "200ms" }
`, name, toolName, toolName, server, toolName)
}

// mcpCall is a line of the test server's calls file.
type mcpCall struct{ Tool, Key, Pid string }

func readLines(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// awaitHeld waits until the server's first refund opened the named pipe: the call runs.
func awaitHeld(t *testing.T, fifo string) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until the server opens it for writing
		if err == nil {
			_, err = bufio.NewReader(f).ReadString('\n')
			f.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the refund never reached the MCP server")
	}
}

// TestMCPServerRestart runs agents whose refund tool is served by the operator's MCP servers,
// one over stdio (its command line holding a secret) and one over streamable HTTP, and kills
// each with SIGKILL in the middle of a call: the server is started again (a warning under its
// name), the attempt runs again and the run completes; the stdio server is started once for
// every run after that; every call carries its idempotency key in _meta, the same key when an
// attempt calls again; a tool that requires MCP tasks fails its step before the model is
// asked, naming the tool and the server; nothing stored or logged shows the secret.
func TestMCPServerRestart(t *testing.T) {
	dir := t.TempDir()
	bin := buildtest.Program(t, "github.com/reins-run/reins/e2e/testdata/mcpserver")
	starts, calls, webCalls := filepath.Join(dir, "starts"), filepath.Join(dir, "calls"), filepath.Join(dir, "webcalls")
	fifo, webFifo := filepath.Join(dir, "hold"), filepath.Join(dir, "webhold")
	for _, f := range []string{fifo, webFifo} {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	webAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	startWeb := func() *proc {
		p := start(t, "mcpserver -http", nil, bin, "-http", webAddr, "-calls", webCalls, "-hold", webFifo)
		p.waitFor("http://", 30*time.Second)
		return p
	}
	web := startWeb()
	cmd, _ := json.Marshal([]string{bin, "-starts", starts, "-calls", calls, "-hold", fifo, "-token", mcpSecret})
	h := hostileServer(t, fmt.Sprintf("\n[mcp.orders]\ncommand = %s\n\n[mcp.web]\nurl = \"http://%s/mcp\"\n", cmd, webAddr))
	// The worker starts the operator's servers, before any run needs them.
	if !h.proc.awaitLine(`msg="MCP server is up" mcp_server=orders`, time.Minute) {
		t.Fatal("reins serve did not start the MCP server orders")
	}
	if n := len(readLines(t, starts)); n != 1 {
		t.Fatalf("the stdio server was started %d times at the worker's start, want once", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, bob := h.client(ctx, attackBobToken)
	h.register(attackBobToken, "refund", mcpWorkflow("refund", "orders", "refund"))
	h.register(attackBobToken, "webrefund", mcpWorkflow("webrefund", "web", "refund"))
	h.register(attackBobToken, "tasks", mcpWorkflow("tasks", "orders", "needs_task"))

	// completes waits for run id and checks it completed after tasks tasks: two iterations, and
	// an attempt of the first that met a dead server.
	completes := func(id string, tasks int) {
		t.Helper()
		rec, err := bob.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		step := rec.Run.Steps["pay"]
		if rec.Run.Status != protocol.RunCompleted || step.StopReason != "completed" || step.Attempts != tasks {
			t.Fatalf("run %s: %s, step %+v; want completed after %d tasks", id, rec.Run.Status, step, tasks)
		}
	}

	t.Run("a stdio server killed mid-call is started again and the run completes", func(t *testing.T) {
		id := h.startAs(attackBobToken, "refund")
		awaitHeld(t, fifo)
		pids := readLines(t, starts)
		if len(pids) != 1 {
			t.Fatalf("the server was started %d times before the first call, want once (at the worker's start)", len(pids))
		}
		pid, _ := strconv.Atoi(pids[0])
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		completes(id, 3)
		if !h.proc.awaitLine(`level=WARN msg="MCP server died; starting it again" mcp_server=orders`, time.Minute) {
			t.Error("the death of orders was not logged as a warning naming it")
		}
		show := exec.CommandContext(ctx, bins.reins, "runs", "show", id, "--nats", h.nats)
		show.Env = append(os.Environ(), "REINS_TOKEN="+attackBobToken)
		out, err := show.CombinedOutput()
		if err != nil {
			t.Fatalf("runs show: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), `mcp server "orders"`) {
			t.Errorf("runs show names no MCP server in the failed attempt:\n%s", out)
		}
	})

	t.Run("the stdio server is started once for every later run", func(t *testing.T) {
		for range 3 {
			completes(h.startAs(attackBobToken, "refund"), 2)
		}
		if n := len(readLines(t, starts)); n != 2 {
			t.Errorf("the server was started %d times, want 2 (the worker's start and the restart)", n)
		}
	})

	t.Run("an HTTP server killed mid-call and started again on its port is reached again", func(t *testing.T) {
		id := h.startAs(attackBobToken, "webrefund")
		awaitHeld(t, webFifo)
		web.kill()
		<-web.exited
		startWeb()
		completes(id, 3)
		if !h.proc.awaitLine(`level=WARN msg="MCP server died; starting it again" mcp_server=web`, time.Minute) {
			t.Error("the loss of web was not logged as a warning naming it")
		}
	})

	t.Run("every call carries its idempotency key in _meta", func(t *testing.T) {
		for _, file := range []string{calls, webCalls} {
			var got []mcpCall
			for _, l := range readLines(t, file) {
				var c mcpCall
				if err := json.Unmarshal([]byte(l), &c); err != nil {
					t.Fatal(err)
				}
				got = append(got, c)
			}
			if len(got) < 2 {
				t.Fatalf("%s: %d calls, want the held one and its retry at least", file, len(got))
			}
			for _, c := range got {
				if c.Key == "" {
					t.Errorf("%s: a call of %s carried no idempotency key", file, c.Tool)
				}
			}
			// The held call and the call of the attempt that ran again: one key, two processes.
			if got[0].Key != got[1].Key || got[0].Pid == got[1].Pid {
				t.Errorf("%s: the held call %+v and the one after the restart %+v; want one key from two processes", file, got[0], got[1])
			}
		}
	})

	t.Run("a tool that requires MCP tasks is refused", func(t *testing.T) {
		id := h.startAs(attackBobToken, "tasks")
		rec, err := bob.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		step := rec.Run.Steps["pay"]
		if rec.Run.Status != protocol.RunFailed || !strings.Contains(step.Error, "tool needs_task cannot be offered") ||
			!strings.Contains(step.Error, `MCP server "orders" requires MCP tasks`) || step.Usage.ModelCalls != 0 {
			t.Errorf("run %s, step %+v; want failed naming needs_task and orders, no model call", rec.Run.Status, step)
		}
	})

	out := strings.Join(h.proc.output(), "\n")
	if strings.Contains(out, mcpSecret) || strings.Contains(out, "-token") {
		t.Errorf("reins serve logged the MCP server's command line")
	}
	h.proc.signal(15) // SIGTERM: the store is flushed to its files
	<-h.proc.exited
	h.scan(mcpSecret, "-token", bin)
}
