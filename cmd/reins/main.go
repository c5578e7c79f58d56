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
	"strings"
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
		Use:   "reins",
		Short: "Bounded, durable LLM agent loops",
		Long:  "reins runs agent loops that the software owns, not the model: every iteration validated, bounded, recorded, and explained when it stops.",
		Example: `  reins run examples/refund/workflow.toml --input '{"order_id":"O-104"}'
  reins runs list
  reins approve r-abc call_1
  reins serve`,
		// What cobra's --version prints after "reins version "; no version template of our own,
		// since a template links text/template, whose reflection keeps every exported method of
		// every type in the binary (the SDKs' alone: 30 MB more).
		Version:       strings.TrimPrefix(buildVersion(), "reins version "),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	for _, g := range commandGroups {
		root.AddGroup(&cobra.Group{ID: g.id, Title: g.title})
		for _, newCmd := range g.commands {
			cmd := newCmd()
			cmd.GroupID = g.id
			root.AddCommand(cmd)
		}
	}
	root.AddCommand(newVersionCmd())
	return root
}

// commandGroups are the sections of reins --help, in the order a newcomer meets them; help,
// completion and version come last, ungrouped.
var commandGroups = []struct {
	id, title string
	commands  []func() *cobra.Command
}{
	{"run", "Run workflows:", []func() *cobra.Command{newRunCmd, newAgentCmd}},
	{"inspect", "Inspect runs:", []func() *cobra.Command{newRunsCmd, newSessionsCmd}},
	{"decide", "Decide on waiting runs:", []func() *cobra.Command{newApproveCmd, newDenyCmd, newResumeCmd, newSignalCmd}},
	{"serve", "Serve and operate:", []func() *cobra.Command{newServeCmd, newWorkerCmd, newMCPCmd}},
	{"develop", "Develop:", []func() *cobra.Command{newValidateCmd, newGraphCmd, newEvalCmd, newBenchCmd}},
}
