package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/cobra"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/console"
	"github.com/reins-run/reins/internal/auth"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/mcpserver"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/trigger"
	"github.com/reins-run/reins/worker"
)

// retentionClock is the clock of serve's retention (now, and the wait between two prunes):
// tests replace it to drive the prunes without waiting.
var retentionClock = struct {
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
}{time.Now, time.After}

func newServeCmd() *cobra.Command {
	var (
		nf         natsFlags
		mf         modelFlags
		listen     string
		httpListen string
		lf         logFlags
		noWorker   bool
		ackWait    time.Duration
		saveWindow saveWindowFlag
		leaseTTL   time.Duration
		retention  time.Duration
		configFile string
		memLimit   string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the engine and the built-in step workers: the long-running server",
		Long: `Runs the durable engine and the built-in llm and agent workers until interrupted.

With no --nats, an embedded NATS server with JetStream stores everything in --data (default
.reins/) and listens on --nats-listen (loopback only; default 127.0.0.1:4222) so that workers
(reins worker, or your programs using package worker) and commands (reins run --nats, reins
runs) can connect; other commands given the same --data find it on their own. With --nats, the
engine and workers use that external server or cluster instead.

The embedded server requires a token from every client (docs/security.md): the principals of
--config FILE, and the data directory's admin, whose token serve creates at its first start in
DATA/admin.token (mode 0600; commands given --data use it). The operator's configuration also
names the providers and keys, the MCP servers and the limits of the runs it serves: a submitted
workflow that sets base_url, api_key_env, cassette or [mcp] tables is refused (E_OPERATOR_ONLY).

Several serve processes may share one NATS server: one engine consumes at a time and the others
stand by, taking over when it stops.

Finished runs are kept for --retention (default 168h, 7 days): serve removes those that ended
longer ago (as reins runs prune does) at start and then every tenth of it, at most every hour.
--retention 0 keeps them forever.

The [[triggers]] of the registered workflows (PUT /v1/workflows/NAME) are active: schedules start
their runs on their due times, exactly once per due time however many serve processes run,
messages on the subjects the operator allows ([triggers] subjects) start the runs of subject
triggers, and POST /v1/hooks/NAME starts the runs of webhook triggers (docs/workflows.md,
"Triggers").
reins run FILE runs a file once and ignores its triggers.

A loop whose iterations come faster than --save-window (default 100ms) has them saved together:
the engine dispatches each next iteration at once and saves the run once per window, then
acknowledges the events the save covers (a crash has them decided again). --save-window 0 is
the default window; --save-window off (or a negative duration) saves after every decision, as
reins run does.

--memory-limit SIZE (or GOMEMLIMIT) is the process's soft memory limit: the Go heap, which
otherwise grows to twice what stays live, collects sooner to stay under it (docs/deploy.md).
Without either, a process in a control group with a memory limit (a container) takes 90% of
that limit, so that a burst does not take it past the limit (AUTOMEMLIMIT=off: none,
AUTOMEMLIMIT=0.8: another share).

The web console is at / on --listen: http://127.0.0.1:7400/ by default (docs/console.md). To
sign in, paste the data directory's admin token, the contents of DATA/admin.token
(.reins/admin.token by default; cat .reins/admin.token prints it), or the token of a principal
of --config. serve's first log line names the console's URL and the token's file.

HTTP on --listen (default 127.0.0.1:7400, loopback only; --listen "" serves none): /metrics
(Prometheus: runs, steps, iterations, model calls, tokens, cost, tool calls, tasks, partitions),
/healthz (the process lives) and /readyz (NATS connected, the engine and workers consuming; 503
with the reason otherwise). docs/observability.md lists the metrics. The log goes to stderr in
--log-format text or json, at --log-level and above; every line about a run carries run_id
(and step and iteration where they apply).`,
		Example: "  reins serve\n  reins serve --listen 0.0.0.0:7400 --log-format json\n  reins serve --data /var/lib/reins --nats-listen 127.0.0.1:4333\n  reins serve --nats nats://nats-1:4222,nats://nats-2:4222 --nats-creds reins.creds",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log, err := lf.logger(cmd, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := checkAddr("--listen", httpListen); err != nil {
				return err
			}
			if retention < 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("--retention %s: want a duration of 0 (keep forever) or more", retention)}
			}
			if leaseTTL <= 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("--lease-ttl %s: want a duration of more than 0", leaseTTL)}
			}
			if nf.url != "" && cmd.Flags().Changed("nats-listen") {
				return &exitError{code: exitUsage, err: fmt.Errorf("--nats-listen applies to the embedded server; it cannot be used with --nats")}
			}
			if err := memoryLimit(memLimit, memlimit.FromCgroup, log); err != nil {
				return err
			}
			cfgOp, res, err := loadOperator(configFile)
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			flush, err := startTracing(ctx, "reins-serve", cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer flush()
			l := listen
			if nf.url != "" {
				l = ""
			} else {
				// The data directory's admin: the operator on this machine (--data finds it).
				token, err := operator.AdminToken(nf.data)
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				res.AddPrincipal(natsbox.RoleAdmin, token, operator.RoleAdmin)
				nf.auth = auth.Authenticator(res)
				nf.maxConsumers = cfgOp.Limits.MaxConsumersPerPrincipal
			}
			box, err := nf.open(ctx, l, log)
			if err != nil {
				return asExit(err, exitFailed)
			}
			defer box.Close()
			if !box.Embedded() && nf.url == "" {
				return &exitError{code: exitFailed, err: fmt.Errorf("the data directory %s is in use by another reins process (reins serve, or a reins run in another terminal): stop it first, or give serve another --data", nf.data)}
			}
			if !box.Embedded() {
				// Principals in accounts of their own on an external server reach the consumer
				// proxy of the serve processes (docs/deploy.md); the embedded server's Box runs its own.
				stop, err := natsbox.ServeConsumerProxy(ctx, box, natsbox.ProxyConfig{Principal: auth.Identity(res),
					MaxPerPrincipal: cfgOp.Limits.MaxConsumersPerPrincipal, Logger: log})
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				defer stop()
			}
			// The triggers of the registered workflows: schedules decided here (several serve
			// processes share them exactly once per due time), webhooks through the API.
			triggers := trigger.New(trigger.Config{Conn: (*conn.Conn)(box), Log: log, MaxInputBytes: cfgOp.Limits.MaxInputBytes, Subjects: cfgOp.TriggerSubjects})
			lim := cfgOp.Limits.HTTP.WithDefaults()
			obs, err := observe("--listen", httpListen, box, res, log, lim, func(m *metrics.Metrics, ready func() error) http.Handler {
				// The built-in workers call the workflows' models with the keys of res, unless
				// --model puts every step on one model of its own.
				a := api.New(api.Config{Conn: (*conn.Conn)(box), Principals: res, Operator: cfgOp, BuiltinWorkers: !noWorker && mf.name == "", Metrics: m.Handler(), Ready: ready, Console: console.Handler(),
					Log: log, MaxInputBytes: cfgOp.Limits.MaxInputBytes, Hooks: triggers,
					MaxWebhookBytes: lim.MaxWebhookBytes, MaxUnauthenticated: lim.MaxUnauthenticated,
					MaxEventStreams: lim.MaxEventStreams, ReadTimeout: lim.ReadTimeout, WriteTimeout: lim.WriteTimeout})
				return withMCP(a, mcpserver.New(mcpserver.Config{As: a.As, Principals: res, Log: log, Version: buildVersion()}))
			})
			if err != nil {
				return err
			}
			defer obs.stop()
			tokenFile := ""
			if nf.url == "" {
				tokenFile = adminTokenFile(nf.data)
			}
			logConsole(log, obs.addr, tokenFile)
			knownWorkflows(ctx, box, obs.metrics, log)
			url := "" // an external server is found by its own URL
			if box.Embedded() {
				url = box.ClientURL()
			}
			remove, err := nf.writeURL(url)
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			defer remove()
			cfg := hostConfig{engine: true, ackWait: ackWait, saveWindow: time.Duration(saveWindow), leaseTTL: leaseTTL, log: log,
				roles: rolesOf(res), admit: admit(cfgOp), limits: runLimits(cfgOp), maxOutput: cfgOp.Limits.MaxOutputBytes,
				maxValue: max(cfgOp.Limits.MaxInputBytes, cfgOp.Limits.MaxOutputBytes), metrics: obs.metrics}
			if !noWorker {
				rf := runFlags{model: mf}
				bc, err := rf.builtinConfig()
				if err != nil {
					return err
				}
				cfg.builtins, cfg.builtin = builtinHandlers, bc
				cfg.builtin.Operator, cfg.builtin.ToolTimeout = res, cfgOp.Limits.ToolTimeout
			}
			h, err := startHost(ctx, box, cfg)
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			where := box.ClientURL()
			switch {
			case !box.Embedded():
				where = box.ServerURL()
			case where == "":
				where = "in-process"
			}
			obs.ready.ready()
			stopRetention := retain(ctx, box, retention, log)
			stopTriggers := runTriggers(ctx, triggers, log)
			log.Info("reins serving", append(append([]any{"nats", where, "builtin_workers", !noWorker}, obs.attr()...), namespaceAttr(box)...)...)
			err = h.Wait(ctx)
			obs.ready.notReady("the engine and workers stopped")
			stopRetention()
			stopTriggers()
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			return nil
		},
	}
	nf.add(cmd)
	nf.addReplicas(cmd)
	mf.add(cmd, "serve every llm and agent step on this model, `PROVIDER:NAME`, instead of the workflow's")
	fl := cmd.Flags()
	fl.StringVar(&listen, "nats-listen", "127.0.0.1:4222", "where the embedded NATS server accepts clients (loopback only)")
	fl.BoolVar(&noWorker, "no-workers", false, "run only the engine: serve no built-in step")
	fl.DurationVar(&ackWait, "ack-wait", worker.DefaultAckWait, "how long a task may stay unacknowledged before another worker gets it (a crashed worker's iteration runs again after it; a running handler renews it)")
	saveWindow = saveWindowFlag(runner.DefaultSaveWindow)
	fl.Var(&saveWindow, "save-window", "how long the engine may hold a decision that only dispatches a run's next task before it saves the run, so that a fast loop's iterations are saved together (0: the default; off or negative: save after every decision)")
	fl.DurationVar(&leaseTTL, "lease-ttl", runner.DefaultLeaseTTL, "how long the other engines wait without a heartbeat of this one before they take its partitions over (the same on every engine; longer on machines too busy to answer within it)")
	fl.DurationVar(&retention, "retention", client.DefaultRetention, "remove finished runs that ended longer ago than this `DURATION` (0: keep them forever)")
	fl.StringVar(&httpListen, "listen", DefaultListen, "where to serve HTTP, `ADDR` (HOST:PORT): /metrics (Prometheus), /healthz and /readyz; loopback by default, \"\" serves no HTTP")
	fl.StringVar(&memLimit, "memory-limit", "", "the soft memory limit of the process, `SIZE` (such as 512MiB): the Go heap collects sooner to stay under it, at the price of CPU (docs/deploy.md, \"Memory\"); default: GOMEMLIMIT's, or 90% of the control group's memory limit, or none")
	lf.add(cmd)
	fl.StringVar(&configFile, "config", "", "the operator's configuration `FILE`: providers, MCP servers, principals, limits (docs/security.md); default: providers openai and anthropic with the keys of OPENAI_API_KEY and ANTHROPIC_API_KEY, and the data directory's admin")
	return cmd
}

// saveWindowFlag is --save-window: a duration read as runner.Config.SaveWindow reads it (0:
// the default, negative: save after every decision), or "off", which is -1.
type saveWindowFlag time.Duration

func (f *saveWindowFlag) Set(s string) error {
	if s == "off" {
		*f = -1
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration (0: the default, %s) or off (save after every decision)", runner.DefaultSaveWindow)
	}
	*f = saveWindowFlag(d)
	return nil
}

func (f *saveWindowFlag) String() string {
	if *f < 0 {
		return "off"
	}
	return time.Duration(*f).String()
}

// Type is the reference's type of the flag: a duration, which may also be off.
func (f *saveWindowFlag) Type() string { return "duration" }

// runTriggers runs the triggers of the registered workflows until the returned function is
// called; a failure to start is logged and tried again, never fatal to serving runs.
func runTriggers(ctx context.Context, s *trigger.Service, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ready := make(chan struct{})
			if err := s.Run(ctx, ready); err != nil && ctx.Err() == nil {
				log.Error("reins: the triggers of registered workflows cannot start; trying again", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(trigger.SyncEvery):
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// retain prunes the runs that ended more than retention ago, at once and then periodically,
// until the returned function is called (which waits for a prune under way). Retention 0 does
// nothing.
func retain(ctx context.Context, box *natsbox.Box, retention time.Duration, log *slog.Logger) (stop func()) {
	if retention <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	c := client.New(client.Config{Conn: (*conn.Conn)(box)})
	go func() {
		defer close(done)
		_ = c.Retain(ctx, client.Retention{
			OlderThan: retention, Now: retentionClock.now, After: retentionClock.after,
			Pruned: func(rep client.PruneReport, err error) {
				switch {
				case err != nil:
					log.Warn("reins: pruning old runs failed; trying again later", "err", err)
				case rep.Runs+rep.SubRuns > 0:
					log.Info("reins pruned runs", "runs", rep.Runs, "sub_runs", rep.SubRuns, "checkpoints", rep.Checkpoints, "ended_before", rep.Before.Format(time.RFC3339))
				default:
					log.Debug("reins pruned no run", "ended_before", rep.Before.Format(time.RFC3339))
				}
			},
		})
	}()
	return func() {
		cancel()
		<-done
	}
}
