//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/natstest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// Secrets of the served instance: none of them may leave it.
const (
	openAIKey   = "sk-e2e-operator-key-7f3a9c2b5d1e8f40"
	badAIKey    = "sk-e2e-rejected-key-1b2c3d4e5f6a7b8c"
	dbPassword  = "db-password-e2e-9d8c7b6a5f4e3d2c"
	aliceToken  = "tok-alice-e2e-0a1b2c3d4e5f6a7b8c9d"
	bobToken    = "tok-bob-e2e-1a2b3c4d5e6f7a8b9c0d"
	samToken    = "tok-sam-e2e-2a3b4c5d6e7f8a9b0c1d"
	workerToken = "tok-worker-e2e-3a4b5c6d7e8f9a0b1c2d"
)

// secrets lists every secret value the server knows.
var secrets = []string{openAIKey, badAIKey, dbPassword, aliceToken, bobToken, samToken, workerToken}

// server is a served instance: reins serve on an embedded NATS server with an operator
// configuration, secrets in its environment.
type server struct {
	t        *testing.T
	data     string
	url      string
	proc     *proc
	attacker *countingServer
	provider *countingServer // the operator's OpenAI-compatible endpoint
	rejects  *countingServer // an endpoint that answers 401, echoing the key it was sent
	logs     []string        // the output of every CLI command run
}

// countingServer is an HTTP server on loopback that counts the requests it receives.
type countingServer struct {
	*httptest.Server
	hits atomic.Int64
	auth atomic.Value // the last Authorization header
}

func newCounting(t *testing.T, h http.HandlerFunc) *countingServer {
	c := &countingServer{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.hits.Add(1)
		c.auth.Store(r.Header.Get("Authorization"))
		h(w, r)
	}))
	t.Cleanup(c.Close)
	return c
}

func chatCompletion(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
}

// startServer starts reins serve with an operator configuration naming three providers (the
// operator's endpoint, one that rejects its key, and nothing else), four principals and the
// secrets in its environment.
func startServer(t *testing.T) *server {
	t.Helper()
	s := &server{t: t, data: t.TempDir()}
	s.attacker = newCounting(t, chatCompletion)
	s.provider = newCounting(t, chatCompletion)
	s.rejects = newCounting(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s. You can find your API key at https://example.invalid.","type":"invalid_request_error","code":"invalid_api_key"}}`, key)
	})
	cfg := fmt.Sprintf(`
[providers.openai]
kind = "openai"
base_url = %q
api_key_env = "OPENAI_API_KEY"

[providers.badai]
kind = "openai"
base_url = %q
api_key_env = "BADAI_API_KEY"

[principals.alice]
token_env = "REINS_TOKEN_ALICE"
roles = ["approver", "viewer"]

[principals.bob]
token_env = "REINS_TOKEN_BOB"
roles = ["approver", "viewer"]

[principals.sam]
token_env = "REINS_TOKEN_SAM"
roles = ["submitter"]

[principals.wanda]
token_env = "REINS_TOKEN_WORKER"
roles = ["worker"]
`, s.provider.URL+"/v1", s.rejects.URL+"/v1")
	file := filepath.Join(t.TempDir(), "ops.toml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	port := natstest.FreePort(t)
	s.url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	env := []string{"OPENAI_API_KEY=" + openAIKey, "BADAI_API_KEY=" + badAIKey, "DATABASE_PASSWORD=" + dbPassword,
		"REINS_TOKEN_ALICE=" + aliceToken, "REINS_TOKEN_BOB=" + bobToken, "REINS_TOKEN_SAM=" + samToken, "REINS_TOKEN_WORKER=" + workerToken}
	s.proc = start(t, "reins serve", env, bins.reins, "serve", "--data", s.data, "--listen", "127.0.0.1:0", "--nats-listen", fmt.Sprintf("127.0.0.1:%d", port), "--config", file, "--retention", "0")
	s.proc.waitFor("reins serving", 30*time.Second)
	return s
}

// cli runs the reins binary as the principal of token against the server and returns its exit
// status and its output (stdout and stderr), which it keeps for the scan of secrets.
func (s *server) cli(token string, args ...string) (int, string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if token != "" {
		args = append(args, "--nats", s.url)
	}
	cmd := exec.CommandContext(ctx, bins.reins, args...)
	cmd.Env = append(os.Environ(), "REINS_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	s.logs = append(s.logs, string(out))
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	s.t.Fatalf("reins %v: %v\n%s", args, err, out)
	return 0, ""
}

// client connects the test as the principal of token.
func (s *server) client(ctx context.Context, token string) (*natsbox.Box, *client.Client) {
	s.t.Helper()
	box, err := natsbox.Open(ctx, natsbox.Options{URL: s.url, Token: token})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { box.Close() })
	name, _, err := box.WhoAmI(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return box, client.New(client.Config{Conn: (*conn.Conn)(box), Principal: name})
}

// workflowFile copies a workflow of testdata/security into a directory of its own, with
// placeholder replaced by value.
func workflowFile(t *testing.T, name, placeholder, value string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "security", name))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(string(data), placeholder, value)), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestSharedServer tries, against a served instance with secrets in its environment, what a
// hostile user would: a workflow that sends a key to its own server, a path out of the
// workflow's directory, connections without credentials or with a submitter's, a decision by
// someone who is not an approver; then it scans every stream, bucket and log for the secrets.
func TestSharedServer(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("a workflow that names its own endpoint and key is refused", func(t *testing.T) {
		steal := workflowFile(t, "steal.toml", "ATTACKER", s.attacker.URL+"/v1")
		code, out := s.cli(samToken, "run", steal)
		if code != 1 || !strings.Contains(out, "E_OPERATOR_ONLY models.m.base_url") || !strings.Contains(out, "E_OPERATOR_ONLY models.m.api_key_env") {
			t.Fatalf("reins run exit %d:\n%s\nwant 1 naming models.m.base_url and models.m.api_key_env", code, out)
		}
		// Past the CLI: the same bundle published by hand is refused by the engine before any
		// step runs.
		_, sam := s.client(ctx, samToken)
		id := startBundle(t, ctx, sam, steal)
		rec, err := sam.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Run.Status != protocol.RunFailed || rec.Run.Error == nil || rec.Run.Error.Code != "E_OPERATOR_ONLY" || rec.Run.StartedBy != "sam" {
			t.Fatalf("run %s: %s %+v by %q; want failed E_OPERATOR_ONLY, started by sam", id, rec.Run.Status, rec.Run.Error, rec.Run.StartedBy)
		}
		if n := s.attacker.hits.Load(); n != 0 {
			t.Fatalf("the attacker's server received %d requests", n)
		}
	})

	t.Run("a path out of the workflow's directory is refused without its contents", func(t *testing.T) {
		trav := filepath.Join("testdata", "security", "traversal.toml")
		code, out := s.cli("", "validate", trav)
		if code != 1 || !strings.Contains(out, "E_PATH_OUTSIDE models.m.cassette") || strings.Contains(out, "root:") {
			t.Fatalf("reins validate exit %d:\n%s\nwant 1 with E_PATH_OUTSIDE and nothing of /etc/passwd", code, out)
		}
		code, out = s.cli(samToken, "run", trav)
		if code != 1 || strings.Contains(out, "root:") || !strings.Contains(out, "models.m.cassette") {
			t.Fatalf("reins run exit %d:\n%s\nwant 1 naming models.m.cassette and nothing of /etc/passwd", code, out)
		}
	})

	t.Run("NATS requires credentials, and a submitter cannot forge an answer", func(t *testing.T) {
		if nc, err := nats.Connect(s.url); err == nil {
			nc.Close()
			t.Fatal("a connection without credentials was accepted")
		}
		code, out := s.cli("not-a-token", "runs", "list")
		if code != 1 || strings.Count(strings.TrimSpace(out), "\n") > 0 || !strings.Contains(out, "refused the credentials") {
			t.Fatalf("runs list with a wrong token: exit %d:\n%s\nwant 1 and one sentence", code, out)
		}
		box, _ := s.client(ctx, samToken)
		nc := box.Conn()
		if err := nc.Publish("reins.event.r-forged", []byte(`{"run_id":"r-forged","type":"completed","item":-1}`)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := nc.LastError(); !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("a submitter published a task answer: last error %v", err)
		}
	})

	t.Run("only an approver decides, as who they are", func(t *testing.T) {
		gated := filepath.Join("testdata", "security", "gated.toml")
		code, id := s.cli(samToken, "run", gated, "--detach")
		id = strings.TrimSpace(id)
		if code != 0 {
			t.Fatalf("start: exit %d: %s", code, id)
		}
		_, alice := s.client(ctx, aliceToken)
		awaitRecord(t, ctx, alice, id, "the review waits", func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
		code, out := s.cli(bobToken, "approve", id, "review")
		if code != 1 || !strings.Contains(out, "principal bob is not one of the approvers of step review (alice)") {
			t.Fatalf("bob approves: exit %d:\n%s\nwant 1 naming bob", code, out)
		}
		// Bob's client refuses at once; past every client check, a decision published by hand
		// on bob's subject (saying it is alice's) is refused by the engine, which records it.
		bobBox, bob := s.client(ctx, bobToken)
		if _, err := bob.Decide(ctx, id, "review", true, "", ""); !errors.Is(err, client.ErrForbidden) {
			t.Fatalf("bob's client: %v, want ErrForbidden", err)
		}
		forged := &protocol.Event{RunID: id, Nonce: "bob-by-hand", Type: protocol.EvDecision, Step: "review", Item: -1, Approve: true, By: "alice", ID: "bob-by-hand"}
		data, err := wire.EncodeEvent(forged)
		if err != nil {
			t.Fatal(err)
		}
		subj, err := natsbox.PrincipalSubject(id, natsbox.HumanKind, "bob")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bobBox.JetStream().Publish(ctx, subj, data); err != nil {
			t.Fatal(err)
		}
		awaitRecord(t, ctx, alice, id, "bob's decision is refused", func(r *client.Record) bool {
			return len(r.Run.Acts) > 0 && r.Run.Acts[0].ID == "bob-by-hand" && r.Run.Acts[0].Refused != ""
		})
		code, out = s.cli(samToken, "approve", id, "review")
		if code != 1 || !strings.Contains(out, "principal sam") {
			t.Fatalf("sam (a submitter) approves: exit %d:\n%s", code, out)
		}
		code, out = s.cli(bobToken, "approve", id, "review", "--by", "alice")
		if code != 1 || !strings.Contains(out, "only an admin") {
			t.Fatalf("bob approves on behalf of alice: exit %d:\n%s", code, out)
		}
		rec, err := alice.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Run.Status != protocol.RunWaiting {
			t.Fatalf("after refused decisions the run is %s; want waiting", rec.Run.Status)
		}
		code, out = s.cli(aliceToken, "approve", id, "review", "--message", "ok")
		if code != 0 {
			t.Fatalf("alice approves: exit %d:\n%s", code, out)
		}
		rec, err = alice.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		dec := rec.Run.Steps["review"].Decisions[""]
		if rec.Run.Status != protocol.RunCompleted || dec.By != "alice" || !dec.Approve {
			t.Fatalf("run %s, decision %+v; want completed, approved by alice", rec.Run.Status, dec)
		}
		refused := 0
		for _, a := range rec.Run.Acts {
			if a.Refused != "" {
				refused++
				if a.By != "bob" {
					t.Errorf("a refused act by %q: %+v", a.By, a)
				}
			}
		}
		if refused != 1 {
			t.Errorf("acts %+v: want bob's one refused decision recorded", rec.Run.Acts)
		}
		code, out = s.cli(aliceToken, "runs", "show", id)
		if code != 0 || !strings.Contains(out, "start by=sam") || !strings.Contains(out, "attempt 1 by=alice") ||
			!strings.Contains(out, "refused: ") || !strings.Contains(out, "by=bob: principal bob is not one of the approvers (alice)") {
			t.Errorf("runs show: exit %d\n%s\nwant who started, who decided, and the refusal", code, out)
		}
	})

	t.Run("a run that used a key and one that hit a 401", func(t *testing.T) {
		for _, tc := range []struct {
			provider string
			status   int
			want     protocol.RunStatus
		}{{"openai", 0, protocol.RunCompleted}, {"badai", 1, protocol.RunFailed}} {
			file := workflowFile(t, "ask.toml", "PROVIDER", tc.provider)
			code, out := s.cli(samToken, "run", file)
			if code != tc.status {
				t.Fatalf("run on %s: exit %d, want %d:\n%s", tc.provider, code, tc.status, out)
			}
		}
		if got := s.provider.auth.Load(); got != "Bearer "+openAIKey {
			t.Fatalf("the operator's endpoint got Authorization %q; want its key", got)
		}
		if n := s.rejects.hits.Load(); n == 0 {
			t.Fatal("the rejecting endpoint was not called")
		}
	})

	// Everything the server stored, and everything it and the commands printed.
	s.proc.kill()
	var found []string
	sawRecords := false // the scan reads what the server stored: the prompt of a run is there
	err := filepath.WalkDir(s.data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "admin.token" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sawRecords = sawRecords || strings.Contains(string(data), "Refund the order?")
		for _, sec := range secrets {
			if strings.Contains(string(data), sec) {
				found = append(found, fmt.Sprintf("%s in %s", sec, path))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sawRecords {
		t.Fatal("the scan found no stored run: it would find no secret either")
	}
	logs := strings.Join(append(s.proc.output(), s.logs...), "\n")
	for _, sec := range secrets {
		if strings.Contains(logs, sec) || strings.Contains(logs, sec[:16]) {
			found = append(found, sec+" in the logs")
		}
	}
	if len(found) > 0 {
		t.Fatalf("secrets left the server: %v", found)
	}
}

// startBundle publishes the workflow file's bundle and a start event as the client's
// principal, past every check of the CLI.
func startBundle(t *testing.T, ctx context.Context, c *client.Client, file string) string {
	t.Helper()
	bs, err := bundlesOf(file)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Start(ctx, bs, json.RawMessage(`null`), "")
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// bundlesOf loads and validates a workflow file into its bundles.
func bundlesOf(file string) (*workflow.Bundles, error) {
	def, ps := workflow.LoadAndValidate(file, workflow.Options{})
	if len(ps) > 0 {
		return nil, ps
	}
	return workflow.NewBundles(def, "")
}
