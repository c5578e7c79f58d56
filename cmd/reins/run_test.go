package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/internal/wire"
)

// Workflows of the run tests, written into temporary directories.
const (
	// failLLMWorkflow fails: its only model call fails for good.
	failLLMWorkflow = `name = "fail_llm"

[models.broken]
provider = "scripted"
script = [{ error = "the model is down", retryable = false }]

[[steps]]
id = "ask"
type = "llm"
model = "broken"
prompt = "Say something."
`
	// gateWorkflow routes on input.kind: good ends the run completed, bad reaches a fail step,
	// anything else has no route.
	gateWorkflow = `name = "gate"

[[steps]]
id = "route"
type = "switch"
expr = "input.kind"

[[steps]]
id = "ok"
type = "terminate"

[[steps]]
id = "reject"
type = "fail"
message = "kind {{input.kind}} is refused"

[[edges]]
from = "route"
to = "ok"
when = "good"

[[edges]]
from = "route"
to = "reject"
when = "bad"
`
	// taskWorkflow needs a worker registering handler "nobody": without one it waits.
	taskWorkflow = `name = "tasky"

[[steps]]
id = "work"
type = "task"
handler = "nobody"
`
	childWorkflow = `name = "child"

[models.echo]
provider = "scripted"
script = [{ text = "child says hi" }]

[[steps]]
id = "speak"
type = "llm"
model = "echo"
prompt = "Speak."
`
	parentWorkflow = `name = "parent"

[[steps]]
id = "sub"
type = "call"
workflow = "child.toml"
`
)

var (
	refundFile    = exampleFile("refund")
	refinerFile   = exampleFile("evaluator")
	researchFile  = exampleFile("research")
	refundInput   = `{"order_id":"O-104"}`
	refinerInput  = `{"product":"Reins 1.0"}`
	researchInput = `{"question":"automated refunds"}`
)

// resultKeys are the keys of the run result of workflow-file.md ("Run results"); stepKeys and
// optionalStepKeys those of each step.
var (
	resultKeys       = []string{"error", "output", "path", "run_id", "status", "steps"}
	stepResultKeys   = []string{"attempts", "id", "iterations", "label", "status", "stop_reason"}
	optionalStepKeys = []string{"error", "stop_detail", "usage"}
)

// runResult is the run result as the tests read it.
type runResult struct {
	RunID  string          `json:"run_id"`
	Status string          `json:"status"`
	Output json.RawMessage `json:"output"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"error"`
	Steps []stepResult `json:"steps"`
	Path  []string     `json:"path"`
}

type stepResult struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	StopReason string `json:"stop_reason"`
	Iterations int    `json:"iterations"`
	Label      string `json:"label"`
	Attempts   int    `json:"attempts"`
	Error      string `json:"error"`
}

func (r *runResult) step(t *testing.T, id string) stepResult {
	t.Helper()
	for _, s := range r.Steps {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("run %s has no step %s: %+v", r.RunID, id, r.Steps)
	return stepResult{}
}

// decodeResult decodes a run result, checking that it has exactly the keys of the run result
// (docs/reference/workflow-file.md) plus extra.
func decodeResult(t *testing.T, data string, extra ...string) runResult {
	t.Helper()
	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &keys); err != nil {
		t.Fatalf("the result is not a JSON object: %v\n%s", err, data)
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(resultKeys), extra...)))
	if got := slices.Sorted(maps.Keys(keys)); !slices.Equal(got, want) {
		t.Errorf("result keys %v, want %v", got, want)
	}
	var steps []map[string]json.RawMessage
	if err := json.Unmarshal(keys["steps"], &steps); err != nil {
		t.Fatalf("steps: %v", err)
	}
	for _, s := range steps {
		for _, k := range stepResultKeys {
			if _, ok := s[k]; !ok {
				t.Errorf("step %s has no key %q", s["id"], k)
			}
		}
		for k := range s {
			if !slices.Contains(stepResultKeys, k) && !slices.Contains(optionalStepKeys, k) {
				t.Errorf("step %s has the unexpected key %q", s["id"], k)
			}
		}
	}
	var r runResult
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		t.Fatal(err)
	}
	if err := wire.CheckRunID(r.RunID); err != nil { // a fork's id too: the server's own
		t.Errorf("run_id: %v", err)
	}
	return r
}

// cliCtx runs the CLI in-process under ctx.
func cliCtx(ctx context.Context, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// syncBuffer is an output that several goroutines write and the test reads, and that tells
// when some text has appeared in it.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	waiters []waiter
}

type waiter struct {
	text string
	ch   chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	b.waiters = slices.DeleteFunc(b.waiters, func(w waiter) bool {
		if strings.Contains(b.buf.String(), w.text) {
			close(w.ch)
			return true
		}
		return false
	})
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// when returns a channel closed once the output contains text.
func (b *syncBuffer) when(text string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(b.buf.String(), text) {
		close(ch)
	} else {
		b.waiters = append(b.waiters, waiter{text, ch})
	}
	return ch
}

// background runs the CLI in-process in a goroutine; its exit status arrives on the channel.
func background(ctx context.Context, stdout, stderr *syncBuffer, args ...string) <-chan int {
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, stdout, stderr) }()
	return done
}

// awaitText waits until out contains text, failing the test if the command exits first or
// it takes too long.
func awaitText(t *testing.T, out *syncBuffer, text string, done <-chan int, what string) {
	t.Helper()
	select {
	case <-out.when(text):
	case code := <-done:
		t.Fatalf("%s exited %d before printing %q:\n%s", what, code, text, out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not print %q within 30s:\n%s", what, text, out.String())
	}
}

// awaitExit waits for a background command's exit status.
func awaitExit(t *testing.T, done <-chan int, what string) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s", what)
		return -1
	}
}

// listRuns returns `reins runs list --json` on a data directory.
func listRuns(t *testing.T, args ...string) []listEntry {
	t.Helper()
	code, out, errOut := cli(t, append([]string{"runs", "list", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("runs list: exit %d\n%s%s", code, out, errOut)
	}
	var entries []listEntry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("runs list --json: %v\n%s", err, out)
	}
	if entries == nil {
		t.Fatalf("runs list --json printed %q, want an array", out)
	}
	return entries
}

func TestRunRefundInvestigation(t *testing.T) {
	data := t.TempDir()

	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data)
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	ls := lines(out)
	first := strings.Fields(ls[0])
	if len(first) != 3 || first[0] != "run" || first[2] != "completed" {
		t.Fatalf("first line %q, want \"run ID completed\"", ls[0])
	}
	if err := wire.CheckRunID(first[1]); err != nil {
		t.Errorf("first line %q: %v", ls[0], err)
	}
	for _, want := range []string{
		"  investigate          completed stop=completed iterations=4 attempts=4 label=completed tools=3 tokens=960 cost=$0.0032",
		"  route                completed iterations=1 label=completed",
		"  recommend            completed iterations=1",
		"  human_review         skipped",
		"path: investigate → route → recommend",
	} {
		if !slices.ContainsFunc(ls, func(l string) bool { return strings.TrimRight(l, " ") == want }) {
			t.Errorf("stdout has no line %q:\n%s", want, out)
		}
	}
	if last := ls[len(ls)-1]; !strings.HasPrefix(last, `output: {"stop_reason":"completed",`) || !strings.Contains(last, "Recommend a refund: O-104 arrived 4 days late") {
		t.Errorf("last line %q, want the output", last)
	}
	// Progress: the step's start, every iteration of the agent step with what it spent and each
	// call with what came of it, then its end.
	for _, want := range []string{
		"investigate          running\n",
		"investigate          iteration 1 continued tools=1 tokens=138 cost=$0.0005\n" +
			`                       read_order {"order_id":"O-104"} → ok, 71 bytes`,
		"investigate          iteration 3 continued tools=1 tokens=262 cost=$0.0008\n" +
			`                       search_refund_policy {"query":"late delivery"} → ok, 81 bytes`,
		"investigate          iteration 4 completed tokens=360 cost=$0.0012\n" +
			"                       answer: Recommend a refund: O-104 arrived 4 days late",
		"                       stop: completed: the model gave a final answer that passed validation\n" +
			"investigate          completed iteration 4 tools=3 tokens=960 cost=$0.0032 stop=completed label=completed",
		"recommend            completed",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("progress on stderr has no %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(out, "running") {
		t.Errorf("progress went to stdout:\n%s", out)
	}
	checkShowIteration(t, data, first[1])

	code, out, errOut = cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("--json: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if errOut != "" {
		t.Errorf("--quiet printed on stderr:\n%s", errOut)
	}
	r := decodeResult(t, out)
	if r.RunID == first[1] {
		t.Errorf("both runs have id %s", r.RunID)
	}
	if r.Status != "completed" || r.Error != nil {
		t.Errorf("status %q, error %+v; want completed, null", r.Status, r.Error)
	}
	if want := []string{"investigate", "route", "recommend"}; !slices.Equal(r.Path, want) {
		t.Errorf("path %v, want %v", r.Path, want)
	}
	var output struct{ StopReason, Answer string }
	if err := json.Unmarshal(r.Output, &output); err != nil {
		t.Fatalf("output %s: %v", r.Output, err)
	}
	if output.Answer != "Recommend a refund: O-104 arrived 4 days late and the policy refunds deliveries more than 3 days late." {
		t.Errorf("output answer %q", output.Answer)
	}
	if got, want := r.Steps[0], (stepResult{ID: "investigate", Status: "completed", StopReason: "completed", Iterations: 4, Label: "completed", Attempts: 4}); got != want {
		t.Errorf("step investigate %+v, want %+v", got, want)
	}
	if got, want := r.step(t, "route"), (stepResult{ID: "route", Status: "completed", Iterations: 1, Label: "completed"}); got != want {
		t.Errorf("step route %+v, want %+v", got, want)
	}
	if got := r.step(t, "human_review").Status; got != "skipped" {
		t.Errorf("step human_review is %s, want skipped", got)
	}
	var ids []string
	for _, s := range r.Steps {
		ids = append(ids, s.ID)
	}
	if want := []string{"investigate", "route", "recommend", "human_review", "declined", "stopped"}; !slices.Equal(ids, want) {
		t.Errorf("steps %v, want definition order %v", ids, want)
	}

	if n := len(listRuns(t, "--data", data)); n != 2 {
		t.Errorf("the data directory holds %d runs, want 2", n)
	}
}

// TestRunStopsAtApprovalStep: the evaluator example's strict critic spends the 3 retries of
// its loop edge, so reins run stops at the approval step, saying how to answer; reins deny
// then ends the run at its fail step.
func TestRunStopsAtApprovalStep(t *testing.T) {
	data := t.TempDir()
	code, out, errOut := cli(t, "run", refinerFile, "--input", refinerInput, "--data", data, "--json")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	r := decodeResult(t, out, "waiting")
	if r.Status != "waiting" {
		t.Fatalf("status %s, want waiting", r.Status)
	}
	if want := []string{"generate", "evaluate", "generate", "evaluate", "generate", "evaluate", "generate", "evaluate"}; !slices.Equal(r.Path, want) {
		t.Errorf("path %v, want %v", r.Path, want)
	}
	if got, want := r.step(t, "evaluate"), (stepResult{ID: "evaluate", Status: "completed", Iterations: 1, Label: "retry", Attempts: 4}); got != want {
		t.Errorf("step evaluate %+v, want %+v", got, want)
	}
	if got := r.step(t, "review").Status; got != "waiting" {
		t.Errorf("step review is %s, want waiting", got)
	}
	want := "waiting: step review asks \"The critic still wants changes after 3 rewrites. Publish this draft anyway? Reins 1.0 is out: agent loops run inside workflows you declare, stay within hard budgets, and record why they stopped.\": reins approve " +
		r.RunID + " review --data " + data + " | reins deny " + r.RunID + " review --message M --data " + data
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr has no line %q:\n%s", want, errOut)
	}

	code, out, errOut = cli(t, "deny", r.RunID, "review", "--message", "Too long.", "--data", data, "--json")
	if code != exitFailed {
		t.Fatalf("deny: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	r = decodeResult(t, out)
	if r.Status != "failed" || r.Error == nil || r.Error.Step != "rejected" || r.Error.Message != "A human rejected the draft after 3 rewrites: Too long." {
		t.Errorf("after the denial: status %s, error %+v; want failed at rejected", r.Status, r.Error)
	}
	if got := r.step(t, "review").Label; got != "denied" {
		t.Errorf("step review label %q, want denied", got)
	}
}

// agentOutput is the output of an agent step.
type agentOutput struct {
	StopReason string `json:"stop_reason"`
	Detail     string `json:"detail"`
	Answer     string `json:"answer"`
}

// TestRunModelOfTheWorkflow: --model NAME runs every llm and agent step on that model of the
// workflow's [models]. The refund example's drafter proposes a call that needs approval, so the
// run stops there; reins approve continues it to the drafter's answer.
func TestRunModelOfTheWorkflow(t *testing.T) {
	data := t.TempDir()
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--model", "drafter", "--run-id", "drafted")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if first := lines(out)[0]; first != "run drafted waiting" {
		t.Errorf("first line %q, want \"run drafted waiting\"", first)
	}
	want := `waiting: step investigate call call_2_0 draft_refund_recommendation {"amount":42.5,"order_id":"O-104","reason":"Delivered 4 days late; policy 4.2 refunds deliveries more than 3 days late in full."}: reins approve drafted call_2_0 --data ` + data + ` | reins deny drafted call_2_0 --message M --data ` + data
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr has no line %q:\n%s", want, errOut)
	}
	code, out, errOut = cli(t, "approve", "drafted", "call_2_0", "--data", data, "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("approve: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	r := decodeResult(t, out)
	var output agentOutput
	if err := json.Unmarshal(r.Output, &output); err != nil {
		t.Fatalf("output %s: %v", r.Output, err)
	}
	if r.Status != "completed" || output.StopReason != "completed" || !strings.HasPrefix(output.Answer, "Recommend a full refund of 42.50 USD for O-104") {
		t.Errorf("status %s, output %s; want completed with the drafter's answer", r.Status, r.Output)
	}
	if got, want := r.step(t, "investigate"), (stepResult{ID: "investigate", Status: "completed", StopReason: "completed", Iterations: 4, Label: "completed", Attempts: 5}); got != want {
		t.Errorf("step investigate %+v, want %+v (iteration 3 ran again once the call was approved)", got, want)
	}
	// The run's definition names the drafter: a replay gives the same path.
	code, out, errOut = cli(t, "runs", "replay", "drafted", "--data", data)
	if code != exitOK || !strings.Contains(out, "replays the same with its own definition") {
		t.Errorf("replay: exit %d\n%s%s", code, out, errOut)
	}

	for _, tc := range []struct {
		model, want string
	}{
		{"huge", `reins: --model: workflow refund_investigation declares no model "huge" in [models] (it declares: drafter, eager, investigator, unsure)`},
		{"acme:big", `reins: --model: invalid model name "acme:big": unknown provider "acme"`},
		{"gpt-4o-mini", `reins: --model: workflow refund_investigation declares no model "gpt-4o-mini" in [models] (it declares: drafter, eager, investigator, unsure): did you mean openai:gpt-4o-mini?`},
		{"claude-sonnet-4-5", `reins: --model: workflow refund_investigation declares no model "claude-sonnet-4-5" in [models] (it declares: drafter, eager, investigator, unsure): did you mean anthropic:claude-sonnet-4-5?`},
		{"drafer", `reins: --model: workflow refund_investigation declares no model "drafer" in [models] (it declares: drafter, eager, investigator, unsure): did you mean drafter?`},
		{"opneai:gpt-4o-mini", `reins: --model: invalid model name "opneai:gpt-4o-mini": unknown provider "opneai": did you mean openai:gpt-4o-mini?`},
	} {
		code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--model", tc.model)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, tc.want) || len(lines(errOut)) != 1 {
			t.Errorf("--model %s: exit %d, want 2 and one line %q\nstdout:\n%s\nstderr:\n%s", tc.model, code, tc.want, out, errOut)
		}
	}
}

// TestRunRefundOnOpenAIProtocol runs the refund example with --model openai:NAME against a
// local server that speaks Chat Completions, as the README's real-model command does against
// a hosted one: the workflow's tools, policy and routing are unchanged, the model is real.
func TestRunRefundOnOpenAIProtocol(t *testing.T) {
	srv := openaiServer(t)
	defer srv.Close()
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", t.TempDir(), "--json",
		"--model", "openai:gpt-4.1-mini", "--base-url", srv.URL+"/v1", "--api-key", exampleKey)
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	r := decodeResult(t, out)
	if want := []string{"investigate", "route", "recommend"}; r.Status != "completed" || !slices.Equal(r.Path, want) {
		t.Errorf("status %s, path %v; want completed, %v", r.Status, r.Path, want)
	}
	var output agentOutput
	if err := json.Unmarshal(r.Output, &output); err != nil || output.StopReason != "completed" || output.Answer != exampleAnswer {
		t.Errorf("output %s; want the server's answer", r.Output)
	}
	if got := r.step(t, "investigate"); got.Iterations != 2 || got.StopReason != "completed" {
		t.Errorf("step investigate %+v; want completed in 2 iterations (both reads, then the answer)", got)
	}
	if !strings.Contains(errOut, "investigate          completed iteration 2 tools=2 tokens=803 cost=$") {
		t.Errorf("progress has no end of investigate with the server's usage and a price:\n%s", errOut)
	}
}

func TestRunInputFile(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "gate.toml")
	in := filepath.Join(dir, "in.json")
	if err := os.WriteFile(wf, []byte(gateWorkflow), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, []byte("{\n  \"kind\": \"good\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "run", wf, "--input-file", in, "--data", t.TempDir(), "--json")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	r := decodeResult(t, out)
	if compactJSON(r.Output) != `{"kind":"good"}` || !slices.Equal(r.Path, []string{"route", "ok"}) {
		t.Errorf("output %s, path %v; want the input, route → ok", r.Output, r.Path)
	}
}

func TestRunCallStep(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"parent.toml": parentWorkflow, "child.toml": childWorkflow} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := t.TempDir()
	code, out, errOut := cli(t, "run", filepath.Join(dir, "parent.toml"), "--data", data, "--json")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	r := decodeResult(t, out)
	if compactJSON(r.Output) != `"child says hi"` {
		t.Errorf("output %s, want the child's", r.Output)
	}
	// The sub-run is not listed: only runs started by clients are.
	runs := listRuns(t, "--data", data)
	if len(runs) != 1 || runs[0].RunID != r.RunID {
		t.Errorf("runs list: %+v, want only %s", runs, r.RunID)
	}
}

func TestRunFailed(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"fail_llm.toml": failLLMWorkflow, "gate.toml": gateWorkflow}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := t.TempDir()
	for _, tc := range []struct {
		name, file, input string
		code, step, msg   string
		path              []string
		failed            string // the step that failed, if one did
	}{
		{"model error", "fail_llm.toml", "", "E_STEP_FAILED", "ask", "the model is down", []string{"ask"}, "ask"},
		{"fail step", "gate.toml", `{"kind":"bad"}`, "E_FAIL", "reject", "kind bad is refused", []string{"route", "reject"}, "reject"},
		{"no route", "gate.toml", `{"kind":"neither"}`, "E_NO_ROUTE", "route", `step route has no edge for label "neither"`, []string{"route"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"run", filepath.Join(dir, tc.file), "--data", data}
			if tc.input != "" {
				args = append(args, "--input", tc.input)
			}
			code, out, errOut := cli(t, args...)
			if code != exitFailed {
				t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			assertNoStackTrace(t, errOut)
			if !strings.Contains(out, " failed\n") || !strings.Contains(out, "error: "+tc.code+" (step "+tc.step+"): ") || !strings.Contains(out, tc.msg) {
				t.Errorf("stdout does not report %s at step %s (%s):\n%s", tc.code, tc.step, tc.msg, out)
			}

			code, out, errOut = cli(t, append(args, "--json", "--quiet")...)
			if code != exitFailed || out == "" {
				t.Fatalf("--json: exit %d, want 1 with the result\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			r := decodeResult(t, out)
			if r.Status != "failed" || r.Error == nil || r.Error.Code != tc.code || r.Error.Step != tc.step || !strings.Contains(r.Error.Message, tc.msg) {
				t.Errorf("status %q, error %+v; want failed with %s at %s", r.Status, r.Error, tc.code, tc.step)
			}
			if compactJSON(r.Output) != "null" {
				t.Errorf("output %s, want null", r.Output)
			}
			if !slices.Equal(r.Path, tc.path) {
				t.Errorf("path %v, want %v", r.Path, tc.path)
			}
			if tc.failed != "" {
				if s := r.step(t, tc.failed); s.Status != "failed" || s.Label != "error" || s.Error == "" {
					t.Errorf("step %s: %+v, want failed with label error and an error", tc.failed, s)
				}
			}
		})
	}
}

// TestRunUsageErrors checks the exit status and the one sentence of every refusal of reins run,
// and that none of them started a run.
func TestRunUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"bad.toml": severalProblems, "task.toml": taskWorkflow} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bad, task := filepath.Join(dir, "bad.toml"), filepath.Join(dir, "task.toml")
	missing := filepath.Join(dir, "missing.toml")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // in stderr
	}{
		{"invalid workflow", []string{bad}, exitFailed, []string{
			bad + ":2: E_BAD_DURATION deadline", "E_CYCLE", "E_DANGLING_EDGE", "reins: " + bad + " is not a valid workflow",
		}},
		{"missing file", []string{missing}, exitFailed, []string{missing, "is not a valid workflow"}},
		{"input not JSON", []string{refundFile, "--input", "not json"}, exitUsage, []string{"reins: --input is not JSON: "}},
		{"input with text after", []string{refundFile, "--input", `{"a":1} x`}, exitUsage, []string{"reins: --input is not one JSON value: text follows it"}},
		{"input nested too deep", []string{refundFile, "--input", strings.Repeat("[", 9999) + strings.Repeat("]", 9999)}, exitUsage, []string{"reins: --input nests deeper than 256 levels (byte 257)"}},
		{"input not UTF-8", []string{refundFile, "--input", "\"caf\xe9\""}, exitUsage, []string{"reins: --input is not valid UTF-8 (byte 4)"}},
		{"input file not JSON", []string{refundFile, "--input-file", bad}, exitUsage, []string{"reins: --input-file " + bad + " is not JSON"}},
		{"input file missing", []string{refundFile, "--input-file", missing}, exitUsage, []string{"reins: --input-file: ", missing}},
		{"no input", []string{refinerFile}, exitUsage, []string{
			"reins: workflow draft_refiner reads the run input (prompt of step generate uses input.product) but no --input was given",
		}},
		{"input and input file", []string{refundFile, "--input", refundInput, "--input-file", missing}, exitUsage, []string{"reins: give --input or --input-file, not both"}},
		{"detach without nats", []string{refundFile, "--input", refundInput, "--detach"}, exitUsage, []string{"reins: --detach needs a server, --nats URL or --server URL"}},
		{"listen with nats", []string{refundFile, "--input", refundInput, "--nats", "nats://127.0.0.1:1", "--listen", "127.0.0.1:0"}, exitUsage, []string{"reins: --listen applies to the embedded server"}},
		{"bad run id", []string{refundFile, "--input", refundInput, "--run-id", "a.b"}, exitUsage, []string{`reins: --run-id: run id "a.b": the character '.'`}},
		{"a trigger's run id", []string{refundFile, "--input", refundInput, "--run-id", "t-x"}, exitUsage, []string{`reins: --run-id: run id "t-x" is the server's to give: an id that begins with "t-" names a run of a trigger, which only the server starts, and a client may not choose one`}},
		{"a fork's run id", []string{refundFile, "--input", refundInput, "--run-id", "r-fork-2"}, exitUsage, []string{`reins: --run-id: run id "r-fork-2" is the server's to give: an id that ends in "-fork-N" names a fork`}},
		{"task step without listen", []string{task}, exitFailed, []string{
			"reins: step work of workflow tasky runs handler nobody, which no worker can serve on a private embedded server: give --listen",
		}},
		{"nats unreachable", []string{refundFile, "--input", refundInput, "--nats", "nats://127.0.0.1:1"}, exitFailed, []string{
			"reins: natsbox: cannot connect to NATS at nats://127.0.0.1:1",
		}},
		{"no file", nil, exitUsage, []string{"accepts 1 arg(s)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			code, out, errOut := cli(t, append(append([]string{"run"}, tc.args...), "--data", data)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			if out != "" {
				t.Errorf("stdout is not empty:\n%s", out)
			}
			assertNoStackTrace(t, errOut)
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr has no %q:\n%s", w, errOut)
				}
			}
			if tc.code == exitUsage {
				if ls := lines(errOut); len(ls) != 1 {
					t.Errorf("a usage error prints one line, got %d:\n%s", len(ls), errOut)
				}
			}
			if runs := listRuns(t, "--data", data); len(runs) != 0 {
				t.Errorf("a refused run was started: %+v", runs)
			}
		})
	}
}

func TestRunDuplicateRunID(t *testing.T) {
	data := t.TempDir()
	args := []string{"run", refundFile, "--input", refundInput, "--data", data, "--run-id", "refund-1", "--quiet"}
	if code, out, errOut := cli(t, args...); code != exitOK || !strings.HasPrefix(out, "run refund-1 completed\n") {
		t.Fatalf("exit %d, want 0 and run refund-1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut := cli(t, args...)
	if code != exitFailed || !strings.Contains(errOut, "run refund-1: a run with this id already exists") {
		t.Fatalf("exit %d, want 1 naming the run\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestRunInterrupt interrupts reins run (main cancels the context on SIGINT) while its run
// waits for a worker: the run is cancelled, the command prints its result and exits 1.
func TestRunInterrupt(t *testing.T) {
	wf := writeWorkflow(t, "task.toml", taskWorkflow)
	data := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := background(ctx, &stdout, &stderr, "run", wf, "--data", data, "--listen", "127.0.0.1:0")
	awaitText(t, &stderr, "work                 running", done, "reins run")
	if !strings.Contains(stderr.String(), "workers can connect to nats://127.0.0.1:") {
		t.Errorf("stderr does not say where workers connect:\n%s", stderr.String())
	}
	cancel()
	if code := awaitExit(t, done, "reins run"); code != exitFailed {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, " cancelled\n") || !strings.Contains(out, "error: E_CANCELLED: interrupted") {
		t.Errorf("stdout does not report the cancelled run:\n%s", out)
	}
	if !strings.Contains(stderr.String(), "interrupted: cancelling run ") {
		t.Errorf("stderr does not say the run is cancelled:\n%s", stderr.String())
	}
	runs := listRuns(t, "--data", data, "--status", "cancelled")
	if len(runs) != 1 || runs[0].Error == nil || runs[0].Error.Code != "E_CANCELLED" {
		t.Errorf("cancelled runs: %+v, want one with E_CANCELLED", runs)
	}
}

// --record and --price reach the built-in workers of reins run: the model's exchanges are
// recorded into the cassette (without the key), and the run's cost is at the given price.
func TestRunRecordAndPrice(t *testing.T) {
	srv := openaiServer(t)
	data := t.TempDir()
	cassette := filepath.Join(t.TempDir(), "run.json")
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--json", "--quiet",
		"--model", "openai:gpt-4.1-mini", "--base-url", srv.URL+"/v1", "--api-key", exampleKey,
		"--record", cassette, "--price", "gpt-4.1-mini=1,2")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var res struct {
		Steps []struct {
			ID    string `json:"id"`
			Usage *struct {
				CostUSD float64 `json:"cost_usd"`
			} `json:"usage"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	// 710 input tokens at $1/M and 93 output tokens at $2/M.
	if s := res.Steps[0]; s.ID != "investigate" || s.Usage == nil || math.Abs(s.Usage.CostUSD-0.000896) > 1e-9 {
		t.Errorf("investigate cost %+v, want $0.000896 at the --price", s.Usage)
	}
	recorded, err := os.ReadFile(cassette)
	if err != nil {
		t.Fatalf("no cassette: %v", err)
	}
	if n := bytes.Count(recorded, []byte(`"request"`)); n != 2 || bytes.Contains(recorded, []byte(exampleKey)) {
		t.Errorf("the cassette holds %d requests (want 2), key present: %v", n, bytes.Contains(recorded, []byte(exampleKey)))
	}
	code, _, errOut = cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--record", cassette)
	if code != exitUsage || !strings.Contains(errOut, "--record records the exchanges of one model: give it with --model PROVIDER:NAME") {
		t.Errorf("--record without --model: exit %d, %q", code, errOut)
	}
}

// Inputs and outputs of 2 MB (and 20 MB in the full suite, buildtest.Heavy), larger than a message: they go by reference through
// the values' store (the record keeps references), and the run's output is the whole input.
// Past the client's bound (64 MiB) an input is refused with one sentence, before anything is
// stored.
func TestRunHugeInputs(t *testing.T) {
	data := t.TempDir()
	wf := filepath.Join(t.TempDir(), "echo.toml")
	if err := os.WriteFile(wf, []byte(`name = "echo"

[[steps]]
id = "rest"
type = "sleep"
duration = "1ms"

[[steps]]
id = "done"
type = "terminate"

[[edges]]
from = "rest"
to = "done"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	sizes := []int{2 << 20}
	if buildtest.Heavy { // most of the test's 20 s: the full suite's
		sizes = append(sizes, 20<<20)
	}
	for _, n := range sizes {
		file := filepath.Join(t.TempDir(), "input.json")
		input := `{"order_id":"O-104","notes":"` + strings.Repeat("x", n) + `"}`
		if err := os.WriteFile(file, []byte(input), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := cli(t, "run", wf, "--input-file", file, "--data", data, "--json", "--quiet")
		var res struct {
			Status string          `json:"status"`
			Output json.RawMessage `json:"output"`
		}
		var compact bytes.Buffer
		err := json.Unmarshal([]byte(out), &res)
		if err == nil {
			err = json.Compact(&compact, res.Output) // --json indents
		}
		if err != nil || code != 0 || res.Status != "completed" || compact.String() != input {
			t.Errorf("%d bytes: exit %d, status %q, output of %d bytes (want %d), stderr %q, %v", n, code, res.Status, len(res.Output), len(input), errOut, err)
		}
	}
	if runs := listRuns(t, "--data", data); len(runs) != len(sizes) {
		t.Errorf("runs: %+v, want the %d", runs, len(sizes))
	}
	file := filepath.Join(t.TempDir(), "input.json")
	if err := os.WriteFile(file, []byte(strconv.Quote(strings.Repeat("x", wire.DefaultMaxValue))), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, "run", wf, "--input-file", file, "--data", data, "--quiet")
	want := fmt.Sprintf("reins: --input-file %s is %d bytes, more than the %d bytes allowed", file, wire.DefaultMaxValue+2, wire.DefaultMaxValue)
	if code != exitUsage || !strings.Contains(errOut, want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("64 MiB: exit %d, stderr %q; want one line saying %q", code, errOut, want)
	}
	if runs := listRuns(t, "--data", data); len(runs) != len(sizes) {
		t.Errorf("runs after a refused input: %d, want %d", len(runs), len(sizes))
	}
}

// An agent whose conversation outgrows a message: 41 iterations with a 30 KB tool result each
// (1.2 MB of conversation). Its checkpoint grows by each iteration's messages, so no write
// nears the message limit, and the run completes.
func TestRunLongAgentConversation(t *testing.T) {
	var turns []string
	for i := range 40 {
		turns = append(turns, fmt.Sprintf(`{ tool_calls = [{ name = "read_page", arguments = { page = %d } }] }`, i))
	}
	turns = append(turns, `{ text = "Read every page." }`)
	page := strings.Repeat("lorem ipsum ", 30<<10/12)
	wf := fmt.Sprintf(`name = "long_reader"

[models.m]
provider = "scripted"
script = [
%s,
]

[tools.read_page]
description = "Read one page."
input_schema = { type = "object", properties = { page = { type = "integer" } }, required = ["page"] }
mock = [{ output = { text = %q } }]

[[steps]]
id = "read"
type = "agent"
model = "m"
goal = "Read every page."
tools = ["read_page"]
budget = { max_iterations = 45, max_tool_calls = 45 }
`, strings.Join(turns, ",\n"), page)
	file := writeWorkflow(t, "long.toml", wf)
	code, out, errOut := cli(t, "run", file, "--data", t.TempDir(), "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%.2000s\nstderr:\n%.2000s", code, out, errOut)
	}
	r := decodeResult(t, out)
	if s := r.step(t, "read"); s.Status != "completed" || s.Iterations != 41 || s.StopReason != "completed" {
		t.Errorf("step read %+v, want completed after 41 iterations", s)
	}
}

// A run that needs a handler no worker serves is warned about when it is submitted: it would
// wait for one (here until its deadline).
func TestRunWarnsUnserved(t *testing.T) {
	wf := filepath.Join(t.TempDir(), "nobody.toml")
	if err := os.WriteFile(wf, []byte(`name = "nobody"
deadline = "1s"

[[steps]]
id = "work"
type = "task"
handler = "nobody"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// With --listen a worker could connect; none does.
	code, _, errOut := cli(t, "run", wf, "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--quiet")
	want := `reins: warning: no worker serves the handler "nobody" that step work of workflow nobody needs: its runs wait until one does`
	if code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, stderr %q; want a failure and the line %q", code, errOut, want)
	}
	if strings.Contains(errOut, "reins-llm") || strings.Contains(errOut, "reins-agent") {
		t.Errorf("the built-in handlers, which reins run serves, were warned about: %q", errOut)
	}
}

// checkShowIteration reads back what iterations of the refund investigation did: reins runs
// show --iteration prints the proposal, each call with its validation and result, the usage,
// and as JSON every field of the record.
func checkShowIteration(t *testing.T, data, id string) {
	t.Helper()
	code, out, errOut := cli(t, "runs", "show", id, "--data", data, "--iteration", "investigate:1")
	if code != exitOK {
		t.Fatalf("runs show --iteration: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"run " + id + " step investigate iteration 1: 1 answer(s)",
		"continued: activation 1 attempt 1 at ",
		"  model: 1 call(s), 120 in / 18 out tokens, $0.0005",
		"  proposes tool_calls",
		`  call call_0_0 read_order {"order_id":"O-104"}`,
		"    validation: accept",
		"ok, 71 bytes",
		`    result: {"currency":"USD","order_id":"O-104","status":"delivered","total":42.5}`,
		"  usage: tools=1 tokens=138 cost=$0.0005",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("runs show --iteration investigate:1 has no %q:\n%s", want, out)
		}
	}
	code, out, _ = cli(t, "runs", "show", id, "--data", data, "--iteration", "investigate:4", "--json", "--full")
	var parts []client.IterationPart
	if err := json.Unmarshal([]byte(out), &parts); code != exitOK || err != nil {
		t.Fatalf("runs show --iteration --json: exit %d, %v\n%s", code, err, out)
	}
	if len(parts) != 1 || parts[0].Event.Record == nil || parts[0].Event.Record.StopReason != "completed" ||
		!strings.Contains(parts[0].Event.Record.Proposal.Text, "Recommend a refund") || len(parts[0].Event.Record.Events) == 0 {
		t.Errorf("iteration 4 as JSON: %s", out)
	}
	if code, _, errOut := cli(t, "runs", "show", id, "--data", data, "--iteration", "investigate:9"); code != exitFailed || !strings.Contains(errOut, "no answer to iteration 9 of step investigate") {
		t.Errorf("an iteration the step did not reach: exit %d, %s", code, errOut)
	}
	if code, _, errOut := cli(t, "runs", "show", id, "--data", data, "--iteration", "investigate"); code != exitUsage || !strings.Contains(errOut, "is not STEP:N") {
		t.Errorf("--iteration without a number: exit %d, %s", code, errOut)
	}
}
