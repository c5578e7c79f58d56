package buildtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A System is what a heavy test needs from the machine and Go cannot give it: a program or file
// that a Debian package installs.
type System struct {
	What   string   // what the test needs, for the sentence: "Chromium"
	Debian string   // the Debian packages that install it, separated by blanks: "nodejs npm"
	Paths  []string // where it may be: an absolute path, or a command looked up in PATH
}

// verdict is what [Need] does about a System.
type verdict int

const (
	use     verdict = iota // it is there
	install                // missing, and the test runs as root: apt-get installs it
	skip                   // missing, no root, not in CI: the test skips, saying how to run it
	fail                   // missing, no root, in CI: the test fails, saying the same
)

// decide is Need's decision: a test installs what it can, and outside CI skips what it cannot;
// in CI (CI=true) a heavy test must run, so it fails instead.
func decide(found, root, ci bool) verdict {
	switch {
	case found:
		return use
	case root:
		return install
	case ci:
		return fail
	default:
		return skip
	}
}

// inCI reports whether the tests run in CI: CI=true, as CI services set it.
func inCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// Need returns where s is, installing its Debian packages with apt-get when it is missing and
// the test runs as root. Otherwise the test stops with one sentence naming the packages and the
// command that runs it: skipped, or failed when it runs in CI (CI=true).
func Need(t testing.TB, s System) string {
	t.Helper()
	return need(t, s, os.Geteuid() == 0, inCI())
}

func need(t testing.TB, s System, root, ci bool) string {
	t.Helper()
	p, found := s.find()
	switch decide(found, root, ci) {
	case use:
		return p
	case install:
		if err := aptGet(s.Debian); err != nil {
			t.Fatalf("%s is not installed: %v", s.What, err)
		}
		if p, found = s.find(); !found {
			t.Fatalf("apt-get installed %s, but %s is still not at %s", s.Debian, s.What, strings.Join(s.Paths, " or "))
		}
		return p
	case fail:
		t.Fatal(s.missing(t) + "; CI=true, so it fails instead of skipping")
	default:
		t.Skip(s.missing(t))
	}
	return ""
}

// missing is the sentence of a test that cannot have s.
func (s System) missing(t testing.TB) string {
	return fmt.Sprintf("%s needs %s, which is not installed: install the Debian package %s as root (apt-get install -y %s), then run %s",
		t.Name(), s.What, strings.Join(strings.Fields(s.Debian), " and "), s.Debian, RunCommand(t))
}

// RunCommand is the command that runs the test (or benchmark) t alone, with the build tag of
// the heavy tests.
func RunCommand(t testing.TB) string {
	return runCommand(packageDir(), t.Name())
}

func runCommand(dir, name string) string {
	name, _, _ = strings.Cut(name, "/")
	if strings.HasPrefix(name, "Benchmark") {
		return fmt.Sprintf("go test -tags e2e %s -run '^$' -bench %s", dir, name)
	}
	return fmt.Sprintf("go test -tags e2e %s -run %s", dir, name)
}

// packageDir is the test's package as go test names it from the module's root ("./e2e").
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	root, _, err := load()
	if err != nil {
		return "."
	}
	rel, err := filepath.Rel(root, wd)
	if err != nil || rel == "." {
		return "."
	}
	return "./" + filepath.ToSlash(rel)
}

func (s System) find() (string, bool) {
	for _, p := range s.Paths {
		if !filepath.IsAbs(p) {
			if lp, err := exec.LookPath(p); err == nil {
				return lp, true
			}
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// aptGet installs Debian's packages, updating the package lists when a fresh machine has none.
func aptGet(packages string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	apt := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	installArgs := append([]string{"install", "-y"}, strings.Fields(packages)...)
	if _, err := apt(installArgs...); err == nil {
		return nil
	}
	if out, err := apt("update"); err != nil {
		return fmt.Errorf("apt-get update: %w\n%s", err, out)
	}
	if out, err := apt(installArgs...); err != nil {
		return fmt.Errorf("apt-get install -y %s: %w\n%s", packages, err, out)
	}
	return nil
}
