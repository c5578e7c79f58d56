//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/protocol"
)

// The examples of examples/, run as their READMEs say: the reins binary on each example's
// workflow.toml (the code review example: its own program), with the scripted models of the
// files and no API key. Each test checks what the example promises: the status, the path, every
// step's stop reason and label, the output, and what a person is asked and answers.

// example is the workflow file of example dir, seen from this package's directory.
func example(dir string) string { return filepath.Join("..", "examples", dir, "workflow.toml") }

// ran is what a command printed and how it exited.
type ran struct {
	code           int
	stdout, stderr string
}

// reinsWant runs reins (reinsExit) and fails the test unless it exits with code.
func reinsWant(t *testing.T, code int, args ...string) ran {
	t.Helper()
	var r ran
	r.code, r.stdout, r.stderr = reinsExit(t, args...)
	if r.code != code {
		t.Fatalf("reins %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	return r
}

// hasLines fails the test unless text has each of want as a whole line (trailing spaces aside).
func hasLines(t *testing.T, what, text string, want ...string) {
	t.Helper()
	ls := strings.Split(text, "\n")
	for i := range ls {
		ls[i] = strings.TrimRight(ls[i], " ")
	}
	for _, w := range want {
		if !slices.Contains(ls, w) {
			t.Errorf("%s has no line %q:\n%s", what, w, text)
		}
	}
}

// shown returns the result of run id as reins runs show --json prints it.
func shown(t *testing.T, data, id string) protocol.Result {
	t.Helper()
	out := reinsWant(t, 0, "runs", "show", id, "--data", data, "--json").stdout
	var res protocol.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("reins runs show --json: %v\n%s", err, out)
	}
	return res
}

// stepsOf maps each step of res to "status stop=STOP label=LABEL".
func stepsOf(res protocol.Result) map[string]string {
	m := map[string]string{}
	for _, s := range res.Steps {
		m[s.ID] = string(s.Status) + " stop=" + s.StopReason + " label=" + s.Label
	}
	return m
}

// checkSteps fails the test unless the steps of res are as want says (steps not named must be
// skipped or pending).
func checkSteps(t *testing.T, res protocol.Result, want map[string]string) {
	t.Helper()
	for id, got := range stepsOf(res) {
		w, ok := want[id]
		if !ok {
			if !strings.HasPrefix(got, "skipped ") && !strings.HasPrefix(got, "pending ") {
				t.Errorf("step %s is %q, want skipped or pending", id, got)
			}
			continue
		}
		if got != w {
			t.Errorf("step %s is %q, want %q", id, got, w)
		}
	}
}

// agentAnswer is the output of an agent step.
type agentAnswer struct {
	StopReason string  `json:"stop_reason"`
	Detail     string  `json:"detail"`
	Answer     *string `json:"answer"`
}

func decodeAnswer(t *testing.T, out json.RawMessage) agentAnswer {
	t.Helper()
	var a agentAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("output %s is not an agent's output: %v", out, err)
	}
	return a
}

// runID reads the run id from the first line of reins run's text result, "run ID STATUS".
func runID(t *testing.T, stdout, status string) string {
	t.Helper()
	first, _, _ := strings.Cut(stdout, "\n")
	f := strings.Fields(first)
	if len(f) != 3 || f[0] != "run" || f[2] != status {
		t.Fatalf("first line %q, want \"run ID %s\"\n%s", first, status, stdout)
	}
	return f[1]
}

// answerCommand finds, in what reins run printed on stderr about a waiting run, the command
// that answers it ("reins approve RUN TARGET --data DIR") and returns its arguments after
// "reins": the hint names the data directory, so the command reaches the run as printed.
var answerCommand = regexp.MustCompile(`: reins (approve \S+ \S+ --data \S+) \| reins deny `)

func approveArgs(t *testing.T, stderr string) []string {
	t.Helper()
	m := answerCommand.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("reins run did not say how to answer the waiting run:\n%s", stderr)
	}
	return strings.Fields(m[1])
}

// TestExampleRefund runs the refund example as the README's quickstart does, and the other
// routes of its stop-reason switch with the other models the file declares.
func TestExampleRefund(t *testing.T) {
	data := t.TempDir()
	input := `{"order_id":"O-104"}`

	t.Run("investigator ends by itself", func(t *testing.T) {
		r := reinsWant(t, 0, "run", example("refund"), "--input", input, "--data", data)
		id := runID(t, r.stdout, "completed")
		hasLines(t, "stdout", r.stdout,
			"  investigate          completed stop=completed iterations=4 attempts=4 label=completed tools=3 tokens=960 cost=$0.0032",
			"  route                completed iterations=1 label=completed",
			"  recommend            completed iterations=1",
			"  human_review         skipped",
			"  stopped              skipped",
			"path: investigate → route → recommend",
			`output: {"stop_reason":"completed","detail":"the model gave a final answer that passed validation","answer":"Recommend a refund: O-104 arrived 4 days late and the policy refunds deliveries more than 3 days late."}`,
		)
		// Live progress, from the run's events (none missed): each iteration with what it spent and
		// each call with what came of it, then each step's end.
		hasLines(t, "progress", r.stderr,
			"investigate          running",
			"investigate          iteration 1 continued tools=1 tokens=138 cost=$0.0005",
			`                       read_order {"order_id":"O-104"} → ok, 71 bytes`,
			"investigate          iteration 2 continued tools=1 tokens=200 cost=$0.0007",
			"investigate          iteration 3 continued tools=1 tokens=262 cost=$0.0008",
			"investigate          iteration 4 completed tokens=360 cost=$0.0012",
			"                       stop: completed: the model gave a final answer that passed validation",
			"investigate          completed iteration 4 tools=3 tokens=960 cost=$0.0032 stop=completed label=completed",
			"route                completed label=completed",
			"recommend            completed",
		)
		res := shown(t, data, id)
		if res.Status != protocol.RunCompleted || !slices.Equal(res.Path, []string{"investigate", "route", "recommend"}) {
			t.Errorf("run %s is %s with path %v", id, res.Status, res.Path)
		}
		checkSteps(t, res, map[string]string{
			"investigate": "completed stop=completed label=completed",
			"route":       "completed stop= label=completed",
			"recommend":   "completed stop= label=",
		})
	})

	t.Run("drafter waits for approval", func(t *testing.T) {
		r := reinsWant(t, 0, "run", example("refund"), "--input", input, "--data", data, "--model", "drafter")
		id := runID(t, r.stdout, "waiting")
		hasLines(t, "stdout", r.stdout, "  investigate          waiting   iterations=3 attempts=3 tools=3 tokens=816 cost=$0.0028")
		want := "waiting: step investigate call call_2_0 draft_refund_recommendation " +
			`{"amount":42.5,"order_id":"O-104","reason":"Delivered 4 days late; policy 4.2 refunds deliveries more than 3 days late in full."}: ` +
			"reins approve " + id + " call_2_0 --data " + data + " | reins deny " + id + " call_2_0 --message M --data " + data
		hasLines(t, "stderr", r.stderr, want)
		res := shown(t, data, id)
		if res.Status != protocol.RunWaiting || len(res.Waiting) != 1 || len(res.Waiting[0].Pending) != 1 || res.Waiting[0].Pending[0].Tool != "draft_refund_recommendation" {
			t.Fatalf("run %s is %s waiting for %+v; want the draft_refund_recommendation call", id, res.Status, res.Waiting)
		}

		r = reinsWant(t, 0, approveArgs(t, r.stderr)...)
		hasLines(t, "stdout", r.stdout,
			"run "+id+" completed",
			"  investigate          completed stop=completed iterations=4 attempts=5 label=completed tools=4 tokens=1270 cost=$0.0043",
			"path: investigate → route → recommend",
		)
		hasLines(t, "stderr", r.stderr, "run "+id+": call call_2_0 (draft_refund_recommendation) of step investigate approved")
		res = shown(t, data, id)
		out := decodeAnswer(t, res.Output)
		if res.Status != protocol.RunCompleted || out.StopReason != "completed" || out.Answer == nil ||
			*out.Answer != "Recommend a full refund of 42.50 USD for O-104 (delivered 4 days late, policy 4.2); the recommendation went to finance as draft D-104." {
			t.Errorf("run %s is %s with output %s; want completed with the drafter's answer", id, res.Status, res.Output)
		}
	})

	t.Run("eager proposes the forbidden refund", func(t *testing.T) {
		r := reinsWant(t, 1, "run", example("refund"), "--input", input, "--data", data, "--model", "eager")
		id := runID(t, r.stdout, "failed")
		hasLines(t, "stdout", r.stdout,
			"path: investigate → route → stopped",
			"error: E_FAIL (step stopped): The investigation stopped without a recommendation (refused).",
		)
		res := shown(t, data, id)
		checkSteps(t, res, map[string]string{
			"investigate": "completed stop=refused label=refused",
			"route":       "completed stop= label=refused",
			"stopped":     "failed stop= label=error",
		})
		if s := res.Steps[0]; s.Usage == nil || s.Usage.ToolCalls != 1 {
			t.Errorf("investigate usage %+v; want the one read_order call: issue_refund never runs", s.Usage)
		}
	})

	t.Run("unsure escalates to a person", func(t *testing.T) {
		r := reinsWant(t, 0, "run", example("refund"), "--input", input, "--data", data, "--model", "unsure")
		id := runID(t, r.stdout, "waiting")
		hasLines(t, "stderr", r.stderr, `waiting: step human_review asks "The investigation of order O-104 needs a person: `+
			`the model escalated: the order total (42.50 USD) differs from the invoice (45.00 USD). Approve the refund?": `+
			"reins approve "+id+" human_review --data "+data+" | reins deny "+id+" human_review --message M --data "+data)
		r = reinsWant(t, 1, "deny", id, "human_review", "--message", "Wait for the invoice correction.", "--data", data)
		hasLines(t, "stdout", r.stdout,
			"path: investigate → route → human_review → declined",
			"error: E_FAIL (step declined): A human declined the refund for order O-104: Wait for the invoice correction.",
		)
		checkSteps(t, shown(t, data, id), map[string]string{
			"investigate":  "completed stop=needs_human label=needs_human",
			"route":        "completed stop= label=needs_human",
			"human_review": "completed stop= label=denied",
			"declined":     "failed stop= label=error",
		})
	})
}

// TestExampleEvaluator: the strict critic asks for a rewrite every time, so the run spends the
// 3 retries of its loop edge and waits for a person, who approves through the CLI.
func TestExampleEvaluator(t *testing.T) {
	data := t.TempDir()
	r := reinsWant(t, 0, "run", example("evaluator"), "--input", `{"product":"Reins 1.0"}`, "--data", data)
	id := runID(t, r.stdout, "waiting")
	loop := "generate → evaluate → generate → evaluate → generate → evaluate → generate → evaluate"
	fourth := "Reins 1.0 is out: agent loops run inside workflows you declare, stay within hard budgets, and record why they stopped."
	hasLines(t, "stdout", r.stdout,
		"  generate             completed iterations=1 attempts=4",
		"  evaluate             completed iterations=1 attempts=4 label=retry",
		"  review               waiting   iterations=1",
		"path: "+loop,
	)
	hasLines(t, "stderr", r.stderr, `waiting: step review asks "The critic still wants changes after 3 rewrites. Publish this draft anyway? `+fourth+`": `+
		"reins approve "+id+" review --data "+data+" | reins deny "+id+" review --message M --data "+data)

	r = reinsWant(t, 0, append(approveArgs(t, r.stderr), "--message", "Good enough.")...)
	want, _ := json.Marshal(fourth)
	hasLines(t, "stdout", r.stdout,
		"run "+id+" completed",
		"  review               completed iterations=1 label=approved",
		"path: "+loop+" → review → publish",
		"output: "+string(want),
	)
	res := shown(t, data, id)
	if res.Status != protocol.RunCompleted || string(res.Output) != string(want) {
		t.Errorf("run %s is %s with output %s; want completed with the fourth draft", id, res.Status, res.Output)
	}
	checkSteps(t, res, map[string]string{
		"generate": "completed stop= label=",
		"evaluate": "completed stop= label=retry",
		"review":   "completed stop= label=approved",
		"publish":  "completed stop= label=",
	})
}

// TestExampleResearch: three agents at once, each with one search, joined into one brief.
func TestExampleResearch(t *testing.T) {
	data := t.TempDir()
	r := reinsWant(t, 0, "run", example("research"), "--input", `{"question":"automated refunds"}`, "--data", data)
	id := runID(t, r.stdout, "completed")
	hasLines(t, "stdout", r.stdout,
		"  research#0           completed stop=completed iterations=2 attempts=2 label=completed tools=1 tokens=272",
		"  research#1           completed stop=completed iterations=2 attempts=2 label=completed tools=1 tokens=278",
		"  research#2           completed stop=completed iterations=2 attempts=2 label=completed tools=1 tokens=291",
		"  combine              completed iterations=1 attempts=1 tokens=262",
		"path: research → combine → done",
		`output: "Brief: demand is real, rivals lack hard budgets, and large refunds need an approval step."`,
	)
	res := shown(t, data, id)
	if res.Status != protocol.RunCompleted {
		t.Errorf("run %s is %s", id, res.Status)
	}
	checkSteps(t, res, map[string]string{
		"research":   "completed stop= label=",
		"research#0": "completed stop=completed label=completed",
		"research#1": "completed stop=completed label=completed",
		"research#2": "completed stop=completed label=completed",
		"combine":    "completed stop= label=",
		"done":       "completed stop= label=",
	})
}

// TestExampleCodeReview runs the code review program as go run ./examples/codereview does.
func TestExampleCodeReview(t *testing.T) {
	bin := buildtest.Program(t, "github.com/reins-run/reins/examples/codereview")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("codereview: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	r := ran{stdout: stdout.String(), stderr: stderr.String()}
	runID(t, r.stdout, "completed")
	hasLines(t, "stdout", r.stdout,
		"  review   completed stop=completed iterations=3 attempts=3 tokens=1025",
		"  report   completed iterations=1 attempts=1 tokens=334",
		"path: review → report",
		"report: 2 findings: an unchecked error in loop/act.go and a missing test for the retry path.",
	)
	hasLines(t, "stderr", r.stderr,
		"review: iteration 1 reviews loop/act.go with 0 earlier messages",
		"review: iteration 2 reviews loop/retry.go with 2 earlier messages",
		"review: iteration 3 reviews docs/loop.md with 4 earlier messages",
	)
}
