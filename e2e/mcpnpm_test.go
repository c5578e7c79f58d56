//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/mcptool"
	"github.com/reins-run/reins/tool"
)

// everythingPackage is the reference MCP server of the protocol's maintainers, from npm,
// pinned: its tools and their texts are what the test checks.
const everythingPackage = "@modelcontextprotocol/server-everything@2026.8.31"

// everythingEnv names the server's entry point (dist/index.js), when it is installed elsewhere.
const everythingEnv = "REINS_MCP_EVERYTHING"

// ensureEverything returns the entry point of the npm reference server, installing the package
// with npm into the user's cache when it is missing (.ci/run installs it first). Without npm it
// installs Debian's nodejs and npm as root; elsewhere the test skips, or fails in CI, naming
// them and the command (buildtest.Need).
func ensureEverything(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(everythingEnv); p != "" {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "reins-test", "npm")
	entry := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(entry); err == nil {
		return entry
	}
	npm := buildtest.Need(t, buildtest.System{What: "npm", Debian: "nodejs npm", Paths: []string{"npm"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--prefix", dir, everythingPackage).CombinedOutput(); err != nil {
		t.Fatalf("npm install --prefix %s %s: %v\n%s", dir, everythingPackage, err, out)
	}
	return entry
}

// TestMCPReferenceServer runs reins's MCP client against the npm reference server, over stdio
// and over streamable HTTP: its tools are listed and offered, the one that requires MCP tasks
// is refused naming it, and calls (carrying an idempotency key) answer what the server says.
func TestMCPReferenceServer(t *testing.T) {
	entry := ensureEverything(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			target := "node " + entry + " stdio"
			if transport == "http" {
				target = everythingHTTP(t, entry)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ts, err := mcptool.Connect(ctx, target, mcptool.Options{Name: "everything", Prefix: "ev_"})
			if err != nil {
				t.Fatalf("connect over %s: %v", transport, err)
			}
			defer ts.Close()
			tools := map[string]tool.Tool{}
			for _, tl := range ts.Tools() {
				tools[tl.Spec().Name] = tl
			}
			for _, name := range []string{"ev_echo", "ev_get-sum"} {
				if tools[name] == nil {
					t.Fatalf("tool %s is not offered; offered: %v", name, slices.Sorted(maps.Keys(tools)))
				}
			}
			why, refused := ts.Refused()["ev_simulate-research-query"]
			if !refused || tools["ev_simulate-research-query"] != nil || !strings.Contains(why, "simulate-research-query") || !strings.Contains(why, "requires MCP tasks") {
				t.Errorf("the tool that requires tasks: refused=%v %q, offered=%v", refused, why, tools["ev_simulate-research-query"] != nil)
			}
			for _, c := range []struct{ tool, args, want string }{
				{"ev_echo", `{"message":"hello from reins"}`, "Echo: hello from reins"},
				{"ev_get-sum", `{"a":2,"b":40}`, "42"},
			} {
				out, err := tools[c.tool].Call(ctx, json.RawMessage(c.args), "run-1/1/0")
				if err != nil || !strings.Contains(string(out), c.want) {
					t.Errorf("%s %s = %s, %v; want a result containing %q", c.tool, c.args, out, err, c.want)
				}
			}
			// Arguments the tool's schema refuses come back as the tool's error, not a crash.
			if out, err := tools["ev_get-sum"].Call(ctx, json.RawMessage(`{"a":"two"}`), "run-1/1/1"); err == nil {
				t.Errorf("get-sum with a string: %s, want an error", out)
			}
		})
	}
}

// everythingHTTP starts the reference server over streamable HTTP on a free port and returns
// its endpoint.
func everythingHTTP(t *testing.T, entry string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	p := start(t, "server-everything", []string{"PORT=" + port}, "node", entry, "streamableHttp")
	p.waitFor("listening on port "+port, time.Minute)
	return "http://127.0.0.1:" + port + "/mcp"
}
