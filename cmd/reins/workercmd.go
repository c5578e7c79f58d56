package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/reins-run/reins/worker"
)

func newWorkerCmd() *cobra.Command {
	var (
		nf       natsFlags
		mf       modelFlags
		handlers []string
		ackWait  time.Duration
		config   string
		lf       logFlags
		mlisten  string
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Serve built-in step types (llm, agent) against a server",
		Long: `Serves the built-in step types against a running server (reins serve): --nats URL, or the
server that runs on --data. --handlers chooses which of the built-in handlers to serve
(reins-llm for llm steps, reins-agent for agent steps; default both). Handlers of task and
agent_loop steps are Go functions: programs serve them with package worker
(worker.New(conn, options), then Handle(name, fn)), against the same server.

Several workers may serve the same handlers: each task goes to one of them, and a task whose
worker dies is redelivered to another after --ack-wait.

With --metrics-listen ADDR the worker serves HTTP there: /metrics (its tasks, model calls,
tokens, cost, tool calls and task queues), /healthz and /readyz (NATS connected and the
handlers consuming; 503 with the reason otherwise). The log goes to stderr in --log-format text
or json, at --log-level and above.`,
		Example: "  reins worker --nats nats://127.0.0.1:4222\n  reins worker --handlers reins-agent --model openai:gpt-4.1-mini",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log, err := lf.logger(cmd, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := checkAddr("--metrics-listen", mlisten); err != nil {
				return err
			}
			if len(handlers) == 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("--handlers is empty: name at least one of %v", builtinHandlers)}
			}
			for _, h := range handlers {
				if !slices.Contains(builtinHandlers, h) {
					return &exitError{code: exitUsage, err: fmt.Errorf("--handlers: %q is not a built-in handler (%v); handlers of your own are served by programs using package worker", h, builtinHandlers)}
				}
			}
			cfgOp, res, err := loadOperator(config)
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			flush, err := startTracing(ctx, "reins-worker", cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer flush()
			box, err := nf.open(ctx, "", log)
			if err != nil {
				return asExit(err, exitFailed)
			}
			defer box.Close()
			if box.Embedded() {
				return &exitError{code: exitFailed, err: fmt.Errorf("no server runs on the data directory %s: start reins serve, or pass --nats URL", nf.data)}
			}
			obs, err := observe("--metrics-listen", mlisten, box, res, log, cfgOp.Limits.HTTP, nil)
			if err != nil {
				return err
			}
			defer obs.stop()
			rf := runFlags{model: mf}
			bc, err := rf.builtinConfig()
			if err != nil {
				return err
			}
			bc.Operator = res // a worker of a server calls only the operator's providers and MCP servers
			bc.ToolTimeout = cfgOp.Limits.ToolTimeout
			h, err := startHost(ctx, box, hostConfig{builtins: handlers, builtin: bc, ackWait: ackWait, log: log, metrics: obs.metrics})
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			obs.ready.ready()
			log.Info("reins worker serving", append(append([]any{"nats", box.ServerURL(), "handlers", handlers}, obs.attr()...), namespaceAttr(box)...)...)
			err = h.Wait(ctx)
			obs.ready.notReady("the workers stopped")
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			return nil
		},
	}
	nf.add(cmd)
	nf.addReplicas(cmd)
	mf.add(cmd, "serve every llm and agent step on this model, `PROVIDER:NAME`, instead of the workflow's")
	cmd.Flags().StringSliceVar(&handlers, "handlers", builtinHandlers, "the built-in `HANDLERS` to serve (comma-separated)")
	cmd.Flags().DurationVar(&ackWait, "ack-wait", worker.DefaultAckWait, "how long a task may stay unacknowledged before another worker gets it (a crashed worker's iteration runs again after it; a running handler renews it)")
	cmd.Flags().StringVar(&mlisten, "metrics-listen", "", "where to serve HTTP, `ADDR` (HOST:PORT): /metrics, /healthz and /readyz (default: nowhere)")
	lf.add(cmd)
	cmd.Flags().StringVar(&config, "config", "", "the operator's configuration `FILE`, for its providers and MCP servers (as reins serve --config; its principals are the server's)")
	return cmd
}
