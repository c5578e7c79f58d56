package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/telemetry"
	"github.com/reins-run/reins/workflow"
)

// The reins command over the HTTP API (docs/api.md, "The reins command over the API"): run,
// runs list|show|cancel, approve, deny, resume and signal given --server URL (or
// $REINS_SERVER) go through a server's API, with the token of --token (or $REINS_TOKEN), and
// need no NATS. They print what the same command prints over NATS, with the same exit
// statuses.

// serverEnv is the environment variable of --server's default.
const serverEnv = "REINS_SERVER"

// addServer adds --server, to a client command that the API can serve.
func (f *natsFlags) addServer(fl *pflag.FlagSet) {
	fl.StringVar(&f.server, "server", "", "go through the HTTP API of the reins server at this `URL` (reins serve --listen, e.g. http://127.0.0.1:7400) instead of NATS, as the principal of --token (default $"+serverEnv+" when no NATS flag is given)")
}

// natsOnlyFlags are the flags that choose or reach a NATS server (dataFlag: the data
// directory's, --data; reins signal also takes its old name --data-dir): with --server, none
// may be given.
func natsOnlyFlags(dataFlag string) []string {
	return []string{"nats", dataFlag, "data-dir", "nats-creds", "nats-nkey", "nats-tls-cert", "nats-tls-key", "nats-tls-ca", "namespace", "js-domain", "js-api-prefix"}
}

// apiClient returns the client of the HTTP API when the command goes through it: --server
// URL, or $REINS_SERVER when no flag chooses NATS; nil when it goes through NATS. --server
// with a NATS flag, or with one of the command's flags that only apply over NATS
// (localOnly), is a usage error, and so is --server without a token.
func (f *natsFlags) apiClient(cmd *cobra.Command, dataFlag string, localOnly ...string) (*api.Client, error) {
	fl := cmd.Flags()
	natsFlag := ""
	for _, name := range natsOnlyFlags(dataFlag) {
		if fl.Lookup(name) != nil && fl.Changed(name) {
			natsFlag = name
			break
		}
	}
	server := f.server
	if !fl.Changed("server") {
		if natsFlag != "" {
			return nil, nil // NATS, as the flag says: $REINS_SERVER is only a default
		}
		server = strings.TrimSpace(os.Getenv(serverEnv))
	}
	if server == "" {
		return nil, nil
	}
	if natsFlag != "" {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("--server goes through a server's HTTP API and --%s through NATS: give one of them", natsFlag)}
	}
	for _, name := range localOnly {
		if fl.Lookup(name) != nil && fl.Changed(name) {
			return nil, &exitError{code: exitUsage, err: fmt.Errorf("--%s applies when the command reaches NATS itself; it cannot be used with --server", name)}
		}
	}
	token := f.clientToken()
	if token == "" {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("--server needs the token of a principal of the server: give --token TOKEN or set $%s", tokenEnv)}
	}
	f.server = server
	return api.NewClient(api.ClientConfig{URL: server, Token: token, HTTP: &http.Client{}}), nil
}

// whereServer is what a suggested command needs to reach the run through the API: never the
// token.
func whereServer(c *api.Client) string { return " --server " + shellWord(c.URL()) }

// searchedServer completes err, when the server answered that a run does not exist, with where
// the command looked: the reins server at the URL of --server (natsFlags.searched says it for
// NATS).
func searchedServer(err error, c *api.Client) error {
	inner := err
	if ee, ok := err.(*exitError); ok {
		inner = ee.err
	}
	var p *api.Problem
	if inner == nil || !errors.As(inner, &p) || p.Status != http.StatusNotFound || !strings.HasPrefix(p.Detail, "there is no run") {
		return err
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("%w (looked on the reins server at %s; a run kept elsewhere needs --data DIR or --nats URL)", p, c.URL())}
}

// apiFailed is the exit error of a failed call of the API: its problem's detail, or why the
// server could not be reached, as one sentence.
func apiFailed(err error) error {
	return &exitError{code: exitFailed, err: err}
}

// runRemote registers file under its workflow's name, starts a run of that version with
// input, and prints its id (--detach) or follows it to its end.
func runRemote(cmd *cobra.Command, c *api.Client, file string, def *workflow.Definition, bundles *workflow.Bundles, input json.RawMessage, f *runFlags) error {
	ctx := cmd.Context()
	// A server runs what other people submit: what carries power is its operator's.
	if ps := operatorOnly(bundles); len(ps) > 0 {
		printProblems(cmd.ErrOrStderr(), ps)
		return &exitError{code: exitFailed, err: fmt.Errorf("%s sets what only the server's operator may set (%s): name the operator's providers and MCP servers instead", file, countProblems(len(ps)))}
	}
	if err := f.checkInputSize(input); err != nil {
		return err
	}
	source, err := os.ReadFile(file)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	v, _, err := c.PutWorkflow(ctx, def.Name, source)
	if p := (*api.Problem)(nil); errors.As(err, &p) && len(p.Problems) > 0 {
		for _, fp := range p.Problems {
			fmt.Fprintln(cmd.ErrOrStderr(), workflow.Problem{Code: workflow.Code(fp.Code), File: file, Line: fp.Line, Key: fp.Key, Message: fp.Message}.String())
		}
		return &exitError{code: exitFailed, err: fmt.Errorf("the server at %s refuses to register %s (%s)", c.URL(), file, countProblems(len(p.Problems)))}
	}
	if err != nil {
		return apiFailed(err)
	}
	started, err := c.StartRun(ctx, api.RunStart{Workflow: v.Name, Version: v.Version, Input: input, RunID: f.runID})
	if err != nil {
		return apiFailed(err)
	}
	if f.detach {
		fmt.Fprintln(cmd.OutOrStdout(), started.RunID)
		return nil
	}
	return followRemote(cmd, c, started.RunID, def, remoteFollow{asJSON: f.asJSON, quiet: f.quiet, where: whereServer(c)})
}

// remoteFollow says how followRemote follows a run.
type remoteFollow struct {
	asJSON, quiet bool
	// untilWaiting stops at a waiting status that comes after an event the stream had not
	// had when following began (the answer start sent, or what it caused).
	untilWaiting bool
	// skip is how many of the stream's first events are history: not shown as progress.
	skip int
	// start, when set, sends what continues the run once the stream is open.
	start func() error
	where string
}

// followRemote follows run id through its event stream, printing progress as reins run does,
// then its result; it exits as followToResult does. An interrupt cancels the run and waits
// for it to end. A stream that breaks is opened again after the last event received.
func followRemote(cmd *cobra.Command, c *api.Client, id string, def *workflow.Definition, o remoteFollow) error {
	ctx := cmd.Context()
	w := cmd.ErrOrStderr()
	watchCtx, stop := cancelOnInterrupt(ctx, w, id,
		func(cctx context.Context) error { return c.Cancel(cctx, id, "interrupted") },
		func(err error) bool { // 409: the run has already finished
			var p *api.Problem
			return errors.As(err, &p) && p.Status == http.StatusConflict
		})
	defer stop()
	p := newProgress(w, def, o.quiet)
	var last *api.StreamStatus
	seen, lastID, sent := 0, "", o.start == nil
	var streamErr error
	// A run just started may have no record yet: its stream is 404 until the engine saved it.
	born := time.Now().Add(15 * time.Second)
	everProgressed := false
	for tries := 0; tries < 5; tries++ {
		progressed := false
		for m, err := range c.Events(watchCtx, id, lastID) {
			if err != nil {
				streamErr = err
				break
			}
			progressed, everProgressed = true, true
			switch m.Kind {
			case "event":
				lastID = m.ID
				seen++
				if seen > o.skip {
					p.event(m.Event)
				}
			case "status":
				last = m.Status
				p.updateResult(&last.Result)
				if !sent {
					sent = true
					if err := o.start(); err != nil {
						return apiFailed(err)
					}
					continue
				}
				if o.untilWaiting && seen > o.skip && last.Status == protocol.RunWaiting {
					return printOutcome(cmd, last.Result, o.asJSON, o.where)
				}
			case "end":
				if last == nil || last.Status == protocol.RunQueued || last.Status == protocol.RunRunning || last.Status == protocol.RunWaiting {
					d, err := c.GetRun(watchCtx, id)
					if err != nil {
						return apiFailed(err)
					}
					last = &api.StreamStatus{Result: d.Result}
				}
				return printOutcome(cmd, last.Result, o.asJSON, o.where)
			}
		}
		var prob *api.Problem
		switch {
		case watchCtx.Err() != nil:
			return &exitError{code: exitFailed, err: fmt.Errorf("run %s: stopped following before it ended", id)}
		case errors.As(streamErr, &prob) && prob.Status == http.StatusNotFound && !everProgressed && time.Now().Before(born):
			tries--
			time.Sleep(100 * time.Millisecond)
			continue
		case errors.As(streamErr, &prob):
			return apiFailed(streamErr)
		case progressed:
			tries = 0
		}
		select {
		case <-watchCtx.Done():
		case <-time.After(time.Second):
		}
	}
	if streamErr == nil {
		streamErr = fmt.Errorf("run %s: the server at %s closed its event stream before the run ended", id, c.URL())
	}
	return apiFailed(streamErr)
}

// updateResult prints the steps of a run result whose status changed, or that started again
// (fewer iterations), as update does from a run's record.
func (p *runProgress) updateResult(res *protocol.Result) {
	if p.quiet || res == nil {
		return
	}
	for _, s := range res.Steps {
		sr := engine.StepRun{Status: s.Status, Iteration: s.Iterations, Attempt: s.Attempts, StopReason: s.StopReason, Label: s.Label, Error: s.Error}
		if s.Usage != nil {
			sr.Usage = *s.Usage
		}
		old, had := p.seen[s.ID]
		p.seen[s.ID] = sr
		if sr.Status == protocol.StepPending || sr.Status == protocol.StepSkipped {
			continue
		}
		if had && old.Status == sr.Status && old.Iteration <= sr.Iteration {
			continue
		}
		fmt.Fprintln(p.w, stepLine(s.ID, &sr))
	}
}

// sketch is the definition a run's graph shows: its steps with their types, enough for
// progress to tell the looping steps (the registered file itself may have changed since).
func sketch(d *api.RunDetail) *workflow.Definition {
	def := &workflow.Definition{Name: d.Workflow}
	if d.Graph == nil {
		return def
	}
	for _, n := range d.Graph.Nodes {
		if n.Step != "" {
			def.Steps = append(def.Steps, workflow.Step{ID: n.Step, Type: workflow.StepType(n.Type)})
		}
	}
	return def
}

// listRemote prints the runs through the API: every run newest first, as over NATS; with
// --limit or --after, one page of the API's, newest first, and the next page's cursor on
// stderr.
func listRemote(cmd *cobra.Command, c *api.Client, q client.Query, paged, asJSON bool) error {
	ctx := cmd.Context()
	if q.Status == client.StatusCorrupt {
		return &exitError{code: exitUsage, err: errors.New("--status corrupt reads the records themselves: it needs NATS (--nats URL or --data DIR), not --server")}
	}
	entries := []listEntry{}
	add := func(page api.RunPage) {
		for _, r := range page.Runs {
			entries = append(entries, listEntry{RunID: r.RunID, Workflow: r.Workflow, Status: r.Status, StartedAt: r.StartedAt, Error: r.Error})
		}
	}
	if paged {
		page, err := c.ListRuns(ctx, api.RunQuery{Status: q.Status, Workflow: q.Workflow, Limit: q.Limit, Cursor: q.After})
		if err != nil {
			return apiFailed(err)
		}
		add(page)
		if err := printList(cmd.OutOrStdout(), entries, asJSON); err != nil {
			return err
		}
		if page.NextCursor != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "reins: more runs follow: the next page is --after %s\n", page.NextCursor)
		}
		return nil
	}
	for cursor := ""; ; {
		page, err := c.ListRuns(ctx, api.RunQuery{Status: q.Status, Limit: 500, Cursor: cursor})
		if err != nil {
			return apiFailed(err)
		}
		add(page)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	return printList(cmd.OutOrStdout(), entries, asJSON)
}

// showRemote prints a run (reins runs show) through the API.
func showRemote(cmd *cobra.Command, c *api.Client, runID string, asJSON bool) error {
	d, err := c.GetRunTrace(cmd.Context(), runID)
	if err != nil {
		return apiFailed(err)
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return printJSON(out, showResult{Result: d.Result, TraceID: telemetry.TraceID(d.RunID).String(), Trace: d.Trace, Registered: d.Registered})
	}
	if err := printResult(out, d.Result, false); err != nil {
		return err
	}
	printTraceID(out, d.RunID)
	printRegistered(out, d.Registered)
	fmt.Fprintln(out, "trace:")
	for _, ev := range d.Trace {
		fmt.Fprintln(out, "  "+eventLine(ev))
	}
	return nil
}

// showIterationRemote prints one iteration (reins runs show --iteration) through the API.
func showIterationRemote(cmd *cobra.Command, c *api.Client, runID, step string, n int, full, asJSON bool) error {
	it, err := c.Iteration(cmd.Context(), runID, step, n, full)
	if err != nil {
		return apiFailed(err)
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), it.Parts)
	}
	printIteration(cmd.OutOrStdout(), runID, step, n, it.Parts)
	return nil
}

// answerRemote sends an answer to a waiting run through the API (send returns the line that
// says what it did), and with --follow follows the run until it ends or waits again.
func answerRemote(cmd *cobra.Command, f *humanFlags, c *api.Client, runID string, send func(context.Context) (string, error)) error {
	return searchedServer(answerRemoteOn(cmd, f, c, runID, send), c)
}

func answerRemoteOn(cmd *cobra.Command, f *humanFlags, c *api.Client, runID string, send func(context.Context) (string, error)) error {
	ctx := cmd.Context()
	sendAndSay := func() error {
		line, err := send(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.ErrOrStderr(), line)
		return nil
	}
	if !f.follow {
		if err := sendAndSay(); err != nil {
			return apiFailed(err)
		}
		return nil
	}
	before, err := c.GetRun(ctx, runID)
	if err != nil {
		return apiFailed(err)
	}
	return followRemote(cmd, c, runID, sketch(&before), remoteFollow{asJSON: f.asJSON, quiet: f.quiet, untilWaiting: true,
		skip: len(before.Trace), start: sendAndSay, where: whereServer(c)})
}

// decideRemote approves or denies through the API: target, or with none every step of the
// run that waits for approval.
func decideRemote(cmd *cobra.Command, f *humanFlags, c *api.Client, runID, target string, approve bool, message string) error {
	return answerRemote(cmd, f, c, runID, func(ctx context.Context) (string, error) {
		targets := []string{target}
		if target == "" {
			d, err := c.GetRun(ctx, runID)
			if err != nil {
				return "", err
			}
			targets = nil
			for _, w := range d.Waiting {
				if w.Wait == protocol.WaitApproval {
					targets = append(targets, w.Step)
				}
			}
			if len(targets) == 0 {
				return "", fmt.Errorf("run %s has nothing waiting for approval (it is %s)", runID, d.Status)
			}
		}
		verb := "approved"
		if !approve {
			verb = "denied"
		}
		var lines []string
		for _, t := range targets {
			done, taken, err := c.Decide(ctx, runID, t, approve, message)
			if err != nil {
				return strings.Join(lines, "\n"), err
			}
			later := ""
			if !taken {
				later = " (sent: the engine has not taken it yet, and will when it can)"
			}
			for _, d := range done {
				if d.CallID == "" {
					lines = append(lines, fmt.Sprintf("run %s: step %s %s%s", runID, d.Step, verb, later))
				} else {
					lines = append(lines, fmt.Sprintf("run %s: call %s (%s) of step %s %s%s", runID, d.CallID, d.Tool, d.Step, verb, later))
				}
			}
		}
		return strings.Join(lines, "\n"), nil
	})
}
