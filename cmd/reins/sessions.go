package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/session"
)

func newSessionsCmd() *cobra.Command {
	nf := &natsFlags{}
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List, show, delete and prune the sessions of agent steps",
		Example: `  reins sessions list
  reins sessions show 0f3c9a1e5b7d2c4a6e8f0b1d3c5a7e9f
  reins sessions prune`,
		Long: `Reads and removes the sessions of agent steps with session = "{{...}}" (docs/agents.md,
Sessions): the conversations they continue across runs. A session is named by its key, 32
hexadecimal digits of the principal who started the runs, the workflow, the step and the
session's value; list prints them. Sessions past their session_ttl are left out and are
removed by prune (and by the bucket's max age, 90 days after their last save, whatever runs).

On a server: --nats URL, or the server running on --data (reins serve), or, when none runs
there, the data directory itself (reins run keeps its sessions in --data, default .reins/).
Reading needs a viewer's, submitter's or approver's token; delete and prune an admin's.`,
	}
	nf.addTo(cmd.PersistentFlags())
	cmd.AddCommand(newSessionsListCmd(nf), newSessionsShowCmd(nf), newSessionsDeleteCmd(nf), newSessionsPruneCmd(nf))
	return cmd
}

// withSessions opens the server of nf and calls f with its sessions bucket; found is false
// when there is none (a data directory nothing ran in, a server whose layout is older).
func withSessions(ctx context.Context, nf *natsFlags, f func(st *session.Store, found bool) error) error {
	if nf.url == "" {
		if _, err := os.Stat(nf.data); errors.Is(err, fs.ErrNotExist) {
			return f(nil, false) // nothing ever ran there; reading creates nothing
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
	st, err := session.Open(ctx, (*conn.Conn)(box))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return f(nil, false)
	}
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	return f(st, true)
}

// sessionEntry is one session in `reins sessions list --json`.
type sessionEntry struct {
	Key       string    `json:"key"`
	Principal string    `json:"principal"`
	Workflow  string    `json:"workflow"`
	Step      string    `json:"step"`
	Session   string    `json:"session"`
	Messages  int       `json:"messages"`
	Turns     int       `json:"turns"`
	Saves     int       `json:"saves"`
	Bytes     int       `json:"bytes"`
	UpdatedAt time.Time `json:"updated_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

func entryOf(s *session.Session) sessionEntry {
	return sessionEntry{Key: s.Key, Principal: s.Principal, Workflow: s.Workflow, Step: s.Step, Session: s.Session,
		Messages: s.Count, Turns: len(s.Turns), Saves: s.Saves, Bytes: s.Bytes, UpdatedAt: s.UpdatedAt, ExpiresAt: s.ExpiresAt}
}

func newSessionsListCmd(nf *natsFlags) *cobra.Command {
	var workflowName, value, principal string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list [--workflow NAME] [--session VALUE] [--principal NAME]",
		Short:   "List the sessions that have not expired, least recently saved first",
		Example: "  reins sessions list\n  reins sessions list --workflow support --session C-42 --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return withSessions(ctx, nf, func(st *session.Store, found bool) error {
				entries := []sessionEntry{}
				if found {
					all, err := st.List(ctx)
					if err != nil {
						return &exitError{code: exitFailed, err: err}
					}
					now := time.Now()
					for _, s := range all {
						if s.Expired(now) || workflowName != "" && s.Workflow != workflowName || value != "" && s.Session != value || principal != "" && s.Principal != principal {
							continue
						}
						entries = append(entries, entryOf(s))
					}
				}
				slices.SortFunc(entries, func(a, b sessionEntry) int {
					return cmpOr(a.UpdatedAt.Compare(b.UpdatedAt), strings.Compare(a.Key, b.Key))
				})
				return printSessions(cmd.OutOrStdout(), entries, asJSON)
			})
		},
	}
	cmd.Flags().StringVar(&workflowName, "workflow", "", "only the sessions of the workflow with this `NAME`")
	cmd.Flags().StringVar(&value, "session", "", "only the sessions whose value (the step's rendered session) is `VALUE`")
	cmd.Flags().StringVar(&principal, "principal", "", "only the sessions of runs started by the principal `NAME`")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sessions as JSON")
	return cmd
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func printSessions(w io.Writer, entries []sessionEntry, asJSON bool) error {
	if asJSON {
		return printJSON(w, entries)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tWORKFLOW\tSTEP\tSESSION\tPRINCIPAL\tMESSAGES\tTURNS\tSAVED\tEXPIRES")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.Key, e.Workflow, e.Step, oneLine(e.Session, 40), orDash(e.Principal),
			e.Messages, e.Turns, e.UpdatedAt.Local().Format(time.DateTime), e.ExpiresAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// oneLine is s on one line, cut to n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sessionShow is `reins sessions show --json`: the entry and the conversation as it is kept.
type sessionShow struct {
	sessionEntry
	Summary         string          `json:"summary"`
	TruncatedBefore int             `json:"truncated_before"`
	Conversation    []model.Message `json:"conversation"`
	Turns           []session.Turn  `json:"turn_ids"`
}

// sessionByKey reads the session of key, refusing a key that is not one (usage) and one that
// is not there, or expired unless expiredOK (failed).
func sessionByKey(ctx context.Context, st *session.Store, found bool, key string, expiredOK bool) (*session.Session, error) {
	if len(key) != 32 || strings.Trim(key, "0123456789abcdef") != "" {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("%q is not a session key: a key is 32 hexadecimal digits, as reins sessions list prints them", key)}
	}
	if !found {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("session %s: %w", key, session.ErrNotFound)}
	}
	s, err := st.Get(ctx, key)
	if err != nil {
		return nil, &exitError{code: exitFailed, err: err}
	}
	if !expiredOK && s.Expired(time.Now()) {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("session %s expired at %s: its next run starts afresh (reins sessions prune removes it)", key, s.ExpiresAt.Local().Format(time.DateTime))}
	}
	return s, nil
}

func newSessionsShowCmd(nf *natsFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "show KEY",
		Short:   "Show a session: its scope, and the conversation its next run continues",
		Example: "  reins sessions show 0f3c9a1e5b7d2c4a6e8f0b1d3c5a7e9f\n  reins sessions show 0f3c9a1e5b7d2c4a6e8f0b1d3c5a7e9f --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return withSessions(ctx, nf, func(st *session.Store, found bool) error {
				s, err := sessionByKey(ctx, st, found, args[0], false)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), sessionShow{sessionEntry: entryOf(s), Summary: s.Summary, TruncatedBefore: s.TruncatedBefore,
						Conversation: s.Messages, Turns: s.Turns})
				}
				return printSession(cmd.OutOrStdout(), s)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session and its conversation as JSON")
	return cmd
}

func printSession(w io.Writer, s *session.Session) error {
	fmt.Fprintf(w, "session %s: %q of step %s of workflow %s, started by %s\n", s.Key, s.Session, s.Step, s.Workflow, orDash(s.Principal))
	fmt.Fprintf(w, "%d messages, %d saves, saved %s, expires %s\n", len(s.Messages), s.Saves,
		s.UpdatedAt.Local().Format(time.DateTime), s.ExpiresAt.Local().Format(time.DateTime))
	for i, m := range s.Messages {
		if i == 1 && s.Summary != "" {
			fmt.Fprintf(w, "\n[summary of what was left out]\n%s\n", s.Summary)
		}
		fmt.Fprintf(w, "\n[%s]", m.Role)
		if m.Name != "" {
			fmt.Fprintf(w, " %s", m.Name)
		}
		fmt.Fprintln(w)
		if m.Content != "" {
			fmt.Fprintln(w, m.Content)
		}
		for _, c := range m.Calls {
			fmt.Fprintf(w, "calls %s with %s\n", c.Name, c.Arguments)
		}
	}
	return nil
}

func newSessionsDeleteCmd(nf *natsFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "delete KEY",
		Short:   "Delete a session: the next run of its step starts afresh",
		Example: "  reins sessions delete 0f3c9a1e5b7d2c4a6e8f0b1d3c5a7e9f",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return withSessions(ctx, nf, func(st *session.Store, found bool) error {
				if _, err := sessionByKey(ctx, st, found, args[0], true); err != nil {
					return err
				}
				if err := st.Delete(ctx, args[0]); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "session %s deleted\n", args[0])
				return nil
			})
		},
	}
}

func newSessionsPruneCmd(nf *natsFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "prune",
		Short:   "Remove the sessions past their session_ttl",
		Example: "  reins sessions prune\n  reins sessions prune --nats nats://127.0.0.1:4222",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return withSessions(ctx, nf, func(st *session.Store, found bool) error {
				n := 0
				if found {
					var err error
					if n, err = st.Prune(ctx, time.Now()); err != nil {
						return &exitError{code: exitFailed, err: err}
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d expired sessions removed\n", n)
				return nil
			})
		},
	}
}
