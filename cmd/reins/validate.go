package main

import (
	"fmt"
	"io"

	"github.com/reins-run/reins/workflow"
	"github.com/spf13/cobra"
)

// validateResult is one file's entry in `reins validate --json`.
type validateResult struct {
	File     string            `json:"file"`
	Valid    bool              `json:"valid"`
	Hash     string            `json:"hash"`
	Problems workflow.Problems `json:"problems"`
}

func newValidateCmd() *cobra.Command {
	var asJSON bool
	var handlers []string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Validate workflow files and print every problem with its code, file, line and key",
		Long: `Loads and validates every workflow file given (docs/reference/workflow-file.md), sub-workflow
files included, and reports every problem found in one pass, one per line:

  FILE:LINE: CODE key: message

or, for a valid file, "FILE: ok (hash H)" with the first 12 hex digits of the definition's
content hash (the hash a run records). With --handlers, task and agent_loop handlers must be
among the given names (E_UNKNOWN_HANDLER).

Exit status: 0 when every file is valid, 1 when any has problems, 2 for a usage error.`,
		Example: "  reins validate examples/*/workflow.toml\n  reins validate examples/codereview/workflow.toml --handlers llm-review --json",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := workflow.Options{}
			if cmd.Flags().Changed("handlers") {
				opts.Handlers = append([]string{}, handlers...)
			}
			results := make([]validateResult, 0, len(args))
			failed := false
			for _, file := range args {
				_, r := validateFile(file, opts)
				failed = failed || !r.Valid
				results = append(results, r)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := printJSON(out, results); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
			} else {
				printValidation(out, results)
			}
			if failed {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the results as JSON: [{"file", "valid", "hash", "problems": [...]}]`)
	cmd.Flags().StringSliceVar(&handlers, "handlers", nil, "the handler `NAMES` workers register (comma-separated); task and agent_loop handlers must be among them")
	return cmd
}

// validateFile loads and validates one file. Every problem names the file, even one the
// validator left without it.
func validateFile(file string, opts workflow.Options) (*workflow.Definition, validateResult) {
	r := validateResult{File: file, Problems: workflow.Problems{}}
	def, ps := workflow.LoadAndValidate(file, opts)
	for _, p := range ps {
		if p.File == "" {
			p.File = file
		}
		r.Problems = append(r.Problems, p)
	}
	if len(r.Problems) > 0 || def == nil {
		if len(r.Problems) == 0 {
			r.Problems = append(r.Problems, workflow.Problem{Code: workflow.EParse, File: file, Message: "the file holds no workflow"})
		}
		return nil, r
	}
	h, err := def.Hash()
	if err != nil {
		r.Problems = append(r.Problems, workflow.Problem{Code: workflow.EType, File: file, Message: "cannot compute the definition's hash: " + err.Error()})
		return nil, r
	}
	r.Valid, r.Hash = true, h
	return def, r
}

func printValidation(w io.Writer, results []validateResult) {
	for _, r := range results {
		if r.Valid {
			fmt.Fprintf(w, "%s: ok (hash %s)\n", r.File, r.Hash[:12])
			continue
		}
		for _, p := range r.Problems {
			fmt.Fprintln(w, p.String())
		}
	}
}
