package buildtest

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// BinEnv names a directory of the programs of [Programs], built before the tests run (.ci/run
// builds them with `go run ./internal/testkit/buildtest/prebuild DIR`). When it is set, [Program] takes
// every program from it and builds nothing, so that no build runs inside a test's timeout.
const BinEnv = "REINS_TEST_BIN"

// Programs are the programs the tests run as processes of their own, by import path. [Program]
// gives only these, so that a directory that [BuildAll] filled has every one a test asks for.
var Programs = []string{
	"github.com/reins-run/reins/cmd/reins",
	"github.com/nats-io/nats-server/v2",
	"github.com/reins-run/reins/examples/codereview",
	"github.com/reins-run/reins/examples/mcp-orders",
	"github.com/reins-run/reins/e2e/testdata/effectworker",
	"github.com/reins-run/reins/e2e/testdata/loopworker",
	"github.com/reins-run/reins/e2e/testdata/mcpeffects",
	"github.com/reins-run/reins/e2e/testdata/mcpserver",
}

var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

// Name is the file name go build gives the program pkg: its last path element, or the one
// before it when the last is a major version (nats-server/v2 is nats-server).
func Name(pkg string) string {
	dir, base := path.Split(path.Clean(pkg))
	if majorVersion.MatchString(base) && dir != "" {
		return path.Base(dir)
	}
	return base
}

// Program returns the path of the program pkg (one of [Programs]): the one in the directory
// [BinEnv] names when it is set, or else one built into the test's temporary directory: as the
// Dockerfile builds reins in the full suite ([Heavy]), and with go build's own flags in the
// quick suite, where it reuses what go test compiled (the Dockerfile's flags would compile the
// standard library and every dependency a second time).
func Program(t testing.TB, pkg string) string {
	t.Helper()
	bin, err := ProgramIn(t.TempDir(), pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// ProgramIn is [Program] for callers without a testing.TB (a TestMain): when [BinEnv] is not
// set, it builds pkg into dir.
func ProgramIn(dir, pkg string) (string, error) {
	bins, err := ProgramsIn(dir, pkg)
	if err != nil {
		return "", err
	}
	return bins[0], nil
}

// ProgramsIn is [ProgramIn] of several programs, built (when they are) by one go build.
func ProgramsIn(dir string, pkgs ...string) ([]string, error) {
	var bins []string
	pre := os.Getenv(BinEnv)
	for _, pkg := range pkgs {
		if !slices.Contains(Programs, pkg) {
			return nil, fmt.Errorf("buildtest: %s is not one of buildtest.Programs: add it there, so that the programs built before the tests include it", pkg)
		}
		if pre == "" {
			bins = append(bins, filepath.Join(dir, Name(pkg)))
			continue
		}
		bin := filepath.Join(pre, Name(pkg))
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("buildtest: %s=%s has no %s (%w): build the tests' programs with go run ./internal/testkit/buildtest/prebuild %s, or unset %s", BinEnv, pre, Name(pkg), err, pre, BinEnv)
		}
		bins = append(bins, bin)
	}
	if pre == "" {
		build := BuildAll
		if !Heavy {
			build = buildPlain
		}
		if err := build(dir, pkgs...); err != nil {
			return nil, err
		}
	}
	return bins, nil
}

// BuildAll builds every package of pkgs into the directory dir with one go build, as the
// Dockerfile builds reins; each program's file is named by [Name].
func BuildAll(dir string, pkgs ...string) error {
	_, image, err := load()
	if err != nil {
		return err
	}
	return goBuild(dir, image.BuildEnv, image.BuildFlags, "as the Dockerfile builds", pkgs)
}

// buildPlain builds pkgs into dir as go build does with no flags.
func buildPlain(dir string, pkgs ...string) error {
	return goBuild(dir, nil, nil, "with go build's own flags", pkgs)
}

func goBuild(dir string, env, flags []string, how string, pkgs []string) error {
	root, _, err := load()
	if err != nil {
		return err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return err
	}
	args := append(append([]string{"build"}, flags...), "-o", dir+string(filepath.Separator))
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build of the tests' programs into %s (%s): %w\n%s", dir, how, err, b)
	}
	return nil
}
