// Command reins runs bounded, durable LLM agent loops. docs/reference/cli.md lists every
// command, flag and exit status; README.md gives a tour.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit statuses of every command (docs/reference/cli.md, "Exit statuses").
const (
	exitOK      = 0
	exitFailed  = 1 // the work itself failed
	exitUsage   = 2 // a usage error (and, for reins eval, an invalid fixture)
	exitInvalid = 2
)

// exitError carries an exit status out of a command. A nil err means the command already printed
// what needed printing.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func main() {
	// SIGTERM (a service manager, kill, a container's stop) ends a command as an interrupt
	// does: a followed run is cancelled, a server stops cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the CLI with args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "reins:", ee.err)
		}
		return ee.code
	}
	// Anything else comes from cobra's own parsing: unknown command, flag or argument count.
	fmt.Fprintln(stderr, "reins:", err)
	return exitUsage
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "reins",
		Short:         "Bounded, durable LLM agent loops",
		Long:          "reins runs agent loops that the software owns, not the model: every iteration validated, bounded, recorded, and explained when it stops.",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.AddCommand(newEvalCmd(), newAgentCmd(), newBenchCmd(), newValidateCmd(), newGraphCmd(),
		newRunCmd(), newServeCmd(), newWorkerCmd(), newRunsCmd(), newSessionsCmd(),
		newApproveCmd(), newDenyCmd(), newResumeCmd(), newSignalCmd())
	return root
}
