package api

import (
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/operator"
)

// Config configures a Server.
type Config struct {
	// Conn is the NATS connection the API acts on (required). Its connection must be allowed
	// to publish every principal's events: the embedded server's own connection is, and an
	// external server's operator grants it (docs/api.md).
	Conn *conn.Conn
	// Principals authenticates bearer tokens (required): the operator's principals, and the
	// data directory's admin where there is one.
	Principals *operator.Resolved
	// Operator is the configuration whose submission check ([operator.CheckWorkflow]) a
	// registered workflow passes; nil means the defaults of a server without --config.
	Operator *operator.Config
	// BuiltinWorkers says that this server's built-in workers call the models of its runs, with
	// the keys of Principals: a start whose workflow calls a provider without a key there is
	// answered 422 before the run exists, instead of failing its step later.
	BuiltinWorkers bool
	// Metrics serves GET /metrics (to any principal); nil serves none.
	Metrics http.Handler
	// Ready answers GET /readyz: nil when the process does its work, else why not. Nil means
	// always ready.
	Ready func() error
	// Hooks starts the runs of webhook deliveries (trigger.Service); nil: every delivery is
	// answered 404, no workflow listening.
	Hooks Hooks
	// Console serves GET / and the console's assets; nil serves none.
	Console http.Handler
	// Log receives what a client must not see (the causes of 500s); nil discards.
	Log *slog.Logger
	// Now is the clock of registrations; nil means [time.Now].
	Now func() time.Time
	// MaxInputBytes bounds a run's input and a request's body; 0 (or less) means
	// [operator.DefaultMaxBytes], the default max_input_bytes.
	MaxInputBytes int64
	// EngineWait bounds how long an answer that needs the engine (a run's start, a decision)
	// waits for it to take what was sent; past it the answer is 202 (stored, not yet taken).
	// 0 (or less) means [DefaultEngineWait], or half of WriteTimeout when that is shorter, so
	// that the 202 is still written in time.
	EngineWait time.Duration
	// KeepAlive returns the ticks on which a stream of a run's events sends a keep-alive
	// comment, and what stops them; nil means every KeepAliveEvery (tests pass their own).
	KeepAlive func() (ticks <-chan time.Time, stop func())

	// The bounds of the listener (docs/api.md, "Limits"; the operator's [limits]).

	// MaxWebhookBytes bounds a webhook delivery's body; 0 (or less) means
	// [DefaultMaxWebhookBytes].
	MaxWebhookBytes int64
	// MaxUnauthenticated bounds the requests in flight that no token vouches for: webhook
	// deliveries, whose body is read before its signature says who sent it (a request to a
	// route of tokens is checked before a byte of its body is read, and holds nothing); more
	// are answered 503 with Retry-After. 0 (or less) means [DefaultMaxUnauthenticated].
	MaxUnauthenticated int
	// MaxEventStreams bounds the event streams one principal has open at once; more are
	// answered 429 with Retry-After. 0 (or less) means [DefaultMaxEventStreams].
	MaxEventStreams int
	// ReadTimeout is the http.Server's: the deadline of a request's arrival, which an
	// authenticated body moves at each read (it is cut when it stalls that long). 0 means
	// [DefaultReadTimeout], as the operator's http_read_timeout; negative means none.
	ReadTimeout time.Duration
	// WriteTimeout is the http.Server's: an event stream moves its write deadline by it
	// before each message. 0 means [DefaultWriteTimeout], as the operator's http_write_timeout;
	// negative means none.
	WriteTimeout time.Duration
}

// Server is the HTTP API. It is an [http.Handler] and safe for concurrent use.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	routes  []route
	clients sync.Map // principal name → *client.Client: a client opens its buckets once
	// unauthenticated holds a slot for each request in flight that no token vouches for.
	unauthenticated slots
	streams         *streamCounts
}

// access is who may call a route.
type access int

const (
	public access = iota // anyone: /healthz, /readyz, the console's files, the OpenAPI document
	read                 // any principal but a worker: viewer, submitter, approver, admin
	submit               // submitter, admin: start runs, register workflows
	decide               // approver, admin: approvals, signals, resume
	cancel               // submitter, approver, admin: cancel runs (each as itself)
	signed               // anyone with the signature of the body: webhooks (the handler checks it)
)

// route is one route of the API: the table the mux, the OpenAPI test and the docs agree on.
type route struct {
	method, path string // path as http.ServeMux patterns write it: /v1/runs/{id}
	access       access
	handle       func(w http.ResponseWriter, r *http.Request, p operator.Principal) error
}

// New returns the API of cfg.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg = cfg.withDefaults()
	if cfg.Ready == nil {
		cfg.Ready = func() error { return nil }
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), unauthenticated: make(slots, cfg.MaxUnauthenticated),
		streams: &streamCounts{max: cfg.MaxEventStreams, n: map[string]int{}}}
	s.routes = s.table()
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+rt.path, s.guard(rt))
	}
	if cfg.Console != nil {
		s.mux.Handle("GET /", cfg.Console)
	}
	return s
}

// table lists every route of the API.
func (s *Server) table() []route {
	rs := []route{
		{"GET", "/healthz", public, s.healthz},
		{"GET", "/readyz", public, s.readyz},
		{"GET", "/v1/openapi.json", public, s.openAPI},
		{"POST", "/v1/runs", submit, s.startRun},
		{"GET", "/v1/runs", read, s.listRuns},
		{"GET", "/v1/runs/{id}", read, s.getRun},
		{"GET", "/v1/runs/{id}/iterations/{step}/{n}", read, s.getIteration},
		{"GET", "/v1/runs/{id}/events", read, s.runEvents},
		{"POST", "/v1/runs/{id}/cancel", cancel, s.cancelRun},
		{"POST", "/v1/runs/{id}/approvals/{call}", decide, s.decide},
		{"POST", "/v1/runs/{id}/signals/{event}", decide, s.signal},
		{"POST", "/v1/runs/{id}/resume", decide, s.resume},
		{"PUT", "/v1/workflows/{name}", submit, s.putWorkflow},
		{"GET", "/v1/workflows", read, s.listWorkflows},
		{"GET", "/v1/workflows/{name}", read, s.getWorkflow},
		{"PUT", "/v1/workflows/{name}/writers", submit, s.putWriters},
		{"GET", "/v1/me", read, s.getMe},
		{"POST", "/v1/hooks/{name}", signed, s.hook},
	}
	if s.cfg.Metrics != nil {
		rs = append(rs, route{"GET", "/metrics", read, func(w http.ResponseWriter, r *http.Request, _ operator.Principal) error {
			s.cfg.Metrics.ServeHTTP(w, r)
			return nil
		}})
	}
	return rs
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// guard authenticates a request to rt and checks the principal's roles, then runs rt; an error
// it returns is answered as a problem document. Nothing of a body is read before its sender is
// known: a token is checked as soon as the header is read, and a webhook delivery, which only
// its body's signature authenticates, holds a slot of Config.MaxUnauthenticated until it is
// answered (503 with Retry-After when none is free).
func (s *Server) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch rt.access {
		case public:
			s.serve(w, r, rt, operator.Principal{})
			return
		case signed:
			if !s.unauthenticated.take() {
				writeProblem(w, r, s.busy())
				return
			}
			defer s.unauthenticated.give()
			s.serve(w, r, rt, operator.Principal{})
			return
		}
		p, err := s.authenticate(r, rt)
		if err != nil {
			writeProblem(w, r, err)
			return
		}
		// The request's arrival was bounded by the server's read deadline; from here its body
		// (if any) may take as long as it keeps coming, and the deadline is lifted at its end
		// (deadlineBody), or now for a request without one.
		rc := http.NewResponseController(w)
		switch {
		case r.Body == nil || r.Body == http.NoBody:
			_ = rc.SetReadDeadline(time.Time{})
		case s.cfg.ReadTimeout > 0:
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, read: s.cfg.ReadTimeout, write: s.cfg.WriteTimeout}
		}
		s.serve(w, r, rt, p)
	})
}

// authenticate returns the principal of r's bearer token, if its roles allow rt: else the 401
// or 403 that says why.
func (s *Server) authenticate(r *http.Request, rt route) (operator.Principal, error) {
	token, ok := BearerToken(r)
	if !ok {
		return operator.Principal{}, problemf(http.StatusUnauthorized, "%s needs the header Authorization: Bearer TOKEN, the token of a principal of the operator's configuration", r.URL.Path)
	}
	p, ok := s.cfg.Principals.Authenticate(token)
	if !ok {
		return p, problemf(http.StatusUnauthorized, "the token of the header Authorization: Bearer TOKEN is not the token of any principal of the operator's configuration")
	}
	if !allowed(p, rt.access) {
		return p, problemf(http.StatusForbidden, "principal %s (roles %s) may not %s %s: it needs the role %s", p.Name, strings.Join(p.Roles, ", "), r.Method, rt.path, needs(rt.access))
	}
	return p, nil
}

// serve runs rt's handler as p and answers the error it returns.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, rt route, p operator.Principal) {
	if err := rt.handle(w, r, p); err != nil {
		if _, ok := err.(*Problem); !ok {
			s.cfg.Log.Error("api: a request failed", "method", r.Method, "path", r.URL.Path, "principal", p.Name, "err", err)
		}
		writeProblem(w, r, err)
	}
}

// allowed reports whether p may call a route of access a.
func allowed(p operator.Principal, a access) bool {
	if p.Has(operator.RoleAdmin) {
		return true
	}
	switch a {
	case read:
		return p.MayRead()
	case submit:
		return p.MayStart()
	case decide:
		return p.Has(operator.RoleApprover)
	case cancel:
		return p.Has(operator.RoleSubmitter) || p.Has(operator.RoleApprover)
	}
	return a == public
}

// needs names the roles that allow a.
func needs(a access) string {
	switch a {
	case read:
		return "viewer, submitter, approver or admin"
	case submit:
		return "submitter or admin"
	case decide:
		return "approver or admin"
	case cancel:
		return "submitter, approver or admin"
	}
	return "none"
}

// client returns the client of runs acting as p: it publishes p's acts on the subjects p's
// roles may publish on (a cancel by an approver goes as the approver's, on its human subject).
func (s *Server) client(p operator.Principal) *client.Client {
	if c, ok := s.clients.Load(p.Name); ok {
		return c.(*client.Client)
	}
	c, _ := s.clients.LoadOrStore(p.Name, client.New(client.Config{Conn: s.cfg.Conn, Principal: p.Name, Roles: p.Roles, Now: s.cfg.Now,
		MaxInputBytes: s.cfg.MaxInputBytes, May: s.may(p)}))
	return c.(*client.Client)
}

// As returns the client of runs acting as p that the API's routes act through, for what serves
// the same principals beside them (reins serve's MCP server).
func (s *Server) As(p operator.Principal) *client.Client { return s.client(p) }

// may reports whether p's roles let it publish on a subject, as the server's permissions would
// let p's own connection (natsbox.Permissions): a principal's event subject by its kind, and
// anything else only as an admin (the API's connection publishes for everyone).
func (s *Server) may(p operator.Principal) func(subject string) bool {
	admin := p.Has(operator.RoleAdmin)
	return func(subject string) bool {
		_, kind, _, ok := s.box().Names().ParseEventSubject(subject)
		switch {
		case admin:
			return true
		case ok && kind == natsbox.SubmitKind:
			return p.Has(operator.RoleSubmitter)
		case ok && kind == natsbox.HumanKind:
			return p.Has(operator.RoleApprover)
		}
		return false
	}
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ operator.Principal) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request, _ operator.Principal) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := s.cfg.Ready(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
		return nil
	}
	_, _ = w.Write([]byte("ready\n"))
	return nil
}

// notYet answers a route whose handler is still to come.
func notYet(w http.ResponseWriter, r *http.Request, _ operator.Principal) error {
	return problemf(http.StatusNotImplemented, "%s %s is not implemented yet", r.Method, r.URL.Path)
}

// box is the connection of Config.Conn as the module's code uses it.
func (s *Server) box() *natsbox.Box { return (*natsbox.Box)(s.cfg.Conn) }
