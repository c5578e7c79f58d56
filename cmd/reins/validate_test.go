package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// examplesDir holds one directory per example; the workflow of example DIR is
// DIR/workflow.toml, its graph DIR/testdata/workflow.mmd.
const examplesDir = "../../examples"

// exampleDirs are the examples that have a workflow file, sorted (the workflow tests check
// that the list is complete).
var exampleDirs = []string{"codereview", "delegate", "evaluator", "refund", "research"}

// exampleFile is the workflow file of example dir.
func exampleFile(dir string) string { return filepath.Join(examplesDir, dir, "workflow.toml") }

// exampleWorkflows lists the example workflow files, sorted.
func exampleWorkflows(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range exampleDirs {
		files = append(files, exampleFile(dir))
	}
	return files
}

// writeWorkflow writes a workflow file into a fresh directory and returns its path.
func writeWorkflow(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// severalProblems has problems of every kind: an unknown key, a bad duration, an unknown model,
// a missing bound, a dangling edge and a cycle without a loop edge.
const severalProblems = `name = "several"
deadline = "soon"

[[steps]]
id = "gen"
type = "llm"
model = "nope"
prompt = "Write"
colour = "blue"

[[steps]]
id = "loop"
type = "agent_loop"
handler = "h"

[[edges]]
from = "gen"
to = "loop"

[[edges]]
from = "loop"
to = "gen"

[[edges]]
from = "loop"
to = "nowhere"
`

// problemLine is Problem.String: FILE:LINE: CODE key: message (no LINE for a key the file
// does not write, such as an absent start).
var problemLine = regexp.MustCompile(`^(.+\.toml)(?::(\d+))?: (E_[A-Z_]+) (\S+): (.+)$`)

func TestValidateExamples(t *testing.T) {
	files := exampleWorkflows(t)
	code, out, errOut := cli(t, append([]string{"validate"}, files...)...)
	if code != exitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if errOut != "" {
		t.Errorf("stderr is not empty:\n%s", errOut)
	}
	var want []string
	for _, f := range files {
		def, ps := workflow.LoadAndValidate(f, workflow.Options{})
		if len(ps) > 0 {
			t.Fatalf("%s: %v", f, ps)
		}
		h, err := def.Hash()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, f+": ok (hash "+h[:12]+")")
	}
	if got := lines(out); !slices.Equal(got, want) {
		t.Errorf("output:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
}

func TestValidateSeveralProblems(t *testing.T) {
	bad := writeWorkflow(t, "several.toml", severalProblems)
	code, out, errOut := cli(t, "validate", bad)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	assertNoStackTrace(t, errOut)
	var got []string
	for _, l := range lines(out) {
		m := problemLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %q is not FILE[:LINE]: CODE key: message", l)
		}
		if m[1] != bad {
			t.Errorf("line %q names file %q, want %q", l, m[1], bad)
		}
		got = append(got, m[2]+" "+m[3]+" "+m[4])
	}
	for _, want := range []string{
		"2 E_BAD_DURATION deadline",
		"7 E_UNKNOWN_MODEL steps[0].model",
		"9 E_UNKNOWN_KEY steps[0].colour",
		"11 E_MISSING_KEY steps[1].max_iterations",
		"26 E_DANGLING_EDGE edges[2].to",
		" E_NO_START start",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if !strings.Contains(out, " E_CYCLE ") {
		t.Errorf("no E_CYCLE in\n%s", out)
	}
	if strings.Contains(out, "ok (hash") {
		t.Errorf("an invalid file is reported ok:\n%s", out)
	}
}

// TestValidateMixed: one invalid file makes the exit status 1, and every file is still reported.
func TestValidateMixed(t *testing.T) {
	good := exampleFile("codereview")
	bad := writeWorkflow(t, "several.toml", severalProblems)
	missing := filepath.Join(t.TempDir(), "missing.toml")
	code, out, errOut := cli(t, "validate", good, bad, missing)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	ls := lines(out)
	if !strings.HasPrefix(ls[0], good+": ok (hash ") {
		t.Errorf("first line %q, want the valid file ok", ls[0])
	}
	last := ls[len(ls)-1]
	if !strings.HasPrefix(last, missing+": E_PARSE") {
		t.Errorf("last line %q, want an E_PARSE problem naming %s", last, missing)
	}
	if n := strings.Count(out, bad+":"); n < 5 {
		t.Errorf("%d lines about %s, want every problem", n, bad)
	}
}

func TestValidateSyntaxError(t *testing.T) {
	bad := writeWorkflow(t, "syntax.toml", "name = \"x\"\n[[steps]\nid = 1\n")
	code, out, _ := cli(t, "validate", bad)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.HasPrefix(out, bad+":2: E_PARSE") {
		t.Errorf("output %q, want an E_PARSE problem at line 2", out)
	}
}

func TestValidateJSON(t *testing.T) {
	good := exampleFile("evaluator")
	bad := writeWorkflow(t, "several.toml", severalProblems)
	code, out, errOut := cli(t, "validate", "--json", good, bad)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1\nstderr:\n%s", code, errOut)
	}
	var results []struct {
		File     string             `json:"file"`
		Valid    bool               `json:"valid"`
		Hash     string             `json:"hash"`
		Problems []workflow.Problem `json:"problems"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&results); err != nil {
		t.Fatalf("stdout is not the JSON results: %v\n%s", err, out)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	def, _ := workflow.LoadAndValidate(good, workflow.Options{})
	h, _ := def.Hash()
	if r := results[0]; r.File != good || !r.Valid || r.Hash != h || len(r.Problems) != 0 {
		t.Errorf("valid file: %+v, want hash %s", r, h)
	}
	if !strings.Contains(out, `"problems": []`) {
		t.Errorf("a valid file's problems are not an empty list:\n%s", out)
	}
	r := results[1]
	if r.File != bad || r.Valid || r.Hash != "" || len(r.Problems) < 5 {
		t.Fatalf("invalid file: %+v", r)
	}
	for _, p := range r.Problems {
		if p.File != bad || p.Code == "" || p.Message == "" {
			t.Errorf("problem %+v lacks its file, code or message", p)
		}
	}
	if !slices.ContainsFunc(r.Problems, func(p workflow.Problem) bool {
		return p.Code == workflow.EUnknownKey && p.Key == "steps[0].colour" && p.Line == 9
	}) {
		t.Errorf("no E_UNKNOWN_KEY at line 9 in %+v", r.Problems)
	}
}

func TestValidateHandlers(t *testing.T) {
	file := exampleFile("codereview")
	if code, out, errOut := cli(t, "validate", "--handlers", "llm-review,other", file); code != exitOK {
		t.Fatalf("known handler: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ := cli(t, "validate", "--handlers", "other", file)
	if code != exitFailed {
		t.Fatalf("unknown handler: exit %d, want 1", code)
	}
	if !strings.Contains(out, "E_UNKNOWN_HANDLER steps[0].handler") {
		t.Errorf("output %q does not report the handler", out)
	}
	// An empty list means no handler is known.
	if code, _, _ := cli(t, "validate", "--handlers", "", file); code != exitFailed {
		t.Errorf("--handlers '': exit %d, want 1", code)
	}
}

func TestValidateUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no files", []string{"validate"}, "requires at least 1 arg"},
		{"unknown flag", []string{"validate", "--bogus", "x.toml"}, "unknown flag: --bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := cli(t, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want 2\nstderr:\n%s", code, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q, want %q", errOut, tc.want)
			}
			assertNoStackTrace(t, errOut)
		})
	}
	code, out, _ := cli(t, "validate", "--help")
	if code != exitOK || !strings.Contains(out, "reins validate FILE...") || !strings.Contains(out, "--handlers") || !strings.Contains(out, "Exit status") {
		t.Errorf("validate --help: exit %d\n%s", code, out)
	}
}
