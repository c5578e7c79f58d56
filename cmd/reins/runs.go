package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/natsbox"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/wire"
)

func newRunsCmd() *cobra.Command {
	nf := &natsFlags{}
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, show and cancel runs",
		Long: `Reads and changes runs on a server: --nats URL, or the server running on --data (reins
serve), or, when none runs there, the data directory itself (reins run without --nats keeps its
runs in --data, default .reins/).`,
	}
	nf.addTo(cmd.PersistentFlags())
	cmd.AddCommand(newRunsListCmd(nf), newRunsShowCmd(nf), newRunsCancelCmd(nf))
	return cmd
}

// withClient opens the server of nf and calls f with a client on it.
func withClient(ctx context.Context, nf *natsFlags, f func(*runner.Client) error) error {
	box, err := nf.open(ctx, "", slog.New(slog.DiscardHandler))
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	defer box.Close()
	if box.Embedded() {
		if err := natsbox.EnsureLayout(ctx, box.JetStream(), natsbox.Layout{}); err != nil {
			return &exitError{code: exitFailed, err: err}
		}
	}
	return f(runner.NewClient(runner.ClientConfig{Box: box}))
}

// listEntry is one run in `reins runs list --json`.
type listEntry struct {
	RunID     string           `json:"run_id"`
	Workflow  string           `json:"workflow"`
	Status    engine.RunStatus `json:"status"`
	StartedAt time.Time        `json:"started_at"`
	Error     *engine.RunError `json:"error"`
}

func newRunsListCmd(nf *natsFlags) *cobra.Command {
	var status string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st := engine.RunStatus(status)
			switch st {
			case "", engine.RunRunning, engine.RunCompleted, engine.RunFailed, engine.RunCancelled, engine.RunTimedOut:
			default:
				return &exitError{code: exitUsage, err: fmt.Errorf("--status %q: want running, completed, failed, cancelled or timed_out", status)}
			}
			return withClient(cmd.Context(), nf, func(c *runner.Client) error {
				recs, err := c.List(cmd.Context(), st)
				if err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				entries := make([]listEntry, 0, len(recs))
				for _, r := range recs {
					entries = append(entries, listEntry{r.Run.ID, r.Run.Workflow, r.Run.Status, r.Run.StartedAt, r.Run.Error})
				}
				return printList(cmd.OutOrStdout(), entries, asJSON)
			})
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only runs with this `STATUS` (running, completed, failed, cancelled, timed_out)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the runs as JSON")
	return cmd
}

func printList(w io.Writer, entries []listEntry, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tWORKFLOW\tSTATUS\tSTARTED\tERROR")
	for _, e := range entries {
		msg := ""
		if e.Error != nil {
			msg = e.Error.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.RunID, e.Workflow, e.Status, e.StartedAt.Local().Format(time.DateTime), msg)
	}
	return tw.Flush()
}

// showResult is `reins runs show --json`: the run result plus the run's events.
type showResult struct {
	runner.Result
	Trace []wire.Event `json:"trace"`
}

func newRunsShowCmd(nf *natsFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show RUN",
		Short: "Show a run's steps, iterations, stop reasons and trace",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return withClient(ctx, nf, func(c *runner.Client) error {
				rec, err := c.Get(ctx, args[0])
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
				res := runner.NewResult(def, rec)
				out := cmd.OutOrStdout()
				if asJSON {
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					return enc.Encode(showResult{Result: res, Trace: events})
				}
				if err := printResult(out, res, false); err != nil {
					return err
				}
				fmt.Fprintln(out, "trace:")
				for _, ev := range events {
					fmt.Fprintln(out, "  "+eventLine(ev))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the run result and its events as JSON (the run result plus "trace")`)
	return cmd
}

// eventLine describes an event in one line.
func eventLine(ev wire.Event) string {
	s := ev.At.Local().Format("15:04:05.000") + " " + string(ev.Type)
	if ev.Step != "" {
		s += " " + ev.Step
		if ev.Item >= 0 {
			s += fmt.Sprintf("#%d", ev.Item)
		}
		if ev.Iteration > 0 {
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
	return s
}

func newRunsCancelCmd(nf *natsFlags) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run: it stops within one iteration with stop reason cancelled",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return withClient(ctx, nf, func(c *runner.Client) error {
				if err := c.Cancel(ctx, args[0], reason); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s: cancel requested\n", args[0])
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "cancelled with reins runs cancel", "why the run is cancelled (recorded in its error)")
	return cmd
}
