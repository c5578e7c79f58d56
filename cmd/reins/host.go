package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/natsbox"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/worker"
)

// hostConfig says what a process hosts besides its NATS connection.
type hostConfig struct {
	engine   bool           // run the engine
	builtins []string       // built-in handlers to serve (nil: none)
	builtin  builtin.Config // their configuration
	ackWait  time.Duration
	log      *slog.Logger
}

// host is the engine and the built-in workers running in this process.
type host struct {
	cancel context.CancelFunc
	done   chan error // one value per component, when it stops
	n      int        // components whose value has not been received
	log    *slog.Logger
	conn   *natsbox.Box // the workers' own connection, closed once they stopped
}

// startHost starts what cfg asks for on box and returns once each part consumes.
func startHost(ctx context.Context, box *natsbox.Box, cfg hostConfig) (*host, error) {
	ctx, cancel := context.WithCancel(ctx)
	log := cfg.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &host{cancel: cancel, done: make(chan error, 2), log: log}
	var ready []<-chan struct{}
	if cfg.engine {
		eng, err := runner.New(runner.Config{Box: box, Logger: cfg.log, AckWait: cfg.ackWait})
		if err != nil {
			cancel()
			return nil, err
		}
		h.goRun(func() error { return eng.Run(ctx) })
		ready = append(ready, eng.Ready())
	}
	if len(cfg.builtins) > 0 {
		wbox := box
		if cfg.engine {
			// The workers get a connection of their own, so that their traffic and the
			// engine's do not queue behind each other (BENCHMARKS.md, durable iterations).
			c, err := box.Connect(ctx, "reins-worker")
			if err != nil {
				h.stop()
				return nil, err
			}
			h.conn, wbox = c, c
		}
		w, err := worker.New(worker.Config{Box: wbox, Logger: cfg.log, AckWait: cfg.ackWait})
		if err != nil {
			h.stop()
			return nil, err
		}
		if err := builtin.Register(w, cfg.builtin, cfg.builtins...); err != nil {
			h.stop()
			return nil, err
		}
		h.goRun(func() error { return w.Run(ctx) })
		ready = append(ready, w.Ready())
	}
	for _, r := range ready {
		select {
		case <-r:
		case err := <-h.done:
			h.n-- // received here: stop must not wait for it again
			h.stop()
			if err == nil {
				err = errors.New("stopped before it was ready")
			}
			return nil, err
		case <-ctx.Done():
			h.stop()
			return nil, ctx.Err()
		}
	}
	return h, nil
}

func (h *host) goRun(f func() error) {
	h.n++
	go func() { h.done <- f() }()
}

// wait blocks until a part stops on its own (an error) or ctx is done.
func (h *host) wait(ctx context.Context) error {
	select {
	case err := <-h.done:
		h.n--
		h.stop()
		if err == nil {
			err = errors.New("a part of the server stopped")
		}
		return err
	case <-ctx.Done():
		h.stop()
		return nil
	}
}

// stop stops every part and waits for them.
func (h *host) stop() {
	h.cancel()
	for ; h.n > 0; h.n-- {
		if err := <-h.done; err != nil && !errors.Is(err, context.Canceled) {
			h.log.Error("reins: a part stopped with an error", "error", err)
		}
	}
	if h.conn != nil {
		h.conn.Close()
		h.conn = nil
	}
}
