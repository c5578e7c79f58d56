package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reins-run/reins/cmd/reins/internal/bench"
	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	var asJSON bool
	var benchtime time.Duration
	var only []string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure reins against its floor, a raw JetStream publish → fetch → ack",
		Long: `Runs the benchmarks behind BENCHMARKS.md in this process and prints each figure with its
ratio to the floor measured in the same run: one durable JetStream message published, fetched
and acknowledged on an embedded server. The same functions run under
"go test -bench . ./cmd/reins/internal/bench", so both commands measure the same code.`,
		Example: "  reins bench\n  reins bench --only loop_iteration --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var keep func(string) bool
			if len(only) > 0 {
				names := map[string]bool{}
				for _, bm := range bench.Suite() {
					names[bm.Name] = true
				}
				wanted := map[string]bool{}
				for _, n := range only {
					if !names[n] {
						return &exitError{code: exitUsage, err: fmt.Errorf("--only: unknown benchmark %q", n)}
					}
					wanted[n] = true
				}
				keep = func(name string) bool { return wanted[name] }
			}
			errOut := cmd.ErrOrStderr()
			if benchtime <= 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("--benchtime %s: want more than 0", benchtime)}
			}
			results, err := bench.Run(bench.RunConfig{Keep: keep, Benchtime: benchtime,
				Progress: func(name string) { fmt.Fprintf(errOut, "measuring %s...\n", name) }})
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, results)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "benchmark\tns/op\tallocs/op\tB/op\tratio to floor\t\t")
			for _, r := range results {
				fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%.3f\t%s\t\n", r.Name, r.NsPerOp, r.AllocsPerOp, r.BytesPerOp, r.RatioToFloor, extraText(r.Extra))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	cmd.Flags().StringSliceVar(&only, "only", nil, "measure only these benchmarks (the floor is always measured)")
	cmd.Flags().DurationVar(&benchtime, "benchtime", bench.DefaultBenchtime, "run each benchmark at least this long (go test's -benchtime)")
	return cmd
}

// extraText prints a benchmark's own metrics, sorted by name.
func extraText(extra map[string]float64) string {
	parts := make([]string, 0, len(extra))
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		parts = append(parts, fmt.Sprintf("%s=%.4g", k, extra[k]))
	}
	return strings.Join(parts, " ")
}
