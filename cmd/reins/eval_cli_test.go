package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const evalsDir = "../../evals"

// cli runs the command in-process and returns its exit status, stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func lines(s string) []string {
	return strings.Split(strings.TrimRight(s, "\n"), "\n")
}

// caseIDs reads the case_id of every fixture file in dir, in path order, without package eval.
func caseIDs(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	var ids []string
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			CaseID string `json:"case_id"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		ids = append(ids, f.CaseID)
	}
	if len(ids) == 0 {
		t.Fatalf("no fixtures in %s", dir)
	}
	return ids
}

// resultLines returns the PASS and FAIL lines of the output, in order.
func resultLines(out string) []string {
	var rs []string
	for _, l := range lines(out) {
		if strings.HasPrefix(l, "PASS ") || strings.HasPrefix(l, "FAIL ") {
			rs = append(rs, l)
		}
	}
	return rs
}

func writeFixture(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// assertNoStackTrace fails if stderr looks like a Go panic rather than one clear sentence.
func assertNoStackTrace(t *testing.T, stderr string) {
	t.Helper()
	for _, bad := range []string{"goroutine ", "panic", ".go:", "runtime."} {
		if strings.Contains(stderr, bad) {
			t.Errorf("stderr contains %q, which looks like a stack trace:\n%s", bad, stderr)
		}
	}
}

func TestEvalShipped(t *testing.T) {
	ids := caseIDs(t, evalsDir)
	code, out, errOut := cli(t, "eval", evalsDir)
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if errOut != "" {
		t.Errorf("stderr is not empty:\n%s", errOut)
	}
	var want []string
	for _, id := range ids {
		want = append(want, "PASS "+id)
	}
	if got := resultLines(out); !slices.Equal(got, want) {
		t.Errorf("result lines:\n%s\nwant (one per case, in path order):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	ls := lines(out)
	if last, want := ls[len(ls)-1], fmt.Sprintf("%d passed, 0 failed", len(ids)); last != want {
		t.Errorf("last line %q, want %q", last, want)
	}
	for _, metric := range []string{"cases", "passed", "correct stop reason", "completion rate", "invalid-action rate",
		"repeated-action rate", "tool calls", "tokens", "cost", "p50 latency"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(metric) + `\s{2,}\S`).MatchString(out) {
			t.Errorf("the metrics table has no %q row:\n%s", metric, out)
		}
	}
}

func TestEvalSingleFile(t *testing.T) {
	code, out, _ := cli(t, "eval", filepath.Join(evalsDir, "refund_forbidden_tool.json"))
	ls := lines(out)
	if code != 0 || ls[0] != "PASS refund_forbidden_tool" || ls[len(ls)-1] != "1 passed, 0 failed" {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

func TestEvalFailingFixture(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir, "a_ok.json", `{"case_id": "ok", "goal": "g", "model": [{"text": "done"}], "expected": {"stop_reason": "completed"}}`)
	writeFixture(t, dir, "b_wrong.json", `{"case_id": "wrong", "goal": "g", "model": [{"text": "done"}], "expected": {"stop_reason": "refused"}}`)
	code, out, errOut := cli(t, "eval", dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	rs := resultLines(out)
	if len(rs) != 2 || rs[0] != "PASS ok" || !strings.HasPrefix(rs[1], "FAIL wrong: stop_reason: expected refused, got completed") {
		t.Errorf("result lines %q, want PASS ok and FAIL wrong: stop_reason: expected refused, got completed ...", rs)
	}
	ls := lines(out)
	if last := ls[len(ls)-1]; last != "1 passed, 1 failed" {
		t.Errorf("last line %q, want \"1 passed, 1 failed\"", last)
	}
	assertNoStackTrace(t, errOut)
}

func TestEvalInvalidFixture(t *testing.T) {
	for _, tc := range []struct {
		name, fixture, key string
	}{
		{"unknown key", `{"case_id": "x", "goal": "g", "model": [], "policy": {"alow": []}, "expected": {"stop_reason": "completed"}}`, "policy.alow"},
		{"wrong type", `{"case_id": "x", "goal": "g", "model": [], "budget": {"max_iterations": "3"}, "expected": {"stop_reason": "completed"}}`, "budget.max_iterations"},
		{"bad turn", `{"case_id": "x", "goal": "g", "model": [{"text": "a"}, {}], "expected": {"stop_reason": "completed"}}`, "model[1]"},
		{"syntax", "{\n\"case_id\": \"x\",,\n}", "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFixture(t, dir, "a_ok.json", `{"case_id": "ok", "goal": "g", "model": [{"text": "done"}], "expected": {"stop_reason": "completed"}}`)
			bad := writeFixture(t, dir, "b_bad.json", tc.fixture)
			code, out, errOut := cli(t, "eval", dir)
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if !strings.Contains(errOut, bad) || !strings.Contains(errOut, tc.key) {
				t.Errorf("stderr %q should name the file %s and %s", errOut, bad, tc.key)
			}
			if n := len(lines(errOut)); n != 1 {
				t.Errorf("stderr has %d lines, want one sentence:\n%s", n, errOut)
			}
			assertNoStackTrace(t, errOut)
			if rs := resultLines(out); len(rs) != 0 {
				t.Errorf("cases ran although a fixture is invalid: %q", rs)
			}
		})
	}
}

// TestEvalSkipsOtherJSON: a *.json in a fixtures directory that has none of a fixture's keys
// is skipped with a note naming it, not run; one with some of them is a fixture whose missing
// key is an error; a file named on the command line is always read as a fixture.
func TestEvalSkipsOtherJSON(t *testing.T) {
	const ok = `{"case_id": "ok", "goal": "g", "model": [{"text": "done"}], "expected": {"stop_reason": "completed"}}`
	const note = "reins: note: skipped %s: it is not an eval fixture (it has none of the keys every fixture has: case_id, goal, model, expected)\n"
	t.Run("skipped", func(t *testing.T) {
		dir := t.TempDir()
		writeFixture(t, dir, "a_ok.json", ok)
		pkg := writeFixture(t, dir, "package.json", `{"name": "evals", "private": true}`)
		report := writeFixture(t, dir, "report.json", `[{"case_id": "ok", "passed": true}]`)
		code, out, errOut := cli(t, "eval", dir)
		if code != exitOK || errOut != fmt.Sprintf(note, pkg)+fmt.Sprintf(note, report) {
			t.Errorf("exit %d, stderr:\n%s\nwant 0 and a note for %s and %s", code, errOut, pkg, report)
		}
		if rs := resultLines(out); len(rs) != 1 || !strings.HasPrefix(rs[0], "PASS ok") {
			t.Errorf("cases %q, want only ok", rs)
		}
	})
	t.Run("a fixture that lacks a key", func(t *testing.T) {
		dir := t.TempDir()
		writeFixture(t, dir, "a_ok.json", ok)
		bad := writeFixture(t, dir, "b_half.json", `{"case_id": "half", "goal": "g", "model": [{"text": "done"}]}`)
		code, out, errOut := cli(t, "eval", dir)
		if code != exitInvalid || !strings.Contains(errOut, bad) || !strings.Contains(errOut, "expected") || len(lines(errOut)) != 1 {
			t.Errorf("exit %d, stderr %q; want 2 naming %s and its missing key expected", code, errOut, bad)
		}
		if rs := resultLines(out); len(rs) != 0 {
			t.Errorf("cases ran although a fixture is invalid: %q", rs)
		}
	})
	t.Run("named on the command line", func(t *testing.T) {
		pkg := writeFixture(t, t.TempDir(), "package.json", `{"name": "evals"}`)
		code, _, errOut := cli(t, "eval", pkg)
		if code != exitInvalid || !strings.Contains(errOut, pkg) {
			t.Errorf("exit %d, stderr %q; want 2 naming %s", code, errOut, pkg)
		}
	})
	t.Run("nothing but other JSON", func(t *testing.T) {
		dir := t.TempDir()
		writeFixture(t, dir, "package.json", `{"name": "evals"}`)
		code, _, errOut := cli(t, "eval", dir)
		if code != exitInvalid || !strings.Contains(errOut, "no *.json fixture files found") {
			t.Errorf("exit %d, stderr %q; want 2 saying no fixture was found", code, errOut)
		}
	})
}

func TestEvalK(t *testing.T) {
	ids := caseIDs(t, evalsDir)
	code, out, errOut := cli(t, "eval", "-k", "2", evalsDir)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var want []string
	for _, id := range ids {
		want = append(want, "PASS "+id+" (run 1 of 2)", "PASS "+id+" (run 2 of 2)")
	}
	if got := resultLines(out); !slices.Equal(got, want) {
		t.Errorf("result lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^passed\s{2,}%d \(pass\^2\)$`, len(ids)))
	if !row.MatchString(out) {
		t.Errorf("no metrics row \"passed  %d (pass^2)\":\n%s", len(ids), out)
	}
	runs := regexp.MustCompile(fmt.Sprintf(`(?m)^correct stop reason\s{2,}100\.0%% \(%d of %d runs\)$`, 2*len(ids), 2*len(ids)))
	if !runs.MatchString(out) {
		t.Errorf("no metrics row counting %d runs:\n%s", 2*len(ids), out)
	}
	ls := lines(out)
	if last, want := ls[len(ls)-1], fmt.Sprintf("%d passed, 0 failed", len(ids)); last != want {
		t.Errorf("last line %q, want %q", last, want)
	}
}

func TestEvalJSON(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir, "a.json", `{"case_id": "a", "goal": "g", "model": [{"text": "done"}], "expected": {"stop_reason": "completed"}}`)
	writeFixture(t, dir, "b.json", `{"case_id": "b", "goal": "g", "model": [{"refuse": "no"}], "expected": {"stop_reason": "completed"}}`)
	writeFixture(t, dir, "c.json", `{"case_id": "c", "goal": "g", "model": [{"escalate": "help"}], "expected": {"stop_reason": "needs_human"}}`)
	report := filepath.Join(t.TempDir(), "report.json")
	code, out, errOut := cli(t, "eval", "--json", report, "-k", "2", dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (case b fails)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("--json file: %v", err)
	}
	var rep struct {
		Passed int `json:"passed"`
		Failed int `json:"failed"`
		Cases  []struct {
			CaseID string `json:"case_id"`
			Passed bool   `json:"passed"`
			Runs   []struct {
				Run     int    `json:"run"`
				Passed  bool   `json:"passed"`
				Failure string `json:"failure"`
			} `json:"runs"`
		} `json:"cases"`
		Metrics struct {
			Cases  int `json:"cases"`
			Passed int `json:"passed"`
			K      int `json:"k"`
			Runs   int `json:"runs"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("--json file is not valid JSON: %v\n%s", err, data)
	}

	// The JSON agrees with the text output, line by line and in total.
	var textPassed, textFailed int
	if _, err := fmt.Sscanf(lines(out)[len(lines(out))-1], "%d passed, %d failed", &textPassed, &textFailed); err != nil {
		t.Fatalf("last line: %v\n%s", err, out)
	}
	if rep.Passed != textPassed || rep.Failed != textFailed || rep.Passed+rep.Failed != len(rep.Cases) {
		t.Errorf("JSON says %d passed, %d failed of %d cases; text says %d passed, %d failed", rep.Passed, rep.Failed, len(rep.Cases), textPassed, textFailed)
	}
	if textPassed != 2 || textFailed != 1 {
		t.Errorf("text says %d passed, %d failed; want 2 and 1", textPassed, textFailed)
	}
	var fromJSON []string
	for _, c := range rep.Cases {
		for _, r := range c.Runs {
			line := fmt.Sprintf("PASS %s (run %d of 2)", c.CaseID, r.Run)
			if !r.Passed {
				line = fmt.Sprintf("FAIL %s (run %d of 2): %s", c.CaseID, r.Run, r.Failure)
			}
			fromJSON = append(fromJSON, line)
		}
		allPassed := true
		for _, r := range c.Runs {
			allPassed = allPassed && r.Passed
		}
		if c.Passed != allPassed || len(c.Runs) != 2 {
			t.Errorf("case %s: passed %v with %d runs", c.CaseID, c.Passed, len(c.Runs))
		}
	}
	if got := resultLines(out); !slices.Equal(got, fromJSON) {
		t.Errorf("text lines:\n%s\nlines rebuilt from JSON:\n%s", strings.Join(got, "\n"), strings.Join(fromJSON, "\n"))
	}
	if rep.Metrics.Cases != 3 || rep.Metrics.Passed != 2 || rep.Metrics.K != 2 || rep.Metrics.Runs != 6 {
		t.Errorf("metrics %+v", rep.Metrics)
	}
}

func TestEvalJSONUnwritable(t *testing.T) {
	report := filepath.Join(t.TempDir(), "no-such-dir", "report.json")
	code, _, errOut := cli(t, "eval", "--json", report, filepath.Join(evalsDir, "model_refuses.json"))
	if code == 0 || !strings.Contains(errOut, "--json") {
		t.Fatalf("exit %d, stderr %q; want a failure naming --json", code, errOut)
	}
	assertNoStackTrace(t, errOut)
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // substring of stderr
	}{
		{"unknown flag", []string{"eval", "--bogus", evalsDir}, "unknown flag: --bogus"},
		{"unknown shorthand", []string{"eval", "-z", evalsDir}, "unknown shorthand flag"},
		{"no paths", []string{"eval"}, "give at least one PATH of fixtures, or --replay RUN"},
		{"k zero", []string{"eval", "-k", "0", evalsDir}, "-k must be at least 1"},
		{"k not a number", []string{"eval", "-k", "two", evalsDir}, "invalid argument"},
		{"unknown command", []string{"evaluate", evalsDir}, "unknown command"},
		{"missing path", []string{"eval", filepath.Join(evalsDir, "no_such_fixture.json")}, "no_such_fixture.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, tc.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q, want it to contain %q", errOut, tc.want)
			}
			assertNoStackTrace(t, errOut)
		})
	}
}

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Usage:", "eval"}},
		{[]string{"eval", "--help"}, []string{"reins eval PATH...", "-k", "--json", "Exit status"}},
		{[]string{"help", "eval"}, []string{"reins eval PATH..."}},
	} {
		code, out, errOut := cli(t, tc.args...)
		if code != 0 {
			t.Errorf("%v: exit %d, want 0\nstderr:\n%s", tc.args, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: help does not mention %q:\n%s", tc.args, w, out)
			}
		}
		if rs := resultLines(out); len(rs) != 0 {
			t.Errorf("%v: --help ran cases: %q", tc.args, rs)
		}
	}
}
