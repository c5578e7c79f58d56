package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/auth"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trigger"
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

// testMaxWebhook is the stack's Config.MaxWebhookBytes, smaller than testMaxInput: a delivery
// has its own limit.
const testMaxWebhook = 16 << 10

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
	// Config is the API's configuration.
	Config api.Config
	// Host is the engine and workers; startHost starts them again after Host.Stop.
	Host      *host.Host
	startHost func() *host.Host
	// served counts the requests of URL being served (a stream that returned is not).
	served sync.WaitGroup
}

// stackOptions changes a stack from what newStack starts.
type stackOptions struct {
	// Served hosts the engine and the built-in workers as reins serve does: the workers serve
	// a shared server (builtin.Config.Operator), and the engine admits only the runs of
	// workflows that pass the submission check of the default operator configuration.
	Served bool
	// MaxInputBytes is the API's (0: testMaxInput).
	MaxInputBytes int64
	// EngineWait is the API's (0: its default).
	EngineWait time.Duration
	// Ticks, when set, are the keep-alive ticks of every event stream (api.Config.KeepAlive).
	Ticks chan time.Time
	// Log, when set, is the API's log (the rest log to the test's).
	Log *slog.Logger
	// Hooks are the webhooks the operator opens, by name, with their secrets; with any, the
	// API starts their runs through a trigger.Service.
	Hooks map[string]string
	// Limits are the engine's bounds on every run's growth (runner.Config.Limits).
	Limits engine.Limits
	// TraceURL is the operator's [console] trace_url ("": none).
	TraceURL string
	// ReadTimeout and WriteTimeout are the HTTP server's (0: none) and the API's (0: its defaults).
	ReadTimeout, WriteTimeout time.Duration
	// MaxUnauthenticated and MaxEventStreams are the API's (0: their defaults).
	MaxUnauthenticated, MaxEventStreams int
	// ProviderEnv, when set, makes the principals those of the default configuration's
	// providers (openai, anthropic) resolved with these environment variables, whose keys the
	// API is told the built-in workers use (api.Config.BuiltinWorkers).
	ProviderEnv map[string]string
	// NoBuiltinWorkers, with ProviderEnv, tells the API that other workers run the steps.
	NoBuiltinWorkers bool
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
func newStack(t testing.TB) *stack { return newStackWith(t, stackOptions{}) }

// newStackWith is newStack changed by opts.
func newStackWith(t testing.TB, opts stackOptions) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	opCfg := &operator.Config{Webhooks: map[string]operator.Webhook{}}
	if opts.ProviderEnv != nil {
		opCfg = operator.Default()
		opCfg.Webhooks = map[string]operator.Webhook{}
	}
	for name := range opts.Hooks {
		opCfg.Webhooks[name] = operator.Webhook{SecretEnv: "HOOK_" + name}
	}
	res, err := opCfg.Resolve(func(k string) string {
		if v, ok := opts.ProviderEnv[k]; ok {
			return v
		}
		return opts.Hooks[strings.TrimPrefix(k, "HOOK_")]
	}, nil)
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
	s.Box, err = natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir(), Authenticate: auth.Authenticator(res), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Box.Close() })
	hc := host.Config{Conn: (*conn.Conn)(s.Box), Engine: true, Logger: log,
		Register: func(w *worker.Worker) error { return builtin.Register(w, builtin.Config{}) },
		Roles: func(name string) []string {
			p, _ := res.Principal(name)
			return p.Roles
		}, Limits: opts.Limits}
	if opts.Served {
		op := operator.Default() // the configuration of a server without --config
		hc.Register = func(w *worker.Worker) error { return builtin.Register(w, builtin.Config{Operator: res}) }
		hc.Admit = func(_ context.Context, defs []*workflow.Definition, _ json.RawMessage) *protocol.RunError {
			if ps := operator.CheckWorkflow(op, defs...); len(ps) > 0 {
				return &protocol.RunError{Code: string(ps[0].Code), Message: ps.Error()}
			}
			return nil
		}
	}
	s.startHost = func() *host.Host {
		h, err := host.Start(ctx, hc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Stop)
		return h
	}
	s.Host = s.startHost()
	s.Config = api.Config{Conn: (*conn.Conn)(s.Box), Principals: res, Log: log, MaxInputBytes: testMaxInput, EngineWait: opts.EngineWait, MaxWebhookBytes: testMaxWebhook,
		BuiltinWorkers: opts.ProviderEnv != nil && !opts.NoBuiltinWorkers}
	if opts.Log != nil {
		s.Config.Log = opts.Log
	}
	if len(opts.Hooks) > 0 {
		op := operator.Default()
		op.Webhooks = opCfg.Webhooks
		s.Config.Operator = op
		s.Config.Hooks = trigger.New(trigger.Config{Conn: (*conn.Conn)(s.Box), Log: log})
	}
	if opts.MaxInputBytes != 0 {
		s.Config.MaxInputBytes = opts.MaxInputBytes
	}
	if opts.Ticks != nil {
		s.Config.KeepAlive = func() (<-chan time.Time, func()) { return opts.Ticks, func() {} }
	}
	if opts.TraceURL != "" {
		if s.Config.Operator == nil {
			s.Config.Operator = operator.Default()
		}
		s.Config.Operator.TraceURL = opts.TraceURL
	}
	s.Config.ReadTimeout, s.Config.WriteTimeout = opts.ReadTimeout, opts.WriteTimeout
	s.Config.MaxUnauthenticated, s.Config.MaxEventStreams = opts.MaxUnauthenticated, opts.MaxEventStreams
	h := api.New(s.Config)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.served.Add(1)
		defer s.served.Done()
		h.ServeHTTP(w, r)
	}))
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = opts.ReadTimeout, opts.WriteTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	s.Admin = client.New(client.Config{Conn: (*conn.Conn)(s.Box)})
	return s
}

// start starts a run of the workflow of TOML text (written to a file of its own) as the admin,
// with input (JSON, "" for none), and returns its id.
func (s *stack) start(text, input string) string {
	s.t.Helper()
	return s.startAs("", text, input)
}

// startAs starts a run of the workflow text with input as principal name (the admin for ""),
// the run's submitter: who, with admins and the approvers its workflow names, may signal,
// resume and cancel it.
func (s *stack) startAs(name, text, input string) string {
	s.t.Helper()
	file := filepath.Join(s.t.TempDir(), "workflow.toml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		s.t.Fatal(err)
	}
	def, ps := workflow.LoadAndValidate(file, workflow.Options{})
	if len(ps) > 0 {
		s.t.Fatalf("the test's workflow: %v", ps)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		s.t.Fatal(err)
	}
	var in json.RawMessage
	if input != "" {
		in = json.RawMessage(input)
	}
	c := s.Admin
	if name != "" {
		c = client.New(client.Config{Conn: (*conn.Conn)(s.Box), Principal: name})
	}
	id, err := c.Start(s.Ctx, bs, in, "")
	if err != nil {
		s.t.Fatalf("start a run of %s as %q: %v", def.Name, name, err)
	}
	return id
}

// waitFor waits until run id's record satisfies ok, and returns it.
func (s *stack) waitFor(id string, ok func(*client.Record) bool) *client.Record {
	s.t.Helper()
	for u, err := range s.Admin.Watch(s.Ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
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

// answer is an HTTP answer of the API: its status, headers and body, and the body's members
// when it is a JSON object.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
	Obj    map[string]any
}

// want fails the test when a's status is not status.
func (a answer) want(t testing.TB, status int, what string) answer {
	t.Helper()
	if a.Status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, a.Status, status, a.Body)
	}
	return a
}

// problems returns the code, line and key of each problem of a 422 (or of a workflow's
// problems), as "CODE@LINE key".
func (a answer) problems() []string {
	var out []string
	ps, _ := a.Obj["problems"].([]any)
	for _, p := range ps {
		m := p.(map[string]any)
		line, _ := m["line"].(float64)
		key, _ := m["key"].(string)
		out = append(out, fmt.Sprintf("%s@%d %s", m["code"], int(line), key))
	}
	return out
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
	return s.doWith(method, path, token, body, nil)
}

// doWith is do with the headers of header besides (those not "").
func (s *stack) doWith(method, path, token, body string, header map[string]string) answer {
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
		ctype := "application/json"
		if method == http.MethodPut { // PUT /v1/workflows/{name}: a workflow file
			ctype = "application/toml"
		}
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
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
	a := answer{Status: resp.StatusCode, Header: resp.Header, Body: bytes.TrimSpace(data)}
	_ = json.Unmarshal(data, &a.Obj) // nil when the body is not a JSON object
	return a
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
