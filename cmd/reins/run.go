package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/provider/registry"
	"github.com/reins-run/reins/workflow"
)

type runFlags struct {
	nats      natsFlags
	model     modelFlags
	input     string
	inputFile string
	asJSON    bool
	detach    bool
	listen    string
	runID     string
	quiet     bool
	// provider is the PROVIDER:NAME of --model when useModel wrote it into the run's
	// definition: a model this command's workers open.
	provider string
}

func newRunCmd() *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run a workflow to its end and print the result and every step's stop reason",
		Long: `Validates the workflow file, starts a run with the input, follows it to its end and prints
the result: the status, the output, the path, and every step's stop reason, iterations, label
and attempts (--json: the run result of docs/reference/workflow-file.md).

With no --nats, an embedded NATS server with JetStream runs for the length of the command in
--data (default .reins/), with the engine and the built-in llm and agent workers in this
process. Task and agent_loop steps need workers that register their handlers: give --listen
so that they can connect, or start the run on a server (reins serve) with --nats. With --nats
the run goes to that server's engine and workers; --detach prints the run id and returns.

With --server URL (default $REINS_SERVER), the command goes through the HTTP API of a server
(reins serve --listen) as the principal of --token, and needs no NATS: it registers FILE under
its workflow's name, starts a run of that version, and follows the run's event stream to its
end (--detach prints the run id). --listen and --model act in this process and cannot be used
with it. docs/api.md, "The reins command over the API".

--model runs every llm and agent step on one model instead of the workflow's: a NAME of the
workflow's [models] (the run starts with a copy of the definition whose steps name it), or
PROVIDER:NAME (openai:NAME, with --base-url for any OpenAI-compatible server, anthropic:NAME,
replay:FILE), which the copy declares too: the run's own definition names its model, so that
reins approve, deny, resume and signal continue it on that model. PROVIDER:NAME is for this
command's own workers: when the run goes to another process's (--nats, or a --data another
reins run holds), declare the model in the file's [models] and give its NAME.

Before the run starts, every model it calls must have its API key (its api_key_env, --api-key,
or OPENAI_API_KEY / ANTHROPIC_API_KEY; a --base-url server needs none), and the input must
match the workflow's input_schema when it has one: otherwise the command says which model
needs which variable, or which input field is wrong, and starts nothing. With --server the
server checks the keys of its workers; with --nats the keys are the server's workers', which
this command cannot see.

Progress (step, iteration, tool calls, tokens, cost) goes to stderr as the run advances.
Interrupting the command (Ctrl-C, SIGTERM) cancels the run. While it runs, other commands on
--data (a second reins run, runs list, approve) work from another terminal through its server
(docs/deploy.md, "Several terminals on one data directory").

A run that waits for a human (an approval step, an agent's call that needs approval, an agent
paused on needs_human, a wait_event step) on the private embedded server stops the command:
it prints the result so far (status waiting), what the run waits for and the command that
answers it (reins approve, deny, resume or signal with the same --data), which continues the
run. With --nats or --listen the command keeps following, since others can answer.

Exit status: 0 when the run completed, or waits for a human on the private embedded server, 1
when it failed, was cancelled or timed out, the file is invalid, or a model has no API key, 2
for a usage error (such as an input that is not JSON, or that the input_schema refuses).`,
		Example: `  reins run examples/refund/workflow.toml --input '{"order_id":"O-104"}'
  reins run examples/refund/workflow.toml --input '{"order_id":"O-104"}' --model drafter
  reins run examples/refund/workflow.toml --input '{"order_id":"O-104"}' --model openai:gpt-4o-mini
  reins run review.toml --input-file pr.json --json
  reins run review.toml --nats nats://127.0.0.1:4222 --detach
  reins run review.toml --server http://127.0.0.1:7400 --token "$REINS_TOKEN" --detach`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runWorkflow(cmd, args[0], f) },
	}
	f.nats.add(cmd)
	f.nats.addServer(cmd.Flags())
	f.model.add(cmd, "run every llm and agent step on this model instead of the workflow's: a `NAME` of the workflow's [models], or PROVIDER:NAME (openai:NAME, anthropic:NAME, replay:FILE)")
	fl := cmd.Flags()
	fl.StringVar(&f.input, "input", "", "the run input, a JSON value")
	fl.StringVar(&f.inputFile, "input-file", "", "read the run input from this JSON `FILE`")
	fl.BoolVar(&f.asJSON, "json", false, "print the run result as JSON")
	fl.BoolVar(&f.detach, "detach", false, "start the run and print its id without waiting (needs --nats or --server)")
	fl.StringVar(&f.listen, "listen", "", "let workers connect to the embedded server at this `ADDR` (127.0.0.1:PORT)")
	fl.StringVar(&f.runID, "run-id", "", "the run `ID` (default: generated)")
	fl.BoolVar(&f.quiet, "quiet", false, "print no progress")
	return cmd
}

func runWorkflow(cmd *cobra.Command, file string, f *runFlags) error {
	ctx := cmd.Context()
	remote, err := f.nats.apiClient(cmd, "data", "listen", "model", "base-url", "api-key", "timeout", "record", "price")
	if err != nil {
		return err
	}
	if f.detach && f.nats.url == "" && remote == nil {
		return &exitError{code: exitUsage, err: errors.New("--detach needs a server, --nats URL or --server URL: an embedded server stops with the command")}
	}
	if f.listen != "" && f.nats.url != "" {
		return &exitError{code: exitUsage, err: errors.New("--listen applies to the embedded server; it cannot be used with --nats")}
	}
	if f.runID != "" {
		if err := wire.CheckClientRunID(f.runID); err != nil {
			return &exitError{code: exitUsage, err: fmt.Errorf("--run-id: %w", err)}
		}
	}
	input, err := readInput(f.input, f.inputFile)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	def, vr := validateFile(file, workflow.Options{})
	if !vr.Valid {
		printValidation(cmd.ErrOrStderr(), []validateResult{vr})
		return &exitError{code: exitFailed, err: fmt.Errorf("%s is not a valid workflow (%s)", file, countProblems(len(vr.Problems)))}
	}
	if err := checkInput(def, input); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if err := def.CheckInput(input); err != nil {
		return &exitError{code: exitUsage, err: fmt.Errorf("%s: %w", f.inputFlag(), err)}
	}
	if n := len(def.Triggers); n > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "reins: note: workflow %s has %d trigger(s): reins run runs it once, now, and ignores them; they start runs once the workflow is registered with reins serve (PUT /v1/workflows/%s)\n", def.Name, n, def.Name)
	}
	if remote != nil {
		bundles, err := workflow.NewBundles(def, "")
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		return runRemote(cmd, remote, file, def, bundles, input, f)
	}
	if def, err = f.useModel(def); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	bundles, err := workflow.NewBundles(def, "")
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	log := commandLogger(cmd.ErrOrStderr(), slog.LevelWarn)
	flush, err := startTracing(ctx, "reins", cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer flush()
	at, err := reach(ctx, &f.nats, f.listen, f.builtinConfig, log)
	if err != nil {
		return err
	}
	defer func() { at.close() }() // at changes when this command takes the data directory over
	if at.front != nil {
		return f.runHere(cmd, at.front, def, bundles, input)
	}
	if err := f.workersElsewhere(cmd); err != nil {
		return err
	}
	// A server runs what other people submit: what carries power is its operator's.
	if ps := operatorOnly(bundles); len(ps) > 0 && !at.byRun {
		printProblems(cmd.ErrOrStderr(), ps)
		return &exitError{code: exitFailed, err: fmt.Errorf("%s sets what only the server's operator may set (%s): name the operator's providers and MCP servers instead", file, countProblems(len(ps)))}
	}
	rc := at.client
	if err := f.checkInputSize(input); err != nil {
		return err
	}
	warnUnserved(ctx, cmd.ErrOrStderr(), rc, bundles)
	if f.detach {
		id, err := rc.Start(ctx, bundles, input, f.runID)
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		fmt.Fprintln(cmd.OutOrStdout(), id)
		return nil
	}
	id := f.runID
	if id == "" {
		id = client.NewRunID()
	}
	start := func() error {
		_, err := rc.Start(ctx, bundles, input, id)
		return err
	}
	// Through another reins run holding the data directory, the run stops where that command's
	// would: at a waiting state, which reins approve (or resume, signal) continues.
	again := func() (*reached, error) { return reach(ctx, &f.nats, f.listen, f.builtinConfig, log) }
	return followOn(cmd, at, again, id, def, followOptions{asJSON: f.asJSON, quiet: f.quiet, start: start,
		untilWaiting: at.byRun, where: f.nats.where()})
}

// runHere runs def on r (package reins) and follows it to its result.
func (f *runFlags) runHere(cmd *cobra.Command, r *reins.Reins, def *workflow.Definition, bundles *workflow.Bundles, input json.RawMessage) error {
	if err := checkHandlers(bundles, f.listen); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	// The built-in workers of this process open the models: what they would fail on, the run
	// would fail on after it started, so it does not start.
	if err := checkCredentials(bundles, registry.Options{BaseURL: f.model.baseURL, APIKey: f.model.apiKey}, os.Getenv); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if f.listen != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "workers can connect to %s\n", r.ClientURL())
	}
	if err := f.checkInputSize(input); err != nil {
		return err
	}
	id := f.runID
	if id == "" {
		id = client.NewRunID()
	}
	ctx := cmd.Context()
	start := func() error {
		_, err := r.StartWith(ctx, def, input, reins.StartOptions{RunID: id})
		return err
	}
	// On a private embedded server nobody else can answer a waiting run: stop there, and let
	// reins approve (or resume, signal) continue it from the data directory.
	return followToResult(cmd, r.Client(), id, def, followOptions{asJSON: f.asJSON, quiet: f.quiet,
		untilWaiting: f.listen == "", start: start, where: f.nats.where()})
}

// checkInputSize applies the size rule of client.Client to the input flag, before anything is
// stored.
func (f *runFlags) checkInputSize(input json.RawMessage) error {
	if err := wire.CheckJSON(input, wire.DefaultMaxValue); err != nil {
		return &exitError{code: exitUsage, err: fmt.Errorf("%s %w", f.inputFlag(), err)}
	}
	return nil
}

// followOptions say how followToResult follows a run.
type followOptions struct {
	asJSON, quiet bool
	// untilWaiting stops at a waiting state saved at a revision after after.
	untilWaiting bool
	after        uint64
	// afterEvent: progress shows the events stored after this stream sequence.
	afterEvent uint64
	// start, when set, starts the run (or sends what continues it) before following: progress
	// reads the run's events from the first, so it misses nothing.
	start func() error
	// where is what the commands suggested for a waiting run need to reach it (natsFlags.where).
	where string
	// lost, when set, is closed when the process holding the data directory, whose server the
	// command follows through, stops: following ends with a *holderStopped error.
	lost <-chan struct{}
	// progress, when set, is the progress to go on with (following again after a takeover).
	progress *runProgress
}

// holderStopped is the error of following through the server of a process that stopped: seq is
// the last event shown.
type holderStopped struct{ seq uint64 }

func (h *holderStopped) Error() string {
	return "the reins process holding the data directory stopped while the command followed the run"
}

// followToResult follows run id, prints its result, and says how the command exits: 0 when
// it completed (or waits, when following stops there), 1 otherwise.
func followToResult(cmd *cobra.Command, c *client.Client, id string, def *workflow.Definition, o followOptions) error {
	rec, err := follow(cmd.Context(), c, id, def, cmd.ErrOrStderr(), o)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	return printOutcome(cmd, client.NewResult(def, rec), o.asJSON, o.where)
}

// printOutcome prints a followed run's result and says how the command exits: 0 when it
// completed (or waits: where is what the commands that continue it need to reach it), 1
// otherwise. The NATS path (followToResult) and the API's (followRemote) end with it.
func printOutcome(cmd *cobra.Command, res protocol.Result, asJSON bool, where string) error {
	if err := printResult(cmd.OutOrStdout(), res, asJSON); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if res.Status == protocol.RunWaiting {
		printWaiting(cmd.ErrOrStderr(), res, where)
		return nil
	}
	if res.Status != protocol.RunCompleted {
		return &exitError{code: exitFailed}
	}
	return nil
}

// useModel applies --model: it returns a copy of def whose llm and agent steps all use that
// model (client.UseModel, as reins runs fork --model does), and clears the flag so that the
// workers open each step's model of the copy. NAME is a model of the workflow's [models];
// PROVIDER:NAME is added to the copy's [models] (with --base-url), so that the run's own
// definition says which model it runs on and the commands that continue it (reins approve, deny,
// resume, signal) need no model flags. Only this command's own workers open such a model
// (workersElsewhere).
func (f *runFlags) useModel(def *workflow.Definition) (*workflow.Definition, error) {
	if f.model.name == "" {
		return def, nil
	}
	add, err := modelDef(f.model.name)
	if err != nil {
		return def, err
	}
	if add != nil && add.Provider != "replay" {
		add.BaseURL = f.model.baseURL
	}
	d, err := client.UseModel(def, f.model.name, add)
	if err != nil {
		return nil, fmt.Errorf("--model: %w%s", err, didYouMeanModel(def, f.model.name))
	}
	if add != nil {
		f.provider = f.model.name
	}
	f.model.name = ""
	return d, nil
}

// builtinConfig is the configuration of the built-in workers the command runs: the model of
// --model PROVIDER:NAME and its options, --price for every model they open, and --record, which
// records one model's exchanges and so needs --model PROVIDER:NAME.
func (f *runFlags) builtinConfig() (builtin.Config, error) {
	prices, err := f.model.priceTable()
	if err != nil {
		return builtin.Config{}, &exitError{code: exitUsage, err: err}
	}
	if f.model.record != "" && f.model.name == "" && f.provider == "" {
		return builtin.Config{}, &exitError{code: exitUsage, err: errors.New("--record records the exchanges of one model: give it with --model PROVIDER:NAME")}
	}
	return builtin.Config{
		Model: f.model.name,
		Registry: registry.Options{BaseURL: f.model.baseURL, APIKey: f.model.apiKey, Timeout: f.model.timeout,
			Record: f.model.record, Prices: prices},
	}, nil
}

// inputFlag names where the run input came from, for messages.
func (f *runFlags) inputFlag() string {
	if f.inputFile != "" {
		return "--input-file " + f.inputFile
	}
	return "--input"
}

// readInput reads the run input from --input or --input-file; none is null.
func readInput(text, file string) (json.RawMessage, error) {
	src := "--input"
	switch {
	case text != "" && file != "":
		return nil, errors.New("give --input or --input-file, not both")
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--input-file: %w", err)
		}
		text, src = string(data), "--input-file "+file
	case text == "":
		return json.RawMessage("null"), nil
	}
	if err := wire.CheckJSON([]byte(text), 0); err != nil {
		return nil, fmt.Errorf("%s %w", src, err)
	}
	return json.RawMessage(strings.TrimSpace(text)), nil
}

// checkInput refuses a null input when a template of the workflow reads the run input.
func checkInput(def *workflow.Definition, input json.RawMessage) error {
	if string(input) != "null" {
		return nil
	}
	if step, key, path, ok := def.ReadsInput(); ok {
		where := key + " of step " + step
		if step == "" {
			where = "its " + key
		}
		return fmt.Errorf("workflow %s reads the run input (%s uses %s) but no --input was given", def.Name, where, path)
	}
	return nil
}

// checkHandlers refuses to start a run on a private embedded server when a step needs a
// handler that no process can serve: only the built-in steps run in this process.
func checkHandlers(bs *workflow.Bundles, listen string) error {
	if listen != "" {
		return nil
	}
	for _, b := range bs.All {
		for _, s := range b.Definition.Steps {
			if s.Type == workflow.Task || s.Type == workflow.AgentLoop {
				return fmt.Errorf("step %s of workflow %s runs handler %s, which no worker can serve on a private embedded server: give --listen 127.0.0.1:PORT and start a worker that registers it, or run on a server (reins serve) with --nats", s.ID, b.Definition.Name, s.Handler)
			}
		}
	}
	return nil
}

// warnUnserved tells, one line each, what the run needs that no running worker serves: it would
// wait for it. Not knowing (the bucket unreadable) says nothing: the run goes on either way.
func warnUnserved(ctx context.Context, w io.Writer, c *client.Client, bs *workflow.Bundles) {
	missing, err := c.Unserved(ctx, bs)
	if err != nil {
		return
	}
	for _, m := range missing {
		fmt.Fprintln(w, "reins: warning:", m)
	}
}

// cancelOnInterrupt returns the context to follow run id with, and what stops it. When ctx
// ends first (an interrupt), it says so on w and cancels the run with cancel, given 10 s; a
// cancel that fails but for the run having finished already (finished) is printed, and ends
// the following.
func cancelOnInterrupt(ctx context.Context, w io.Writer, id string, cancel func(context.Context) error, finished func(error) bool) (context.Context, context.CancelFunc) {
	watchCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
			fmt.Fprintf(w, "interrupted: cancelling run %s\n", id)
			cctx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer done()
			if err := cancel(cctx); err != nil && !finished(err) {
				fmt.Fprintln(w, "reins:", err)
				stop()
			}
		case <-watchCtx.Done():
		}
	}()
	return watchCtx, stop
}

// follow prints progress until the run ends and returns its final record. An interrupt
// cancels the run and waits for it to end. When o.lost is closed first, it returns a
// *holderStopped error.
func follow(ctx context.Context, c *client.Client, id string, def *workflow.Definition, w io.Writer, o followOptions) (*client.Record, error) {
	watchCtx, stop := cancelOnInterrupt(ctx, w, id,
		func(cctx context.Context) error { return c.Cancel(cctx, id, "interrupted") },
		func(err error) bool { return errors.Is(err, client.ErrFinished) })
	defer stop()
	lost := &holderStopped{seq: o.afterEvent}
	followCtx, stopFollow := context.WithCancelCause(watchCtx)
	defer stopFollow(nil)
	if o.lost != nil {
		go func() {
			select {
			case <-o.lost:
				stopFollow(lost)
			case <-followCtx.Done():
			}
		}()
	}
	if o.start != nil {
		if err := o.start(); err != nil {
			return nil, err
		}
	}
	p := o.progress
	if p == nil {
		p = newProgress(w, def, o.quiet)
	}
	for u, err := range c.Watch(followCtx, id, client.WatchOptions{After: o.afterEvent}) {
		if err != nil {
			if context.Cause(followCtx) == lost {
				return nil, lost
			}
			return nil, err
		}
		if u.Event != nil {
			if u.Seq > o.afterEvent {
				p.event(u.Event)
				lost.seq = u.Seq
			}
			continue
		}
		rec := u.Record
		p.update(rec)
		if rec.Run.Finished() || o.untilWaiting && rec.Run.Status == protocol.RunWaiting && rec.Revision > o.after {
			return rec, c.ReadValues(watchCtx, rec)
		}
	}
	if context.Cause(followCtx) == lost {
		return nil, lost
	}
	return nil, fmt.Errorf("run %s: stopped following before it ended", id)
}

// followOn follows run id through at to its result, as followToResult does. When at is the
// server of another process holding the data directory and that process stops, this command
// takes the directory over (again: reach), its engine carrying the run on, and follows on,
// stopping where a run on the data directory's own server stops (o.untilWaiting).
func followOn(cmd *cobra.Command, at *reached, again func() (*reached, error), id string, def *workflow.Definition, o followOptions) error {
	o.progress = newProgress(cmd.ErrOrStderr(), def, o.quiet)
	for {
		o.lost = at.lost
		rec, err := follow(cmd.Context(), at.client, id, def, cmd.ErrOrStderr(), o)
		var hs *holderStopped
		if !errors.As(err, &hs) {
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			return printOutcome(cmd, client.NewResult(def, rec), o.asJSON, o.where)
		}
		at.close()
		next, err := again()
		if err != nil {
			*at = reached{close: func() {}}
			return err
		}
		*at = *next
		if at.front != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "reins: the process holding the data directory stopped: this command carries run %s on\n", id)
		}
		o.start, o.afterEvent = nil, hs.seq
		o.untilWaiting = o.untilWaiting || at.front != nil
	}
}
