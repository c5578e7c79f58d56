//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/natstest"
)

// documentedTenantBlock reads the tenant's permissions of docs/deploy.md: the nats-server
// configuration block an operator copies, as the doc shows it.
func documentedTenantBlock(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- permissions:tenant -->\n```\n(.*?)```\n<!-- end permissions:tenant -->").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/deploy.md has no tenant permissions block")
	}
	return string(m[1])
}

// tenantServer starts a real nats-server process whose only user, acme, has perms (a user's
// "permissions: {...}" block of a nats-server configuration), and returns its URL as acme.
func tenantServer(t *testing.T, perms string) string {
	t.Helper()
	port := natstest.FreePort(t)
	conf := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream: {store_dir: %q}\nauthorization: {\n  users: [\n    {user: acme, password: secret-acme,\n%s}\n  ]\n}\n",
		port, t.TempDir(), perms)
	file := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "nats-server", nil, bins.natsServer, "-c", file)
	p.waitFor("Server is ready", 30*time.Second)
	return fmt.Sprintf("nats://acme:secret-acme@127.0.0.1:%d", port)
}

// TestDocumentedTenantPermissions: a tenant's NATS user with exactly the permissions
// docs/deploy.md lists for namespace acme runs reins serve (the engine), a worker process that
// answers every task, and a run of the research example to completion, on a real nats-server.
// Without the permissions of one bucket (as the doc once was), serve exits at once naming the
// subject the server refused and the bucket it was setting up.
func TestDocumentedTenantPermissions(t *testing.T) {
	block := documentedTenantBlock(t)
	url := tenantServer(t, block)
	// The engine alone, so that the worker process answers every task on the same permissions.
	srv := start(t, "reins serve", nil, bins.reins, "serve", "--nats", url, "--namespace", "acme", "--listen", "127.0.0.1:0", "--no-workers")
	srv.waitFor("reins serving", 60*time.Second)
	wk := start(t, "reins worker", nil, bins.reins, "worker", "--nats", url, "--namespace", "acme")
	wk.waitFor("ready", 60*time.Second)
	out := reins(t, "run", filepath.Join("..", "examples", "research", "workflow.toml"), "--input", `{"question":"automated refunds"}`,
		"--nats", url, "--namespace", "acme", "--json", "--quiet")
	if !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("the research run on the documented permissions did not complete:\n%s", out)
	}

	t.Run("without the sessions bucket", func(t *testing.T) {
		var kept []string
		for _, line := range strings.Split(block, "\n") {
			kept = append(kept, regexp.MustCompile(`"[^"]*acme_reins_sessions[^"]*",? ?`).ReplaceAllString(line, ""))
		}
		url := tenantServer(t, strings.Join(kept, "\n"))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bins.reins, "serve", "--nats", url, "--namespace", "acme", "--listen", "127.0.0.1:0")
		began := time.Now()
		msg, err := cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil {
			t.Fatalf("serve without the sessions bucket's permissions: %v (context %v)\n%s", err, ctx.Err(), msg)
		}
		want := `setting up KV bucket acme_reins_sessions: the NATS server refused this connection's user permission to publish to "$JS.API.STREAM.INFO.KV_acme_reins_sessions"`
		if !strings.Contains(string(msg), want) || strings.Contains(string(msg), "deadline exceeded") {
			t.Errorf("serve's error does not say %q:\n%s", want, msg)
		}
		t.Logf("serve exited after %s: %s", time.Since(began).Round(time.Millisecond), lastLine(string(msg)))
	})
}

// bigWorkflow writes the research example with a description that makes its file size bytes
// long, and returns the file and its source.
func bigWorkflow(t *testing.T, size int) (string, string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "examples", "research", "workflow.toml"))
	if err != nil {
		t.Fatal(err)
	}
	const line = `description = "Research a question from three angles at once, then combine the findings into one brief."`
	if !strings.Contains(string(src), line) {
		t.Fatalf("the research example has no line %s", line)
	}
	pad := size - len(src) + len(line) - len(`description = ""`)
	text := strings.Replace(string(src), line, `description = "`+strings.Repeat("x", pad)+`"`, 1)
	if len(text) != size {
		t.Fatalf("workflow of %d bytes, want %d", len(text), size)
	}
	file := filepath.Join(t.TempDir(), "workflow.toml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, text
}

// TestLargeWorkflowFile: a workflow file over 1 MiB is refused with one sentence naming
// its size and the limit that applies, through reins run (the NATS server's max_payload: a
// workflow is stored in one message) and through the HTTP API's registration (the API's own
// limit of 1 MiB, and for a file of exactly 1 MiB, stored with its source, max_payload), and
// nothing is stored or started; on a server whose max_payload is lower, the sentence names it.
func TestLargeWorkflowFile(t *testing.T) {
	// Its stored definition leaves out the file's comments: 8 KiB more makes it over 1 MiB too.
	file, _ := bigWorkflow(t, 1<<20+8<<10)
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.reins, "run", file, "--data", data, "--input", `{"question":"x"}`)
	msg, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code == 0 || ctx.Err() != nil {
		t.Fatalf("reins run of a workflow of 1 MiB + 8 KiB: exit %d, %v\n%s", code, err, msg)
	}
	want := regexp.MustCompile(`workflow research_fanout is too large to store: it takes \d+ bytes as stored, more than the 1044480 bytes one message of the NATS server holds \(its max_payload of 1048576, less 4096 for headers\)`)
	if !want.Match(msg) || strings.Contains(string(msg), "maximum payload exceeded") {
		t.Errorf("reins run says:\n%s\nwant a sentence matching %s", msg, want)
	}

	// A server whose operator lowered max_payload: the sentence names that limit.
	port := natstest.FreePort(t)
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "listen: \"127.0.0.1:%d\"\nmax_payload: 524288\njetstream: {store_dir: %q}\n", port, t.TempDir()), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, "nats-server", nil, bins.natsServer, "-c", conf).waitFor("Server is ready", 30*time.Second)
	small, _ := bigWorkflow(t, 600<<10)
	cmd = exec.CommandContext(ctx, bins.reins, "run", small, "--nats", fmt.Sprintf("nats://127.0.0.1:%d", port), "--input", `{"question":"x"}`)
	msg, err = cmd.CombinedOutput()
	want = regexp.MustCompile(`workflow research_fanout is too large to store: it takes \d+ bytes as stored, more than the 520192 bytes one message of the NATS server holds \(its max_payload of 524288, less 4096 for headers\)`)
	if err == nil || !want.Match(msg) {
		t.Errorf("reins run of 600 KiB on a server of max_payload 512 KiB: %v\n%s\nwant a sentence matching %s", err, msg, want)
	}

	// The HTTP API, on a reins serve of its own.
	h := hostileServer(t, "")
	_, text := bigWorkflow(t, 1<<20+1)
	status, _, body := h.do(h.admin, "PUT", "/v1/workflows/big", text, "Content-Type", "application/toml")
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "the workflow file is 1048577 bytes, more than 1048576 (1 MiB), the most a registered workflow may be") {
		t.Errorf("PUT of a file of 1 MiB + 1: %d %s", status, body)
	}
	_, exact := bigWorkflow(t, 1<<20)
	status, _, body = h.do(h.admin, "PUT", "/v1/workflows/big", exact, "Content-Type", "application/toml")
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "one message of the NATS server holds (its max_payload of 1048576, less 4096 for headers)") {
		t.Errorf("PUT of a file of exactly 1 MiB: %d %s", status, body)
	}
	if status, _, body := h.do(h.admin, "GET", "/v1/workflows/big", ""); status != http.StatusNotFound {
		t.Errorf("GET of the refused workflow: %d %s, want 404", status, body)
	}
}
