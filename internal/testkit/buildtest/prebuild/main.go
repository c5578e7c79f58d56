// Command prebuild builds the programs the tests run as processes (buildtest.Programs) into one
// directory, as the Dockerfile builds reins, before the tests start: .ci/run runs it and hands
// the directory to the tests in REINS_TEST_BIN, so that no build runs inside a test's timeout.
//
//	go run ./internal/testkit/buildtest/prebuild DIR
package main

import (
	"fmt"
	"os"

	"github.com/reins-run/reins/internal/testkit/buildtest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/testkit/buildtest/prebuild DIR (the directory to build the tests' programs into)")
		os.Exit(2)
	}
	if err := os.MkdirAll(os.Args[1], 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "prebuild:", err)
		os.Exit(1)
	}
	if err := buildtest.BuildAll(os.Args[1], buildtest.Programs...); err != nil {
		fmt.Fprintln(os.Stderr, "prebuild:", err)
		os.Exit(1)
	}
}
