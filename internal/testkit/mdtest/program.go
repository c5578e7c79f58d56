package mdtest

import (
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// programEnv, set to "1", makes the test binary a shim runs act as the program.
const programEnv = "REINS_MDTEST_PROGRAM"

// Shim writes dir/name, an executable that runs the test binary again as a program: with only
// the test named test selected, and its own arguments after "--". That test calls Serve first,
// which runs the program's main with them. A README's commands thus run the program as written
// (the test puts dir on PATH), with nothing to build: the test binary has the program in it.
func Shim(t testing.TB, dir, name, test string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("mdtest: the test binary's path: %v", err)
	}
	path := filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %s -test.run=%s -- \"$@\"\n", programEnv, quote(exe), quote("^"+test+"$"))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatalf("mdtest: writing the shim of %s: %v", name, err)
	}
	return path
}

// Serve runs main with the arguments a shim passed, and exits with the status it returns, when
// the test binary runs as the program; otherwise it returns at once and the test goes on.
func Serve(main func(args []string) int) {
	if os.Getenv(programEnv) != "1" {
		return
	}
	os.Unsetenv(programEnv) // the program's own children are not shims
	os.Exit(main(flag.Args()))
}

// quote quotes s for sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ServeGoRun is Serve for a README that runs a Go program as `go run PKG ARGS...`, PKG being
// the package of the test: its shim is named go (for that test's commands only), and
// ServeGoRun takes "run PKG" off the arguments and calls main as go run would, with os.Args
// set and a fresh flag.CommandLine for main to parse them. main's return is exit status 0.
func ServeGoRun(pkg string, main func()) {
	Serve(func(args []string) int {
		if len(args) < 2 || args[0] != "run" || args[1] != pkg {
			fmt.Fprintf(os.Stderr, "mdtest: this go stands in for go run %s only, not go %s\n", pkg, strings.Join(args, " "))
			return 2
		}
		name := path.Base(pkg)
		os.Args = append([]string{name}, args[2:]...)
		flag.CommandLine = flag.NewFlagSet(name, flag.ExitOnError)
		main()
		return 0
	})
}

// CheckGoRun runs the shell sessions of the README of the example program pkg (as "./examples/NAME",
// the test's working directory being that example's) as written, the test binary standing in for
// go run through the test program (a test that calls [ServeGoRun]), and fails t where what they
// print differs from what the README shows.
func CheckGoRun(t *testing.T, pkg, program string) {
	t.Helper()
	bin := t.TempDir()
	Shim(t, bin, "go", program)
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	r := Runner{Dir: t.TempDir(), Env: Env(bin), Programs: []string{"go run " + pkg}}
	r.Check(t, strings.TrimPrefix(pkg, "./")+"/README.md", src)
}
