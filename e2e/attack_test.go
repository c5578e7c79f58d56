//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/natstest"
)

// The principals of the attack suite (docs/security.md, "Attacks"): bob and mallory submit and
// approve, wanda is a worker, vera a viewer. Each attack holds only the token its principal is
// given; the data directory's admin token is the operator's, used to look, never to attack.
const (
	attackBobToken     = "tok-bob-attack-5e6f7a8b9c0d1e2f3a4b"
	attackMalloryToken = "tok-mallory-attack-6f7a8b9c0d1e2f3a4b5c"
	attackWorkerToken  = "tok-wanda-attack-7a8b9c0d1e2f3a4b5c6d"
	attackViewerToken  = "tok-vera-attack-8b9c0d1e2f3a4b5c6d7e"
)

// hostile is a shared server under attack: reins serve --config on an embedded NATS server
// listening on loopback, its HTTP API on loopback, with the built-in workers.
type hostile struct {
	t     *testing.T
	data  string
	nats  string // the NATS URL principals connect to
	base  string // the HTTP API's base URL
	admin string // the data directory's admin token: for looking, never for attacking
	proc  *proc
}

// hostileServer starts reins serve with the attack suite's principals and extra appended to
// its operator configuration (limits, webhooks, providers), env added to its environment.
func hostileServer(t *testing.T, extra string, env ...string) *hostile {
	t.Helper()
	cfg := `
[principals.bob]
token_env = "REINS_TOKEN_BOB"
roles = ["submitter", "approver"]

[principals.mallory]
token_env = "REINS_TOKEN_MALLORY"
roles = ["submitter", "approver"]

[principals.wanda]
token_env = "REINS_TOKEN_WANDA"
roles = ["worker"]

[principals.vera]
token_env = "REINS_TOKEN_VERA"
roles = ["viewer"]
` + extra
	file := filepath.Join(t.TempDir(), "ops.toml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &hostile{t: t, data: t.TempDir()}
	port := natstest.FreePort(t)
	h.nats = fmt.Sprintf("nats://127.0.0.1:%d", port)
	env = append(env, "REINS_TOKEN_BOB="+attackBobToken, "REINS_TOKEN_MALLORY="+attackMalloryToken,
		"REINS_TOKEN_WANDA="+attackWorkerToken, "REINS_TOKEN_VERA="+attackViewerToken)
	h.proc = start(t, "reins serve", env, bins.reins, "serve", "--data", h.data, "--listen", "127.0.0.1:0",
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", port), "--config", file, "--retention", "0")
	line := h.proc.waitFor("reins serving", 60*time.Second)
	m := httpAddrLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("reins serve names no HTTP address: %s", line)
	}
	h.base = "http://" + m[1]
	admin, err := os.ReadFile(filepath.Join(h.data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	h.admin = strings.TrimSpace(string(admin))
	return h
}

// conn is a raw NATS connection holding token: what an attacker's own program would open.
func (h *hostile) conn(token string) *nats.Conn {
	h.t.Helper()
	nc, err := nats.Connect(h.nats, nats.Token(token), nats.Name("attacker"))
	if err != nil {
		h.t.Fatalf("connect with a token: %v", err)
	}
	h.t.Cleanup(nc.Close)
	return nc
}

// client connects as the principal of token through reins's own client.
func (h *hostile) client(ctx context.Context, token string) (*natsbox.Box, *client.Client) {
	h.t.Helper()
	box, err := natsbox.Open(ctx, natsbox.Options{URL: h.nats, Token: token})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { box.Close() })
	name, _, err := box.WhoAmI(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return box, client.New(client.Config{Conn: (*conn.Conn)(box), Principal: name})
}

// do sends one HTTP request to the API with token (none when empty) and returns its status,
// headers and body.
func (h *hostile) do(token, method, path, body string, header ...string) (int, http.Header, string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

// register registers toml under name as the principal of token and fails the test unless the
// API took it.
func (h *hostile) register(token, name, toml string) {
	h.t.Helper()
	status, _, body := h.do(token, "PUT", "/v1/workflows/"+name, toml, "Content-Type", "application/toml")
	if status != http.StatusOK && status != http.StatusCreated {
		h.t.Fatalf("register %s: %d %s", name, status, body)
	}
}

// startAs starts a run of the registered workflow name through the API as the principal of
// token, and returns its id.
func (h *hostile) startAs(token, name string) string {
	h.t.Helper()
	status, _, body := h.do(token, "POST", "/v1/runs", `{"workflow":"`+name+`"}`, "Content-Type", "application/json")
	var started api.RunStarted
	if err := json.Unmarshal([]byte(body), &started); err != nil || status != http.StatusCreated && status != http.StatusAccepted {
		h.t.Fatalf("start %s: %d %s", name, status, body)
	}
	return started.RunID
}

// healthy fails the test unless /healthz answers within a second: the server stays responsive
// during every attack.
func (h *hostile) healthy() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", h.base+"/healthz", nil)
	if err != nil {
		h.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("/healthz did not answer within 1 s during the attack: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("/healthz answered %d during the attack", resp.StatusCode)
	}
}

// scan fails the test if any file of the server's data directory holds one of secrets: what
// a refused or scrubbed request sent is never stored.
func (h *hostile) scan(secrets ...string) {
	h.t.Helper()
	err := filepath.Walk(h.data, func(path string, info os.FileInfo, err error) error {
		// The server renames its temporary files (a consumer's o.dat.tmp) while the walk runs:
		// one gone between the listing and the read left its bytes in the file it became,
		// which the walk reads.
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				h.t.Errorf("%s holds the secret %.6s…", path, s)
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// TestAttackHarness checks the harness itself: each principal is who its token says, and a
// connection without a token is refused.
func TestAttackHarness(t *testing.T) {
	h := hostileServer(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for token, want := range map[string]string{attackBobToken: "bob", attackMalloryToken: "mallory", attackWorkerToken: "wanda", attackViewerToken: "vera"} {
		box, _ := h.client(ctx, token)
		name, _, err := box.WhoAmI(ctx)
		if err != nil || name != want {
			t.Errorf("the token of %s connects as %q (%v)", want, name, err)
		}
	}
	if _, err := nats.Connect(h.nats); err == nil {
		t.Error("a connection without a token was accepted")
	}
	if status, _, _ := h.do("", "GET", "/v1/runs", ""); status != http.StatusUnauthorized {
		t.Errorf("GET /v1/runs without a token: %d, want 401", status)
	}
	h.healthy()
}
