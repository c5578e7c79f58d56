package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/natsbox"
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
		// Newest first: the gate run started last.
		if r := runs[0]; r.RunID != failed.RunID || r.Workflow != "gate" || r.Status != "failed" || r.Error == nil || r.Error.Code != "E_FAIL" {
			t.Errorf("first run %+v, want %s of gate, failed with E_FAIL", r, failed.RunID)
		}
		if r := runs[1]; r.RunID != done.RunID || r.Workflow != "refund_investigation" || r.Status != "completed" || r.Error != nil || r.StartedAt.IsZero() {
			t.Errorf("second run %+v, want %s of refund_investigation, completed", r, done.RunID)
		}
		if runs[0].StartedAt.Before(runs[1].StartedAt) {
			t.Errorf("runs are not newest first: %+v", runs)
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
		if f := strings.Fields(ls[2]); f[0] != done.RunID || f[1] != "refund_investigation" || f[2] != "completed" {
			t.Errorf("line %q", ls[2])
		}
		if !strings.HasPrefix(ls[1], failed.RunID) || !strings.Contains(ls[1], "E_FAIL (step reject): kind bad is refused") {
			t.Errorf("line %q does not show the error", ls[1])
		}
	})

	t.Run("list by workflow, a page at a time", func(t *testing.T) {
		if runs := listRuns(t, "--data", data, "--workflow", "gate"); len(runs) != 1 || runs[0].RunID != failed.RunID {
			t.Errorf("--workflow gate: %+v, want %s", runs, failed.RunID)
		}
		code, out, errOut := cli(t, "runs", "list", "--json", "--data", data, "--limit", "1")
		var first []listEntry
		if err := json.Unmarshal([]byte(out), &first); code != exitOK || err != nil || len(first) != 1 || first[0].RunID != failed.RunID {
			t.Fatalf("--limit 1: exit %d, %s (%v)\n%s", code, out, err, errOut)
		}
		cursor, ok := strings.CutPrefix(strings.TrimSpace(errOut), "reins: more runs follow: the next page is --after ")
		if !ok {
			t.Fatalf("--limit 1: stderr %q, want the next page's cursor", errOut)
		}
		code, out, errOut = cli(t, "runs", "list", "--json", "--data", data, "--limit", "1", "--after", cursor)
		var second []listEntry
		if err := json.Unmarshal([]byte(out), &second); code != exitOK || err != nil || len(second) != 1 || second[0].RunID != done.RunID || errOut != "" {
			t.Errorf("the second page: exit %d, %s (%v), stderr %q, want %s and no more", code, out, err, errOut, done.RunID)
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
			"  investigate          completed stop=completed iterations=4 attempts=4 label=completed tools=3 tokens=960 cost=$0.0032",
			"                       the model gave a final answer that passed validation", // the stop detail
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
		if f := strings.Fields(trace[0]); len(f) != 3 || f[1] != "start" || f[2] != "by=admin" {
			t.Errorf("first trace line %q, want the start event, by the data directory's admin", trace[0])
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
			r := decodeResult(t, out, "trace_id", "trace")
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
		for _, tc := range []runsError{
			{"show unknown", []string{"show", "r-nope"}, exitFailed, "run r-nope: no such run"},
			{"show bad id", []string{"show", "a b"}, exitFailed, `run id "a b"`},
			{"cancel unknown", []string{"cancel", "r-nope"}, exitFailed, "run r-nope: no such run"},
			{"cancel finished", []string{"cancel", done.RunID}, exitFailed, "cancel run " + done.RunID + ": it ended completed: the run has already finished"},
			{"cancel failed", []string{"cancel", failed.RunID}, exitFailed, "it ended failed: the run has already finished"},
			{"bogus status", []string{"list", "--status", "bogus"}, exitUsage, `--status "bogus": want queued, running, waiting, completed, failed, cancelled, timed_out or corrupt`},
			{"show without run", []string{"show"}, exitUsage, "accepts 1 arg(s)"},
			{"bad cursor", []string{"list", "--after", "junk"}, exitFailed, `"junk" is not a cursor that a page of runs gave (Page.Next, --after)`},
			{"negative limit", []string{"list", "--limit", "-1"}, exitUsage, "--limit -1: want 1 or more"},
			{"corrupt by workflow", []string{"list", "--status", "corrupt", "--workflow", "gate"}, exitUsage, "it takes no --workflow, --limit or --after"},
		} {
			t.Run(tc.name, func(t *testing.T) { tc.check(t, data) })
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
	// Reading runs creates nothing: no stray data directory.
	code, _, errOut = cli(t, "runs", "show", "r1", "--data", data)
	if code != exitFailed || !strings.Contains(errOut, "data directory "+data+" does not exist: no runs are kept there") {
		t.Errorf("show: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(data); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the data directory was created by reading it: %v", err)
	}
}

// A run whose record cannot be decoded is listed as corrupt with the reason, shown with it, and
// deleted; nothing is dropped silently.
func TestRunsCorruptRecord(t *testing.T) {
	data := t.TempDir()
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--run-id", "good", "--quiet")
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	box, err := natsbox.Open(t.Context(), natsbox.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := box.JetStream().KeyValue(t.Context(), natsbox.RunsBucket)
	if err == nil {
		_, err = kv.Put(t.Context(), "broken", []byte(`{"run": {"id": "broken", "status": 7`))
	}
	box.Close()
	if err != nil {
		t.Fatal(err)
	}
	runs := listRuns(t, "--data", data)
	if len(runs) != 2 {
		t.Fatalf("listed %+v, want the good run and the corrupt one", runs)
	}
	var corrupt *listEntry
	for i := range runs {
		if runs[i].RunID == "broken" {
			corrupt = &runs[i]
		}
	}
	if corrupt == nil || corrupt.Status != "corrupt" || corrupt.Error == nil || corrupt.Error.Code != "E_CORRUPT_RECORD" ||
		!strings.Contains(corrupt.Error.Message, "its 36 bytes are not a run record") {
		t.Fatalf("the corrupt run is listed as %+v", corrupt)
	}
	if only := listRuns(t, "--data", data, "--status", "corrupt"); len(only) != 1 || only[0].RunID != "broken" {
		t.Errorf("--status corrupt: %+v", only)
	}
	code, _, errOut = cli(t, "runs", "show", "broken", "--data", data)
	if code != exitFailed || !strings.Contains(errOut, "the run's record is corrupt") || !strings.Contains(errOut, "reins runs delete broken removes it") {
		t.Errorf("show: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut = cli(t, "runs", "delete", "broken", "--data", data)
	if code != exitOK || out != "run broken deleted\n" {
		t.Fatalf("delete: exit %d, %q %q", code, out, errOut)
	}
	if runs := listRuns(t, "--data", data); len(runs) != 1 || runs[0].RunID != "good" {
		t.Errorf("after the delete: %+v", runs)
	}
	code, _, errOut = cli(t, "runs", "delete", "nope", "--data", data)
	if code != exitFailed || !strings.Contains(errOut, "no such run") {
		t.Errorf("delete of no run: exit %d, %q", code, errOut)
	}
}

// writeTestFile writes content into a fresh directory and returns its path.
func writeTestFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// approvalWorkflow waits for a human at its only step.
const approvalWorkflow = `name = "ask"

[[steps]]
id = "ok"
type = "approval"
prompt = "Go?"
`

// TestRunsReplayForkPrune replays, forks and prunes the runs reins run left in a data
// directory, each command embedding the server again.
func TestRunsReplayForkPrune(t *testing.T) {
	data := t.TempDir()
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	done := decodeResult(t, out)
	code, out, errOut = cli(t, "run", writeTestFile(t, "ask.toml", approvalWorkflow), "--data", data, "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("run ask: exit %d\n%s%s", code, out, errOut)
	}
	waiting := decodeResult(t, out, "waiting")
	if waiting.Status != "waiting" {
		t.Fatalf("run ask: %s, want waiting", waiting.Status)
	}

	t.Run("replay", func(t *testing.T) {
		code, out, errOut := cli(t, "runs", "replay", done.RunID, "--data", data)
		want := "run " + done.RunID + " replays the same with its own definition: status completed, path investigate → route → recommend\n" +
			"records: 4 iteration record(s) agree with their answers\n"
		if code != exitOK || out != want {
			t.Fatalf("exit %d, stdout %q, want 0 and %q\n%s", code, out, want, errOut)
		}
		code, out, errOut = cli(t, "runs", "replay", done.RunID, "--data", data, "--json")
		if code != exitOK {
			t.Fatalf("--json: exit %d\n%s%s", code, out, errOut)
		}
		var rep struct {
			RunID    string          `json:"run_id"`
			Same     bool            `json:"same"`
			Changed  bool            `json:"changed"`
			Events   int             `json:"events"`
			Records  int             `json:"records"`
			Original json.RawMessage `json:"original"`
			Replay   json.RawMessage `json:"replay"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("--json: %v\n%s", err, out)
		}
		if rep.RunID != done.RunID || !rep.Same || rep.Changed || rep.Events < 5 || rep.Records != 4 || compactJSON(rep.Original) != compactJSON(rep.Replay) {
			t.Errorf("report %+v", rep)
		}
		if r := decodeResult(t, string(rep.Replay)); r.Status != "completed" || r.step(t, "investigate").Iterations != 4 {
			t.Errorf("replayed result %+v", r)
		}
	})

	t.Run("replay a changed workflow", func(t *testing.T) {
		src, err := os.ReadFile(refundFile)
		if err != nil {
			t.Fatal(err)
		}
		changed := strings.Replace(string(src), "budget = { max_iterations = 8,", "budget = { max_iterations = 2,", 1)
		if changed == string(src) {
			t.Fatal("the refund workflow has no budget to change")
		}
		file := writeTestFile(t, "refund_v2.toml", changed)
		code, out, errOut := cli(t, "runs", "replay", done.RunID, "--data", data, "--workflow", file)
		ls := lines(out)
		want := `run ` + done.RunID + ` replays differently with the definition of ` + file + `, hash `
		if code != exitFailed || len(ls) != 4 || !strings.HasPrefix(ls[0], want) ||
			!strings.HasSuffix(ls[0], `: step "investigate" iteration 3: the original run dispatched a task the replay did not`) ||
			ls[1] != "  original: completed, path investigate → route → recommend" || !strings.HasPrefix(ls[2], "  replay:   ") {
			t.Errorf("exit %d, want 1 and the difference\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if errOut != "" {
			t.Errorf("stderr: %q", errOut)
		}
		bad := writeTestFile(t, "bad.toml", "name = \"bad\"\n")
		code, _, errOut = cli(t, "runs", "replay", done.RunID, "--data", data, "--workflow", bad)
		if code != exitFailed || !strings.Contains(errOut, bad+" is not a valid workflow") {
			t.Errorf("an invalid --workflow: exit %d\n%s", code, errOut)
		}
	})

	t.Run("fork", func(t *testing.T) {
		code, out, errOut := cli(t, "runs", "fork", done.RunID, "--from", "investigate:3", "--data", data, "--json", "--quiet")
		if code != exitOK {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		r := decodeResult(t, out)
		if r.RunID != done.RunID+"-fork-1" || r.Status != "completed" || compactJSON(r.Output) != compactJSON(done.Output) || !slices.Equal(r.Path, done.Path) {
			t.Errorf("fork result %+v\nwant the original's %+v", r, done)
		}
		if s := r.step(t, "investigate"); s.Iterations != 4 || s.StopReason != "completed" || s.Attempts != 4 {
			t.Errorf("step investigate of the fork %+v", s)
		}
		want := "run " + done.RunID + " forked into " + r.RunID + " at step investigate iteration 3 (2 checkpoint keys copied)\n"
		if errOut != want {
			t.Errorf("stderr %q, want %q", errOut, want)
		}
		// The fork is a run like another; the original stays as it was.
		code, out, errOut = cli(t, "runs", "show", done.RunID, "--data", data, "--json")
		if code != exitOK {
			t.Fatalf("runs show: exit %d\n%s%s", code, out, errOut)
		}
		if shown := decodeResult(t, out, "trace_id", "trace"); !slices.Equal(shown.Steps, done.Steps) || shown.Status != done.Status {
			t.Errorf("the original run changed: %+v", shown)
		}
		code, out, errOut = cli(t, "runs", "fork", done.RunID, "--from", "investigate", "--data", data, "--quiet", "--run-id", "again")
		if code != exitOK || !strings.HasPrefix(out, "run again completed\n") {
			t.Errorf("fork from iteration 1: exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []runsError{
			{"replay unknown", []string{"replay", "r-nope"}, exitFailed, "run r-nope: no such run"},
			{"replay waiting", []string{"replay", waiting.RunID}, exitFailed, "run " + waiting.RunID + " is waiting: only a run that has ended can be replayed"},
			{"fork unknown run", []string{"fork", "r-nope", "--from", "x"}, exitFailed, "run r-nope: no such run"},
			{"fork unknown step", []string{"fork", done.RunID, "--from", "nope"}, exitFailed, `workflow refund_investigation has no step "nope"`},
			{"fork switch step", []string{"fork", done.RunID, "--from", "route"}, exitFailed, "step route of workflow refund_investigation is a switch step, which dispatches no task"},
			{"fork iteration not reached", []string{"fork", done.RunID, "--from", "investigate:7"}, exitFailed, "run " + done.RunID + " never dispatched iteration 7 of step investigate (it reached iteration 4)"},
			{"fork unknown model", []string{"fork", done.RunID, "--from", "investigate", "--model", "huge"}, exitFailed, `workflow refund_investigation declares no model "huge" in [models] (it declares: drafter, eager, investigator, unsure)`},
			{"fork bad provider", []string{"fork", done.RunID, "--from", "investigate", "--model", "acme:big"}, exitUsage, `unknown provider "acme"`},
			{"fork model without provider", []string{"fork", done.RunID, "--from", "investigate", "--model", "gpt-4o-mini"}, exitFailed, `declares no model "gpt-4o-mini" in [models] (it declares: drafter, eager, investigator, unsure): did you mean openai:gpt-4o-mini?`},
			{"fork taken id", []string{"fork", done.RunID, "--from", "investigate", "--run-id", done.RunID}, exitFailed, "a run with this id already exists"},
			{"fork without from", []string{"fork", done.RunID}, exitUsage, "--from STEP[:ITERATION] is required"},
			{"fork bad iteration", []string{"fork", done.RunID, "--from", "investigate:0"}, exitUsage, `--from "investigate:0": the iteration must be a whole number of 1 or more`},
			{"fork bad input", []string{"fork", done.RunID, "--from", "investigate", "--input", "{"}, exitUsage, "--input is not JSON"},
			{"fork detach", []string{"fork", done.RunID, "--from", "investigate", "--detach"}, exitUsage, "--detach needs a server"},
			{"prune negative", []string{"prune", "--older-than", "-1h"}, exitUsage, "--older-than -1h0m0s: want a duration of 0 or more"},
		} {
			t.Run(tc.name, func(t *testing.T) { tc.check(t, data) })
		}
	})

	t.Run("eval replay", func(t *testing.T) {
		code, out, errOut := cli(t, "eval", "--replay", done.RunID, "--data", data)
		if code != exitOK || out != "PASS replay:"+done.RunID+"\n1 passed, 0 failed\n" {
			t.Errorf("exit %d, stdout %q\n%s", code, out, errOut)
		}
		code, out, errOut = cli(t, "eval", filepath.Join(evalsDir, "refund_forbidden_tool.json"), "--replay", done.RunID, "--replay", "r-nope", "--data", data)
		ls := lines(out)
		if code != exitFailed || !slices.Equal(resultLines(out), []string{"PASS refund_forbidden_tool", "PASS replay:" + done.RunID, "FAIL replay:r-nope: client: run r-nope: no such run"}) ||
			ls[len(ls)-1] != "2 passed, 1 failed" || !strings.Contains(out, "correct stop reason") {
			t.Errorf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		code, out, errOut = cli(t, "eval")
		if code != exitUsage || !strings.Contains(errOut, "give at least one PATH of fixtures, or --replay RUN") {
			t.Errorf("eval without a case: exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("prune", func(t *testing.T) {
		code, out, errOut := cli(t, "runs", "prune", "--data", data)
		if code != exitOK || !strings.HasPrefix(out, "removed 0 runs that ended before ") {
			t.Fatalf("default retention: exit %d, stdout %q\n%s", code, out, errOut)
		}
		code, out, errOut = cli(t, "runs", "prune", "--data", data, "--older-than", "0", "--json")
		if code != exitOK {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		var rep struct {
			Runs, SubRuns, Checkpoints int
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		// The refund run and its two forks go, with their checkpoints; the waiting run stays.
		if rep.Runs != 3 || rep.SubRuns != 0 || rep.Checkpoints < 8 {
			t.Errorf("pruned %+v", rep)
		}
		runs := listRuns(t, "--data", data)
		if len(runs) != 1 || runs[0].RunID != waiting.RunID || runs[0].Status != "waiting" {
			t.Errorf("runs left: %+v", runs)
		}
		code, _, errOut = cli(t, "runs", "show", done.RunID, "--data", data)
		if code != exitFailed || !strings.Contains(errOut, "no such run") {
			t.Errorf("show a pruned run: exit %d\n%s", code, errOut)
		}
	})
}

// runsError is a `reins runs` command that fails: its exit status and what its one line on
// stderr says.
type runsError struct {
	name string
	args []string
	code int
	want string
}

// check runs `reins runs ARGS --data data` and requires the exit status, nothing on stdout and
// one "reins: " line on stderr holding want.
func (tc runsError) check(t *testing.T, data string) {
	t.Helper()
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
}

// TestNoSuchRunSaysWhere: a command given a run that is not there says where it looked, and
// which flags reach runs kept elsewhere.
func TestNoSuchRunSaysWhere(t *testing.T) {
	data := t.TempDir()
	pauseRun(t, writeWorkflow(t, "wf.toml", holdWorkflow), data, "hold-1", "null")
	abs, err := filepath.Abs(data)
	if err != nil {
		t.Fatal(err)
	}
	want := "reins: client: run nope: no such run (looked in the data directory " + abs + "; a run kept elsewhere needs --data DIR or --nats URL)\n"
	for _, args := range [][]string{
		{"runs", "show", "nope"},
		{"runs", "cancel", "nope"},
		{"runs", "replay", "nope"},
		{"runs", "fork", "nope", "--from", "hold"},
		{"approve", "nope", "call_1"},
		{"resume", "nope", "--input", `"go on"`},
		{"signal", "nope", "go"},
	} {
		code, out, errOut := cli(t, append(args, "--data", data)...)
		if code != exitFailed || out != "" || errOut != want {
			t.Errorf("reins %s: exit %d, stdout %q, stderr %q; want 1 and %q", strings.Join(args, " "), code, out, errOut, want)
		}
	}
}

// TestDidYouMeanSteps: a step or call that a command names and the run does not have is
// reported with the one it nearly spells.
func TestDidYouMeanSteps(t *testing.T) {
	data := t.TempDir()
	if code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--quiet", "--run-id", "done-1"); code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--data", data, "--quiet", "--model", "drafter", "--run-id", "wait-1"); code != exitOK {
		t.Fatalf("run --model drafter: exit %d\n%s%s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "show", "done-1", "--iteration", "investigat:1"}, "reins: client: run done-1 has no answer to iteration 1 of step investigat (did you mean investigate?): no such iteration"},
		{[]string{"runs", "fork", "done-1", "--from", "investigat"}, `reins: client: workflow refund_investigation has no step "investigat" (did you mean investigate?): no such step`},
		{[]string{"approve", "wait-1", "call_2_1"}, `reins: client: run wait-1: no call or step "call_2_1" waits for approval (pending calls: call_2_0) (did you mean call_2_0?): nothing in the run waits for it`},
		{[]string{"deny", "wait-1", "investigat"}, `reins: client: run wait-1: no call or step "investigat" waits for approval (pending calls: call_2_0) (did you mean investigate?): nothing in the run waits for it`},
	} {
		code, out, errOut := cli(t, append(tc.args, "--data", data)...)
		if code != exitFailed || out != "" || errOut != tc.want+"\n" {
			t.Errorf("reins %s: exit %d, stdout %q, stderr %q; want 1 and %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
}
