// Package mcptool turns the tools of an MCP (Model Context Protocol) server into reins tools, and
// keeps the server up.
//
// Connect starts a server as a subprocess speaking MCP over stdio, or reaches one over streamable
// HTTP, lists its tools, and returns a Toolset whose Tools can be handed to the loop like any
// other tool.Tool; Start does the same in the background, for a server that should be up before
// anyone calls it. Each MCP tool keeps its description and input schema; it is side-effecting
// unless its annotations say readOnlyHint, and never needs approval of its own (policy decides).
// A tool that requires MCP tasks (execution.taskSupport "required", MCP 2025-11-25) is not
// offered: the Go SDK this package is built on has no task-augmented tools/call, so such a tool
// could only fail; Refused names it.
//
// A server that dies (its process exits, its connection breaks, an HTTP server forgets the
// session) is started or reached again with exponential backoff, each attempt logged at warning
// level under the server's name: the name the caller gives in Options.Name, never the command
// line, its arguments, its environment or its URL's query, which may hold secrets. Errors name the
// server the same way.
//
// A call sends the arguments as they are, with the idempotency key in the request's _meta under
// "reins/idempotency_key" (IdempotencyMetaKey). Its output is always JSON: the structured content
// when the server gives one; otherwise the content items one per line (text as it is, other items
// summarized like "[image/png content, 1234 bytes]"), kept as they are when they form valid JSON
// and made a JSON string otherwise; null when there is no content at all. A tool that reports an
// error (isError), or a JSON-RPC error answered by the server (bad arguments, unknown tool),
// becomes a retryable *tool.Error the model can react to. A call that finds its server down, or
// whose server dies during it, becomes a retryable *tool.Error wrapping ErrUnavailable: a durable
// caller fails the attempt so that it runs again once the server is back (the call, if it was in
// flight, may then be made twice, with the same idempotency key). A call after Close is a
// non-retryable one. The end of the caller's context is returned as an error wrapping the
// context's error.
//
// It owns the MCP sessions and, for a command, the server processes. It must not know about
// budgets, policy or the loop: whether a call may run is decided before Call.
package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/kballard/go-shellquote"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/tool"
)

// IdempotencyMetaKey is the key under which a call's idempotency key is sent to the server, in
// the request's _meta. A server that changes the world can use it to do each call at most once.
const IdempotencyMetaKey = "reins/idempotency_key"

// ErrUnavailable is wrapped by the error of a call that found its server down or saw it die.
var ErrUnavailable = errors.New("the MCP server is unavailable")

// waitDelay bounds how long closing a server process waits for its stderr to be drained after
// it exited (a grandchild may keep the pipe open).
const waitDelay = 2 * time.Second

// stderrTail is how many bytes of a server's standard error are kept for error messages.
const stderrTail = 4 << 10

// Defaults of Options.
const (
	DefaultMinBackoff     = 250 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultConnectTimeout = 30 * time.Second
)

// Options configures Connect and Start.
type Options struct {
	// Name names the server in errors and logs (default: the program's file name, or the URL's
	// scheme, host and path). It should say which server this is, not how it is started.
	Name string
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
	// Logger receives a warning for each time the server is found dead and each failed attempt
	// to start or reach it again, and an info line when it is back (nil: discarded).
	Logger *slog.Logger
	// Clock times the waits between attempts (nil: the real clock).
	Clock clock.Clock
	// MinBackoff and MaxBackoff bound the wait before an attempt to start or reach the server
	// again: MinBackoff after it died, doubled after each failed attempt up to MaxBackoff, and
	// MinBackoff again once a connection lasted MaxBackoff (defaults DefaultMinBackoff,
	// DefaultMaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// ConnectTimeout bounds one attempt: starting or reaching the server and listing its tools
	// (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
}

// Connect starts or reaches the MCP server named by target and lists its tools (every page).
// A target starting with http:// or https:// is a streamable HTTP endpoint; anything else is a
// command line, split like a POSIX shell would (quotes and backslashes, no expansion), started
// as a subprocess that speaks MCP over its standard input and output; its standard error is not
// shown, but its last line is quoted in connection errors. ctx bounds the first connection, not
// the lifetime of the Toolset; if the first attempt fails, Connect returns its error and keeps
// nothing. Once connected, the server is restarted or reached again whenever it dies.
func Connect(ctx context.Context, target string, opts Options) (*Toolset, error) {
	ts, err := newToolset(target, opts)
	if err != nil {
		return nil, err
	}
	ts.supervise(false)
	if err := ts.Ready(ctx); err != nil {
		_ = ts.Close()
		return nil, err
	}
	return ts, nil
}

// Start is Connect in the background: it returns at once (failing only on a target it cannot
// parse), and keeps trying to start or reach the server, with backoff, until Close. Ready waits
// for the first connection; until then Tools is empty.
func Start(target string, opts Options) (*Toolset, error) {
	ts, err := newToolset(target, opts)
	if err != nil {
		return nil, err
	}
	ts.supervise(true)
	return ts, nil
}

// newToolset checks target and prepares the Toolset that connects to it.
func newToolset(target string, opts Options) (*Toolset, error) {
	name := opts.Name
	if name == "" {
		name = defaultName(target)
	}
	ts := &Toolset{name: name, prefix: opts.Prefix, log: opts.Logger, clock: opts.Clock,
		minBackoff: opts.MinBackoff, maxBackoff: opts.MaxBackoff, connectTimeout: opts.ConnectTimeout,
		changed: make(chan struct{}), byRemote: map[string]*mcpTool{}, refused: map[string]string{}}
	if ts.log == nil {
		ts.log = slog.New(slog.DiscardHandler)
	}
	if ts.clock == nil {
		ts.clock = clock.Real{}
	}
	if ts.minBackoff <= 0 {
		ts.minBackoff = DefaultMinBackoff
	}
	if ts.maxBackoff < ts.minBackoff {
		ts.maxBackoff = max(DefaultMaxBackoff, ts.minBackoff)
	}
	if ts.connectTimeout <= 0 {
		ts.connectTimeout = DefaultConnectTimeout
	}
	clientName := opts.ClientName
	if clientName == "" {
		clientName = "reins"
	}
	ts.client = mcp.NewClient(&mcp.Implementation{Name: clientName, Version: version()}, nil)
	if isURL(target) {
		u, err := url.Parse(target)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("mcp server %q: invalid URL: %v", name, urlProblem(err))
		}
		ts.hide = urlHider(target, name, u)
		ts.dial = func() (mcp.Transport, *process, *sniffer) {
			sn := &sniffer{}
			return &mcp.StreamableClientTransport{Endpoint: target, DisableStandaloneSSE: true, HTTPClient: sn.httpClient()}, nil, sn
		}
		return ts, nil
	}
	argv, err := shellquote.Split(target)
	if err != nil {
		return nil, fmt.Errorf("mcp server %q: cannot parse the command line: %v", name, err)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("mcp server %q: empty command line", name)
	}
	ts.hide = strings.NewReplacer(target, name)
	ts.dial = func() (mcp.Transport, *process, *sniffer) {
		cmd := exec.Command(argv[0], argv[1:]...)
		if len(opts.Env) > 0 {
			cmd.Env = append(os.Environ(), opts.Env...)
		}
		cmd.Dir = opts.Dir
		p := &process{cmd: cmd, stderr: &tailBuffer{max: stderrTail}}
		cmd.Stderr = p.stderr
		cmd.WaitDelay = waitDelay
		sn := &sniffer{}
		return sn.transport(&mcp.CommandTransport{Command: cmd}), p, sn
	}
	return ts, nil
}

// Tools returns the server's tools, in the order the server listed them last, without those it
// refused (Refused). It is empty until the first connection.
func (ts *Toolset) Tools() []tool.Tool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]tool.Tool(nil), ts.tools...)
}

// Refused returns the tools of the server that are not offered, by their name (with the prefix),
// each with the sentence that says why.
func (ts *Toolset) Refused() map[string]string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make(map[string]string, len(ts.refused))
	for k, v := range ts.refused {
		out[k] = v
	}
	return out
}

// Name returns the name the server goes by in errors and logs: Options.Name, or the default
// derived from the target.
func (ts *Toolset) Name() string { return ts.name }

// Starts returns how many times the server was started or reached (successful connections).
func (ts *Toolset) Starts() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.starts
}

// mcpTool is one tool of a Toolset. It stays valid across restarts of the server: each call
// goes to the session of the moment.
type mcpTool struct {
	ts     *Toolset
	remote string // the tool's name on the server
	spec   tool.Spec
}

// newTool makes the tool t of a listing.
func (ts *Toolset) newTool(t *mcp.Tool) (*mcpTool, error) {
	var schema json.RawMessage
	if t.InputSchema != nil {
		b, err := marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("mcp server %q: tool %s: cannot encode its input schema: %v", ts.name, t.Name, err)
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
		Name:        ts.prefix + t.Name,
		Description: desc,
		InputSchema: schema,
		SideEffect:  t.Annotations == nil || !t.Annotations.ReadOnlyHint,
	}}, nil
}

func (t *mcpTool) Spec() tool.Spec { return t.spec }

// Call sends the call to the server. The package documentation says how results and errors are
// mapped.
func (t *mcpTool) Call(ctx context.Context, args json.RawMessage, idempotencyKey string) (json.RawMessage, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	} else if !json.Valid(args) {
		return nil, &tool.Error{Message: fmt.Sprintf("arguments of %s are not valid JSON", t.spec.Name), Retryable: true, Err: tool.ErrInvalidArguments}
	}
	c, err := t.ts.session(ctx)
	if err != nil {
		return nil, t.downError(ctx, err)
	}
	params := &mcp.CallToolParams{Name: t.remote, Arguments: args}
	if idempotencyKey != "" {
		params.Meta = mcp.Meta{IdempotencyMetaKey: idempotencyKey}
	}
	res, err := c.session.CallTool(ctx, params)
	if err != nil {
		return nil, t.callError(ctx, c, err)
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
			return nil, &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: cannot encode its structured result: %v", t.ts.name, t.remote, err), Retryable: true, Err: err}
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

// urlHider replaces the forms of the URL u that errors show (as given, redacted as url and
// net/http redact it) by name, and its query, which may hold a token, by nothing.
func urlHider(target, name string, u *url.URL) *strings.Replacer {
	forms := []string{target, name, u.String(), name, u.Redacted(), name}
	if pw, ok := u.User.Password(); ok && pw != "" {
		v := *u
		v.User = url.UserPassword(u.User.Username(), "***")
		forms = append(forms, v.String(), name)
	}
	if u.RawQuery != "" {
		forms = append(forms, "?"+u.RawQuery, "")
	}
	return strings.NewReplacer(forms...)
}

// hideText is s with the server's name where it would show the target.
func (ts *Toolset) hideText(s string) string {
	if ts.hide == nil {
		return s
	}
	return ts.hide.Replace(s)
}

// downError is the error of a call that found no session: the Toolset closed (for good), the
// server down (retryable: it is being started again), or the caller's context ended waiting.
func (t *mcpTool) downError(ctx context.Context, err error) error {
	ts := t.ts
	switch {
	case errors.Is(err, errClosed):
		return &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: the session is closed", ts.name, t.remote), Err: err}
	case ctx.Err() != nil:
		return &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: %v", ts.name, t.remote, ctx.Err()), Retryable: true, Err: ctx.Err()}
	}
	return &tool.Error{Message: fmt.Sprintf("mcp server %q is down and being started again, so tool %s was not called: %s", ts.name, t.remote, ts.say(err)),
		Retryable: true, Err: fmt.Errorf("%w: %w", ErrUnavailable, err)}
}

// callError classifies a failed tools/call. The caller's context ending is reported as such (the
// loop knows when that is its own doing). An error response from a live server (bad parameters,
// an internal error of the tool) is retryable: the model sees it and may adapt. Anything else
// means the session is unusable (server crashed, transport broken): the server is started again,
// and the error wraps ErrUnavailable.
func (t *mcpTool) callError(ctx context.Context, c *conn, err error) error {
	ts := t.ts
	if ctxErr := ctx.Err(); ctxErr != nil {
		return &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: %v", ts.name, t.remote, ctxErr), Retryable: true, Err: ctxErr}
	}
	var wire *jsonrpc.Error
	if !errors.Is(err, mcp.ErrConnectionClosed) && errors.As(err, &wire) && serverReported(wire.Code) {
		return &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: %s", ts.name, t.remote, ts.hideText(wire.Message)), Retryable: true, Err: err}
	}
	if ts.isClosed() {
		return &tool.Error{Message: fmt.Sprintf("mcp server %q: tool %s: the session is closed", ts.name, t.remote), Err: errClosed}
	}
	ts.lost(c, err)
	return &tool.Error{Message: fmt.Sprintf("mcp server %q stopped answering during the call of tool %s and is being started again: %s%s", ts.name, t.remote, ts.say(err), c.stderrNote()),
		Retryable: true, Err: fmt.Errorf("%w: %w", ErrUnavailable, err)}
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

// defaultName names a server whose caller gave no name, with nothing that may hold a secret:
// the program's file name for a command line, the scheme, host and path of a URL.
func defaultName(target string) string {
	if isURL(target) {
		u, err := url.Parse(target)
		if err != nil || u.Host == "" {
			return strings.ToLower(target[:strings.Index(target, ":")]) + " server"
		}
		return u.Scheme + "://" + u.Host + u.EscapedPath()
	}
	argv, err := shellquote.Split(target)
	if err != nil || len(argv) == 0 {
		fields := strings.Fields(target)
		if len(fields) == 0 {
			return "(empty command)"
		}
		argv = fields
	}
	return filepath.Base(argv[0])
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
