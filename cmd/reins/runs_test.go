package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRunsOnDataDir reads the runs that reins run left in a data directory: list, show and
// cancel, with the server embedded again for each command.
func TestRunsOnDataDir(t *testing.T) {
	data := t.TempDir()
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	done := decodeResult(t, out)
	gate := writeWorkflow(t, "gate.toml", gateWorkflow)
	code, out, errOut = cli(t, "run", gate, "--input", `{"kind":"bad"}`, "--data", data, "--json", "--quiet")
	if code != exitFailed {
		t.Fatalf("run gate: exit %d, want 1\n%s%s", code, out, errOut)
	}
	failed := decodeResult(t, out)

	t.Run("list", func(t *testing.T) {
		runs := listRuns(t, "--data", data)
		if len(runs) != 2 {
			t.Fatalf("%d runs, want 2: %+v", len(runs), runs)
		}
		if r := runs[0]; r.RunID != done.RunID || r.Workflow != "refund_investigation" || r.Status != "completed" || r.Error != nil || r.StartedAt.IsZero() {
			t.Errorf("first run %+v, want %s of refund_investigation, completed", r, done.RunID)
		}
		if r := runs[1]; r.RunID != failed.RunID || r.Workflow != "gate" || r.Status != "failed" || r.Error == nil || r.Error.Code != "E_FAIL" {
			t.Errorf("second run %+v, want %s of gate, failed with E_FAIL", r, failed.RunID)
		}
		if runs[1].StartedAt.Before(runs[0].StartedAt) {
			t.Errorf("runs are not oldest first: %+v", runs)
		}
		for status, want := range map[string][]string{
			"completed": {done.RunID}, "failed": {failed.RunID}, "cancelled": nil, "running": nil,
		} {
			var got []string
			for _, r := range listRuns(t, "--data", data, "--status", status) {
				got = append(got, r.RunID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("--status %s: %v, want %v", status, got, want)
			}
		}

		code, out, errOut := cli(t, "runs", "list", "--data", data)
		if code != exitOK {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		ls := lines(out)
		if len(ls) != 3 || strings.Join(strings.Fields(ls[0]), " ") != "RUN WORKFLOW STATUS STARTED ERROR" {
			t.Fatalf("text list:\n%s", out)
		}
		if f := strings.Fields(ls[1]); f[0] != done.RunID || f[1] != "refund_investigation" || f[2] != "completed" {
			t.Errorf("line %q", ls[1])
		}
		if !strings.HasPrefix(ls[2], failed.RunID) || !strings.Contains(ls[2], "E_FAIL (step reject): kind bad is refused") {
			t.Errorf("line %q does not show the error", ls[2])
		}
	})

	t.Run("show", func(t *testing.T) {
		code, out, errOut := cli(t, "runs", "show", done.RunID, "--data", data)
		if code != exitOK {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		ls := lines(out)
		if ls[0] != "run "+done.RunID+" completed" {
			t.Errorf("first line %q", ls[0])
		}
		for _, want := range []string{
			"  investigate          completed stop=completed iterations=4 attempts=4 label=completed tools=3 tokens=960",
			"path: investigate → route → recommend",
			"trace:",
		} {
			if !slices.Contains(ls, want) {
				t.Errorf("no line %q:\n%s", want, out)
			}
		}
		i := slices.Index(ls, "trace:")
		if i < 0 || i+1 >= len(ls) {
			t.Fatalf("no trace:\n%s", out)
		}
		trace := ls[i+1:]
		if f := strings.Fields(trace[0]); len(f) != 2 || f[1] != "start" {
			t.Errorf("first trace line %q, want the start event", trace[0])
		}
		if !slices.ContainsFunc(trace, func(l string) bool {
			return strings.Contains(l, " completed investigate iteration 4 attempt 1 stop=completed")
		}) {
			t.Errorf("the trace has no end of investigate:\n%s", strings.Join(trace, "\n"))
		}
	})

	t.Run("show json", func(t *testing.T) {
		for _, want := range []runResult{done, failed} {
			code, out, errOut := cli(t, "runs", "show", want.RunID, "--data", data, "--json")
			if code != exitOK {
				t.Fatalf("exit %d\n%s%s", code, out, errOut)
			}
			r := decodeResult(t, out, "trace")
			if r.RunID != want.RunID || r.Status != want.Status || !slices.Equal(r.Path, want.Path) || !slices.Equal(r.Steps, want.Steps) || compactJSON(r.Output) != compactJSON(want.Output) {
				t.Errorf("runs show --json:\n%+v\nreins run --json:\n%+v", r, want)
			}
			var shown struct {
				Trace []struct {
					RunID    string          `json:"run_id"`
					Type     string          `json:"type"`
					Workflow string          `json:"workflow"`
					Input    json.RawMessage `json:"input"`
				} `json:"trace"`
			}
			if err := json.Unmarshal([]byte(out), &shown); err != nil {
				t.Fatal(err)
			}
			if len(shown.Trace) == 0 {
				t.Fatalf("run %s: empty trace", want.RunID)
			}
			first := shown.Trace[0]
			if first.Type != "start" || first.RunID != want.RunID || first.Workflow == "" || len(first.Input) == 0 {
				t.Errorf("run %s: first event %+v, want its start with the workflow and input", want.RunID, first)
			}
			for _, ev := range shown.Trace {
				if ev.RunID != want.RunID {
					t.Errorf("run %s: the trace holds an event of run %s", want.RunID, ev.RunID)
				}
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			code int
			want string
		}{
			{"show unknown", []string{"show", "r-nope"}, exitFailed, "run r-nope: no such run"},
			{"show bad id", []string{"show", "a b"}, exitFailed, `run id "a b"`},
			{"cancel unknown", []string{"cancel", "r-nope"}, exitFailed, "run r-nope: no such run"},
			{"cancel finished", []string{"cancel", done.RunID}, exitFailed, "cancel run " + done.RunID + ": it ended completed: the run has already finished"},
			{"cancel failed", []string{"cancel", failed.RunID}, exitFailed, "it ended failed: the run has already finished"},
			{"bogus status", []string{"list", "--status", "bogus"}, exitUsage, `--status "bogus": want running, completed, failed, cancelled or timed_out`},
			{"show without run", []string{"show"}, exitUsage, "accepts 1 arg(s)"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, out, errOut := cli(t, append(append([]string{"runs"}, tc.args...), "--data", data)...)
				if code != tc.code {
					t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
				}
				if out != "" {
					t.Errorf("stdout is not empty:\n%s", out)
				}
				if ls := lines(errOut); len(ls) != 1 || !strings.HasPrefix(errOut, "reins: ") || !strings.Contains(errOut, tc.want) {
					t.Errorf("stderr %q, want one line with %q", errOut, tc.want)
				}
			})
		}
		// Nothing changed: the finished runs are as they were.
		if runs := listRuns(t, "--data", data, "--status", "cancelled"); len(runs) != 0 {
			t.Errorf("cancelled runs: %+v", runs)
		}
	})
}

func TestRunsEmptyDataDir(t *testing.T) {
	data := filepath.Join(t.TempDir(), "fresh")
	code, out, errOut := cli(t, "runs", "list", "--data", data, "--json")
	if code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("exit %d, stdout %q, want 0 and []\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "runs", "list", "--data", data)
	if code != exitOK || out != "RUN  WORKFLOW  STATUS  STARTED  ERROR\n" {
		t.Fatalf("exit %d, stdout %q, want only the header\nstderr:\n%s", code, out, errOut)
	}
}
