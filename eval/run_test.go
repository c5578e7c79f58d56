package eval_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reins-run/reins/eval"
	"github.com/reins-run/reins/fixture"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/trace"
)

const shipped = "../evals"

func intp(n int) *int { return &n }

func TestCheck(t *testing.T) {
	// One result that meets every expectation below unless a case changes it.
	base := func() loop.Result {
		return loop.Result{
			StopReason: loop.Completed,
			Answer:     "The refund is justified.",
			State: &loop.State{
				Iteration: 3,
				ToolCalls: 2,
				Executed:  map[string]int{"read_order": 1, "read_policy": 1},
			},
			Trace: []trace.Event{{Type: trace.IterationStart}, {Type: trace.ToolResult}, {Type: trace.Stop}},
		}
	}
	for _, tc := range []struct {
		name     string
		expected fixture.Expected
		result   func(*loop.Result)
		want     []string // substrings of the failure, in order; nil means it passes
	}{
		{
			name: "all hold",
			expected: fixture.Expected{
				StopReason: loop.Completed, AnswerContains: "justified",
				ToolCalls: &fixture.Range{Min: intp(2), Max: intp(2)}, Iterations: &fixture.Range{Min: intp(1), Max: intp(3)},
				ForbiddenTools: []string{"issue_refund"}, CalledTools: []string{"read_order", "read_policy"},
				RequiresTraceEvents: []trace.Type{trace.ToolResult, trace.Stop},
			},
		},
		{name: "only the stop reason", expected: fixture.Expected{StopReason: loop.Completed}},
		{name: "open ranges", expected: fixture.Expected{StopReason: loop.Completed, ToolCalls: &fixture.Range{Min: intp(0)}, Iterations: &fixture.Range{Max: intp(3)}}},
		{
			name:     "stop_reason",
			expected: fixture.Expected{StopReason: loop.Refused},
			want:     []string{"stop_reason: ", "expected refused", "got completed"},
		},
		{
			name:     "stop_reason is checked first",
			expected: fixture.Expected{StopReason: loop.NeedsHuman, AnswerContains: "nowhere", CalledTools: []string{"ghost"}},
			result:   func(r *loop.Result) { r.StopReason = loop.MaxIterations; r.Detail = "the iteration budget ran out" },
			want:     []string{"stop_reason: ", "expected needs_human", "got max_iterations", "the iteration budget ran out"},
		},
		{
			name:     "answer_contains",
			expected: fixture.Expected{StopReason: loop.Completed, AnswerContains: "rejected"},
			want:     []string{"answer_contains: ", `"rejected"`, `"The refund is justified."`},
		},
		{
			name:     "answer_contains is case-sensitive",
			expected: fixture.Expected{StopReason: loop.Completed, AnswerContains: "refund IS"},
			want:     []string{"answer_contains: ", `"refund IS"`, `"The refund is justified."`},
		},
		{
			name:     "tool_calls min",
			expected: fixture.Expected{StopReason: loop.Completed, ToolCalls: &fixture.Range{Min: intp(3)}},
			want:     []string{"tool_calls: ", "at least 3", "got 2"},
		},
		{
			name:     "tool_calls max",
			expected: fixture.Expected{StopReason: loop.Completed, ToolCalls: &fixture.Range{Min: intp(0), Max: intp(1)}},
			want:     []string{"tool_calls: ", "at most 1", "got 2"},
		},
		{
			name:     "iterations min",
			expected: fixture.Expected{StopReason: loop.Completed, Iterations: &fixture.Range{Min: intp(4), Max: intp(9)}},
			want:     []string{"iterations: ", "at least 4", "got 3"},
		},
		{
			name:     "iterations max",
			expected: fixture.Expected{StopReason: loop.Completed, Iterations: &fixture.Range{Max: intp(2)}},
			want:     []string{"iterations: ", "at most 2", "got 3"},
		},
		{
			name:     "forbidden_tools",
			expected: fixture.Expected{StopReason: loop.Completed, ForbiddenTools: []string{"issue_refund", "read_order"}},
			result:   func(r *loop.Result) { r.State.Executed["read_order"] = 2 },
			want:     []string{"forbidden_tools: ", "read_order never to execute", "2 time(s)"},
		},
		{
			name:     "called_tools",
			expected: fixture.Expected{StopReason: loop.Completed, CalledTools: []string{"read_order", "search_policy"}},
			want:     []string{"called_tools: ", "search_policy to execute at least once", "never did"},
		},
		{
			name:     "called_tools counts executions, not proposals",
			expected: fixture.Expected{StopReason: loop.Completed, CalledTools: []string{"read_order"}},
			result:   func(r *loop.Result) { r.State.Executed["read_order"] = 0 },
			want:     []string{"called_tools: ", "read_order"},
		},
		{
			name:     "requires_trace_events",
			expected: fixture.Expected{StopReason: loop.Completed, RequiresTraceEvents: []trace.Type{trace.Stop, trace.Approval}},
			want:     []string{"requires_trace_events: ", "approval", "found none"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := base()
			if tc.result != nil {
				tc.result(&res)
			}
			got := eval.Check(&tc.expected, res)
			if tc.want == nil {
				if got != "" {
					t.Fatalf("Check = %q, want \"\"", got)
				}
				return
			}
			if !strings.HasPrefix(got, tc.want[0]) {
				t.Fatalf("Check = %q, want it to start with %q", got, tc.want[0])
			}
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("Check = %q, want it to contain %q (expected before actual)", got, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// loadDir loads every fixture under dir.
func loadDir(t *testing.T, dir string) []*fixture.Fixture {
	t.Helper()
	fixtures, err := eval.LoadAll([]string{dir})
	if err != nil {
		t.Fatalf("LoadAll(%s): %v", dir, err)
	}
	return fixtures
}

func TestRunSuiteShipped(t *testing.T) {
	fixtures := loadDir(t, shipped)
	files, err := filepath.Glob(filepath.Join(shipped, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(fixtures) != len(files) || len(files) == 0 {
		t.Fatalf("loaded %d fixtures from %d files", len(fixtures), len(files))
	}
	for _, k := range []int{1, 3} {
		var lines int
		rep, err := eval.RunSuite(context.Background(), fixtures, k, eval.Options{}, func(f *fixture.Fixture, rr eval.RunResult) {
			lines++
			if !rr.Passed {
				t.Errorf("k=%d: %s (%s) run %d failed: %s", k, f.CaseID, f.File, rr.Run, rr.Failure)
			}
			if rr.StopReason != f.Expected.StopReason {
				t.Errorf("k=%d: %s stopped with %s, want %s", k, f.CaseID, rr.StopReason, f.Expected.StopReason)
			}
		})
		if err != nil {
			t.Fatalf("k=%d: RunSuite: %v", k, err)
		}
		n := len(fixtures)
		m := rep.Metrics
		if rep.Passed != n || rep.Failed != 0 || m.Passed != n || m.Cases != n || len(rep.Cases) != n {
			t.Errorf("k=%d: passed %d failed %d (metrics %d of %d), want %d of %d", k, rep.Passed, rep.Failed, m.Passed, m.Cases, n, n)
		}
		if m.K != k || m.Runs != k*n || lines != k*n {
			t.Errorf("k=%d: metrics K %d Runs %d, %d onRun calls; want K %d, %d runs", k, m.K, m.Runs, lines, k, k*n)
		}
		if m.CorrectStopReason != m.Runs {
			t.Errorf("k=%d: correct stop reason in %d of %d runs", k, m.CorrectStopReason, m.Runs)
		}
		for i, cr := range rep.Cases {
			if cr.CaseID != fixtures[i].CaseID || cr.File != fixtures[i].File || len(cr.Runs) != k || !cr.Passed {
				t.Errorf("k=%d: case %d = %s (%s), %d runs, passed %v", k, i, cr.CaseID, cr.File, len(cr.Runs), cr.Passed)
			}
			for j, rr := range cr.Runs {
				if rr.Run != j+1 {
					t.Errorf("k=%d: %s run %d numbered %d", k, cr.CaseID, j+1, rr.Run)
				}
			}
		}
	}
}

// Every run of a scripted fixture is the same run: on a virtual clock, the k runs of a case must
// produce identical numbers and traces (apart from the run id, which idempotency keys start with).
func TestRunSuiteDeterministic(t *testing.T) {
	fixtures := loadDir(t, shipped)
	rep, err := eval.RunSuite(context.Background(), fixtures, 2, eval.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cr := range rep.Cases {
		a, b := cr.Runs[0], cr.Runs[1]
		if a.StopReason != b.StopReason || a.Detail != b.Detail || a.Answer != b.Answer || a.Iterations != b.Iterations ||
			a.ToolCalls != b.ToolCalls || a.Tokens != b.Tokens || a.CostUSD != b.CostUSD || a.Latency != b.Latency ||
			a.Proposals != b.Proposals || a.InvalidActions != b.InvalidActions || a.RepeatedProposals != b.RepeatedProposals {
			t.Errorf("%s: run 1 %+v differs from run 2 %+v", cr.CaseID, a, b)
		}
		if len(a.Result.Trace) != len(b.Result.Trace) {
			t.Errorf("%s: traces of %d and %d events", cr.CaseID, len(a.Result.Trace), len(b.Result.Trace))
			continue
		}
		for i := range a.Result.Trace {
			ea, eb := a.Result.Trace[i], b.Result.Trace[i]
			ea.RunID, eb.RunID = "", ""
			ea.Key = strings.TrimPrefix(ea.Key, a.Result.State.RunID)
			eb.Key = strings.TrimPrefix(eb.Key, b.Result.State.RunID)
			if ea.Type == trace.ToolResult {
				// Concurrent calls' latencies add up on the virtual clock in whatever order the
				// goroutines run, so one call's measured duration is not deterministic; the
				// run's total latency (compared above) is.
				ea.Duration, eb.Duration = 0, 0
			}
			if ea != eb {
				t.Errorf("%s: event %d differs: %+v vs %+v", cr.CaseID, i, ea, eb)
				break
			}
		}
	}
}

func TestShippedEvalsCoverEveryStopReason(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(shipped, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	covered := map[loop.StopReason][]string{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Read the file independently of fixture.Load: only the expected stop reason matters here.
		var f struct {
			Expected struct {
				StopReason loop.StopReason `json:"stop_reason"`
			} `json:"expected"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if !slices.Contains(loop.StopReasons, f.Expected.StopReason) {
			t.Errorf("%s expects %q, which is not a stop reason", file, f.Expected.StopReason)
		}
		covered[f.Expected.StopReason] = append(covered[f.Expected.StopReason], filepath.Base(file))
	}
	for _, sr := range loop.StopReasons {
		if len(covered[sr]) == 0 {
			t.Errorf("no shipped fixture expects stop reason %s", sr)
		}
	}
	if len(loop.StopReasons) != 14 {
		t.Errorf("loop.StopReasons has %d entries; the reference lists 12 of the loop, then context_exhausted and output_truncated", len(loop.StopReasons))
	}
}

func TestPassK(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a_good.json", `{"case_id": "good", "goal": "g", "model": [{"text": "ok"}], "expected": {"stop_reason": "completed"}}`)
	// The script answers, but the fixture expects a refusal: every run fails.
	writeFile(t, dir, "b_wrong.json", `{"case_id": "wrong", "goal": "g", "model": [{"text": "ok"}], "expected": {"stop_reason": "refused"}}`)
	fixtures := loadDir(t, dir)

	rep, err := eval.RunSuite(context.Background(), fixtures, 3, eval.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed != 1 || rep.Failed != 1 || rep.Metrics.Passed != 1 || rep.Metrics.Runs != 6 || rep.Metrics.CorrectStopReason != 3 {
		t.Fatalf("passed %d failed %d, metrics %+v; want 1 passed, 1 failed, 6 runs, 3 with the right stop reason", rep.Passed, rep.Failed, rep.Metrics)
	}
	good, wrong := rep.Cases[0], rep.Cases[1]
	if !good.Passed || wrong.Passed {
		t.Fatalf("good passed=%v, wrong passed=%v", good.Passed, wrong.Passed)
	}
	for _, rr := range wrong.Runs {
		if rr.Passed || !strings.HasPrefix(rr.Failure, "stop_reason: expected refused, got completed") {
			t.Errorf("wrong run %d: passed %v, failure %q", rr.Run, rr.Passed, rr.Failure)
		}
	}
}

// A case passes only if all k runs pass: a model that misbehaves in one run of three fails the
// case even though the other two runs pass.
func TestPassKOneFlakyRun(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "flaky.json", `{"case_id": "flaky", "goal": "g", "model": [], "expected": {"stop_reason": "completed", "answer_contains": "yes"}}`)
	fixtures := loadDir(t, dir)
	var calls atomic.Int32
	flaky := model.Func(func(_ context.Context, req *model.Request) (*model.Response, error) {
		text := "yes"
		if calls.Add(1) == 2 { // the only model call of run 2
			text = "no"
		}
		return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: text}}, nil
	})
	var lines []string
	rep, err := eval.RunSuite(context.Background(), fixtures, 3, eval.Options{Model: flaky}, func(f *fixture.Fixture, rr eval.RunResult) {
		lines = append(lines, eval.Line(f.CaseID, rr, 3))
	})
	if err != nil {
		t.Fatal(err)
	}
	cr := rep.Cases[0]
	var passed []bool
	for _, rr := range cr.Runs {
		passed = append(passed, rr.Passed)
	}
	if !slices.Equal(passed, []bool{true, false, true}) {
		t.Fatalf("runs passed %v, want [true false true]", passed)
	}
	if cr.Passed || rep.Passed != 0 || rep.Failed != 1 || rep.Metrics.Passed != 0 {
		t.Fatalf("case passed=%v, report %d passed %d failed; pass^3 must fail the case", cr.Passed, rep.Passed, rep.Failed)
	}
	if rep.Metrics.CorrectStopReason != 3 || rep.Metrics.CompletionRate != 1 {
		t.Errorf("metrics %+v: every run completed with the expected stop reason", rep.Metrics)
	}
	want := []string{
		"PASS flaky (run 1 of 3)",
		`FAIL flaky (run 2 of 3): answer_contains: expected the answer to contain "yes", got "no"`,
		"PASS flaky (run 3 of 3)",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestLine(t *testing.T) {
	pass := eval.RunResult{Run: 2, Passed: true}
	fail := eval.RunResult{Run: 1, Failure: "stop_reason: expected completed, got refused (x)"}
	for _, tc := range []struct {
		rr   eval.RunResult
		k    int
		want string
	}{
		{pass, 1, "PASS case"},
		{pass, 3, "PASS case (run 2 of 3)"},
		{fail, 1, "FAIL case: stop_reason: expected completed, got refused (x)"},
		{fail, 2, "FAIL case (run 1 of 2): stop_reason: expected completed, got refused (x)"},
	} {
		if got := eval.Line("case", tc.rr, tc.k); got != tc.want {
			t.Errorf("Line(k=%d) = %q, want %q", tc.k, got, tc.want)
		}
	}
}

// metricsFixtures are four cases whose numbers are worked out by hand in TestMetrics. The file
// names order them so that the slowest runs first: a p50 taken without sorting would be wrong.
var metricsFixtures = map[string]string{
	// Completes at once: 1 proposal, 15 tokens, $0.01, 100ms of model latency.
	"2.json": `{"case_id": "answers", "goal": "g",
		"model": [{"text": "done", "usage": {"input_tokens": 10, "output_tokens": 5}, "cost_usd": 0.01, "latency": "100ms"}],
		"expected": {"stop_reason": "completed", "iterations": {"min": 1, "max": 1}}}`,
	// One invalid call (missing required id), then an answer: 2 proposals, 1 invalid, 20 tokens,
	// 600ms, no executed call.
	"3.json": `{"case_id": "invalid_then_answers", "goal": "g",
		"tools": [{"name": "lookup", "input_schema": {"type": "object", "required": ["id"]}}],
		"model": [
			{"tool_calls": [{"name": "lookup", "arguments": {}}], "usage": {"input_tokens": 20}, "latency": "300ms"},
			{"text": "x", "latency": "300ms"}
		],
		"expected": {"stop_reason": "completed", "tool_calls": {"max": 0}}}`,
	// The same call twice (1 repeated proposal of 2), both executed, then an escalation (not a
	// proposal): 2 tool calls, $0.02, 1s per model call (3) and per tool call (2), 5s in all.
	"1.json": `{"case_id": "repeats_then_escalates", "goal": "g",
		"tools": [{"name": "ping"}],
		"model": [
			{"tool_calls": [{"name": "ping"}], "cost_usd": 0.02, "latency": "1s"},
			{"tool_calls": [{"name": "ping", "arguments": {}}], "latency": "1s"},
			{"escalate": "stuck", "latency": "1s"}
		],
		"mocked_tools": {"ping": [{"output": "pong", "latency": "1s"}]},
		"expected": {"stop_reason": "needs_human", "tool_calls": {"min": 2, "max": 2}}}`,
	// Completes, with the expected stop reason, but the answer is wrong: the case fails.
	// 1 proposal, 200 tokens, 600ms.
	"4.json": `{"case_id": "wrong_answer", "goal": "g",
		"model": [{"text": "blue", "usage": {"input_tokens": 100, "output_tokens": 100}, "latency": "600ms"}],
		"expected": {"stop_reason": "completed", "answer_contains": "red"}}`,
}

func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	for name, content := range metricsFixtures {
		writeFile(t, dir, name, content)
	}
	fixtures := loadDir(t, dir)

	type runNumbers struct {
		stop                                           loop.StopReason
		passed                                         bool
		iterations, toolCalls, proposals, invalid, rep int
		tokens                                         int64
		cost                                           float64
		latency                                        time.Duration
	}
	wantRuns := map[string]runNumbers{
		"repeats_then_escalates": {loop.NeedsHuman, true, 3, 2, 2, 0, 1, 0, 0.02, 5 * time.Second},
		"answers":                {loop.Completed, true, 1, 0, 1, 0, 0, 15, 0.01, 100 * time.Millisecond},
		"invalid_then_answers":   {loop.Completed, true, 2, 0, 2, 1, 0, 20, 0, 600 * time.Millisecond},
		"wrong_answer":           {loop.Completed, false, 1, 0, 1, 0, 0, 200, 0, 600 * time.Millisecond},
	}

	for _, k := range []int{1, 2} {
		rep, err := eval.RunSuite(context.Background(), fixtures, k, eval.Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Cases) != len(wantRuns) {
			t.Fatalf("k=%d: %d cases", k, len(rep.Cases))
		}
		for _, cr := range rep.Cases {
			w, ok := wantRuns[cr.CaseID]
			if !ok {
				t.Fatalf("unexpected case %s", cr.CaseID)
			}
			for _, rr := range cr.Runs {
				got := runNumbers{rr.StopReason, rr.Passed, rr.Iterations, rr.ToolCalls, rr.Proposals, rr.InvalidActions, rr.RepeatedProposals, rr.Tokens, rr.CostUSD, rr.Latency}
				if got != w {
					t.Errorf("k=%d %s run %d:\n got %+v\nwant %+v (failure %q)", k, cr.CaseID, rr.Run, got, w, rr.Failure)
				}
			}
		}

		m := rep.Metrics
		fk := float64(k)
		// Runs: 4k. Completed: all but repeats_then_escalates. Proposals 2+1+2+1 = 6 per round, 1
		// invalid, 1 repeated. Latencies 5s, 100ms, 600ms, 600ms (each k times): sorted, the median
		// is 600ms whichever middle value is taken.
		if m.Cases != 4 || m.Passed != 3 || m.K != k || m.Runs != 4*k || m.CorrectStopReason != 4*k {
			t.Errorf("k=%d: counts %+v", k, m)
		}
		if rep.Passed != 3 || rep.Failed != 1 {
			t.Errorf("k=%d: %d passed, %d failed; want 3 and 1", k, rep.Passed, rep.Failed)
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"completion rate", m.CompletionRate, 3.0 / 4},
			{"invalid-action rate", m.InvalidActionRate, 1.0 / 6},
			{"repeated-action rate", m.RepeatedActionRate, 1.0 / 6},
			{"tool calls", float64(m.ToolCalls), 2 * fk},
			{"tokens", float64(m.Tokens), (15 + 20 + 200) * fk},
			{"cost", m.CostUSD, 0.03 * fk},
			{"p50 latency ms", m.P50Latency, 600},
		} {
			if math.Abs(c.got-c.want) > 1e-9 {
				t.Errorf("k=%d: %s = %v, want %v", k, c.name, c.got, c.want)
			}
		}

		var out bytes.Buffer
		if err := rep.WriteSummary(&out); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		for _, row := range [][2]string{
			{"cases", "4"},
			{"passed", fmt.Sprintf("3 (pass^%d)", k)},
			{"completion rate", "75.0%"},
			{"invalid-action rate", "16.7%"},
			{"repeated-action rate", "16.7%"},
			{"tokens", map[int]string{1: "235", 2: "470"}[k]},
			{"cost", map[int]string{1: "$0.0300", 2: "$0.0600"}[k]},
			{"p50 latency", "600.0ms"},
		} {
			if !containsRow(text, row[0], row[1]) {
				t.Errorf("k=%d: summary has no row %q = %q:\n%s", k, row[0], row[1], text)
			}
		}
		lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
		if last := lines[len(lines)-1]; last != "3 passed, 1 failed" {
			t.Errorf("k=%d: last line %q, want \"3 passed, 1 failed\"", k, last)
		}
	}
}

// containsRow reports whether the table has a row whose first column is name and whose value is
// value (columns are separated by two or more spaces).
func containsRow(table, name, value string) bool {
	for _, line := range strings.Split(table, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if ok && strings.HasPrefix(rest, "  ") && strings.TrimSpace(rest) == value {
			return true
		}
	}
	return false
}

func TestMetricsEmptyAndZeroProposals(t *testing.T) {
	// Only an escalation: no proposals at all, so the rates must be 0, not NaN.
	dir := t.TempDir()
	writeFile(t, dir, "e.json", `{"case_id": "e", "goal": "g", "model": [{"escalate": "why"}], "expected": {"stop_reason": "needs_human"}}`)
	rep, err := eval.RunSuite(context.Background(), loadDir(t, dir), 1, eval.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Metrics
	if m.InvalidActionRate != 0 || m.RepeatedActionRate != 0 || m.CompletionRate != 0 || m.Runs != 1 {
		t.Fatalf("metrics %+v", m)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatalf("the report does not marshal: %v", err)
	}

	rep, err = eval.RunSuite(context.Background(), nil, 0, eval.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Metrics.Runs != 0 || rep.Metrics.K != 1 || rep.Passed != 0 || rep.Failed != 0 {
		t.Fatalf("empty suite: %+v", rep)
	}
}

func TestWriteJSON(t *testing.T) {
	dir := t.TempDir()
	for name, content := range metricsFixtures {
		writeFile(t, dir, name, content)
	}
	rep, err := eval.RunSuite(context.Background(), loadDir(t, dir), 2, eval.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Passed, Failed int
		Cases          []struct {
			CaseID string `json:"case_id"`
			Passed bool
			Runs   []struct {
				Run        int
				Passed     bool
				StopReason string `json:"stop_reason"`
				LatencyNS  int64  `json:"latency_ns"`
			}
		}
		Metrics struct {
			Runs       int
			P50Latency float64 `json:"p50_latency_ms"`
		}
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("WriteJSON wrote invalid JSON: %v\n%s", err, buf.String())
	}
	if got.Passed != 3 || got.Failed != 1 || len(got.Cases) != 4 || got.Metrics.Runs != 8 || got.Metrics.P50Latency != 600 {
		t.Fatalf("decoded %+v", got)
	}
	c := got.Cases[0] // 1.json
	if c.CaseID != "repeats_then_escalates" || len(c.Runs) != 2 || c.Runs[1].Run != 2 || c.Runs[1].StopReason != "needs_human" || c.Runs[1].LatencyNS != int64(5*time.Second) {
		t.Fatalf("case 2 decoded as %+v", c)
	}
}

func TestRunCaseCancelAfter(t *testing.T) {
	// cancel_after is measured on the virtual clock. The script: a call after 2s of model latency
	// (the tool takes no time), then a second call after 2s more, then an answer.
	const script = `"tools": [{"name": "t"}],
		"model": [{"tool_calls": [{"name": "t"}], "latency": "2s"}, {"tool_calls": [{"name": "t", "arguments": {"n": 2}}], "latency": "2s"}, {"text": "done"}]`
	for _, tc := range []struct {
		name, after string
		stop        loop.StopReason
		toolCalls   int
		latency     time.Duration
	}{
		// Cancelled during the second model call: its proposal is never acted on.
		{"during the second call", "2500ms", loop.Cancelled, 1, 2500 * time.Millisecond},
		// Exactly when the first call would return: that call is interrupted.
		{"at the end of the first call", "2s", loop.Cancelled, 0, 2 * time.Second},
		// At zero the clock is already there: nothing runs.
		{"at once", "0s", loop.Cancelled, 0, 0},
		// Later than the whole run: the run completes undisturbed.
		{"after the run", "1h", loop.Completed, 2, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "cancel.json", `{"case_id": "cancel", "goal": "g", "cancel_after": "`+tc.after+`", `+script+`,
				"expected": {"stop_reason": "`+string(tc.stop)+`"}}`)
			f := loadDir(t, dir)[0]
			rr, err := eval.RunCase(context.Background(), f, 1, eval.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rr.StopReason != tc.stop || rr.ToolCalls != tc.toolCalls || rr.Latency != tc.latency || !rr.Passed {
				t.Fatalf("RunCase = stop %s (%s), %d tool calls, %v; want %s, %d tool calls, %v",
					rr.StopReason, rr.Detail, rr.ToolCalls, rr.Latency, tc.stop, tc.toolCalls, tc.latency)
			}
		})
	}
}
