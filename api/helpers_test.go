package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// The principals of a test stack: one per role, and a second approver. Tokens maps each name,
// and each role, to the principal's token.
var testPrincipals = []struct{ name, role string }{
	{"admin", operator.RoleAdmin},
	{"sam", operator.RoleSubmitter},
	{"alice", operator.RoleApprover},
	{"bob", operator.RoleApprover},
	{"vera", operator.RoleViewer},
	{"wanda", operator.RoleWorker},
}

// testMaxInput is the stack's Config.MaxInputBytes: small, so that a test sends a body over it.
const testMaxInput = 64 << 10

// stack is the API served over HTTP on a real embedded NATS server, with the engine and the
// built-in workers running: what a test of the routes calls.
type stack struct {
	t   testing.TB
	Ctx context.Context // ends at the stack's bound (2 min): every wait of a test ends with it
	// URL is the API's httptest server.
	URL string
	// Tokens maps a principal's name ("alice"), and a role ("approver"), to its token.
	Tokens map[string]string
	// Admin is a client acting as the data directory's admin (principal "admin").
	Admin *client.Client
	Box   *natsbox.Box
	// Host is the engine and workers; startHost starts them again after Host.Stop.
	Host      *host.Host
	startHost func() *host.Host
}

// startAPI starts the server stack (newStack) and returns the API's URL, the tokens by role
// and principal name, and a client acting as the admin.
func startAPI(t testing.TB) (string, map[string]string, *client.Client) {
	s := newStack(t)
	return s.URL, s.Tokens, s.Admin
}

// newStack starts an embedded NATS server that authenticates testPrincipals, the engine (which
// knows their roles) and the built-in workers (llm, agent) on it, and the API over HTTP; all
// stop when the test ends.
func newStack(t testing.TB) *stack { return newStackWith(t, nil) }

// newStackWith is newStack with the API's configuration changed by with (nil: as it is).
func newStackWith(t testing.TB, with func(*api.Config)) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	res, err := (&operator.Config{}).Resolve(func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, Ctx: ctx, Tokens: map[string]string{}}
	for _, p := range testPrincipals {
		token := "tok-" + p.name + "-" + client.NewRunID()
		res.AddPrincipal(p.name, token, p.role)
		s.Tokens[p.name], s.Tokens[p.role] = token, token
	}
	log := runtest.Logger(t)
	s.Box, err = natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir(), Authenticate: host.Authenticator(res), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Box.Close() })
	s.startHost = func() *host.Host {
		h, err := host.Start(ctx, host.Config{Box: s.Box, Engine: true, Logger: log,
			Register: func(w *worker.Worker) error { return builtin.Register(w, builtin.Config{}) },
			Roles: func(name string) []string {
				p, _ := res.Principal(name)
				return p.Roles
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Stop)
		return h
	}
	s.Host = s.startHost()
	cfg := api.Config{Box: s.Box, Principals: res, Log: log, MaxInputBytes: testMaxInput}
	if with != nil {
		with(&cfg)
	}
	srv := httptest.NewServer(api.New(cfg))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	s.Admin = client.NewClient(client.ClientConfig{Box: s.Box})
	return s
}

// start starts a run of the workflow of TOML text (written to a file of its own) as the admin,
// with input (JSON, "" for none), and returns its id.
func (s *stack) start(text, input string) string {
	s.t.Helper()
	file := filepath.Join(s.t.TempDir(), "workflow.toml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		s.t.Fatal(err)
	}
	def, ps := workflow.LoadAndValidate(file, workflow.Options{})
	if len(ps) > 0 {
		s.t.Fatalf("the test's workflow: %v", ps)
	}
	bs, err := wire.NewBundles(def, "")
	if err != nil {
		s.t.Fatal(err)
	}
	var in json.RawMessage
	if input != "" {
		in = json.RawMessage(input)
	}
	id, err := s.Admin.Start(s.Ctx, bs, in, "")
	if err != nil {
		s.t.Fatalf("start a run of %s: %v", def.Name, err)
	}
	return id
}

// waitFor waits until run id's record satisfies ok, and returns it.
func (s *stack) waitFor(id string, ok func(*client.Record) bool) *client.Record {
	s.t.Helper()
	for rec, err := range s.Admin.Watch(s.Ctx, id) {
		if err != nil {
			s.t.Fatalf("watch run %s: %v", id, err)
		}
		if ok(rec) {
			return rec
		}
	}
	s.t.Fatalf("run %s ended before the awaited state", id)
	return nil
}

// waiting waits until run id waits (for a person or a signal).
func (s *stack) waiting(id string) *client.Record {
	s.t.Helper()
	return s.waitFor(id, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
}

// wait waits for the end of run id and returns its record.
func (s *stack) wait(id string) *client.Record {
	s.t.Helper()
	rec, err := s.Admin.Wait(s.Ctx, id)
	if err != nil {
		s.t.Fatalf("wait for run %s: %v", id, err)
	}
	return rec
}

// answer is an HTTP answer of the API: its status, headers and body.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test when it cannot.
func (a answer) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(a.Body, v); err != nil {
		t.Fatalf("the body %s: %v", a.Body, err)
	}
}

// problem decodes the body as a problem document, checking its content type and status.
func (a answer) problem(t testing.TB) api.Problem {
	t.Helper()
	var p api.Problem
	if ct := a.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q of a %d, want application/problem+json", ct, a.Status)
	}
	a.JSON(t, &p)
	if p.Status != a.Status {
		t.Errorf("problem status %d, HTTP status %d", p.Status, a.Status)
	}
	return p
}

// do sends method path (relative to the API's URL) with token ("" for no Authorization
// header) and body ("" for none) and returns the answer.
func (s *stack) do(method, path, token, body string) answer {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(s.Ctx, method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	// Every answer a test reads is what the OpenAPI document says (api/openapi.json).
	api.CheckAnswer(s.t, method, req.URL.Path, resp.StatusCode, resp.Header.Get("Content-Type"), data)
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: bytes.TrimSpace(data)}
}

// as sends method path as the principal (or role) name, with body ("" for none).
func (s *stack) as(name, method, path, body string) answer {
	s.t.Helper()
	token, ok := s.Tokens[name]
	if !ok {
		s.t.Fatalf("no principal or role %q in the test stack", name)
	}
	return s.do(method, path, token, body)
}
