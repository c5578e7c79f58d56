package mcptool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kballard/go-shellquote"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/internal/testkit/mcptest"
)

// serverEnv makes the test binary act as an MCP server instead of running the tests: "stdio"
// serves over standard input and output, "http" serves streamable HTTP on 127.0.0.1 (printing
// its URL on the first line of standard output, and exiting when standard input is closed),
// "broken" writes a complaint on standard error and exits without speaking MCP.
const serverEnv = "REINS_MCPTOOL_SERVER"

const testServerName = "reins-test-server"

// startsEnv, when set, is a file the test server appends a line to each time it starts, so that
// a test counts its starts; addrEnv is the address an HTTP test server listens on (default: a
// free port), so that a test can start one again where the last one was.
const (
	startsEnv = "REINS_MCPTOOL_STARTS"
	addrEnv   = "REINS_MCPTOOL_ADDR"
)

func TestMain(m *testing.M) {
	mode := os.Getenv(serverEnv)
	if f := os.Getenv(startsEnv); f != "" && mode != "" {
		if err := mcptest.AppendLine(f, strconv.Itoa(os.Getpid())); err != nil {
			fmt.Fprintln(os.Stderr, "test server:", err)
			os.Exit(1)
		}
	}
	switch mode {
	case "":
		code := m.Run()
		if pids := childProcesses(); code == 0 && len(pids) > 0 {
			fmt.Fprintf(os.Stderr, "the tests left child processes behind: %v\n", pids)
			code = 1
		}
		os.Exit(code)
	case "stdio":
		if err := newTestServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "test server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "http":
		os.Exit(serveHTTP())
	case "broken":
		fmt.Fprintln(os.Stderr, "starting up")
		fmt.Fprintln(os.Stderr, "fatal: no API key configured")
		os.Exit(3)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", serverEnv, mode)
		os.Exit(2)
	}
}

// childProcesses lists the processes this one started and has not waited for (running or
// zombie), from Linux's /proc; elsewhere it finds none.
func childProcesses() []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	self := strconv.Itoa(os.Getpid())
	var pids []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the process is gone
		}
		// pid (comm) state ppid ...; comm may contain spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if fields := strings.Fields(s[i+1:]); i >= 0 && len(fields) >= 2 && fields[1] == self {
			pids = append(pids, strings.Fields(s)[0])
		}
	}
	return pids
}

func serveHTTP() int {
	addr := os.Getenv(addrEnv)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test server:", err)
		return 1
	}
	server := newTestServer()
	srv := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // serve until the test closes our standard input
	_ = srv.Close()
	return 0
}

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo back"`
}

type addIn struct {
	A int `json:"a" jsonschema:"the first addend"`
	B int `json:"b" jsonschema:"the second addend"`
}

type addOut struct {
	Sum int `json:"sum"`
}

type lookupIn struct {
	Key string `json:"key"`
}

type slowIn struct {
	// Fifo, when set, is a named pipe the tool writes "started" to once it runs, so that a test
	// knows the call is in progress on the server.
	Fifo string `json:"fifo,omitempty"`
}

type noIn struct{}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// taskTool is the test server's tool that requires MCP tasks.
const taskTool = "needs_task"

// newTestServer builds the server the tests talk to. A page size of 2 makes listing its tools
// take several pages.
func newTestServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: testServerName, Version: "1.0.0"}, &mcp.ServerOptions{PageSize: 2})
	s.AddReceivingMiddleware(mcptest.RequireTasks(taskTool))
	mcp.AddTool(s, &mcp.Tool{Name: taskTool, Description: "Runs only as an MCP task."},
		func(context.Context, *mcp.CallToolRequest, noIn) (*mcp.CallToolResult, any, error) {
			return text("ran without a task"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo the text back."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers."},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *mcp.CallToolRequest, noIn) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("the disk is on fire")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "read_only_lookup", Description: "Look a key up.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in lookupIn) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprintf(`{"key": %q, "found": true}`, in.Key)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Blocks until cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
			if in.Fifo != "" {
				f, err := os.OpenFile(in.Fifo, os.O_WRONLY, 0)
				if err != nil {
					return nil, nil, err
				}
				_, _ = f.WriteString("started\n")
				_ = f.Close()
			}
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	mcp.AddTool(s, &mcp.Tool{Name: "chart", Description: "Returns a caption and an image."},
		func(context.Context, *mcp.CallToolRequest, noIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "sales by month"},
				&mcp.ImageContent{MIMEType: "image/png", Data: make([]byte, 1234)},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "idempotency_key", Description: "Returns the idempotency key of the call."},
		func(_ context.Context, req *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, any, error) {
			key, _ := req.Params.Meta[IdempotencyMetaKey].(string)
			return text(key), nil, nil
		})
	return s
}

// serverEnvFor is the extra environment of a test server in the given mode. Under the race
// detector a process sleeps a second before exiting (GORACE atexit_sleep_ms); a server need not.
func serverEnvFor(mode string) []string {
	return []string{serverEnv + "=" + mode, "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}
}

// stdioCommand is the command line that starts the test binary as a stdio MCP server (with
// serverEnv=stdio in its environment). -test.run=^$ keeps it from running tests should the
// variable ever be missing.
func stdioCommand() string {
	return shellquote.Join(os.Args[0], "-test.run=^$")
}

// connectStdio connects to a fresh stdio test server and closes it at the end of the test.
func connectStdio(t *testing.T, prefix string) *Toolset {
	t.Helper()
	ts, err := Connect(context.Background(), stdioCommand(), Options{Prefix: prefix, Env: serverEnvFor("stdio")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ts.Close() })
	return ts
}

// httpServer is a test binary serving MCP over streamable HTTP.
type httpServer struct {
	URL   string
	cmd   *exec.Cmd
	stdin io.Closer
}

// startHTTPServer starts the test binary as an HTTP MCP server on addr (host:port; "": a free
// port) and stops it (closing its standard input, then waiting for it) at the end of the test.
func startHTTPServer(t *testing.T, addr string) *httpServer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), serverEnvFor("http")...), addrEnv+"="+addr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &httpServer{cmd: cmd, stdin: stdin}
	t.Cleanup(s.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the test server's URL: %v", err)
	}
	s.URL = strings.TrimSpace(line)
	return s
}

func (s *httpServer) stop() {
	_ = s.stdin.Close()
	_ = s.cmd.Wait()
}

// kill ends the server with SIGKILL; its port is free once kill returns.
func (s *httpServer) kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
