package main

import (
	"testing"

	"github.com/reins-run/reins/internal/testkit/mdtest"
)

// TestReadmeProgram is this program when a README's command runs the test binary through its
// shim (mdtest.ServeGoRun); run by go test, it does nothing.
func TestReadmeProgram(t *testing.T) {
	mdtest.ServeGoRun("./examples/writer-critic", main)
}

// TestReadme runs the shell sessions of this example's README as written (go run
// ./examples/writer-critic, the test binary standing in for go run) and compares what they print with
// what the README shows (mdtest.Matcher: "..." for lines left out, run ids bound to the real
// ones).
func TestReadme(t *testing.T) {
	mdtest.CheckGoRun(t, "./examples/writer-critic", "TestReadmeProgram")
}
