// Command codereview runs the code review workflow (workflow.toml, beside this file) in one
// process: an embedded NATS server with JetStream, the engine, and a worker that serves the
// agent_loop handler "llm-review" beside the built-in llm and agent handlers. It runs the
// workflow on a change and prints the result: every step's stop reason, the path and the report.
//
// The handler reviews one file of the change per iteration. The conversation with the model
// lives in the step's checkpoint: each iteration loads it, asks about the next file with the
// whole conversation, and appends the question and the answer (AppendCheckpoint writes only
// those two messages). An iteration that a crash makes run again, on this worker or another,
// continues from the same conversation. The engine bounds the loop (max_iterations,
// max_duration, loop_delay and the per-iteration timeout of workflow.toml).
//
//	go run ./examples/codereview                                   # scripted models, no API key
//	go run ./examples/codereview -change change.json               # another change
//	go run ./examples/codereview -model openai:gpt-4o-mini         # a real model for every call
//	go run ./examples/codereview -model openai:qwen2.5 -base-url http://127.0.0.1:8000/v1
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider/registry"
)

// workflowFile is examples/codereview/workflow.toml, compiled in so that the command runs from
// any directory.
//
//go:embed workflow.toml
var workflowFile []byte

// Handler is the name the review step's handler is registered under (workflow.toml's handler).
const Handler = "llm-review"

// File is one file of a change: its path and its diff.
type File struct {
	Path string `json:"path"`
	Diff string `json:"diff"`
}

// Finding is the review of one file.
type Finding struct {
	File   string `json:"file"`
	Review string `json:"review"`
}

// Review is the input and the output of every iteration of the review step: the change, the
// files still to review, and the findings so far. The run input is a Review with no findings.
type Review struct {
	Change   string    `json:"change"`
	Files    []File    `json:"files,omitempty"`
	Findings []Finding `json:"findings,omitempty"`
}

// sampleChange is the change reviewed when no -change is given.
var sampleChange = Review{
	Change: "PR 42: retry failed tool calls",
	Files: []File{
		{Path: "loop/act.go", Diff: "-\tres, err := t.Execute(ctx, args, key)\n+\tres, _ := t.Execute(ctx, args, key)\n+\tif res == nil {\n+\t\treturn retry(ctx, call)\n+\t}"},
		{Path: "loop/retry.go", Diff: "+func retry(ctx context.Context, call Call) (Result, error) {\n+\treturn call.Tool.Execute(ctx, call.Args, call.Key)\n+}"},
		{Path: "docs/loop.md", Diff: "+A tool call that returns no result is retried once."},
	},
}

// reviewerScript is the scripted reviewer: one answer per file of the sample change.
var reviewerScript = []model.Turn{
	reviewTurn("loop/act.go: the error of t.Execute is dropped; return it instead of retrying on a nil result.", 210, 26),
	reviewTurn("loop/retry.go: no test covers the retry path; add one where the first call fails.", 330, 22),
	reviewTurn("docs/loop.md: matches the code once the error is returned. No finding.", 420, 17),
}

func reviewTurn(text string, in, out int64) model.Turn {
	return model.Turn{Text: &text, Usage: &model.Usage{InputTokens: in, OutputTokens: out}}
}

// reviewInstructions are the reviewer model's instructions.
const reviewInstructions = "You review a code change one file at a time. For each file, answer in one line: " +
	"the file's path, a colon, then the one most important finding, or \"No finding.\""

// NewReviewHandler returns the handler of the review step: one file per iteration, reviewed by
// m with the conversation so far, which it keeps in the step's checkpoint. logw receives one
// line per iteration.
func NewReviewHandler(m model.Model, logw io.Writer) reins.Handler {
	return func(t reins.TaskContext) error {
		var in Review
		if err := json.Unmarshal(t.Input(), &in); err != nil || len(in.Files) == 0 {
			return t.FailPermanent(fmt.Errorf("the review step's input %s is not a change with files to review", t.Input()))
		}
		var history []model.Message
		if ck, err := t.LoadCheckpoint(); err != nil {
			return err
		} else if ck != nil {
			if err := json.Unmarshal(ck, &history); err != nil {
				return t.FailPermanent(fmt.Errorf("the review step's checkpoint is not a conversation: %w", err))
			}
		}
		file := in.Files[0]
		ask := model.Message{Role: model.RoleUser, Content: fmt.Sprintf("Change %q, file %s:\n%s", in.Change, file.Path, file.Diff)}
		fmt.Fprintf(logw, "review: iteration %d reviews %s with %d earlier messages\n", t.Iteration(), file.Path, len(history))
		resp, err := m.Generate(t, &model.Request{
			Instructions: reviewInstructions,
			Messages:     append(history, ask),
			Seq:          len(history) / 2, // the scripted reviewer's turn: one per reviewed file
		})
		if err != nil {
			if model.IsRetryable(err) {
				return t.Fail(err) // the step's retry policy applies
			}
			return t.FailPermanent(err)
		}
		t.AddUsage(reins.Usage{ModelCalls: 1, InputTokens: int(resp.Usage.InputTokens), OutputTokens: int(resp.Usage.OutputTokens), CostUSD: resp.CostUSD})
		if resp.Proposal.Kind != model.KindAnswer || strings.TrimSpace(resp.Proposal.Text) == "" {
			return t.FailPermanent(fmt.Errorf("the reviewer gave no review of %s (it proposed %s)", file.Path, resp.Proposal.Kind))
		}
		answer := model.Message{Role: model.RoleAssistant, Content: resp.Proposal.Text}
		if err := t.AppendCheckpoint(ask, answer); err != nil {
			return err
		}
		out := Review{Change: in.Change, Files: in.Files[1:], Findings: append(in.Findings, Finding{File: file.Path, Review: resp.Proposal.Text})}
		if len(out.Files) == 0 {
			return t.Complete(out)
		}
		return t.Continue(out) // the engine checks max_iterations, max_duration and loop_delay
	}
}

// Config says what run does.
type Config struct {
	// Change is the run input, a Review; nil means the sample change.
	Change json.RawMessage
	// DataDir holds the embedded server's store; "" means a temporary directory, removed after.
	DataDir string
	// Model, when set (PROVIDER:NAME), is the model of every call: the reviewer's and the
	// report step's. Empty means the scripted models.
	Model string
	// Registry is what opening Model needs besides its name (base URL, API key).
	Registry registry.Options
	// Reviewer, when set, is the reviewer model, whatever Model says.
	Reviewer model.Model
	// Log receives progress lines (nil: discarded).
	Log io.Writer
}

// Run starts an embedded NATS server, the engine and a worker, runs the code review workflow on
// cfg.Change and returns its result.
func Run(ctx context.Context, cfg Config) (*reins.Result, error) {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	def, err := loadWorkflow()
	if err != nil {
		return nil, err
	}
	input := cfg.Change
	if input == nil {
		if input, err = json.Marshal(sampleChange); err != nil {
			return nil, err
		}
	}
	reviewer := cfg.Reviewer
	switch {
	case reviewer != nil:
	case cfg.Model != "":
		if reviewer, err = registry.Open(cfg.Model, cfg.Registry); err != nil {
			return nil, err
		}
	default:
		if reviewer, err = model.NewScripted(reviewerScript, nil); err != nil {
			return nil, err
		}
	}
	// The server, the engine and the worker stop when Run returns, not before: an interrupted
	// run is cancelled first (reins.Run does), which needs them.
	r, err := reins.New(context.WithoutCancel(ctx), reins.Config{DataDir: cfg.DataDir, Model: cfg.Model, Registry: cfg.Registry})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	r.Handle(Handler, NewReviewHandler(reviewer, logw))
	res, err := r.Run(ctx, def, input)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logw, "run %s finished\n", res.RunID)
	return &res, nil
}

// loadWorkflow parses and validates the compiled-in workflow.toml.
func loadWorkflow() (*reins.Definition, error) {
	return reins.ParseWorkflow("examples/codereview/workflow.toml", workflowFile)
}

// printResult prints the run's status, every step with its stop reason, the path and the output.
func printResult(w io.Writer, res *reins.Result) {
	fmt.Fprintf(w, "run %s %s\n", res.RunID, res.Status)
	for _, s := range res.Steps {
		fmt.Fprintf(w, "  %-8s %-9s", s.ID, s.Status)
		if s.StopReason != "" {
			fmt.Fprintf(w, " stop=%s", s.StopReason)
		}
		fmt.Fprintf(w, " iterations=%d attempts=%d", s.Iterations, s.Attempts)
		if s.Usage != nil {
			fmt.Fprintf(w, " tokens=%d", s.Usage.InputTokens+s.Usage.OutputTokens)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "path: %s\n", strings.Join(res.Path, " → "))
	if res.Error != nil {
		fmt.Fprintf(w, "error: %s\n", res.Error.Message)
	}
	var text string
	if json.Unmarshal(res.Output, &text) == nil {
		fmt.Fprintf(w, "report: %s\n", text)
	} else {
		fmt.Fprintf(w, "output: %s\n", res.Output)
	}
}

func main() {
	changeFile := flag.String("change", "", "review the change in this JSON `FILE` ({\"change\": TITLE, \"files\": [{\"path\", \"diff\"}]}) instead of the sample")
	modelName := flag.String("model", "", "run every model call on this model, `PROVIDER:NAME` (openai:NAME, anthropic:NAME), instead of the scripted ones")
	baseURL := flag.String("base-url", "", "with -model: any server speaking the provider's protocol; default $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL")
	dataDir := flag.String("data", "", "keep the embedded server's store in this `DIR` (default: a temporary directory)")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()

	cfg := Config{DataDir: *dataDir, Model: *modelName, Registry: registry.Options{BaseURL: *baseURL}, Log: os.Stderr}
	if *changeFile != "" {
		data, err := os.ReadFile(*changeFile)
		if err != nil {
			fail(err)
		}
		if !json.Valid(data) {
			fail(fmt.Errorf("-change %s is not JSON", *changeFile))
		}
		cfg.Change = data
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, *timeout)
	defer cancelTimeout()
	res, err := Run(ctx, cfg)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("the run did not end within -timeout %s", *timeout)
	}
	if err != nil {
		fail(err)
	}
	printResult(os.Stdout, res)
	if res.Status != reins.RunCompleted {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "codereview:", err)
	os.Exit(1)
}
