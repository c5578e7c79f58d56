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

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/provider/registry"
)

// humanFlags are the flags of the commands that answer a waiting run: where the run is, and how
// to follow it. They take no model flags: a run continued here runs on the models its
// definition names (reins run --model PROVIDER:NAME writes its model into the run's copy).
type humanFlags struct {
	nats   natsFlags
	follow bool
	asJSON bool
	quiet  bool
}

func (f *humanFlags) add(cmd *cobra.Command) {
	f.nats.add(cmd)
	f.nats.addServer(cmd.Flags())
	fl := cmd.Flags()
	fl.BoolVar(&f.follow, "follow", false, "on a server, follow the run until it ends or waits again (on the embedded server of --data it always does)")
	fl.BoolVar(&f.asJSON, "json", false, "print the run result as JSON when following")
	fl.BoolVar(&f.quiet, "quiet", false, "print no progress")
}

const humanLong = `The run may wait on a server (--nats URL, or reins serve on --data): the command sends the
answer and returns (--follow to follow the run). When the run lives in the data directory of an
embedded server that no process runs (reins run stopped at the pause), the command starts the
engine and the built-in workers there and continues the run until it ends or waits again,
printing its progress and result as reins run does. The run's steps keep the models its
definition names (reins run --model wrote its choice there); API keys come from the
environment (OPENAI_API_KEY, ANTHROPIC_API_KEY, or the model's api_key_env).

With --server URL (default $REINS_SERVER) the answer goes through the server's HTTP API as the
principal of --token, needing no NATS (--follow follows the run's event stream); --by cannot
be used with it.

Exit status: 0 when the answer was sent (and, when following, the run completed or waits
again), 1 when nothing waits for it, the run has ended, or the followed run failed, 2 for a
usage error.`

func newApproveCmd() *cobra.Command {
	f := &humanFlags{}
	var message, by string
	cmd := &cobra.Command{
		Use:   "approve RUN [CALL]",
		Short: "Approve a pending call (or every pending approval of the run)",
		Long: `Approves the tool call CALL waiting for approval in run RUN, or, when CALL is the id of a step,
every call that step has pending (an approval step: labels it approved). Without CALL it
approves everything in the run that waits for approval. An agent step resumes the same
iteration without calling the model again once each of its pending calls is decided.

` + humanLong,
		Example: `  reins approve r-abc call_1
  reins approve r-abc review --message "ship it"
  reins approve r-abc
  reins approve r-abc call_1 --server http://127.0.0.1:7400 --follow`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := ""
			if len(args) == 2 {
				target = args[1]
			}
			return decide(cmd, f, args[0], target, true, message, by)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&message, "message", "", "a note recorded with the decision (an approval step's output)")
	cmd.Flags().StringVar(&by, "by", "", "decide on behalf of this `PRINCIPAL` (admins only; the record keeps both names)")
	return cmd
}

func newDenyCmd() *cobra.Command {
	f := &humanFlags{}
	var message, by string
	cmd := &cobra.Command{
		Use:   "deny RUN CALL",
		Short: "Deny a pending call: the model gets the message as the call's result",
		Long: `Denies the tool call CALL waiting for approval in run RUN (or, when CALL is the id of a step,
every call it has pending; an approval step is labelled denied). The denied call is not run:
the model sees --message as its result, and the iteration goes on without calling the model
again.

` + humanLong,
		Example: `  reins deny r-abc call_1 --message "refunds above 100 EUR need a manager"
  reins deny r-abc review --data /var/lib/reins`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return decide(cmd, f, args[0], args[1], false, message, by)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&message, "message", "denied by a human reviewer", "what the model sees as the denied call's result")
	cmd.Flags().StringVar(&by, "by", "", "decide on behalf of this `PRINCIPAL` (admins only; the record keeps both names)")
	return cmd
}

func newResumeCmd() *cobra.Command {
	f := &humanFlags{}
	var input, step string
	cmd := &cobra.Command{
		Use:   "resume RUN",
		Short: "Continue an agent step paused on needs_human with a human's message",
		Long: `Continues the agent step of run RUN that paused on needs_human (on_needs_human = "pause"):
its loop goes on with --input (a JSON value: a string is the human's message) added to the
conversation.

` + humanLong,
		Example: `  reins resume r-abc --input '"The customer confirmed the address."'
  reins resume r-abc --step investigate --input '{"note":"refund approved by phone"}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := jsonFlag("--input", input)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if remote, err := f.remote(cmd); err != nil || remote != nil {
				if err != nil {
					return err
				}
				return answerRemote(cmd, f, remote, args[0], func(ctx context.Context) (string, error) {
					key, err := remote.Resume(ctx, args[0], step, raw)
					return fmt.Sprintf("run %s: step %s resumed", args[0], key), err
				})
			}
			return answer(cmd, f, args[0], func(ctx context.Context, c *client.Client) (string, error) {
				key, err := c.Resume(ctx, args[0], step, raw)
				return fmt.Sprintf("run %s: step %s resumed", args[0], key), err
			})
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&input, "input", "", "the human's answer, a JSON value")
	cmd.Flags().StringVar(&step, "step", "", "the paused `STEP` (needed only when several are paused)")
	return cmd
}

func newSignalCmd() *cobra.Command {
	f := &humanFlags{}
	var payload string
	cmd := &cobra.Command{
		Use:   "signal RUN EVENT",
		Short: "Send a named event to a run (for its wait_event steps)",
		Long: `Sends the event EVENT with --payload to run RUN. A wait_event step waiting for EVENT completes
with the payload as its output; when none waits, the run keeps the event for the first one
that starts.

` + humanLong,
		Example: `  reins signal r-abc payment_received --payload '{"amount":42.5}'
  reins signal r-abc go --data /var/lib/reins
  reins signal r-abc payment_received --payload '{"amount":42.5}' --server http://127.0.0.1:7400 --follow`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkDataFlag(cmd, f.nats.data); err != nil {
				return err
			}
			raw, err := jsonFlag("--payload", payload)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if remote, err := f.remote(cmd); err != nil || remote != nil {
				if err != nil {
					return err
				}
				return answerRemote(cmd, f, remote, args[0], func(ctx context.Context) (string, error) {
					return fmt.Sprintf("run %s: event %s sent", args[0], args[1]), remote.Signal(ctx, args[0], args[1], raw)
				})
			}
			return answer(cmd, f, args[0], func(ctx context.Context, c *client.Client) (string, error) {
				return fmt.Sprintf("run %s: event %s sent", args[0], args[1]), c.Signal(ctx, args[0], args[1], raw)
			})
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&payload, "payload", "", "the event's data, a JSON value (the wait_event step's output)")
	// --data-dir is the data directory's old name here (from when --data was the event's
	// data): hidden, it still works.
	fl.StringVar(&f.nats.data, "data-dir", ".reins", "the data `DIR` of the embedded server")
	_ = fl.MarkHidden("data-dir")
	return cmd
}

// checkDataFlag refuses what reins signal's --data meant before it named the data directory,
// the event's data: a JSON value where a directory is expected, or --data with --data-dir.
func checkDataFlag(cmd *cobra.Command, data string) error {
	fl := cmd.Flags()
	if fl.Changed("data") && fl.Changed("data-dir") {
		return &exitError{code: exitUsage, err: errors.New("--data and --data-dir both name the data directory (--data-dir is its old name): give --data DIR, and the event's data with --payload JSON")}
	}
	if !fl.Changed("data") {
		return nil
	}
	if _, err := os.Stat(data); err == nil || !looksLikeJSON(data) {
		return nil
	}
	return &exitError{code: exitUsage, err: fmt.Errorf("--data names the data directory, and %s is JSON, not a directory: give the event's data with --payload", shellWord(data))}
}

// looksLikeJSON reports whether s reads as a JSON object, array or string: what nobody names a
// directory.
func looksLikeJSON(s string) bool {
	s = strings.TrimSpace(s)
	if s == "" || !strings.ContainsRune("{[\"", rune(s[0])) {
		return false
	}
	return json.Valid([]byte(s))
}

// continueConfig is the configuration of the built-in workers that approve, deny, resume and
// signal run when they continue a run themselves: the models of the run's definition, with the
// environment's API keys.
func continueConfig() (builtin.Config, error) {
	return builtin.Config{Registry: registry.Options{Timeout: 2 * time.Minute}}, nil
}

// decide sends an approve or deny decision, as the authenticated principal (on behalf of by,
// for an admin).
func decide(cmd *cobra.Command, f *humanFlags, runID, target string, approve bool, message, by string) error {
	if remote, err := f.remote(cmd); err != nil || remote != nil {
		if err != nil {
			return err
		}
		if by != "" {
			return &exitError{code: exitUsage, err: errors.New("--by decides on behalf of another principal, which the HTTP API does not take: use --nats or --data to decide with --by, or the principal's own token with --server")}
		}
		return decideRemote(cmd, f, remote, runID, target, approve, message)
	}
	return answer(cmd, f, runID, func(ctx context.Context, c *client.Client) (string, error) {
		done, err := c.Decide(ctx, runID, target, approve, message, by)
		verb := "approved"
		if !approve {
			verb = "denied"
		}
		lines := make([]string, len(done))
		for i, d := range done {
			if d.CallID == "" {
				lines[i] = fmt.Sprintf("run %s: step %s %s", runID, d.Step, verb)
			} else {
				lines[i] = fmt.Sprintf("run %s: call %s (%s) of step %s %s", runID, d.CallID, d.Tool, d.Step, verb)
			}
		}
		return strings.Join(lines, "\n"), err
	})
}

// remote returns the client of the HTTP API when the command goes through it (--server).
func (f *humanFlags) remote(cmd *cobra.Command) (*api.Client, error) {
	return f.nats.apiClient(cmd, "data")
}

// answer opens the server, sends what send sends, and follows the run when asked to or when
// nothing else would continue it (the embedded server of --data).
func answer(cmd *cobra.Command, f *humanFlags, runID string, send func(context.Context, *client.Client) (string, error)) error {
	return f.nats.searched(answerOn(cmd, f, runID, send))
}

func answerOn(cmd *cobra.Command, f *humanFlags, runID string, send func(context.Context, *client.Client) (string, error)) error {
	ctx := cmd.Context()
	log := commandLogger(cmd.ErrOrStderr(), slog.LevelWarn)
	// The engine and workers it may run export the spans of what they decide, as reins run's.
	flush, err := startTracing(ctx, "reins", cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer flush()
	// With the data directory's embedded server, nothing else runs the engine: this command
	// does, until the run ends or waits again. It starts before the answer is sent, so that the
	// engine has the layout and its timers armed when the answer arrives.
	at, err := reach(ctx, &f.nats, "", continueConfig, log)
	if err != nil {
		return err
	}
	defer func() { at.close() }() // at changes when this command takes the data directory over
	// Through another reins run holding the data directory, the command follows the run as if
	// it held the directory: that process may stop before the run ends or waits again.
	c, embedded := at.client, at.front != nil || at.byRun
	// The record before the answer: following stops at a waiting state saved after it.
	before, err := c.Get(ctx, runID)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	// Progress shows the events after the answer, not the run's whole history again.
	shown, err := c.LastEvent(ctx, runID)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	sendAndSay := func() error {
		line, err := send(ctx, c)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.ErrOrStderr(), line)
		return nil
	}
	if !embedded && !f.follow {
		if err := sendAndSay(); err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		return nil
	}
	def, err := c.Definition(ctx, before)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	again := func() (*reached, error) { return reach(ctx, &f.nats, "", continueConfig, log) }
	return followOn(cmd, at, again, runID, def, followOptions{asJSON: f.asJSON, quiet: f.quiet, untilWaiting: true,
		after: before.Revision, afterEvent: shown, start: sendAndSay, where: f.nats.where()})
}

// printWaiting tells what a waiting run waits for and the command that answers each; where
// (" --data DIR", " --nats URL", or "") is appended to each command, so that it reaches the run.
func printWaiting(w io.Writer, res protocol.Result, where string) {
	for _, wr := range res.Waiting {
		switch wr.Wait {
		case protocol.WaitApproval:
			if len(wr.Pending) == 0 {
				fmt.Fprintf(w, "waiting: step %s asks %q: reins approve %s %s%s | reins deny %s %s --message M%s\n", wr.Step, wr.Prompt, res.RunID, wr.Step, where, res.RunID, wr.Step, where)
			}
			for _, p := range wr.Pending {
				fmt.Fprintf(w, "waiting: step %s call %s %s %s: reins approve %s %s%s | reins deny %s %s --message M%s\n", wr.Step, p.CallID, p.Tool, compactJSON(p.Arguments), res.RunID, p.CallID, where, res.RunID, p.CallID, where)
			}
		case protocol.WaitInput:
			fmt.Fprintf(w, "waiting: step %s needs a human: reins resume %s --input '\"...\"'%s\n", wr.Step, res.RunID, where)
		case protocol.WaitEvent:
			fmt.Fprintf(w, "waiting: step %s waits for event %s: reins signal %s %s --payload JSON%s\n", wr.Step, wr.Event, res.RunID, wr.Event, where)
		}
	}
}

// where is what a suggested command needs to reach the server of nf: --nats URL (with
// --js-domain or --js-api-prefix when given), or --data DIR when it is not the default, and
// --namespace NAME when given as a flag (one from the environment is there for the next
// command too).
func (nf *natsFlags) where() string {
	ns := ""
	if nf.namespace != "" {
		ns = " --namespace " + shellWord(nf.namespace)
	}
	switch {
	case nf.url != "":
		js := ""
		if nf.jsDomain != "" {
			js = " --js-domain " + shellWord(nf.jsDomain)
		}
		if nf.jsAPIPrefix != "" {
			js += " --js-api-prefix " + shellWord(nf.jsAPIPrefix)
		}
		return " --nats " + shellWord(natsbox.RedactURL(nf.url)) + js + ns
	case nf.data != "" && nf.data != ".reins":
		return " --data " + shellWord(nf.data) + ns
	}
	return ns
}

// shellWord is s as one word of a POSIX shell: as it is when it has only safe characters, else
// in single quotes.
func shellWord(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:,@%+=", r))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// jsonFlag is the JSON value of flag name (none: null).
func jsonFlag(name, text string) (json.RawMessage, error) {
	if strings.TrimSpace(text) == "" {
		return json.RawMessage("null"), nil
	}
	if err := wire.CheckJSON([]byte(text), 0); err != nil {
		return nil, fmt.Errorf("%s %w (a message is a JSON string: '\"text\"')", name, err)
	}
	return json.RawMessage(text), nil
}
