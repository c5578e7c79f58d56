package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// TestGraphExamples: the default format is Mermaid, the committed graph of each example.
func TestGraphExamples(t *testing.T) {
	for _, dir := range exampleDirs {
		file := exampleFile(dir)
		t.Run(dir, func(t *testing.T) {
			code, out, errOut := cli(t, "graph", file)
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
			}
			golden, err := os.ReadFile(filepath.Join(examplesDir, dir, "testdata", "workflow.mmd"))
			if err != nil {
				t.Fatal(err)
			}
			if out != string(golden) {
				t.Errorf("graph differs from examples/%s/testdata/workflow.mmd:\n%s", dir, out)
			}
			code, mermaid, _ := cli(t, "graph", "--format", "mermaid", file)
			if code != exitOK || mermaid != out {
				t.Errorf("--format mermaid: exit %d, or not the default output", code)
			}
		})
	}
}

func TestGraphDot(t *testing.T) {
	file := exampleFile("evaluator")
	code, out, errOut := cli(t, "graph", file, "--format", "dot")
	if code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
	}
	def, ps := workflow.LoadAndValidate(file, workflow.Options{})
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if out != workflow.Dot(def) {
		t.Errorf("output is not workflow.Dot:\n%s", out)
	}
	for _, want := range []string{`digraph "draft_refiner" {`, `label="retry (loop ≤ 3)", style=bold`, `label="accept"`} {
		if !strings.Contains(out, want) {
			t.Errorf("dot output lacks %q:\n%s", want, out)
		}
	}
}

// TestGraphInvalidFile: problems go to stderr as reins validate prints them; nothing to stdout.
func TestGraphInvalidFile(t *testing.T) {
	bad := writeWorkflow(t, "several.toml", severalProblems)
	code, out, errOut := cli(t, "graph", bad)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if out != "" {
		t.Errorf("stdout is not empty:\n%s", out)
	}
	if !strings.Contains(errOut, bad+":9: E_UNKNOWN_KEY steps[0].colour: ") || !strings.Contains(errOut, " E_CYCLE ") {
		t.Errorf("stderr does not list the problems:\n%s", errOut)
	}
	if !strings.Contains(errOut, "reins: "+bad+" is not a valid workflow") {
		t.Errorf("stderr lacks the closing sentence:\n%s", errOut)
	}
	assertNoStackTrace(t, errOut)

	code, _, errOut = cli(t, "graph", filepath.Join(t.TempDir(), "missing.toml"))
	if code != exitFailed || !strings.Contains(errOut, "missing.toml: E_PARSE") {
		t.Errorf("missing file: exit %d\n%s", code, errOut)
	}
}

func TestGraphUsage(t *testing.T) {
	file := exampleFile("codereview")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown format", []string{"graph", file, "--format", "svg"}, `unknown --format "svg": use mermaid or dot`},
		{"no file", []string{"graph"}, "accepts 1 arg(s), received 0"},
		{"two files", []string{"graph", file, file}, "accepts 1 arg(s), received 2"},
		{"unknown flag", []string{"graph", file, "--bogus"}, "unknown flag: --bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if out != "" {
				t.Errorf("stdout is not empty:\n%s", out)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q, want %q", errOut, tc.want)
			}
			assertNoStackTrace(t, errOut)
		})
	}
	code, out, _ := cli(t, "graph", "--help")
	if code != exitOK || !strings.Contains(out, "reins graph FILE") || !strings.Contains(out, "--format") {
		t.Errorf("graph --help: exit %d\n%s", code, out)
	}
}
