package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/eval"
	"github.com/reins-run/reins/fixture"
	"github.com/spf13/cobra"
)

func newEvalCmd() *cobra.Command {
	var k int
	var jsonFile string
	var mf modelFlags
	var nf natsFlags
	var replays []string
	cmd := &cobra.Command{
		Use:   "eval PATH...",
		Short: "Run eval fixtures through the loop controller and check their trajectories",
		Long: `Runs every eval fixture (docs/reference/eval-fixtures.md) found in the given files and
directories (every *.json inside, recursively, sorted by path) through the same loop controller
that production runs use, with each fixture's scripted model and mocked tools on a virtual clock.
A *.json found in a directory that has none of the keys every fixture has (case_id, goal,
model, expected), such as a package.json or a saved report, is skipped with a note on stderr;
one that has some of them is a fixture, and what it lacks is an error naming the file and the
key. A file named on the command line is always read as a fixture.

With --model, each fixture's scripted model is replaced by a real one (any OpenAI-compatible
server with --base-url, Anthropic, or a recorded cassette), its tools, mocks, policy and budget
unchanged, on the real clock: the way to measure an agent on a real model. -k N then shows how
often it passes every time (pass^k).

With --replay RUN (repeatable), a saved run of the durable engine is a case too: it is replayed
from its recorded events (as reins runs replay does, on --nats URL or the runs in --data) and
passes when the replay takes the same path, labels, stop reasons, iterations and status as the
run did. Its line is PASS or FAIL replay:RUN; a replay is deterministic, so -k does not repeat
it, and it adds nothing to the metrics table.

Prints PASS or FAIL per case and run, a metrics table (when there are fixtures), and
"N passed, M failed" last.
Exit status: 0 when every case passed, 1 when any failed, 2 when a fixture is invalid.`,
		Example: "  reins eval evals/\n  reins eval evals/refund_forbidden_tool.json -k 5 --json report.json\n  reins eval evals/ --model openai:qwen2.5 --base-url http://127.0.0.1:8000/v1 -k 3\n  reins eval --replay r-abc --data .reins",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && len(replays) == 0 {
				return errors.New("give at least one PATH of fixtures, or --replay RUN")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if k < 1 {
				return &exitError{code: exitUsage, err: fmt.Errorf("-k must be at least 1, got %d", k)}
			}
			if len(args) == 0 {
				return evalReplays(cmd.Context(), cmd.OutOrStdout(), &nf, replays, &eval.Report{}, jsonFile, false)
			}
			fixtures, err := eval.LoadSuite(args, func(file string) {
				fmt.Fprintf(cmd.ErrOrStderr(), "reins: note: skipped %s: it is not an eval fixture (it has none of the keys every fixture has: %s)\n", file, strings.Join(fixture.RequiredKeys, ", "))
			})
			if err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			var opts eval.Options
			if mf.name != "" {
				m, err := mf.open()
				if err != nil {
					return &exitError{code: exitUsage, err: err}
				}
				opts.Model = m
			} else if cmd.Flags().Changed("base-url") || cmd.Flags().Changed("record") {
				return &exitError{code: exitUsage, err: fmt.Errorf("--base-url and --record need --model")}
			}
			out := cmd.OutOrStdout()
			rep, err := eval.RunSuite(cmd.Context(), fixtures, k, opts, func(f *fixture.Fixture, rr eval.RunResult) {
				fmt.Fprintln(out, eval.Line(f.CaseID, rr, k))
			})
			if err != nil {
				var inv *fixture.InvalidError
				if errors.As(err, &inv) {
					return &exitError{code: exitInvalid, err: err}
				}
				return &exitError{code: exitFailed, err: err}
			}
			if len(replays) > 0 {
				return evalReplays(cmd.Context(), out, &nf, replays, rep, jsonFile, true)
			}
			if jsonFile != "" {
				if err := writeJSONFile(jsonFile, rep); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
			}
			if err := rep.WriteSummary(out); err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			if rep.Failed > 0 {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&k, "k", "k", 1, "run every case `N` times and report pass^k (a case passes only if all N runs pass)")
	cmd.Flags().StringVar(&jsonFile, "json", "", "also write the results as JSON to `FILE`")
	mf.add(cmd, "replace every fixture's scripted model by this real model, `PROVIDER:NAME` (openai:NAME, anthropic:NAME, replay:CASSETTE); tools, mocks, policy and budget stay the fixture's")
	cmd.Flags().StringArrayVar(&replays, "replay", nil, "also replay the saved `RUN` as a case: it passes when the replay takes the run's path (repeatable)")
	nf.add(cmd)
	return cmd
}

// evalReplays replays each run as a case, adding it to rep (after the fixtures' cases, whose
// metrics it leaves alone), prints its line, then the metrics table when there were fixtures,
// and the closing "N passed, M failed" line.
func evalReplays(ctx context.Context, out io.Writer, nf *natsFlags, runs []string, rep *eval.Report, jsonFile string, metrics bool) error {
	err := withClient(ctx, nf, func(c *client.Client) error {
		for _, id := range runs {
			rr := eval.RunResult{Run: 1, Passed: true}
			r, err := c.Replay(ctx, id, nil)
			switch {
			case err != nil:
				rr.Passed, rr.Failure = false, err.Error()
			case !r.Same:
				rr.Passed, rr.Failure = false, r.Difference
			}
			if r != nil {
				rr.Detail = fmt.Sprintf("replayed: status %s, path %s", r.Replay.Status, pathText(r.Replay.Path))
			}
			caseID := "replay:" + id
			rep.Cases = append(rep.Cases, eval.CaseResult{CaseID: caseID, File: "replay:" + id, Passed: rr.Passed, Runs: []eval.RunResult{rr}})
			if rr.Passed {
				rep.Passed++
			} else {
				rep.Failed++
			}
			fmt.Fprintln(out, eval.Line(caseID, rr, 1))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if jsonFile != "" {
		if err := writeJSONFile(jsonFile, rep); err != nil {
			return &exitError{code: exitFailed, err: err}
		}
	}
	if metrics {
		if err := rep.WriteSummary(out); err != nil {
			return &exitError{code: exitFailed, err: err}
		}
	} else if _, err := fmt.Fprintf(out, "%d passed, %d failed\n", rep.Passed, rep.Failed); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if rep.Failed > 0 {
		return &exitError{code: exitFailed}
	}
	return nil
}

func writeJSONFile(path string, rep *eval.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cannot write --json file: %w", err)
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("cannot write --json file %s: %w", path, err)
	}
	return f.Close()
}
