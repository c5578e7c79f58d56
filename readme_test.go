package reins_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/mdtest"
)

// docFiles are the Markdown files whose Go samples must compile: the README and docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("docs/*/*.md")
	return append(append([]string{"README.md"}, files...), more...)
}

// TestDocSamples: every Go sample of README.md and docs/ is cut from a Go file of the module
// (docs_example_test.go, or a package's Example), whole, as consecutive lines: so every sample
// compiles, and one that drifts from the API fails here instead of in a reader's editor.
// Indentation and the spaces gofmt aligns comments with do not count (mdtest.Normalize).
func TestDocSamples(t *testing.T) {
	src, err := mdtest.ReadSources(".")
	if err != nil {
		t.Fatal(err)
	}
	samples := 0
	for _, file := range docFiles(t) {
		md, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := mdtest.Blocks(file, md)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.Lang != "go" {
				continue
			}
			samples++
			if len(src.Find(b.Text)) == 0 {
				t.Errorf("%s: this Go sample is in no Go file of the module: cut it from code that compiles (docs_example_test.go)\n%s", b.Where(), b.Text)
			}
		}
	}
	if samples < 5 {
		t.Errorf("found %d Go samples in the README and docs/: the test no longer reads them", samples)
	}
}

// TestDocSamplesCatches: a sample that differs from its source by one word is reported.
func TestDocSamplesCatches(t *testing.T) {
	src := mdtest.Sources{"x.go": "\n" + mdtest.Normalize("func f() {\n\tr, err := reins.New(ctx, reins.Config{})\n\tdefer r.Close()\n}\n")}
	if got := src.Find("r, err := reins.New(ctx, reins.Config{})\ndefer r.Close()\n"); len(got) != 1 {
		t.Errorf("the sample as cut is found in %v, want x.go", got)
	}
	if got := src.Find("r, err := reins.New(ctx, reins.Config{})\ndefer r.Stop()\n"); len(got) != 0 {
		t.Errorf("a changed sample is found in %v", got)
	}
}

// TestReadmeInstall: the README's install and requirements name the module and the Go version
// of go.mod, which its quickstart cannot run (it would download them).
func TestReadmeInstall(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	module := regexp.MustCompile(`(?m)^module (\S+)$`).FindSubmatch(mod)
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if module == nil || goVersion == nil {
		t.Fatalf("go.mod has no module or go line:\n%s", mod)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"go install " + string(module[1]) + "/cmd/reins@latest",
		"go get " + string(module[1]) + "@latest",
		"Go " + string(goVersion[1]) + " or later",
	} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md does not say %q (go.mod: module %s, go %s)", want, module[1], goVersion[1])
		}
	}
}
