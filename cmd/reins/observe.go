package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/logs"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/operator"
)

// DefaultListen is where reins serve serves HTTP unless --listen says otherwise: loopback, so
// that nothing is exposed unless the operator asks.
const DefaultListen = "127.0.0.1:7400"

// logFlags are the log flags of the long-running commands (serve, worker).
type logFlags struct {
	format, level string
	verbose       bool
}

func (f *logFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.format, "log-format", logs.Text, "the log's `FORMAT`: text (key=value lines) or json (one object a line)")
	fl.StringVar(&f.level, "log-level", "info", "log at this `LEVEL` and above: debug, info, warn or error")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log at debug level (as --log-level debug)")
}

// logger returns the command's logger on w, or a usage error naming the bad flag.
func (f *logFlags) logger(cmd *cobra.Command, w io.Writer) (*slog.Logger, error) {
	if err := logs.CheckFormat(f.format); err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	level, err := logs.ParseLevel(f.level)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	if f.verbose {
		if cmd.Flags().Changed("log-level") && level != slog.LevelDebug {
			return nil, &exitError{code: exitUsage, err: fmt.Errorf("-v logs at debug level: it cannot be used with --log-level %s", f.level)}
		}
		level = slog.LevelDebug
	}
	return logs.New(w, f.format, level), nil
}

// readiness is what /readyz answers: ready once the process's parts consume and while its NATS
// connection is up.
type readiness struct {
	box   atomic.Pointer[natsbox.Box]
	state atomic.Pointer[string] // why the parts are not ready; nil when they are
}

func newReadiness() *readiness {
	r := &readiness{}
	r.notReady("the engine and workers are starting")
	return r
}

func (r *readiness) notReady(why string) { r.state.Store(&why) }
func (r *readiness) ready()              { r.state.Store(nil) }

// check returns nil when ready, else why not, in one sentence.
func (r *readiness) check() error {
	box := r.box.Load()
	if box == nil {
		return errors.New("NATS is not connected yet")
	}
	if st := box.Conn().Status(); st != nats.CONNECTED {
		return fmt.Errorf("NATS is not connected (%s)", st)
	}
	if why := r.state.Load(); why != nil {
		return errors.New(*why)
	}
	return nil
}

// newMux returns the routes every process serves: /metrics, for a bearer token that
// authenticate knows (docs/reference/http-api.md: every route but /healthz and /readyz needs one),
// /healthz (the process lives) and /readyz (it does its work), without one. The HTTP API adds
// its routes to the same mux.
func newMux(m *metrics.Metrics, ready func() error, authenticate func(token string) bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", bearer(authenticate, m.Handler()))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// bearer serves h to requests with "Authorization: Bearer TOKEN" (the scheme in any case,
// api.BearerToken) of a token authenticate knows, and answers the others 401 with an RFC 9457
// problem document. The token is never logged.
func bearer(authenticate func(token string) bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := api.BearerToken(r)
		if !ok || !authenticate(token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="reins"`)
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Unauthorized", "status": http.StatusUnauthorized,
				"detail": r.URL.Path + " needs the header Authorization: Bearer TOKEN, the token of a principal of the operator's configuration"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// checkAddr checks the value of flag, an address to listen on: "" or HOST:PORT.
func checkAddr(flag, addr string) error {
	if addr == "" {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return &exitError{code: exitUsage, err: fmt.Errorf("%s %q: want HOST:PORT, such as %s (\"\" serves no HTTP)", flag, addr, DefaultListen)}
	}
	return nil
}

// listen listens on addr for flag (its name, for errors): a usage error when addr is not
// HOST:PORT, a failure when it cannot be listened on (taken, not an address of this machine).
func listen(flag, addr string) (net.Listener, error) {
	if err := checkAddr(flag, addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("%s %s: the address is in use by another process: pass another %s ADDR, or %s \"\" to serve no HTTP", flag, addr, flag, flag)}
	case err != nil:
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("%s %s: cannot listen there: %w", flag, addr, err)}
	}
	return ln, nil
}

// serveHTTP serves mux on ln until stop is called, which lets the requests under way finish
// (at most 5 s). The server is bounded as lim says (docs/security.md, "The HTTP listener"):
// a header arrives within ReadHeaderTimeout and holds at most MaxHeaderBytes, a request within
// ReadTimeout (an authenticated body moves it while it keeps coming: package api), an answer
// is written within WriteTimeout (an event stream moves it at each message), and a kept-alive
// connection waits IdleTimeout for its next request.
func serveHTTP(ln net.Listener, mux http.Handler, log *slog.Logger, lim operator.HTTPLimits) (stop func()) {
	lim = lim.WithDefaults()
	srv := &http.Server{Handler: mux, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout, WriteTimeout: lim.WriteTimeout,
		IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: int(lim.MaxHeaderBytes)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("reins: the HTTP listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}

// observed is the HTTP side of a long-running process: its metrics, and its listener when it
// has one.
type observed struct {
	metrics *metrics.Metrics // nil when it listens nowhere
	ready   *readiness
	addr    string // where it listens ("" for nowhere)
	stop    func()
}

// serveMux makes the handler a process serves on its listener from its metrics and readiness.
type serveMux func(m *metrics.Metrics, ready func() error) http.Handler

// observe listens on addr (flag names it; "" listens nowhere, and nothing is counted) and
// serves there, bounded by lim, what mux makes (nil: the process's metrics, to the principals
// of res, liveness and readiness), not ready until the caller says so.
func observe(flag, addr string, box *natsbox.Box, res *operator.Resolved, log *slog.Logger, lim operator.HTTPLimits, mux serveMux) (*observed, error) {
	o := &observed{ready: newReadiness(), stop: func() {}}
	o.ready.box.Store(box)
	if addr == "" {
		return o, nil
	}
	o.metrics = metrics.New()
	ln, err := listen(flag, addr)
	if err != nil {
		return nil, err
	}
	o.addr = ln.Addr().String()
	if mux == nil {
		authenticate := func(token string) bool { _, ok := res.Authenticate(token); return ok }
		mux = func(m *metrics.Metrics, ready func() error) http.Handler { return newMux(m, ready, authenticate) }
	}
	o.stop = serveHTTP(ln, mux(o.metrics, o.ready.check), log, lim)
	return o, nil
}

// attr is the listener's address as log attributes: none when it listens nowhere.
func (o *observed) attr() []any {
	if o.addr == "" {
		return nil
	}
	return []any{"http", o.addr}
}

// knownWorkflows makes the series of the registered workflows exist at 0 before their first
// run, so that increase() counts it: those registered at start before it returns (a scrape
// right after start finds them), those registered later as they are, until ctx ends. A
// registry that cannot be read is logged, not fatal.
func knownWorkflows(ctx context.Context, box *natsbox.Box, m *metrics.Metrics, log *slog.Logger) {
	if m == nil {
		return
	}
	c := client.New(client.Config{Conn: (*conn.Conn)(box)})
	regs, err := c.Workflows(ctx)
	if err != nil {
		log.Warn("metrics: the registered workflows are not counted from 0", "err", err)
		return
	}
	for _, r := range regs {
		m.Workflow(r.Name)
	}
	go func() {
		for name, err := range c.WorkflowNames(ctx) {
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("metrics: workflows registered from now on are not counted from 0", "err", err)
				}
				return
			}
			m.Workflow(name)
		}
	}()
}
