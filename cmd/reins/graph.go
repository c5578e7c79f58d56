package main

import (
	"fmt"
	"io"

	"github.com/reins-run/reins/workflow"
	"github.com/spf13/cobra"
)

func newGraphCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "graph FILE",
		Short: "Print a workflow's graph as Mermaid or Graphviz dot",
		Long: `Validates the workflow file and prints its graph: every step with its id and type, edges
labelled with their branch label, loop edges drawn thick and labelled with their bound
("retry (loop ≤ 3)"), parallel branches and map bodies dashed from their parent, sub-workflow
files as nodes of their own, and the start step marked.

--format mermaid (the default) prints a Mermaid flowchart to paste into Markdown; --format dot
prints a Graphviz digraph (reins graph FILE --format dot | dot -Tsvg > graph.svg).

Exit status: 0 when the graph was printed, 1 when the file has problems (printed to stderr as
reins validate prints them), 2 for a usage error such as an unknown format.`,
		Example: "  reins graph examples/evaluator/workflow.toml\n  reins graph examples/research/workflow.toml --format dot | dot -Tsvg -o fanout.svg",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var render func(*workflow.Definition) string
			switch format {
			case "mermaid":
				render = workflow.Mermaid
			case "dot":
				render = workflow.Dot
			default:
				return &exitError{code: exitUsage, err: fmt.Errorf("unknown --format %q: use mermaid or dot", format)}
			}
			file := args[0]
			def, r := validateFile(file, workflow.Options{})
			if !r.Valid {
				printValidation(cmd.ErrOrStderr(), []validateResult{r})
				return &exitError{code: exitFailed, err: fmt.Errorf("%s is not a valid workflow (%s)", file, countProblems(len(r.Problems)))}
			}
			_, err := io.WriteString(cmd.OutOrStdout(), render(def))
			return err
		},
	}
	cmd.Flags().StringVar(&format, "format", "mermaid", "the output `FORMAT`: mermaid or dot")
	return cmd
}

func countProblems(n int) string {
	if n == 1 {
		return "1 problem"
	}
	return fmt.Sprintf("%d problems", n)
}
