package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/mdtest"
)

// TestReinsProgram is the reins command when a README's command runs this test binary through
// its shim (mdtest.Shim); run by go test, it does nothing.
func TestReinsProgram(t *testing.T) {
	mdtest.Serve(func(args []string) int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return run(ctx, args, os.Stdout, os.Stderr)
	})
}

// goPrograms are the examples whose README runs a Go program of their own (go run
// ./examples/NAME) rather than reins: their packages' tests run those READMEs.
var goPrograms = map[string]string{
	"codereview":    "go test ./examples/codereview -run TestReadme",
	"writer-critic": "go test ./examples/writer-critic -run TestReadme",
}

// TestReadmeCommands runs the shell sessions of README.md (its quickstart), docs/guide.md and
// every example's README as written: `reins` on PATH, in a directory of its own holding a copy
// of examples/ and evals/ (the commands name examples/NAME/workflow.toml and evals/, and their
// data directory is ./.reins), one command after another. What each prints, stdout and stderr together, must be
// what the README shows, with mdtest.Matcher's two placeholders only: a line "..." for lines
// left out, and run ids, which are the real ones from then on. A command ending in " &" (reins
// serve) runs in the background until the file's sessions end.
func TestReadmeCommands(t *testing.T) {
	bin := t.TempDir()
	mdtest.Shim(t, bin, "reins", "TestReinsProgram")
	root := filepath.Join("..", "..")
	files := []string{"README.md", "docs/guide.md"}
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range examples {
		if _, ok := goPrograms[filepath.Base(filepath.Dir(e))]; !ok {
			files = append(files, filepath.ToSlash(e[len(root)+1:]))
		}
	}
	if len(files) < 5 {
		t.Fatalf("the READMEs to run are %v: the examples are not where the test looks", files)
	}
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			for _, d := range []string{"examples", "evals"} {
				if err := os.CopyFS(filepath.Join(dir, d), os.DirFS(filepath.Join(root, d))); err != nil {
					t.Fatal(err)
				}
			}
			r := mdtest.Runner{Dir: dir, Env: mdtest.Env(bin), Programs: []string{"reins"}, Timeout: 2 * time.Minute}
			r.Check(t, file, src)
		})
	}
}
