//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/buildtest"
)

// mcpEffectsWorkflow is the workflow of the MCP side-effect test: the agent of slow.toml, its
// append_line served by the mcpeffects server of server (a TOML table's body: its command or
// url), with attempts of 2s and 4 of them, so that the call (3s) outlives its attempt.
const mcpEffectsWorkflow = `name = %q

[models.script]
provider = "scripted"
script = [
  { tool_calls = [{ name = "append_line", arguments = { text = "refund O-104" } }] },
  { text = "Appended one line." },
]

[tools.append_line]
description = "Append a line to the counter file."
mcp = %q

[[steps]]
id = "act"
type = "agent"
model = "script"
goal = "Append one line to the counter file."
tools = ["append_line"]
budget = { max_iterations = 4 }
timeout = "2s"
retry = { max_attempts = 4, backoff = "fixed", initial_delay = "100ms" }
`

// A side-effecting MCP tool slower than its step's timeout (a 3s call, 2s attempts, 4 of
// them), over stdio and over streamable HTTP, served by the operator's MCP servers as on a
// shared server: the attempt that times out leaves its call running, and the next attempt
// waits for its recorded result instead of calling again. 10 runs: 10 effects, counted by the
// MCP server process itself. The honest server stops a call whose client cancels it (stop): a
// worker that cancelled the call when its attempt ended would make no effect at all; the other
// finishes whatever the client says (finish): a worker that gave up on the call and called
// again would make more effects than runs.
func TestEffectOnceAcrossTimeoutsMCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	server := buildtest.Program(t, "github.com/reins-run/reins/e2e/testdata/mcpeffects")
	type variant struct{ name, counter string }
	var variants []variant
	var config strings.Builder
	for _, transport := range []string{"stdio", "http"} {
		for _, onCancel := range []string{"stop", "finish"} {
			v := variant{name: transport + "_" + onCancel, counter: filepath.Join(dir, transport+"-"+onCancel+".txt")}
			variants = append(variants, v)
			argv := []string{server, "-counter", v.counter, "-slow", "3s", "-on-cancel", onCancel}
			fmt.Fprintf(&config, "[mcp.%s]\n", v.name)
			if transport == "stdio" {
				fmt.Fprintf(&config, "command = %s\n", tomlStrings(argv))
				continue
			}
			p := start(t, "mcpeffects-"+v.name, nil, append(argv, "-http", "127.0.0.1:0")...)
			fmt.Fprintf(&config, "url = %q\n", strings.TrimPrefix(p.waitFor("listening ", 30*time.Second), "listening "))
		}
	}
	configFile := filepath.Join(dir, "reins.toml")
	if err := os.WriteFile(configFile, []byte(config.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t)
	s := start(t, "reins serve", nil, bins.reins, "serve", "--nats", c.url, "--listen", "127.0.0.1:0", "--no-workers", "--ack-wait", "1s", "--config", configFile)
	s.waitFor("reins serving", 30*time.Second)
	w := start(t, "effectworker", []string{"REINS_COUNTER_FILE=" + filepath.Join(dir, "go-tool.txt")}, buildEffectWorker(t), "-nats", c.url, "-ack-wait", "1s", "-config", configFile)
	w.waitFor("ready", 30*time.Second)
	ids := map[string][]string{}
	for _, v := range variants {
		file := filepath.Join(dir, v.name+".toml")
		if err := os.WriteFile(file, []byte(fmt.Sprintf(mcpEffectsWorkflow, "effects_mcp_"+v.name, v.name)), 0o600); err != nil {
			t.Fatal(err)
		}
		ids[v.name] = startRuns(t, c.url, file, "mcp-"+strings.ReplaceAll(v.name, "_", "-"), 10)
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			checkOnce(t, ctx, c, v.counter, ids[v.name])
			for _, id := range ids[v.name] {
				rec, err := c.client(ctx).Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if a := rec.Run.Steps["act"].Attempts; a < 3 {
					t.Errorf("run %s: %d tasks for the step; want a retry after the timeout (the test would prove nothing)", id, a)
				}
			}
		})
	}
}

// tomlStrings writes ss as a TOML array of basic strings.
func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
