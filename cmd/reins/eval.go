package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/reins-run/reins/eval"
	"github.com/spf13/cobra"
)

func newEvalCmd() *cobra.Command {
	var k int
	var jsonFile string
	var mf modelFlags
	cmd := &cobra.Command{
		Use:   "eval PATH...",
		Short: "Run eval fixtures through the loop controller and check their trajectories",
		Long: `Runs every eval fixture (shared/spec/eval-fixtures.md) found in the given files and
directories (every *.json inside, recursively, sorted by path) through the same loop controller
that production runs use, with each fixture's scripted model and mocked tools on a virtual clock.

With --model, each fixture's scripted model is replaced by a real one (any OpenAI-compatible
server with --base-url, Anthropic, or a recorded cassette), its tools, mocks, policy and budget
unchanged, on the real clock: the way to measure an agent on a real model. -k N then shows how
often it passes every time (pass^k).

Prints PASS or FAIL per case and run, a metrics table, and "N passed, M failed" last.
Exit status: 0 when every case passed, 1 when any failed, 2 when a fixture is invalid.`,
		Example: "  reins eval evals/\n  reins eval evals/refund_forbidden_tool.json -k 5 --json report.json\n  reins eval evals/ --model openai:qwen2.5 --base-url http://127.0.0.1:8000/v1 -k 3",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if k < 1 {
				return &exitError{code: exitUsage, err: fmt.Errorf("-k must be at least 1, got %d", k)}
			}
			fixtures, err := eval.LoadAll(args)
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
			rep, err := eval.RunSuite(cmd.Context(), fixtures, k, opts, func(f *eval.Fixture, rr eval.RunResult) {
				fmt.Fprintln(out, eval.Line(f.CaseID, rr, k))
			})
			if err != nil {
				var inv *eval.InvalidError
				if errors.As(err, &inv) {
					return &exitError{code: exitInvalid, err: err}
				}
				return &exitError{code: exitFailed, err: err}
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
	return cmd
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
