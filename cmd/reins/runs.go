package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/provider/registry"
	"github.com/reins-run/reins/telemetry"
	"github.com/reins-run/reins/workflow"
)

func newRunsCmd() *cobra.Command {
	nf := &natsFlags{}
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, show, cancel, delete, replay, fork and prune runs",
		Example: `  reins runs list
  reins runs show r-abc
  reins runs list --nats nats://127.0.0.1:4222 --status waiting`,
		Long: `Reads and changes runs on a server: --nats URL, or the server running on --data (reins
serve, or a reins run in another terminal), or, when none runs there, the data directory itself
(reins run without --nats keeps its runs in --data, default .reins/). There, a run still running
is orphaned: the command that ran it was stopped; list and show say so, and reins serve --data
DIR carries it on.

list, show and cancel also go through a server's HTTP API with --server URL (default
$REINS_SERVER) and --token, needing no NATS (docs/api.md).`,
	}
	nf.addTo(cmd.PersistentFlags())
	cmd.AddCommand(newRunsListCmd(nf), newRunsShowCmd(nf), newRunsCancelCmd(nf), newRunsDeleteCmd(nf),
		newRunsReplayCmd(nf), newRunsForkCmd(nf), newRunsPruneCmd(nf))
	return cmd
}

// errNoDataDir is the error of a command that reads runs from a data directory that does not
// exist: it is not created (nothing was ever run there).
var errNoDataDir = errors.New("no runs are kept there")

// withClient opens the server of nf and calls f with a client on it. A data directory that does
// not exist is not created: errNoDataDir.
func withClient(ctx context.Context, nf *natsFlags, f func(*client.Client) error) error {
	return withClientAlone(ctx, nf, func(c *client.Client, _ bool) error { return f(c) })
}

// withClientAlone is withClient, telling f whether this process runs the data directory's
// embedded server itself (alone): then no engine runs there, and a run that is running or
// queued is orphaned (orphans.go).
func withClientAlone(ctx context.Context, nf *natsFlags, f func(c *client.Client, alone bool) error) error {
	if nf.url == "" {
		if _, err := os.Stat(nf.data); errors.Is(err, fs.ErrNotExist) {
			return &exitError{code: exitFailed, err: fmt.Errorf("data directory %s does not exist: %w (reins run keeps its runs in --data, default .reins/; or give --nats URL)", nf.data, errNoDataDir)}
		}
	}
	box, err := nf.open(ctx, "", slog.New(slog.DiscardHandler))
	if err != nil {
		return asExit(err, exitFailed)
	}
	defer box.Close()
	if box.Embedded() {
		if err := natsbox.EnsureLayout(ctx, box.JetStream(), box.Layout()); err != nil {
			return &exitError{code: exitFailed, err: err}
		}
	}
	c, err := newClient(ctx, box)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	return nf.searched(f(c, box.Embedded()))
}

// searched completes err, when it says that a run does not exist (client.ErrNotFound), with
// where the command looked for it: the data directory, or the NATS server of --nats. A user
// who ran it elsewhere then sees which flag to give.
func (nf *natsFlags) searched(err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && errors.Is(ee.err, client.ErrNotFound) && !strings.Contains(ee.err.Error(), " looked ") {
			ee.err = fmt.Errorf("%w (looked %s)", ee.err, nf.place())
		}
		return err
	}
	if err != nil && errors.Is(err, client.ErrNotFound) {
		return &exitError{code: exitFailed, err: fmt.Errorf("%w (looked %s)", err, nf.place())}
	}
	return err
}

// place says where nf reaches runs: "in the data directory DIR" or "on the NATS server URL".
func (nf *natsFlags) place() string {
	if nf.url != "" {
		return "on the NATS server " + natsbox.RedactURL(nf.url)
	}
	abs, err := filepath.Abs(nf.data)
	if err != nil {
		abs = nf.data
	}
	return "in the data directory " + abs + "; a run kept elsewhere needs --data DIR or --nats URL"
}

// listEntry is one run in `reins runs list --json`.
type listEntry struct {
	RunID     string             `json:"run_id"`
	Workflow  string             `json:"workflow"`
	Status    protocol.RunStatus `json:"status"`
	StartedAt time.Time          `json:"started_at"`
	Error     *protocol.RunError `json:"error"`
	// Orphaned: running or queued on a data directory that no process serves (orphans.go).
	Orphaned bool `json:"orphaned,omitempty"`
}

func newRunsListCmd(nf *natsFlags) *cobra.Command {
	var status, workflowName, after string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Example: `  reins runs list
  reins runs list --status waiting --workflow refund_investigation
  reins runs list --limit 20 --json
  reins runs list --server http://127.0.0.1:7400 --token "$REINS_TOKEN"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st := protocol.RunStatus(status)
			switch st {
			case "", protocol.RunQueued, protocol.RunRunning, protocol.RunWaiting, protocol.RunCompleted, protocol.RunFailed, protocol.RunCancelled, protocol.RunTimedOut, client.StatusCorrupt:
			default:
				return &exitError{code: exitUsage, err: fmt.Errorf("--status %q: want queued, running, waiting, completed, failed, cancelled, timed_out or corrupt", status)}
			}
			q := client.Query{Status: st, Workflow: workflowName, Limit: limit, After: after, Newest: true}
			paged := q.Workflow != "" || q.Limit != 0 || q.After != ""
			switch {
			case limit < 0:
				return &exitError{code: exitUsage, err: fmt.Errorf("--limit %d: want 1 or more", limit)}
			case st == client.StatusCorrupt && paged:
				return &exitError{code: exitUsage, err: errors.New("--status corrupt reads every record, since one that cannot be read is in no index: it takes no --workflow, --limit or --after")}
			}
			if remote, err := nf.apiClient(cmd, "data"); err != nil || remote != nil {
				if err != nil {
					return err
				}
				return listRemote(cmd, remote, q, paged, asJSON)
			}
			if nf.url == "" {
				if _, err := os.Stat(nf.data); errors.Is(err, fs.ErrNotExist) {
					return printList(cmd.OutOrStdout(), []listEntry{}, asJSON) // nothing ever ran there
				}
			}
			return withClientAlone(cmd.Context(), nf, func(c *client.Client, alone bool) error {
				var page client.Page
				var err error
				if paged {
					page, err = c.Query(cmd.Context(), q)
				} else {
					page.Records, err = c.List(cmd.Context(), st)
					slices.Reverse(page.Records) // newest first, as a page of Query's
				}
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				entries := make([]listEntry, 0, len(page.Records))
				for _, r := range page.Records {
					entries = append(entries, listEntry{r.Run.ID, r.Run.Workflow, r.Run.Status, r.Run.StartedAt, r.Run.Error, alone && orphanable(r.Run.Status)})
				}
				if err := printList(cmd.OutOrStdout(), entries, asJSON); err != nil {
					return err
				}
				noteOrphans(cmd.ErrOrStderr(), entries, nf)
				if page.Next != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "reins: more runs follow: the next page is --after %s\n", page.Next)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only runs with this `STATUS` (queued, running, waiting, completed, failed, cancelled, timed_out, or corrupt: a record that cannot be read)")
	cmd.Flags().StringVar(&workflowName, "workflow", "", "only runs of the workflow with this `NAME`")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most `N` runs; the next page's --after is printed on stderr")
	cmd.Flags().StringVar(&after, "after", "", "the runs after this `CURSOR`, which the page before printed")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the runs as JSON")
	nf.addServer(cmd.Flags())
	return cmd
}

func printList(w io.Writer, entries []listEntry, asJSON bool) error {
	if asJSON {
		return printJSON(w, entries)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tWORKFLOW\tSTATUS\tSTARTED\tERROR")
	for _, e := range entries {
		msg := ""
		if e.Error != nil {
			msg = e.Error.Error()
		}
		status := string(e.Status)
		if e.Orphaned {
			status += " (orphaned)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.RunID, e.Workflow, status, e.StartedAt.Local().Format(time.DateTime), msg)
	}
	return tw.Flush()
}

// showResult is `reins runs show --json`: the run result plus the run's events, and the
// registered version the run runs (none for a run of a file).
type showResult struct {
	protocol.Result
	// TraceID is the OpenTelemetry trace id of the run's spans (telemetry.TraceID), hex.
	TraceID    string                 `json:"trace_id"`
	Trace      []protocol.Event       `json:"trace"`
	Registered *protocol.Registration `json:"registered,omitempty"`
}

// printTraceID prints the OpenTelemetry trace id of run runID: every span of the run, in
// every process, is in this trace (when tracing was on).
func printTraceID(out io.Writer, runID string) {
	fmt.Fprintf(out, "trace id: %s\n", telemetry.TraceID(runID))
}

// printRegistered prints which registered version a run runs, when it runs one.
func printRegistered(out io.Writer, r *protocol.Registration) {
	if r != nil {
		fmt.Fprintf(out, "registered: %s version %d\n", r.Name, r.Version)
	}
}

func newRunsShowCmd(nf *natsFlags) *cobra.Command {
	var asJSON, full bool
	var iteration string
	cmd := &cobra.Command{
		Use:   "show RUN [--iteration STEP:N]",
		Short: "Show a run's steps, iterations, stop reasons and trace, or what one iteration did",
		Long: `Shows a run: its steps with their status, stop reason and its sentence, iterations, usage,
the path it took, its output, its OpenTelemetry trace id (docs/observability.md) and its trace
of events.

With --iteration STEP:N, shows what iteration N of step STEP did, from the record its answer
carries: the model's proposal, each call with its arguments, the validation decision and why,
the human's decision and who took it, the result, tokens, cost and time, and the stop. Texts
longer than 2 KiB are clipped in the record; --full reads the whole ones.`,
		Example: `  reins runs show refund-1
  reins runs show refund-1 --iteration investigate:2
  reins runs show refund-1 --iteration investigate:2 --full --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			remote, err := nf.apiClient(cmd, "data")
			if err != nil {
				return err
			}
			if iteration != "" {
				step, n, err := client.ParseIteration(iteration)
				if err != nil {
					return &exitError{code: exitUsage, err: fmt.Errorf("--iteration: %w", err)}
				}
				if remote != nil {
					return showIterationRemote(cmd, remote, args[0], step, n, full, asJSON)
				}
				return withClient(ctx, nf, func(c *client.Client) error {
					return showIteration(cmd, c, args[0], step, n, full, asJSON)
				})
			}
			if remote != nil {
				return searchedServer(showRemote(cmd, remote, args[0], asJSON), remote)
			}
			return withClientAlone(ctx, nf, func(c *client.Client, alone bool) error {
				rec, err := c.Get(ctx, args[0])
				if errors.Is(err, client.ErrCorrupt) {
					return &exitError{code: exitFailed, err: fmt.Errorf("%w; reins runs delete %s removes it", err, args[0])}
				}
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				def, err := c.Definition(ctx, rec)
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				events, err := c.Events(ctx, args[0])
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				registered, err := c.RegisteredOf(ctx, rec, events)
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				res := client.NewResult(def, rec)
				out := cmd.OutOrStdout()
				if alone && orphanable(rec.Run.Status) {
					noteOrphan(cmd.ErrOrStderr(), rec.Run.ID, nf)
				}
				if asJSON {
					return printJSON(out, showResult{Result: res, TraceID: telemetry.TraceID(res.RunID).String(), Trace: events, Registered: registered})
				}
				if err := printResult(out, res, false); err != nil {
					return err
				}
				printTraceID(out, res.RunID)
				printRegistered(out, registered)
				if !rec.Finished() {
					printSubRuns(out, engine.SubRuns(def, rec.Run))
				}
				fmt.Fprintln(out, "trace:")
				for _, ev := range events {
					fmt.Fprintln(out, "  "+eventLine(ev))
				}
				printRefused(out, rec.Run.Acts)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the run result and its events as JSON (the run result plus "trace"); with --iteration, the iteration's answers`)
	cmd.Flags().StringVar(&iteration, "iteration", "", "show what iteration N of step STEP did (`STEP:N`; a child is PARENT#ITEM:N)")
	cmd.Flags().BoolVar(&full, "full", false, "with --iteration: the whole texts, not those clipped at 2 KiB")
	nf.addServer(cmd.Flags())
	return cmd
}

// showIteration prints the answers to one iteration of a run's step.
func showIteration(cmd *cobra.Command, c *client.Client, runID, step string, n int, full, asJSON bool) error {
	ctx := cmd.Context()
	parts, err := c.Iteration(ctx, runID, step, n)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if full {
		if err := c.WholeTexts(ctx, runID, parts); err != nil {
			return &exitError{code: exitFailed, err: err}
		}
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), parts)
	}
	printIteration(cmd.OutOrStdout(), runID, step, n, parts)
	return nil
}

// printSubRuns lists the sub-runs a run waits for, by id: a person deciding or resuming one
// (an agent tool's child paused on needs_human) addresses it so, and reins runs list leaves
// sub-runs out.
func printSubRuns(out io.Writer, subs []engine.ChildRun) {
	for _, c := range subs {
		what := "workflow " + c.Workflow
		if c.Agent != "" {
			what = "agent " + c.Agent
		}
		if c.CallID != "" {
			what += fmt.Sprintf(", call %s of iteration %d", c.CallID, c.Iteration)
		}
		fmt.Fprintf(out, "sub-run: %s (step %s, %s)\n", c.RunID, c.Step, what)
	}
}

// printRefused lists the decisions the engine refused (a principal who is not an approver):
// the trace shows them as sent, this says they changed nothing.
func printRefused(out io.Writer, acts []engine.Act) {
	for _, a := range acts {
		if a.Refused == "" {
			continue
		}
		fmt.Fprintf(out, "refused: %s %s %s by=%s: %s\n", a.At.Local().Format("15:04:05.000"), a.Type, a.Step, a.By, a.Refused)
	}
}

// eventLine describes an event in one line.
func eventLine(ev protocol.Event) string {
	s := ev.At.Local().Format("15:04:05.000") + " " + string(ev.Type)
	if ev.Step != "" {
		s += " " + ev.Step
		if ev.Item >= 0 {
			s += fmt.Sprintf("#%d", ev.Item)
		}
		switch {
		case ev.Type == protocol.EvChildFinished && ev.CallID != "": // the sub-run of an agent tool's call
			s += fmt.Sprintf(" iteration %d call %s %s", ev.Iteration, ev.CallID, ev.Status)
		case ev.Iteration > 0:
			s += fmt.Sprintf(" iteration %d attempt %d", ev.Iteration, ev.Attempt)
		}
	}
	if ev.Label != "" {
		s += " label=" + ev.Label
	}
	if ev.StopReason != "" {
		s += " stop=" + ev.StopReason
	}
	if ev.Error != "" {
		s += " error: " + ev.Error
	}
	if ev.Reason != "" {
		s += " reason: " + ev.Reason
	}
	if ev.Usage != nil {
		s += usageText(*ev.Usage)
	}
	if ev.By != "" { // a person's event: by the principal whose subject it came on
		s += " by=" + ev.By
		if ev.OnBehalfOf != "" {
			s += " on_behalf_of=" + ev.OnBehalfOf
		}
	}
	return s
}

func newRunsCancelCmd(nf *natsFlags) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run: it stops within one iteration with stop reason cancelled",
		Example: `  reins runs cancel r-abc
  reins runs cancel r-abc --reason "wrong order" --nats nats://127.0.0.1:4222`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if remote, err := nf.apiClient(cmd, "data"); err != nil || remote != nil {
				if err != nil {
					return err
				}
				if err := remote.Cancel(ctx, args[0], reason); err != nil {
					return searchedServer(apiFailed(err), remote)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s: cancel requested\n", args[0])
				return nil
			}
			return withClientAlone(ctx, nf, func(c *client.Client, alone bool) error {
				if err := c.Cancel(ctx, args[0], reason); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s: cancel requested\n", args[0])
				if alone {
					noteNoEngine(cmd.ErrOrStderr(), "the cancel", nf)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "cancelled with reins runs cancel", "why the run is cancelled (recorded in its error)")
	nf.addServer(cmd.Flags())
	return cmd
}

func newRunsDeleteCmd(nf *natsFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "delete RUN",
		Short:   "Delete a finished run, or one whose record is corrupt: its record, events, checkpoints and sub-runs",
		Example: "  reins runs delete r-abc\n  reins runs delete r-abc --data /var/lib/reins",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return withClient(ctx, nf, func(c *client.Client) error {
				if err := c.Delete(ctx, args[0]); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s deleted\n", args[0])
				return nil
			})
		},
	}
}

func newRunsReplayCmd(nf *natsFlags) *cobra.Command {
	var file string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "replay RUN",
		Short: "Replay a finished run from its recorded events and check that it takes the same path",
		Long: `Re-executes the engine's decisions of the finished run RUN from its recorded events, in this
process: the start with the recorded input and time, every task's recorded answer once the
replay dispatches that task, and the recorded cancel, tick, decision, resume, signal and
child_finished events in their order. Nothing is sent to workers or models and nothing else
changes. It prints whether the replay has the path, every step's label, stop reason and
iterations, and the final status of the saved run, and if not where they first part.

With --workflow FILE the replay runs FILE's definition (a changed version of the workflow)
instead of the run's own: would the change take the same path on this recorded run?

A replay re-derives the engine's decisions from recorded answers: it does not run the
handlers, models or tools again.

Exit status: 0 when the replay is the same, 1 when it differs (or the run has not finished, or
does not exist), 2 for a usage error.`,
		Example: "  reins runs replay r-abc\n  reins runs replay r-abc --workflow review-v2.toml --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var def *workflow.Definition
			if file != "" {
				d, vr := validateFile(file, workflow.Options{})
				if !vr.Valid {
					printValidation(cmd.ErrOrStderr(), []validateResult{vr})
					return &exitError{code: exitFailed, err: fmt.Errorf("%s is not a valid workflow (%s)", file, countProblems(len(vr.Problems)))}
				}
				def = d
			}
			return withClient(ctx, nf, func(c *client.Client) error {
				rep, err := c.Replay(ctx, args[0], def)
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				if err := printReplay(cmd.OutOrStdout(), rep, file, asJSON); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				if !rep.Same || rep.RecordProblem != "" {
					return &exitError{code: exitFailed}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&file, "workflow", "", "replay this workflow `FILE` instead of the run's own definition")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the replay report as JSON")
	return cmd
}

// printReplay prints a replay report: one line saying same or where the replay parts, then
// the status and path of the run and of the replay.
func printReplay(w io.Writer, rep *client.ReplayReport, file string, asJSON bool) error {
	if asJSON {
		return printJSON(w, rep)
	}
	what := "its own definition"
	if file != "" {
		what = fmt.Sprintf("the definition of %s, hash %.12s", file, rep.Hash)
		if !rep.Changed {
			what += ", the run's own"
		}
	}
	if rep.Same {
		fmt.Fprintf(w, "run %s replays the same with %s: status %s, path %s\n", rep.RunID, what, rep.Original.Status, pathText(rep.Original.Path))
	} else {
		fmt.Fprintf(w, "run %s replays differently with %s: %s\n", rep.RunID, what, rep.Difference)
		fmt.Fprintf(w, "  original: %s, path %s\n", rep.Original.Status, pathText(rep.Original.Path))
		fmt.Fprintf(w, "  replay:   %s, path %s\n", rep.Replay.Status, pathText(rep.Replay.Path))
	}
	if rep.RecordProblem != "" {
		fmt.Fprintf(w, "records: %s\n", rep.RecordProblem)
	} else {
		fmt.Fprintf(w, "records: %d iteration record(s) agree with their answers\n", rep.Records)
	}
	return nil
}

func pathText(path []string) string {
	if len(path) == 0 {
		return "(empty)"
	}
	return strings.Join(path, " → ")
}

type forkFlags struct {
	from, input, model, runID string
	detach, asJSON, quiet     bool
}

func newRunsForkCmd(nf *natsFlags) *cobra.Command {
	f := &forkFlags{}
	cmd := &cobra.Command{
		Use:   "fork RUN --from STEP[:ITERATION]",
		Short: "Start a new run from the recorded state of a run at one step's iteration",
		Long: `Starts a new run from the state run RUN had just before the engine first dispatched ITERATION
(default 1) of step STEP, rebuilt by replaying RUN's recorded events. The new run gets its own
id (--run-id, default RUN-fork-N with N the smallest number not taken), the checkpoints of the
iterations before ITERATION (so an agent_loop or agent continues from its history), and the
time its deadline and bounds had left; it has no parent run. RUN itself is only read.

STEP is a step's id, or parent#N for one child of a parallel or map step. --input replaces the
input of that step's task; --model runs every llm and agent step of the new run on another
model: one of the workflow's [models], or PROVIDER:NAME (openai:NAME, anthropic:NAME,
replay:FILE), declared in a copy of the definition stored by its hash.

The new run needs an engine: a server (--nats URL, or reins serve on --data), or, on a data
directory no process serves, this command runs the engine and the built-in workers itself
until the run ends (or waits for a human). Without --detach it follows the run like reins run
and prints its result.

Exit status: 0 when the new run completed (or, with --detach, started), 1 when it did not, or
RUN, STEP or the iteration does not exist, 2 for a usage error.`,
		Example: "  reins runs fork r-abc --from review:3\n  reins runs fork r-abc --from draft --input '{\"topic\":\"x\"}' --model openai:gpt-4.1-mini --detach",
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return forkRun(cmd, nf, args[0], f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "the step to start from, `STEP[:ITERATION]` (iteration 1 by default)")
	fl.StringVar(&f.input, "input", "", "replace the input of that step's task with this JSON value")
	fl.StringVar(&f.model, "model", "", "run every llm and agent step on this model: a `NAME` of the workflow's [models], or PROVIDER:NAME")
	fl.StringVar(&f.runID, "run-id", "", "the new run's `ID` (default: RUN-fork-N)")
	fl.BoolVar(&f.detach, "detach", false, "start the new run and print its id without waiting (needs a server)")
	fl.BoolVar(&f.asJSON, "json", false, "print the run result as JSON")
	fl.BoolVar(&f.quiet, "quiet", false, "print no progress")
	return cmd
}

// parseFrom splits STEP[:ITERATION].
func parseFrom(from string) (string, int, error) {
	if from == "" {
		return "", 0, errors.New("--from STEP[:ITERATION] is required")
	}
	step, it, ok := strings.Cut(from, ":")
	if step == "" {
		return "", 0, fmt.Errorf("--from %q: want STEP[:ITERATION]", from)
	}
	if !ok {
		return step, 1, nil
	}
	n, err := strconv.Atoi(it)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("--from %q: the iteration must be a whole number of 1 or more", from)
	}
	return step, n, nil
}

func forkRun(cmd *cobra.Command, nf *natsFlags, runID string, f *forkFlags) error {
	return nf.searched(forkRunOn(cmd, nf, runID, f))
}

func forkRunOn(cmd *cobra.Command, nf *natsFlags, runID string, f *forkFlags) error {
	ctx := cmd.Context()
	step, iteration, err := parseFrom(f.from)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	o := client.ForkOptions{From: step, Iteration: iteration, Model: f.model, RunID: f.runID}
	if f.input != "" {
		if o.Input, err = readInput(f.input, ""); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
	}
	if f.runID != "" {
		if err := wire.CheckClientRunID(f.runID); err != nil {
			return &exitError{code: exitUsage, err: fmt.Errorf("--run-id: %w", err)}
		}
	}
	if f.model != "" {
		if o.AddModel, err = modelDef(f.model); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
	}
	log := commandLogger(cmd.ErrOrStderr(), slog.LevelWarn)
	// The engine and workers it may run export the spans of what they decide, as reins run's.
	flush, err := startTracing(ctx, "reins", cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer flush()
	// With the data directory's embedded server, nothing else runs the engine: this command
	// does, as reins run does, until the new run ends or waits.
	bc := (&runFlags{}).builtinConfig
	at, err := reach(ctx, nf, "", bc, log)
	if err != nil {
		return err
	}
	defer func() { at.close() }() // at changes when this command takes the data directory over
	c, embedded := at.client, at.front != nil
	if embedded {
		if f.detach {
			return &exitError{code: exitUsage, err: errors.New("--detach needs a server (--nats URL, or reins serve on --data): an embedded server stops with the command")}
		}
		rec, err := c.Get(ctx, runID)
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		def, err := c.Definition(ctx, rec)
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		if err := checkHandlers(&workflow.Bundles{Root: rec.Run.Hash, All: map[string]*workflow.Bundle{rec.Run.Hash: {Definition: def}}}, ""); err != nil {
			return &exitError{code: exitFailed, err: err}
		}
	}
	forked, err := c.Fork(ctx, runID, o)
	if err != nil {
		if guess := registry.Guess(f.model); guess != "" && o.AddModel == nil {
			err = fmt.Errorf("%w: did you mean %s?", err, guess)
		}
		return &exitError{code: exitFailed, err: err}
	}
	if f.detach {
		fmt.Fprintln(cmd.OutOrStdout(), forked.RunID)
		return nil
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "run %s forked into %s at step %s iteration %d (%d checkpoint keys copied)\n",
		runID, forked.RunID, forked.Step, forked.Iteration, forked.Checkpoints)
	again := func() (*reached, error) { return reach(ctx, nf, "", bc, log) }
	return followOn(cmd, at, again, forked.RunID, forked.Definition, followOptions{asJSON: f.asJSON, quiet: f.quiet, untilWaiting: embedded || at.byRun, where: nf.where()})
}

// modelDef is the model declaration of --model PROVIDER:NAME, for a fork's definition (nil
// when name is not PROVIDER:NAME: it must then be one of the workflow's [models]).
func modelDef(name string) (*workflow.ModelDef, error) {
	p, m, err := registry.Split(name)
	if err != nil {
		if strings.Contains(name, ":") {
			return nil, fmt.Errorf("--model: %w", err)
		}
		return nil, nil
	}
	if p == "replay" {
		abs, err := filepath.Abs(m)
		if err != nil {
			return nil, fmt.Errorf("--model %s: %w", name, err)
		}
		return &workflow.ModelDef{Provider: p, Cassette: abs}, nil
	}
	return &workflow.ModelDef{Provider: p, Model: m}, nil
}

func newRunsPruneCmd(nf *natsFlags) *cobra.Command {
	var olderThan time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove the finished runs that ended more than --older-than ago",
		Long: `Removes every run that finished (completed, failed, cancelled or timed out) more than
--older-than ago: its record, its events and its checkpoints, with its sub-runs. A running or
waiting run is never removed. Workflow definitions and dead-lettered tasks stay. reins serve
does the same periodically (--retention).`,
		Example: "  reins runs prune\n  reins runs prune --older-than 24h --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("--older-than %s: want a duration of 0 or more", olderThan)}
			}
			ctx := cmd.Context()
			return withClient(ctx, nf, func(c *client.Client) error {
				rep, err := c.Prune(ctx, olderThan, time.Now())
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				out := cmd.OutOrStdout()
				if asJSON {
					return printJSON(out, rep)
				}
				fmt.Fprintf(out, "removed %d runs that ended before %s (%d sub-runs, %d checkpoint keys)\n",
					rep.Runs, rep.Before.Local().Format(time.DateTime), rep.SubRuns, rep.Checkpoints)
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", client.DefaultRetention, "remove the runs that ended more than this `DURATION` ago")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print what was removed as JSON ({"runs", "sub_runs", "checkpoints", "before"})`)
	return cmd
}
