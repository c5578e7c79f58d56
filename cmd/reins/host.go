package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/ratelimit"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// hostConfig says what a command hosts besides its NATS connection.
type hostConfig struct {
	engine   bool           // run the engine
	builtins []string       // built-in handlers to serve (nil: none)
	builtin  builtin.Config // their configuration
	ackWait  time.Duration
	// saveWindow and leaseTTL are the engine's runner.Config ones.
	saveWindow time.Duration
	leaseTTL   time.Duration
	log        *slog.Logger
	// roles, admit, limits, maxOutput and maxValue are a shared server's (runner.Config): what
	// its operator configured.
	roles     func(string) []string
	admit     func(context.Context, []*workflow.Definition, json.RawMessage) *protocol.RunError
	limits    engine.Limits
	maxOutput int64
	maxValue  int64
	metrics   *metrics.Metrics // nil: none
}

// startHost starts the engine and the built-in workers cfg asks for on box (package host).
func startHost(ctx context.Context, box *natsbox.Box, cfg hostConfig) (*host.Host, error) {
	hc := host.Config{Conn: (*conn.Conn)(box), Engine: cfg.engine, AckWait: cfg.ackWait, SaveWindow: cfg.saveWindow, LeaseTTL: cfg.leaseTTL, Logger: cfg.log,
		Roles: cfg.roles, Admit: cfg.admit, Limits: cfg.limits, MaxOutputBytes: cfg.maxOutput, MaxValueBytes: cfg.maxValue, Metrics: cfg.metrics}
	if cfg.builtin.Logger == nil {
		cfg.builtin.Logger = cfg.log // their debug lines about each task
	}
	if cfg.builtin.Metrics == nil {
		cfg.builtin.Metrics = cfg.metrics // their model and tool calls
	}
	if len(cfg.builtins) > 0 {
		hc.Register = func(w *worker.Worker) error {
			if cfg.builtin.Operator != nil && cfg.builtin.Limiter == nil {
				// A server's workers share its operator's rate limits (docs/providers.md).
				lim, err := ratelimit.New(ratelimit.Config{JS: box.JetStream(), Bucket: box.Names().LimitsBucket(), Logger: cfg.log})
				if err != nil {
					return err
				}
				w.OnStop(lim.Close)
				cfg.builtin.Limiter = lim
			}
			return builtin.Register(w, cfg.builtin, cfg.builtins...)
		}
	}
	return host.Start(ctx, hc)
}

// reached is where a command that runs, answers or forks a run reaches it.
type reached struct {
	client *client.Client
	// front is package reins's [reins.Reins] when this process runs the engine and the
	// built-in workers on the data directory's embedded server, nobody else serving it; nil
	// when a server does (reins serve on the data directory, or --nats).
	front *reins.Reins
	// byRun: the server is another reins command's running its own runs (reins run), whose
	// workers take a workflow's own providers and MCP servers, not reins serve's.
	byRun bool
	// lost is closed when the connection to the reins run holding the data directory ends (nil
	// with --nats, through reins serve, or when this process holds the directory).
	lost  <-chan struct{}
	close func()
}

// reach opens what nf names. With no --nats it opens package reins on the data directory,
// listening on listen (default a free loopback port) and recording it for other commands,
// with the built-in workers bc configures, started at once (the command continues runs that
// need them); the engine saves after every decision, so that the progress shows each
// iteration however fast the loop, and it outlives an interrupt of ctx (following then cancels
// the run, which needs the engine). When another process holds the data directory (reins
// serve, another reins run), or with --nats, it connects to that server (natsFlags.open)
// instead.
func reach(ctx context.Context, nf *natsFlags, listen string, bc func() (builtin.Config, error), log *slog.Logger) (*reached, error) {
	names, err := nf.names()
	if err != nil {
		return nil, err
	}
	if err := nf.checkJS(); err != nil {
		return nil, err
	}
	if nf.url != "" {
		return reachServer(ctx, nf, log)
	}
	cfg, err := bc()
	if err != nil {
		return nil, err
	}
	if listen == "" {
		listen = anyLoopback // other commands on the data directory connect through it
	}
	// The process holding the directory may stop while this one connects: then it runs the
	// engine itself.
	for range 3 {
		r, err := reins.New(context.WithoutCancel(ctx), reins.Config{DataDir: nf.data, Listen: listen,
			Model: cfg.Model, Registry: cfg.Registry, Logger: log, SaveWindow: -1, Namespace: names.Namespace()})
		if err == nil {
			return startFront(ctx, nf, r)
		}
		if !errors.Is(err, natsbox.ErrDataDirLocked) {
			return nil, &exitError{code: exitFailed, err: err}
		}
		if at, err := reachServer(ctx, nf, log); at != nil || err != nil {
			return at, err
		}
	}
	return nil, &exitError{code: exitFailed, err: fmt.Errorf("the reins processes holding the data directory %s kept stopping while this one connected: run the command again", nf.data)}
}

// reachServer connects to the server of --nats, or of the process holding the data directory;
// nil and no error when that process stopped meanwhile, leaving the directory free.
func reachServer(ctx context.Context, nf *natsFlags, log *slog.Logger) (*reached, error) {
	box, err := nf.open(ctx, "", log)
	if err != nil {
		return nil, asExit(err, exitFailed)
	}
	if box.Embedded() { // nothing would run the engine here
		box.Close()
		return nil, nil
	}
	c, err := newClient(ctx, box)
	if err != nil {
		box.Close()
		return nil, &exitError{code: exitFailed, err: err}
	}
	at := &reached{client: c, close: func() { _ = box.Close() }}
	if h, _ := readHolder(nf.data); nf.url == "" && h.run {
		at.byRun = true
		// The command holding the directory ends: the connection ends (closing it too). A
		// server (reins serve) is waited for instead: it comes back on the same port when it
		// restarts, and must find its directory free.
		lost := make(chan struct{})
		var once sync.Once
		gone := func() { once.Do(func() { close(lost) }) }
		box.Conn().SetDisconnectErrHandler(func(*nats.Conn, error) { gone() })
		if !box.Conn().IsConnected() { // it ended before the handler was set
			gone()
		}
		at.lost = lost
	}
	return at, nil
}

// startFront starts the built-in workers of r (package reins on the data directory of nf), and
// records its URL there for other commands (holder.go) until it closes.
func startFront(ctx context.Context, nf *natsFlags, r *reins.Reins) (*reached, error) {
	if err := r.StartWorkers(ctx); err != nil {
		r.Close()
		return nil, &exitError{code: exitFailed, err: err}
	}
	remove, err := recordHolder(nf.data, holder{url: r.ClientURL(), run: true})
	if err != nil {
		r.Close()
		return nil, &exitError{code: exitFailed, err: err}
	}
	// The file goes first: once the server stops, another process may record its own.
	return &reached{client: r.Client(), front: r, close: func() { remove(); _ = r.Close() }}, nil
}
