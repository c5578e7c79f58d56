// Package mcptool turns the tools of an MCP (Model Context Protocol) server into reins tools.
//
// Connect starts a server as a subprocess speaking MCP over stdio, or reaches one over streamable
// HTTP, lists its tools, and returns a Toolset whose Tools can be handed to the loop like any
// other tool.Tool. Each MCP tool keeps its description and input schema; it is side-effecting
// unless its annotations say readOnlyHint, and never needs approval of its own (policy decides).
//
// A call sends the arguments as they are, with the idempotency key in the request's _meta under
// "reins/idempotency_key". Its output is always JSON: the structured content when the server
// gives one; otherwise the content items one per line (text as it is, other items summarized
// like "[image/png content, 1234 bytes]"), kept as they are when they form valid JSON and made a
// JSON string otherwise; null when there is no content at all. A tool that reports an error
// (isError), or a JSON-RPC error answered by the server (bad arguments, unknown tool), becomes a
// retryable *tool.Error the model can react to. A broken connection (the server crashed, the
// session is closed) becomes a non-retryable one naming the server, which stops the loop with
// tool_failure. The end of the caller's context is returned as an error wrapping the context's
// error.
//
// It owns the MCP session and, for a command, the server process. It must not know about budgets,
// policy or the loop: whether a call may run is decided before Call.
package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kballard/go-shellquote"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/tool"
)

// IdempotencyMetaKey is the key under which a call's idempotency key is sent to the server, in
// the request's _meta. A server that changes the world can use it to do each call at most once.
const IdempotencyMetaKey = "reins/idempotency_key"

// waitDelay bounds how long closing a server process waits for its stderr to be drained after
// it exited (a grandchild may keep the pipe open).
const waitDelay = 2 * time.Second

// stderrTail is how many bytes of a server's standard error are kept for error messages.
const stderrTail = 4 << 10

// Options configures Connect.
type Options struct {
	// Prefix is prepended to every tool name, e.g. "files_" turns read into files_read. It keeps
	// the tools of several servers apart. Model providers accept only letters, digits, _ and - in
	// tool names, so a prefix should use nothing else.
	Prefix string
	// Env is extra environment ("KEY=value") for a server started as a command, on top of the
	// current process's environment (a key set here wins). It is ignored for an HTTP server.
	Env []string
	// ClientName is the client name announced to the server (default "reins").
	ClientName string
	// Dir is the working directory of a server started as a command ("": the process's).
	Dir string
}

// Toolset is a connection to one MCP server and the tools it offers. Its tools may be called
// concurrently. Close it when done: for a command, that ends the server process.
type Toolset struct {
	target  string // how the server is named in errors
	name    string
	session *mcp.ClientSession
	tools   []tool.Tool
	cmd     *exec.Cmd // nil over HTTP
	stderr  *tailBuffer
	closed  atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// Connect starts or reaches the MCP server named by target and lists its tools (every page).
// A target starting with http:// or https:// is a streamable HTTP endpoint; anything else is a
// command line, split like a POSIX shell would (quotes and backslashes, no expansion), started
// as a subprocess that speaks MCP over its standard input and output; its standard error is not
// shown, but its last line is quoted in connection errors. ctx bounds the connection and the
// listing, not the lifetime of the session: give it a deadline, since a server that never
// answers would otherwise block Connect.
func Connect(ctx context.Context, target string, opts Options) (*Toolset, error) {
	ts := &Toolset{target: displayTarget(target)}
	var transport mcp.Transport
	if isURL(target) {
		u, err := url.Parse(target)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("mcp server %q: invalid URL: %v", ts.target, urlProblem(err))
		}
		transport = &mcp.StreamableClientTransport{Endpoint: target, DisableStandaloneSSE: true}
	} else {
		argv, err := shellquote.Split(target)
		if err != nil {
			return nil, fmt.Errorf("mcp server %q: cannot parse the command line: %v", ts.target, err)
		}
		if len(argv) == 0 {
			return nil, fmt.Errorf("mcp server %q: empty command line", ts.target)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		if len(opts.Env) > 0 {
			cmd.Env = append(os.Environ(), opts.Env...)
		}
		cmd.Dir = opts.Dir
		ts.stderr = &tailBuffer{max: stderrTail}
		cmd.Stderr = ts.stderr
		cmd.WaitDelay = waitDelay
		ts.cmd = cmd
		transport = &mcp.CommandTransport{Command: cmd}
	}

	clientName := opts.ClientName
	if clientName == "" {
		clientName = "reins"
	}
	client := mcp.NewClient(&mcp.Implementation{Name: clientName, Version: version()}, nil)
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		if ts.cmd != nil && ts.cmd.Process == nil {
			return nil, fmt.Errorf("mcp server %q: cannot start: %v", ts.target, err)
		}
		return nil, fmt.Errorf("mcp server %q: cannot connect: %v%s", ts.target, err, ts.stderrNote())
	}
	ts.session = session
	ts.name = ts.target
	if res := session.InitializeResult(); res != nil && res.ServerInfo != nil && res.ServerInfo.Name != "" {
		ts.name = res.ServerInfo.Name
	}

	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			_ = ts.Close()
			return nil, fmt.Errorf("mcp server %q: cannot list tools: %v%s", ts.target, err, ts.stderrNote())
		}
		mt, err := ts.newTool(opts.Prefix, t)
		if err != nil {
			_ = ts.Close()
			return nil, err
		}
		ts.tools = append(ts.tools, mt)
	}
	return ts, nil
}

// Tools returns the server's tools, in the order the server listed them.
func (ts *Toolset) Tools() []tool.Tool {
	return append([]tool.Tool(nil), ts.tools...)
}

// Name returns the name the server reported for itself, or its target if it reported none.
func (ts *Toolset) Name() string { return ts.name }

// Close ends the session. For a command, the server's standard input is closed and the process
// is waited for (terminated, then killed, if it does not exit on its own). Calls after Close fail
// with a non-retryable error. Close is idempotent; that the process exited with an error status
// (or was killed, say after crashing) is not a Close error.
func (ts *Toolset) Close() error {
	ts.closeOnce.Do(func() {
		ts.closed.Store(true)
		err := ts.session.Close()
		if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
			err = nil
		}
		if err != nil {
			ts.closeErr = fmt.Errorf("mcp server %q: close: %v", ts.target, err)
		}
	})
	return ts.closeErr
}

// stderrNote is the last line the server wrote on its standard error, formatted to end an error
// message, or "" if there is none.
func (ts *Toolset) stderrNote() string {
	if ts.stderr == nil {
		return ""
	}
	line := ts.stderr.lastLine()
	if line == "" {
		return ""
	}
	return fmt.Sprintf(" (stderr: %q)", line)
}

// mcpTool is one tool of a Toolset.
type mcpTool struct {
	ts     *Toolset
	remote string // the tool's name on the server
	spec   tool.Spec
}

func (ts *Toolset) newTool(prefix string, t *mcp.Tool) (*mcpTool, error) {
	var schema json.RawMessage
	if t.InputSchema != nil {
		b, err := marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("mcp server %q: tool %s: cannot encode its input schema: %v", ts.target, t.Name, err)
		}
		if !bytes.Equal(b, []byte("null")) {
			schema = b
		}
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if desc == "" && t.Annotations != nil {
		desc = t.Annotations.Title
	}
	return &mcpTool{ts: ts, remote: t.Name, spec: tool.Spec{
		Name:        prefix + t.Name,
		Description: desc,
		InputSchema: schema,
		SideEffect:  t.Annotations == nil || !t.Annotations.ReadOnlyHint,
	}}, nil
}

func (t *mcpTool) Spec() tool.Spec { return t.spec }

// Call sends the call to the server. The package documentation says how results and errors are
// mapped.
func (t *mcpTool) Call(ctx context.Context, args json.RawMessage, idempotencyKey string) (json.RawMessage, error) {
	ts := t.ts
	if ts.closed.Load() {
		return nil, &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: the session is closed", ts.target, t.remote)}
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	} else if !json.Valid(args) {
		return nil, &tool.Error{Message: fmt.Sprintf("arguments of %s are not valid JSON", t.spec.Name), Retryable: true, Err: tool.ErrInvalidArguments}
	}
	params := &mcp.CallToolParams{Name: t.remote, Arguments: args}
	if idempotencyKey != "" {
		params.Meta = mcp.Meta{IdempotencyMetaKey: idempotencyKey}
	}
	res, err := ts.session.CallTool(ctx, params)
	if err != nil {
		return nil, t.callError(ctx, err)
	}
	if res.IsError {
		msg := contentText(res.Content)
		if msg == "" {
			msg = fmt.Sprintf("tool %s reported an error without a message", t.remote)
		}
		return nil, &tool.Error{Message: msg, Retryable: true}
	}
	if res.StructuredContent != nil {
		out, err := marshal(res.StructuredContent)
		if err != nil {
			return nil, &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: cannot encode its structured result: %v", ts.target, t.remote, err), Retryable: true, Err: err}
		}
		return out, nil
	}
	if len(res.Content) == 0 {
		return json.RawMessage("null"), nil
	}
	text := contentText(res.Content)
	if json.Valid([]byte(text)) {
		return json.RawMessage(text), nil
	}
	return marshal(text)
}

// marshal encodes v as JSON without escaping <, > and &, which the model should read as they are.
func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// callError classifies a failed tools/call. The caller's context ending is reported as such (the
// loop knows when that is its own doing). An error response from a live server (bad parameters,
// an internal error of the tool) is retryable: the model sees it and may adapt. Anything else
// means the session is unusable (closed, server crashed, transport broken): non-retryable.
func (t *mcpTool) callError(ctx context.Context, err error) error {
	ts := t.ts
	if ctxErr := ctx.Err(); ctxErr != nil {
		return &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: %v", ts.target, t.remote, ctxErr), Retryable: true, Err: ctxErr}
	}
	var wire *jsonrpc.Error
	if !ts.closed.Load() && !errors.Is(err, mcp.ErrConnectionClosed) && errors.As(err, &wire) && serverReported(wire.Code) {
		return &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: %s", ts.target, t.remote, wire.Message), Retryable: true, Err: err}
	}
	what := "the connection failed"
	if ts.closed.Load() {
		what = "the session is closed"
	}
	return &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: %s: %v%s", ts.target, t.remote, what, err, ts.stderrNote()), Err: err}
}

// serverReported tells whether a JSON-RPC error code is an answer of the server about this call,
// as opposed to one the client library uses for a connection going away.
func serverReported(code int64) bool {
	switch code {
	case -32001, -32003, -32004, -32005: // unknown, client closing, server closing, rejected by transport
		return false
	case jsonrpc.CodeMethodNotFound: // the server does not serve tools/call at all
		return false
	}
	return true
}

// contentText renders content as text, one line per item: text as it is, anything else as a
// short summary such as "[image/png content, 1234 bytes]".
func contentText(content []mcp.Content) string {
	parts := make([]string, 0, len(content))
	for _, c := range content {
		parts = append(parts, contentItem(c))
	}
	return strings.Join(parts, "\n")
}

func contentItem(c mcp.Content) string {
	switch c := c.(type) {
	case *mcp.TextContent:
		return c.Text
	case *mcp.ImageContent:
		return fmt.Sprintf("[%s content, %d bytes]", orDefault(c.MIMEType, "image"), len(c.Data))
	case *mcp.AudioContent:
		return fmt.Sprintf("[%s content, %d bytes]", orDefault(c.MIMEType, "audio"), len(c.Data))
	case *mcp.ResourceLink:
		return fmt.Sprintf("[resource link %s]", c.URI)
	case *mcp.EmbeddedResource:
		r := c.Resource
		if r == nil {
			return "[empty embedded resource]"
		}
		if r.Text != "" || len(r.Blob) == 0 {
			return r.Text
		}
		return fmt.Sprintf("[%s resource %s, %d bytes]", orDefault(r.MIMEType, "binary"), r.URI, len(r.Blob))
	case nil:
		return ""
	default:
		return fmt.Sprintf("[%T content]", c)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func isURL(target string) bool {
	lower := strings.ToLower(target)
	return strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://")
}

// displayTarget is target as shown in errors: a URL without its password.
func displayTarget(target string) string {
	if !isURL(target) {
		return target
	}
	u, err := url.Parse(target)
	if err == nil {
		if u.User != nil {
			return u.Redacted()
		}
		return target
	}
	// Unparseable: hide anything that may be credentials, between the scheme and the last @.
	scheme := strings.Index(target, "://") + len("://")
	if at := strings.LastIndexByte(target, '@'); at > scheme {
		return target[:scheme] + "xxxxx" + target[at:]
	}
	return target
}

func urlProblem(err error) string {
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err.Error()
		}
		return err.Error()
	}
	return "no host"
}

// version is the reins module's version, as announced to servers.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	const path = "github.com/reins-run/reins"
	if info.Main.Path == path && info.Main.Version != "" {
		return info.Main.Version
	}
	for _, d := range info.Deps {
		if d.Path == path && d.Version != "" {
			return d.Version
		}
	}
	return "dev"
}

// tailBuffer keeps the last max bytes written to it. It is safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if len(p) >= b.max {
		p = p[len(p)-b.max:]
		b.buf = append(b.buf[:0], p...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// lastLine returns the last non-empty line written, trimmed.
func (b *tailBuffer) lastLine() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(string(b.buf))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	return s
}
