// Package host runs the parts of reins that serve runs, the engine and workers, in one process
// on a NATS connection (or on an embedded server it opens, [StartEmbedded]): it starts them,
// returns once each one consumes, and stops them together. `reins run`, `reins serve`, the
// examples and the benchmarks host their parts with it.
//
// It owns the lifecycle of those parts only. It must not decide anything about runs (package
// engine), carry out the engine's commands (package runner) or answer tasks (package worker):
// it starts and stops what they provide.
package host

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed" // Open starts embedded servers
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/metrics/workermetrics"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// Config says what a Host runs on Conn.
type Config struct {
	// Conn is the connection the parts run on (required by Start; [StartEmbedded] opens it).
	Conn *conn.Conn
	// Engine runs the engine.
	Engine bool
	// Handlers are served by a worker, with the handlers Register adds (builtin.Register, for
	// example); with neither, no worker runs. With the engine in the same process the worker
	// gets a connection of its own, so that their traffic does not queue behind each other's
	// (BENCHMARKS.md, durable iterations).
	Handlers map[string]worker.Handler
	Register func(*worker.Worker) error
	// AckWait and Concurrency configure the worker (zero: its defaults). The engine keeps
	// [runner.DefaultAckWait]: an engine that dies is replaced by its partitions' leases, and an
	// event lost with a NATS node comes again after it.
	AckWait     time.Duration
	Concurrency int
	// SaveWindow and LeaseTTL are the engine's [runner.Config] ones (zero: their defaults).
	SaveWindow time.Duration
	LeaseTTL   time.Duration
	// Roles, Admit, Limits, MaxOutputBytes and MaxValueBytes are the engine's ([runner.Config]):
	// what a shared server's operator configured (zero: a server's defaults).
	Roles          func(principal string) []string
	Admit          func(ctx context.Context, defs []*workflow.Definition, input json.RawMessage) *protocol.RunError
	Limits         engine.Limits
	MaxOutputBytes int64
	MaxValueBytes  int64
	Logger         *slog.Logger
	// Metrics is given to the engine and the worker (nil: no metrics).
	Metrics *metrics.Metrics
}

// Host is the engine and a worker running in this process.
type Host struct {
	cancel context.CancelFunc
	done   chan error // one value per part, when it stops
	n      int        // parts whose value has not been received
	log    *slog.Logger
	conn   *natsbox.Box // the worker's own connection, closed once it stopped
	box    *natsbox.Box // Config.Conn
	owned  bool         // box was opened by StartEmbedded: Stop closes it
}

// StartEmbedded opens an embedded NATS server with its file store in dataDir ([natsbox.Open]),
// then starts on it what cfg asks for (cfg.Conn is that server's connection). The Host owns the
// server: Stop stops the parts, then the server. Conn returns the connection.
func StartEmbedded(ctx context.Context, dataDir string, cfg Config) (*Host, error) {
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: dataDir, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	cfg.Conn = (*conn.Conn)(box)
	h, err := Start(ctx, cfg)
	if err != nil {
		box.Close()
		return nil, err
	}
	h.owned = true
	return h, nil
}

// Conn returns the NATS connection the parts run on ([Config.Conn]).
func (h *Host) Conn() *conn.Conn { return (*conn.Conn)(h.box) }

// Start starts what cfg asks for and returns once each part consumes. The parts run until
// Stop, or until ctx is done.
func Start(ctx context.Context, cfg Config) (*Host, error) {
	ctx, cancel := context.WithCancel(ctx)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Host{cancel: cancel, done: make(chan error, 2), log: log, box: (*natsbox.Box)(cfg.Conn)}
	var ready []<-chan struct{}
	if cfg.Engine {
		eng, err := runner.New(runner.Config{Conn: cfg.Conn, Logger: cfg.Logger, SaveWindow: cfg.SaveWindow, LeaseTTL: cfg.LeaseTTL,
			Roles: cfg.Roles, Admit: cfg.Admit, Limits: cfg.Limits, MaxOutputBytes: cfg.MaxOutputBytes, MaxValueBytes: cfg.MaxValueBytes, Metrics: cfg.Metrics})
		if err != nil {
			cancel()
			return nil, err
		}
		h.goRun(func() error { return eng.Run(ctx) })
		ready = append(ready, eng.Ready())
	}
	if len(cfg.Handlers) > 0 || cfg.Register != nil {
		w, err := h.worker(ctx, cfg)
		if err != nil {
			h.Stop()
			return nil, err
		}
		h.goRun(func() error { return w.Run(ctx) })
		ready = append(ready, w.Ready())
	}
	for _, r := range ready {
		select {
		case <-r:
		case err := <-h.done:
			h.n-- // received here: Stop must not wait for it again
			h.Stop()
			if err == nil {
				err = errors.New("host: a part stopped before it was ready")
			}
			return nil, err
		case <-ctx.Done():
			h.Stop()
			return nil, ctx.Err()
		}
	}
	return h, nil
}

// worker creates the worker of cfg with its handlers.
func (h *Host) worker(ctx context.Context, cfg Config) (*worker.Worker, error) {
	box := h.box
	if cfg.Engine {
		c, err := h.box.Connect(ctx, "reins-worker")
		if err != nil {
			return nil, err
		}
		h.conn, box = c, c
	}
	w, err := worker.New((*conn.Conn)(box), worker.Options{Logger: cfg.Logger, AckWait: cfg.AckWait, Concurrency: cfg.Concurrency, Metrics: workermetrics.New(cfg.Metrics)})
	if err != nil {
		return nil, err
	}
	for name, fn := range cfg.Handlers {
		w.Handle(name, fn)
	}
	if cfg.Register != nil {
		if err := cfg.Register(w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func (h *Host) goRun(f func() error) {
	h.n++
	go func() { h.done <- f() }()
}

// Wait blocks until a part stops on its own (its error is returned) or ctx is done (nil); then
// it stops every part.
func (h *Host) Wait(ctx context.Context) error {
	select {
	case err := <-h.done:
		h.n--
		h.Stop()
		if err == nil {
			err = errors.New("host: a part stopped")
		}
		return err
	case <-ctx.Done():
		h.Stop()
		return nil
	}
}

// Stop stops every part and waits for them, then closes the server [StartEmbedded] opened. It may
// be called more than once.
func (h *Host) Stop() {
	h.cancel()
	for ; h.n > 0; h.n-- {
		if err := <-h.done; err != nil && !errors.Is(err, context.Canceled) {
			h.log.Error("host: a part stopped with an error", "error", err)
		}
	}
	if h.conn != nil {
		h.conn.Close()
		h.conn = nil
	}
	if h.owned {
		h.box.Close()
		h.owned = false
	}
}
