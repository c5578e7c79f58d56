package mcptool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/tool"
)

// errClosed is the cause of a call after Close.
var errClosed = errors.New("the session is closed")

// Toolset is a connection to one MCP server, kept up, and the tools it offers. Its tools may be
// called concurrently. Close it when done: for a command, that ends the server process.
type Toolset struct {
	name   string
	prefix string
	client *mcp.Client
	// dial prepares one attempt: the transport, the process it starts (nil over HTTP) and the
	// sniffer of its tool listings.
	dial                                   func() (mcp.Transport, *process, *sniffer)
	hide                                   *strings.Replacer // the target's forms, replaced by the name in what errors say
	log                                    *slog.Logger
	clock                                  clock.Clock
	minBackoff, maxBackoff, connectTimeout time.Duration

	stop context.CancelFunc // ends the supervisor (Close)
	done chan struct{}      // closed when the supervisor returned

	mu       sync.Mutex
	state    connState
	cur      *conn // the session while up
	lastErr  error // why the last attempt failed, while down
	changed  chan struct{}
	tools    []tool.Tool
	byRemote map[string]*mcpTool
	refused  map[string]string
	starts   int

	closeOnce sync.Once
	closeErr  error // of the session closed last by the supervisor
}

// connState is where a Toolset stands.
type connState int

const (
	connecting connState = iota // an attempt is under way
	up                          // cur serves calls
	down                        // the last attempt failed; the next waits for its backoff
	closed                      // Close was called
)

// process is a server started as a command.
type process struct {
	cmd    *exec.Cmd
	stderr *tailBuffer
}

// conn is one session with the server.
type conn struct {
	session *mcp.ClientSession
	proc    *process // nil over HTTP

	lostOnce sync.Once
	lostErr  error
	lostCh   chan struct{} // closed when a call saw the session broken
}

// stderrNote is the last line the server wrote on its standard error, formatted to end an error
// message, or "" if there is none.
func (c *conn) stderrNote() string {
	if c == nil || c.proc == nil {
		return ""
	}
	return stderrNote(c.proc.stderr)
}

func stderrNote(b *tailBuffer) string {
	line := b.lastLine()
	if line == "" {
		return ""
	}
	return fmt.Sprintf(" (stderr: %q)", line)
}

// supervise starts the goroutine that connects and reconnects. keep says whether a failed first
// attempt is retried (Start) or ends it (Connect, which reports the failure).
func (ts *Toolset) supervise(keep bool) {
	ctx, cancel := context.WithCancel(context.Background())
	ts.stop, ts.done = cancel, make(chan struct{})
	go func() {
		defer close(ts.done)
		ts.run(ctx, keep)
	}()
}

// run connects, serves until the connection is lost, and connects again, with backoff, until
// ctx ends.
func (ts *Toolset) run(ctx context.Context, keep bool) {
	delay := ts.minBackoff
	for attempt := 1; ; attempt++ {
		c, err := ts.attempt(ctx)
		if ctx.Err() != nil {
			if c != nil {
				_ = c.close()
			}
			return
		}
		if errors.Is(err, errClosed) {
			return
		}
		if err != nil {
			ts.set(down, nil, err)
			if !keep && ts.Starts() == 0 {
				return // Connect reports it
			}
			ts.log.Warn("MCP server unavailable; trying again", "mcp_server", ts.name, "attempt", attempt, "retry_in", delay, "error", err.Error())
			if ts.clock.Sleep(ctx, delay) != nil {
				return
			}
			delay = min(delay*2, ts.maxBackoff)
			ts.set(connecting, nil, nil)
			continue
		}
		if n := ts.Starts(); n > 1 {
			ts.log.Info("MCP server is back", "mcp_server", ts.name, "attempts", attempt, "starts", n)
		} else {
			ts.log.Info("MCP server is up", "mcp_server", ts.name, "attempts", attempt)
		}
		since := ts.clock.Now()
		cause := ts.serve(ctx, c)
		if ctx.Err() != nil {
			return
		}
		if ts.clock.Now().Sub(since) >= ts.maxBackoff {
			delay = ts.minBackoff
		}
		ts.log.Warn("MCP server died; starting it again", "mcp_server", ts.name, "retry_in", delay, "error", ts.say(cause))
		if ts.clock.Sleep(ctx, delay) != nil {
			return
		}
		delay = min(delay*2, ts.maxBackoff)
		ts.set(connecting, nil, nil)
		attempt = 0
	}
}

// serve installs c and waits until it is lost (the server ended the session, its process
// exited, or a call saw it broken) or ctx ends; it closes c and returns why it was lost.
func (ts *Toolset) serve(ctx context.Context, c *conn) error {
	ended := make(chan error, 1)
	go func() { ended <- c.session.Wait() }()
	var cause error
	waited := false
	select {
	case err := <-ended:
		cause, waited = err, true
		if cause == nil {
			cause = errors.New("the server closed the connection")
		}
	case <-c.lostCh:
		cause = c.lostErr
	case <-ctx.Done():
	}
	ts.mu.Lock()
	if ts.cur == c {
		ts.cur = nil
		if ts.state == up {
			ts.state = connecting
			ts.broadcast()
		}
	}
	ts.mu.Unlock()
	if err := c.close(); err != nil && ctx.Err() != nil {
		ts.closeErr = fmt.Errorf("mcp server %q: close: %v", ts.name, err) // read by Close once run returned
	}
	if !waited {
		<-ended
	}
	if c.proc != nil && cause != nil {
		cause = fmt.Errorf("%w%s", cause, stderrNote(c.proc.stderr))
	}
	return cause
}

// attempt starts or reaches the server once and lists its tools; on success the session serves
// calls.
func (ts *Toolset) attempt(ctx context.Context) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, ts.connectTimeout)
	defer cancel()
	transport, proc, sn := ts.dial()
	session, err := ts.client.Connect(ctx, transport, nil)
	if err != nil {
		if proc != nil && proc.cmd.Process == nil {
			return nil, fmt.Errorf("mcp server %q: cannot start: %s", ts.name, ts.say(err))
		}
		note := ""
		if proc != nil {
			note = stderrNote(proc.stderr)
		}
		return nil, fmt.Errorf("mcp server %q: cannot connect: %s%s", ts.name, ts.say(err), note)
	}
	c := &conn{session: session, proc: proc, lostCh: make(chan struct{})}
	var listed []*mcp.Tool
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			_ = c.close()
			return nil, fmt.Errorf("mcp server %q: cannot list tools: %s%s", ts.name, ts.say(err), c.stderrNote())
		}
		listed = append(listed, t)
	}
	if err := ts.install(c, listed, sn.required()); err != nil {
		_ = c.close()
		return nil, err
	}
	return c, nil
}

// install makes c the session of the Toolset, with the tools it listed (those that require
// tasks refused).
func (ts *Toolset) install(c *conn, listed []*mcp.Tool, needTasks map[string]bool) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.state == closed {
		return errClosed
	}
	tools := make([]tool.Tool, 0, len(listed))
	refused := map[string]string{}
	for _, t := range listed {
		if needTasks[t.Name] {
			refused[ts.prefix+t.Name] = fmt.Sprintf("tool %s of MCP server %q requires MCP tasks (execution.taskSupport is \"required\"), which reins does not support", t.Name, ts.name)
			continue
		}
		mt := ts.byRemote[t.Name]
		if mt == nil {
			var err error
			if mt, err = ts.newTool(t); err != nil {
				return err
			}
		}
		nt, err := ts.newTool(t) // the spec as listed now
		if err != nil {
			return err
		}
		mt.spec = nt.spec
		ts.byRemote[t.Name] = mt
		tools = append(tools, mt)
	}
	for name, why := range refused {
		if _, known := ts.refused[name]; !known {
			ts.log.Warn("MCP tool not offered: it requires MCP tasks", "mcp_server", ts.name, "tool", name, "reason", why)
		}
	}
	ts.tools, ts.refused, ts.cur, ts.state, ts.lastErr = tools, refused, c, up, nil
	ts.starts++
	ts.broadcast()
	return nil
}

// set moves the Toolset to state st with session c and error err, unless it is closed.
func (ts *Toolset) set(st connState, c *conn, err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.state == closed {
		return
	}
	ts.state, ts.cur, ts.lastErr = st, c, err
	ts.broadcast()
}

// broadcast wakes those waiting for a change of state; ts.mu is held.
func (ts *Toolset) broadcast() {
	close(ts.changed)
	ts.changed = make(chan struct{})
}

func (ts *Toolset) isClosed() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.state == closed
}

// Ready waits until the server is connected, and returns nil then; or until an attempt to start
// or reach it failed, and returns that attempt's error (Start keeps trying in the background);
// or until ctx ends or the Toolset is closed.
func (ts *Toolset) Ready(ctx context.Context) error {
	_, err := ts.session(ctx)
	return err
}

// session waits for the state to settle and returns the session of the moment.
func (ts *Toolset) session(ctx context.Context) (*conn, error) {
	for {
		ts.mu.Lock()
		st, c, err, changed := ts.state, ts.cur, ts.lastErr, ts.changed
		ts.mu.Unlock()
		switch st {
		case up:
			return c, nil
		case down:
			return nil, err
		case closed:
			return nil, errClosed
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("mcp server %q: waiting for it to start: %w", ts.name, ctx.Err())
		}
	}
}

// say is what err says, with the server's name where it would show the target (an HTTP
// client's error quotes the URL, with its query).
func (ts *Toolset) say(err error) string {
	if ts.hide == nil {
		return err.Error()
	}
	return ts.hide.Replace(err.Error())
}

// lost tells the supervisor that a call saw c broken. The state moves at once, so that a call
// right after this one waits for the next session rather than try the broken one.
func (ts *Toolset) lost(c *conn, err error) {
	c.lostOnce.Do(func() {
		c.lostErr = err
		close(c.lostCh)
	})
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.cur == c && ts.state == up {
		ts.cur, ts.state = nil, connecting
		ts.broadcast()
	}
}

// close ends the session and, for a command, waits for the process (terminated, then killed, if
// it does not exit on its own); that the process exited with an error status (or was killed,
// say after crashing) is not an error.
func (c *conn) close() error {
	err := c.session.Close()
	if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
		err = nil
	}
	return err
}

// Close ends the session and stops restarting the server. For a command, the server's standard
// input is closed and the process is waited for (terminated, then killed, if it does not exit
// on its own). Calls after Close fail with a non-retryable error. Close is idempotent.
func (ts *Toolset) Close() error {
	ts.closeOnce.Do(func() {
		ts.mu.Lock()
		ts.state = closed // ts.cur stays for the supervisor to close
		ts.broadcast()
		ts.mu.Unlock()
		ts.stop()
		<-ts.done
	})
	return ts.closeErr
}
