package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/mcptool"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
	"github.com/spf13/cobra"
)

type agentFlags struct {
	model        modelFlags
	goal         string
	instructions string
	mcp          []string
	allow        []string
	forbid       []string
	approval     []string
	evidence     []string
	budget       loop.Budget
	context      contextFlags
	stream       bool
	asJSON       bool
	record       string
}

// contextFlags are the flags of the loop's context policy.
type contextFlags struct {
	maxTokens  int64
	strategy   string
	keepLast   int
	summarizer string
}

func newAgentCmd() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent --model PROVIDER:NAME --goal TEXT [--mcp COMMAND]...",
		Short: "Run one bounded tool-calling loop against a real model",
		Long: `Runs one bounded agent loop: the model proposes, reins validates every proposal against the
tools' schemas and the policy, executes the accepted tool calls, and stops at a budget, an answer,
an escalation or a refusal, printing each iteration as it happens and the stop reason.

Tools come from MCP servers: --mcp takes a command line started over stdio, or an http(s) URL of
a streamable-HTTP server, and may be repeated. Exit status 0 when the loop completed with an
answer, 1 for any other stop reason, 2 for a usage error.`,
		Example: `  reins agent --model openai:gpt-4.1-mini --goal "Summarise README.md" --mcp "npx -y @modelcontextprotocol/server-filesystem ."
  reins agent --model openai:qwen2.5 --base-url http://127.0.0.1:8000/v1 --goal "What is 2+2?"
  reins agent --model replay:testdata/cassettes/agent.json --goal "..." --json
  reins agent --model openai:gpt-4.1 --goal "..." --mcp "..." --context-max-tokens 60000 --context-strategy summarize --summarizer openai:gpt-4.1-mini`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAgent(cmd, &f) },
	}
	f.model.add(cmd, "the model, `PROVIDER:NAME`: openai:NAME (any OpenAI-compatible server), anthropic:NAME, or replay:CASSETTE")
	fl := cmd.Flags()
	fl.StringVar(&f.goal, "goal", "", "the task given to the loop")
	fl.StringVar(&f.instructions, "instructions", "", "system instructions")
	fl.StringArrayVar(&f.mcp, "mcp", nil, "an MCP server: a `COMMAND` line (stdio) or an http(s) URL (streamable HTTP); repeatable")
	fl.StringSliceVar(&f.allow, "allow", nil, "tools the model may call (default: every tool)")
	fl.StringSliceVar(&f.forbid, "forbid", nil, "tools that must never execute: proposing one stops the loop (refused)")
	fl.StringSliceVar(&f.approval, "require-approval", nil, "tools whose calls need a human decision (the loop stops needs_human)")
	fl.StringSliceVar(&f.evidence, "required-evidence", nil, "tools that must have succeeded before an answer is accepted")
	d := loop.DefaultBudget()
	fl.IntVar(&f.budget.MaxIterations, "max-iterations", d.MaxIterations, "iteration budget")
	fl.IntVar(&f.budget.MaxToolCalls, "max-tool-calls", d.MaxToolCalls, "executed tool-call budget")
	fl.DurationVar(&f.budget.MaxDuration, "max-duration", d.MaxDuration, "wall-clock budget of the whole loop")
	fl.Int64Var(&f.budget.MaxTokens, "max-tokens", 0, "token budget, input plus output (0: unlimited)")
	fl.Float64Var(&f.budget.MaxCostUSD, "max-cost", 0, "cost budget in USD (0: unlimited; needs a known price, see --price)")
	fl.Int64Var(&f.context.maxTokens, "context-max-tokens", 0, "the most input tokens one model call may carry (0: no context policy, the whole conversation every time)")
	fl.StringVar(&f.context.strategy, "context-strategy", "", "how a call over --context-max-tokens is brought under it: drop_oldest (default), truncate_tool_results or summarize")
	fl.IntVar(&f.context.keepLast, "keep-last", 0, "how many of the latest messages the context strategy never touches (default 4)")
	fl.StringVar(&f.context.summarizer, "summarizer", "", "the model that writes the summaries of --context-strategy summarize, `PROVIDER:NAME`, opened like --model")
	fl.BoolVar(&f.stream, "stream", false, "stream the model's text as it arrives")
	fl.BoolVar(&f.asJSON, "json", false, "print the result (stop reason, answer, usage, trace, iteration records) as JSON instead of live progress")
	fl.StringVar(&f.record, "record-iterations", "", "append the record of each iteration to `FILE` (JSON Lines) as it ends: proposal, calls, validation, results, usage, stop")
	return cmd
}

func runAgent(cmd *cobra.Command, f *agentFlags) error {
	switch {
	case f.model.name == "":
		return &exitError{code: exitUsage, err: fmt.Errorf("--model is required (e.g. --model openai:gpt-4.1-mini)")}
	case f.goal == "":
		return &exitError{code: exitUsage, err: fmt.Errorf("--goal is required")}
	}
	m, err := f.model.open()
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	policy, err := f.contextPolicy()
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ctx := cmd.Context()
	var tools []tool.Tool
	for _, target := range f.mcp {
		ts, err := mcptool.Connect(ctx, target, mcptool.Options{ClientName: "reins"})
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		defer ts.Close()
		for _, why := range ts.Refused() {
			fmt.Fprintf(cmd.ErrOrStderr(), "reins agent: not offered to the model: %s\n", why)
		}
		tools = append(tools, ts.Tools()...)
	}
	out := cmd.OutOrStdout()
	cfg := loop.Config{
		Model: m, Tools: tools, Instructions: f.instructions, Budget: f.budget, Context: policy,
		Policy: loop.Policy{Allow: f.allow, Forbid: f.forbid, RequireApproval: f.approval, RequiredEvidence: f.evidence},
	}
	if !f.asJSON {
		cfg.Sink = &progress{w: out}
		if f.stream {
			cfg.OnDelta = func(_ int, d model.Delta) { fmt.Fprint(out, d.Text) }
		}
	}
	c, err := loop.New(cfg)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	res, records, err := runRecorded(ctx, c, newRunID("agent"), f.goal, f.record)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if f.asJSON {
		if err := writeAgentJSON(out, res, records); err != nil {
			return &exitError{code: exitFailed, err: err}
		}
	} else if res.Answer != "" {
		fmt.Fprintf(out, "\n%s\n", res.Answer)
	}
	if res.StopReason != loop.Completed {
		return &exitError{code: exitFailed}
	}
	return nil
}

// contextPolicy is the loop's context policy from the flags: none without
// --context-max-tokens, the summarizer opened with --model's options (a recording aside: the
// cassette is the main model's).
func (f *agentFlags) contextPolicy() (loop.ContextPolicy, error) {
	c := f.context
	if c.maxTokens == 0 {
		if c.strategy != "" || c.keepLast != 0 || c.summarizer != "" {
			return loop.ContextPolicy{}, fmt.Errorf("--context-strategy, --keep-last and --summarizer need --context-max-tokens")
		}
		return loop.ContextPolicy{}, nil
	}
	p := loop.ContextPolicy{MaxTokens: c.maxTokens, Strategy: loop.ContextStrategy(c.strategy), KeepLast: c.keepLast}
	if c.summarizer != "" {
		mf := f.model
		mf.name, mf.record = c.summarizer, ""
		s, err := mf.open()
		if err != nil {
			return p, fmt.Errorf("--summarizer: %w", err)
		}
		p.Summarizer = s
	}
	return p, nil
}

// progress prints each trace event of a live run as one short line.
type progress struct{ w io.Writer }

func (p *progress) Emit(e trace.Event) {
	switch e.Type {
	case trace.IterationStart:
		fmt.Fprintf(p.w, "── iteration %d\n", e.Iteration)
	case trace.ModelCall:
		if e.Error != "" {
			fmt.Fprintf(p.w, "   model error (retryable=%v): %s\n", e.Retryable, e.Error)
			return
		}
		fmt.Fprintf(p.w, "   model: %s, %d in / %d out tokens, $%.4f\n", e.Duration.Round(time.Millisecond), e.InputTokens, e.OutputTokens, e.CostUSD)
	case trace.Proposal:
		switch e.Proposal {
		case string(model.KindToolCalls):
			fmt.Fprintf(p.w, "   proposes %d tool call(s)\n", e.Calls)
		case string(model.KindAnswer):
			fmt.Fprintln(p.w, "   proposes an answer")
		default:
			fmt.Fprintf(p.w, "   proposes to %s: %s\n", e.Proposal, e.Reason)
		}
	case trace.Validation:
		if e.Decision == trace.DecisionInvalid || e.Decision == trace.DecisionForbid {
			fmt.Fprintf(p.w, "   ✗ %s %s\n", orAnswer(e.Tool), e.Reason)
		}
	case trace.Approval:
		fmt.Fprintf(p.w, "   approval of %s: %s %s\n", e.Tool, e.Decision, e.Reason)
	case trace.ToolCall:
		fmt.Fprintf(p.w, "   → %s (%s)\n", e.Tool, e.CallID)
	case trace.ToolResult:
		switch {
		case !e.Executed:
			fmt.Fprintf(p.w, "   ← %s not executed\n", e.Tool)
		case e.Error != "":
			fmt.Fprintf(p.w, "   ← %s failed in %s: %s\n", e.Tool, e.Duration.Round(time.Millisecond), e.Error)
		default:
			fmt.Fprintf(p.w, "   ← %s ok in %s\n", e.Tool, e.Duration.Round(time.Millisecond))
		}
	case trace.Context:
		fmt.Fprintf(p.w, "   context (%s): %s\n", e.Decision, e.Reason)
	case trace.Stop:
		fmt.Fprintf(p.w, "stop: %s (%s)\n", e.StopReason, e.Reason)
	}
}

func orAnswer(toolName string) string {
	if toolName == "" {
		return "answer:"
	}
	return toolName + ":"
}

func writeAgentJSON(w io.Writer, res loop.Result, records []trace.Iteration) error {
	st := res.State
	return printJSON(w, struct {
		RunID      string             `json:"run_id"`
		StopReason loop.StopReason    `json:"stop_reason"`
		Detail     string             `json:"detail"`
		Answer     string             `json:"answer"`
		Iterations int                `json:"iterations"`
		ToolCalls  int                `json:"tool_calls"`
		Usage      model.Usage        `json:"usage"`
		CostUSD    float64            `json:"cost_usd"`
		Pending    []loop.PendingCall `json:"pending,omitempty"`
		Trace      []trace.Event      `json:"trace"`
		Records    []trace.Iteration  `json:"records"`
	}{st.RunID, res.StopReason, res.Detail, res.Answer, st.Iteration, st.ToolCalls, st.Usage, st.CostUSD, st.Pending, res.Trace, records})
}

// runRecorded runs the loop to its end, keeping the record of each iteration; with a file,
// each record is appended to it (a JSON line, synced) as its iteration ends, so that a run
// that dies leaves the record of every iteration it finished.
func runRecorded(ctx context.Context, c *loop.Controller, runID, goal, file string) (loop.Result, []trace.Iteration, error) {
	var enc *json.Encoder
	var f *os.File
	if file != "" {
		var err error
		if f, err = os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return loop.Result{}, nil, fmt.Errorf("--record-iterations: %w", err)
		}
		defer f.Close()
		enc = json.NewEncoder(f)
	}
	run := c.Start(runID, goal)
	records := []trace.Iteration{}
	for done := false; !done; {
		m := run.Mark()
		done = run.Step(ctx)
		rec := run.Record(m)
		records = append(records, rec)
		if enc == nil {
			continue
		}
		if err := enc.Encode(rec); err != nil {
			return run.Result(), records, fmt.Errorf("--record-iterations %s: %w", file, err)
		}
		if err := f.Sync(); err != nil {
			return run.Result(), records, fmt.Errorf("--record-iterations %s: %w", file, err)
		}
	}
	return run.Result(), records, nil
}

// newRunID returns a unique, time-ordered run id such as agent-20261121-201503-a1b2c3.
func newRunID(prefix string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}
