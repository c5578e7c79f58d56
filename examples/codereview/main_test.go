package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/model"
)

// recorder wraps a reviewer model and keeps every request it was sent.
type recorder struct {
	mu   sync.Mutex
	reqs []model.Request
	next model.Model
}

func (r *recorder) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, model.Request{Instructions: req.Instructions, Messages: slices.Clone(req.Messages), Seq: req.Seq})
	r.mu.Unlock()
	return r.next.Generate(ctx, req)
}

func (r *recorder) requests() []model.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

func step(t *testing.T, res *reins.Result, id string) reins.StepResult {
	t.Helper()
	for _, s := range res.Steps {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("the result has no step %s: %+v", id, res.Steps)
	return reins.StepResult{}
}

// TestSampleReview runs the example as go run ./examples/codereview does: the sample change,
// the scripted reviewer and reporter. The review loop takes one iteration per file, each with
// the whole conversation so far, read back from the step's checkpoint.
func TestSampleReview(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scripted, err := model.NewScripted(reviewerScript, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{next: scripted}
	var log bytes.Buffer
	res, err := Run(ctx, Config{DataDir: t.TempDir(), Reviewer: rec, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != reins.RunCompleted || res.Error != nil {
		t.Fatalf("run %s, error %+v; want completed", res.Status, res.Error)
	}
	if want := []string{"review", "report"}; !slices.Equal(res.Path, want) {
		t.Errorf("path %v, want %v", res.Path, want)
	}
	review := step(t, res, "review")
	if review.Status != reins.StepCompleted || review.StopReason != "completed" || review.Label != "completed" || review.Iterations != 3 || review.Attempts != 3 {
		t.Errorf("step review %+v; want completed after 3 iterations, one per file", review)
	}
	if u := review.Usage; u == nil || u.ModelCalls != 3 || u.InputTokens != 210+330+420 || u.OutputTokens != 26+22+17 {
		t.Errorf("step review usage %+v; want the 3 reviewer calls", u)
	}
	if s := step(t, res, "report"); s.Status != reins.StepCompleted || s.Iterations != 1 {
		t.Errorf("step report %+v; want completed", s)
	}
	var report string
	if err := json.Unmarshal(res.Output, &report); err != nil || report != "2 findings: an unchecked error in loop/act.go and a missing test for the retry path." {
		t.Errorf("output %s; want the reporter's report", res.Output)
	}

	// Iteration i sends the 2(i-1) messages of the checkpoint and the question about file i.
	reqs := rec.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d reviewer calls, want 3", len(reqs))
	}
	for i, req := range reqs {
		if len(req.Messages) != 2*i+1 || req.Seq != i {
			t.Fatalf("call %d: %d messages, seq %d; want %d, %d", i+1, len(req.Messages), req.Seq, 2*i+1, i)
		}
		ask := req.Messages[2*i]
		if ask.Role != model.RoleUser || !strings.Contains(ask.Content, "file "+sampleChange.Files[i].Path+":\n"+sampleChange.Files[i].Diff) {
			t.Errorf("call %d asks %q; want the diff of %s", i+1, ask.Content, sampleChange.Files[i].Path)
		}
		if i > 0 {
			// The earlier turns, as the previous call saw them, then its answer.
			prev := reqs[i-1].Messages
			if !reflect.DeepEqual(req.Messages[:len(prev)], prev) {
				t.Errorf("call %d does not continue the conversation of call %d", i+1, i)
			}
			answer := req.Messages[len(prev)]
			if answer.Role != model.RoleAssistant || answer.Content != *reviewerScript[i-1].Text {
				t.Errorf("call %d: message %d is %+v; want the answer to call %d", i+1, len(prev), answer, i)
			}
		}
	}
	for _, want := range []string{
		"review: iteration 1 reviews loop/act.go with 0 earlier messages",
		"review: iteration 2 reviews loop/retry.go with 2 earlier messages",
		"review: iteration 3 reviews docs/loop.md with 4 earlier messages",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the progress has no line %q:\n%s", want, log.String())
		}
	}

	var out bytes.Buffer
	printResult(&out, res)
	for _, want := range []string{
		"run " + res.RunID + " completed\n",
		"  review   completed stop=completed iterations=3 attempts=3 tokens=1025\n",
		"  report   completed iterations=1 attempts=1 tokens=334\n",
		"path: review → report\n",
		"report: 2 findings: an unchecked error in loop/act.go and a missing test for the retry path.\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the printed result has no %q:\n%s", want, out.String())
		}
	}
}

// TestReviewStopsAtMaxIterations: a change of 12 files meets the step's bound of 10
// iterations. The engine ends the loop with stop reason max_iterations after 10 reviewer calls,
// and the report step, behind an unconditional edge, still runs.
func TestReviewStopsAtMaxIterations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	change := Review{Change: "PR 43: rename everything"}
	for i := range 12 {
		change.Files = append(change.Files, File{Path: fmt.Sprintf("f%02d.go", i+1), Diff: "-old\n+new"})
	}
	input, err := json.Marshal(change)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{next: model.Func(func(_ context.Context, req *model.Request) (*model.Response, error) {
		return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "No finding."}, Usage: model.Usage{InputTokens: 10, OutputTokens: 2}}, nil
	})}
	res, err := Run(ctx, Config{DataDir: t.TempDir(), Change: input, Reviewer: rec})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != reins.RunCompleted {
		t.Fatalf("run %s, error %+v; want completed", res.Status, res.Error)
	}
	review := step(t, res, "review")
	if review.StopReason != "max_iterations" || review.Label != "max_iterations" || review.Iterations != 10 {
		t.Errorf("step review %+v; want stopped by max_iterations at iteration 10", review)
	}
	if n := len(rec.requests()); n != 10 {
		t.Errorf("%d reviewer calls, want 10", n)
	}
	if want := []string{"review", "report"}; !slices.Equal(res.Path, want) {
		t.Errorf("path %v, want %v", res.Path, want)
	}
}

// TestBadChange: a change with no files fails the review step for good, naming its input.
func TestBadChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{DataDir: t.TempDir(), Change: json.RawMessage(`{"change":"empty"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != reins.RunFailed || res.Error == nil || !strings.Contains(res.Error.Message, `the review step's input {"change":"empty"} is not a change with files to review`) {
		t.Fatalf("run %s, error %+v; want failed on the input", res.Status, res.Error)
	}
	if s := step(t, res, "review"); s.Attempts != 1 {
		t.Errorf("step review %+v; want one attempt (the failure is permanent)", s)
	}
}
