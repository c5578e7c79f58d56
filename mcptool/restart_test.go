package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
)

// fakeSecret stands for a secret an operator put in a server's command line; nothing the
// package says may show it.
const fakeSecret = "sk-mcp-fake-secret-0a9b8c7d"

// logRecord is one record a Toolset logged: level, message and attributes as text.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
	text  string // all of it, for the scan of secrets
}

// logCatcher is a slog handler that hands each record to the test.
type logCatcher struct{ ch chan logRecord }

func newLogCatcher() (*slog.Logger, chan logRecord) {
	ch := make(chan logRecord, 1000)
	return slog.New(logCatcher{ch}), ch
}

func (logCatcher) Enabled(context.Context, slog.Level) bool { return true }
func (h logCatcher) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h logCatcher) WithGroup(string) slog.Handler          { return h }

func (h logCatcher) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		fmt.Fprintf(&b, " %s=%s", a.Key, a.Value)
		return true
	})
	rec.text = b.String()
	h.ch <- rec
	return nil
}

// awaitLog returns the first record with message msg, failing the test on one that shows the
// fake secret or the test binary's command line, and after a minute without it.
func awaitLog(t *testing.T, ch chan logRecord, msg string) logRecord {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case r := <-ch:
			if strings.Contains(r.text, fakeSecret) || strings.Contains(r.text, "-test.run") {
				t.Fatalf("a log record shows the command line: %s", r.text)
			}
			if r.msg == msg {
				return r
			}
		case <-timeout:
			t.Fatalf("no log record %q within a minute", msg)
		}
	}
}

// serverCmd is the process of the session of the moment.
func serverCmd(t *testing.T, ts *Toolset) *exec.Cmd {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.cur == nil || ts.cur.proc == nil {
		t.Fatal("no server process is up")
	}
	return ts.cur.proc.cmd
}

// wantUnavailable checks a call's error: retryable, wrapping ErrUnavailable, naming the server
// and the tool, showing nothing of the command line.
func wantUnavailable(t *testing.T, err error, server, toolName string) {
	t.Helper()
	te := wantToolError(t, err, true, fmt.Sprintf("mcp server %q", server), "tool "+toolName)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("error %q does not wrap ErrUnavailable", err)
	}
	if strings.Contains(te.Error(), fakeSecret) || strings.Contains(te.Error(), "-test.run") {
		t.Errorf("error %q shows the command line", te)
	}
}

// fastBackoff makes restarts quick in tests on the real clock.
func fastBackoff(o Options) Options {
	o.MinBackoff, o.MaxBackoff = time.Millisecond, 20*time.Millisecond
	return o
}

// TestStdioRestart kills a stdio server with SIGKILL in the middle of a call: the call fails
// with a retryable error naming the server, the server is started again (a warning logged under
// its name, never its command line), and calls go on on the new process.
func TestStdioRestart(t *testing.T) {
	log, logs := newLogCatcher()
	ts, err := Connect(context.Background(), stdioCommand()+" --token "+fakeSecret, fastBackoff(Options{Name: "files", Env: serverEnvFor("stdio"), Logger: log}))
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	tools := toolMap(t, ts)
	call(t, tools["echo"], `{"text":"before"}`, "")
	first := serverCmd(t, ts)

	// A call in flight when the server dies.
	fifo := makeFifo(t)
	args, _ := json.Marshal(map[string]string{"fifo": fifo})
	done := make(chan error, 1)
	go func() {
		_, err := tools["slow"].Call(context.Background(), args, "r/1/0")
		done <- err
	}()
	awaitFifo(t, fifo, done)
	if err := first.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	wantUnavailable(t, <-done, "files", "slow")

	died := awaitLog(t, logs, "MCP server died; starting it again")
	if died.level != slog.LevelWarn || died.attrs["mcp_server"] != "files" {
		t.Errorf("the death was logged as %s %q, want a warning naming files", died.level, died.text)
	}
	awaitLog(t, logs, "MCP server is back")
	if got := call(t, tools["echo"], `{"text":"after"}`, ""); got != `"after"` {
		t.Errorf("echo after the restart = %s", got)
	}
	if again := serverCmd(t, ts); again.Process.Pid == first.Process.Pid {
		t.Errorf("the server runs as pid %d, the process that was killed", again.Process.Pid)
	}
	if n := ts.Starts(); n != 2 {
		t.Errorf("Starts() = %d, want 2", n)
	}
	if first.ProcessState == nil {
		t.Error("the killed server process was not waited for")
	}
}

// awaitFifo waits until the slow tool opened fifo, that is until its call runs on the server.
func awaitFifo(t *testing.T, fifo string, done chan error) {
	t.Helper()
	started := make(chan error, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until the server opens it for writing
		if err == nil {
			_, err = f.Read(make([]byte, 64))
			f.Close()
		}
		started <- err
	}()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("waiting for slow to start: %v", err)
		}
	case err := <-done:
		unblockFifo(fifo)
		<-started
		t.Fatalf("slow returned before it started: %v", err)
	}
}

// TestHTTPRestart stops an HTTP server and starts another on its port: a call in between fails
// retryably naming the server, the attempts to reach it are logged, and it is reached again.
// A server restarted between two calls (which forgot the session) is reached again too.
func TestHTTPRestart(t *testing.T) {
	srv := startHTTPServer(t, "")
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	log, logs := newLogCatcher()
	ts, err := Connect(context.Background(), srv.URL, fastBackoff(Options{Name: "web", Logger: log}))
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	tools := toolMap(t, ts)
	call(t, tools["echo"], `{"text":"before"}`, "")

	srv.kill()
	_, err = tools["echo"].Call(context.Background(), json.RawMessage(`{"text":"down"}`), "")
	wantUnavailable(t, err, "web", "echo")
	if r := awaitLog(t, logs, "MCP server unavailable; trying again"); r.level != slog.LevelWarn || r.attrs["mcp_server"] != "web" {
		t.Errorf("a failed attempt was logged as %s %q, want a warning naming web", r.level, r.text)
	}
	startHTTPServer(t, u.Host)
	awaitLog(t, logs, "MCP server is back")
	if got := call(t, tools["echo"], `{"text":"after"}`, ""); got != `"after"` {
		t.Errorf("echo once the server is back = %s", got)
	}

	// Restarted between calls: the new server does not know the session.
	srv2 := startHTTPServer(t, "")
	ts2, err := Connect(context.Background(), srv2.URL, fastBackoff(Options{Name: "web2", Logger: log}))
	if err != nil {
		t.Fatal(err)
	}
	defer ts2.Close()
	call(t, toolMap(t, ts2)["echo"], `{"text":"before"}`, "")
	u2, _ := url.Parse(srv2.URL)
	srv2.kill()
	startHTTPServer(t, u2.Host)
	_, err = toolMap(t, ts2)["echo"].Call(context.Background(), json.RawMessage(`{"text":"forgotten"}`), "")
	wantUnavailable(t, err, "web2", "echo")
	for r := awaitLog(t, logs, "MCP server is back"); r.attrs["mcp_server"] != "web2"; r = awaitLog(t, logs, "MCP server is back") {
	}
	if got := call(t, toolMap(t, ts2)["echo"], `{"text":"after"}`, ""); got != `"after"` {
		t.Errorf("echo once reached again = %s", got)
	}
}

// TestBackoff: a server that cannot start is tried again and again, the wait doubling from
// MinBackoff up to MaxBackoff, each failure a warning naming the server; Ready reports the
// failure, and Close stops the attempts.
func TestBackoff(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	log, logs := newLogCatcher()
	ts, err := Start("reins-no-such-command-4711 --token "+fakeSecret, Options{Name: "ghost", Clock: clk, Logger: log, MinBackoff: time.Second, MaxBackoff: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		r := awaitLog(t, logs, "MCP server unavailable; trying again")
		if r.level != slog.LevelWarn || r.attrs["mcp_server"] != "ghost" || r.attrs["retry_in"] != want.String() || r.attrs["attempt"] != fmt.Sprint(i+1) {
			t.Fatalf("attempt %d logged %s %q; want a warning naming ghost, retry_in=%s", i+1, r.level, r.text, want)
		}
		if i == 0 {
			err := ts.Ready(context.Background())
			if err == nil || !strings.Contains(err.Error(), `mcp server "ghost": cannot start`) || strings.Contains(err.Error(), fakeSecret) {
				t.Fatalf("Ready = %v, want the failure naming ghost", err)
			}
		}
		advanceToNext(clk, want)
	}
	awaitLog(t, logs, "MCP server unavailable; trying again") // the fifth attempt failed too
	if err := ts.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err = (&mcpTool{ts: ts, remote: "x"}).Call(context.Background(), nil, "")
	wantToolError(t, err, false, `mcp server "ghost"`, "closed")
}

// advanceToNext moves clk by d once something waits on it (the supervisor logs before it
// sleeps).
func advanceToNext(clk *clock.Manual, d time.Duration) {
	for {
		if _, ok := clk.Next(); ok {
			clk.Advance(d)
			return
		}
		runtime.Gosched()
	}
}

// TestLoopGoesOn: a server killed between two iterations of a loop is started again, and the
// loop goes on to its answer.
func TestLoopGoesOn(t *testing.T) {
	log, logs := newLogCatcher()
	ts, err := Connect(context.Background(), stdioCommand(), fastBackoff(Options{Env: serverEnvFor("stdio"), Logger: log}))
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	answer := "done"
	m, err := model.NewScripted([]model.Turn{
		{ToolCalls: []model.ToolCall{{Name: "fail"}}},
		{ToolCalls: []model.ToolCall{{Name: "echo", Arguments: json.RawMessage(`{"text":"x"}`)}}},
		{Text: &answer},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loop.New(loop.Config{Model: m, Tools: ts.Tools()})
	if err != nil {
		t.Fatal(err)
	}
	r := c.Start("run-2", "Try.")
	if r.Step(context.Background()) {
		t.Fatalf("the run stopped after a retryable tool error: %s", r.Result().Detail)
	}
	if err := serverCmd(t, ts).Process.Kill(); err != nil {
		t.Fatal(err)
	}
	awaitLog(t, logs, "MCP server is back")
	for !r.Step(context.Background()) {
	}
	res := r.Result()
	if res.StopReason != loop.Completed || res.Answer != answer {
		t.Errorf("stop reason %s (%s), want completed", res.StopReason, res.Detail)
	}
	var last string
	for _, msg := range res.State.Messages {
		if msg.Role == model.RoleTool {
			last = msg.Content
		}
	}
	if last != `"x"` {
		t.Errorf("the echo after the restart answered %s", last)
	}
}
