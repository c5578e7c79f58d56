package main

import (
	"os"
	"testing"

	"github.com/reins-run/reins/internal/mdtest"
)

// TestReadmeProgram is this program when a README's command runs the test binary through its
// shim (mdtest.ServeGoRun); run by go test, it does nothing.
func TestReadmeProgram(t *testing.T) {
	mdtest.ServeGoRun("./examples/codereview", main)
}

// TestReadme runs the shell sessions of this example's README as written (go run
// ./examples/codereview, the test binary standing in for go run) and compares what they print with
// what the README shows (mdtest.Matcher: "..." for lines left out, run ids bound to the real
// ones).
func TestReadme(t *testing.T) {
	bin := t.TempDir()
	mdtest.Shim(t, bin, "go", "TestReadmeProgram")
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	r := mdtest.Runner{Dir: t.TempDir(), Env: mdtest.Env(bin), Programs: []string{"go run ./examples/codereview"}}
	r.Check(t, "examples/codereview/README.md", src)
}
