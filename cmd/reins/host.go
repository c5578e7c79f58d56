package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// hostConfig says what a command hosts besides its NATS connection.
type hostConfig struct {
	engine   bool           // run the engine
	builtins []string       // built-in handlers to serve (nil: none)
	builtin  builtin.Config // their configuration
	ackWait  time.Duration
	// saveWindow is the engine's runner.Config.SaveWindow.
	saveWindow time.Duration
	log        *slog.Logger
	// roles, admit, maxOutput and maxValue are a shared server's (runner.Config): what its
	// operator configured.
	roles     func(string) []string
	admit     func(context.Context, []*workflow.Definition, json.RawMessage) *protocol.RunError
	maxOutput int64
	maxValue  int64
}

// startHost starts the engine and the built-in workers cfg asks for on box (package host).
func startHost(ctx context.Context, box *natsbox.Box, cfg hostConfig) (*host.Host, error) {
	hc := host.Config{Box: box, Engine: cfg.engine, AckWait: cfg.ackWait, SaveWindow: cfg.saveWindow, Logger: cfg.log,
		Roles: cfg.roles, Admit: cfg.admit, MaxOutputBytes: cfg.maxOutput, MaxValueBytes: cfg.maxValue}
	if len(cfg.builtins) > 0 {
		hc.Register = func(w *worker.Worker) error { return builtin.Register(w, cfg.builtin, cfg.builtins...) }
	}
	return host.Start(ctx, hc)
}

// hostHere starts the engine and the built-in workers on the embedded server of a command that
// then follows a run there, since no other process runs them on its data directory. They
// outlive an interrupt of ctx (following then cancels the run, which needs them) and stop with
// the returned host. The engine saves after every decision: the command prints its progress
// from the saved states, one line per iteration however fast the loop.
func hostHere(ctx context.Context, box *natsbox.Box, bc builtin.Config, log *slog.Logger) (*host.Host, error) {
	return startHost(context.WithoutCancel(ctx), box, hostConfig{engine: true, builtins: builtinHandlers, builtin: bc, saveWindow: -1, log: log})
}
