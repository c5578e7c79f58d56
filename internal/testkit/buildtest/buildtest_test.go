package buildtest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
)

func TestShellWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/reins ./cmd/reins`, []string{"CGO_ENABLED=0", "go", "build", "-trimpath", "-ldflags=-s -w", "-o", "/out/reins", "./cmd/reins"}},
		{`a 'b c' "d \"e\"" f\g`, []string{"a", "b c", `d "e"`, `f\g`}},
		{`  spaced   out  `, []string{"spaced", "out"}},
		{`""`, []string{""}},
	} {
		got, err := shellWords(tc.in)
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("shellWords(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`go build "x`, `go mod download && go build ./cmd/reins`} {
		if _, err := shellWords(bad); err == nil {
			t.Errorf("shellWords(%q): no error", bad)
		}
	}
}

func TestReadDockerfile(t *testing.T) {
	image, err := Image()
	if err != nil {
		t.Fatal(err)
	}
	// The module's own Dockerfile: what the tests build with and run as.
	if !slices.Contains(image.BuildEnv, "CGO_ENABLED=0") || !slices.Contains(image.BuildFlags, "-trimpath") {
		t.Errorf("the image's build: env %q, flags %q; want a static build (CGO_ENABLED=0, -trimpath)", image.BuildEnv, image.BuildFlags)
	}
	if image.User == "" || strings.HasPrefix(image.User, "root") || strings.HasPrefix(image.User, "0") {
		t.Errorf("the image runs as %q: not a non-root user", image.User)
	}
	// A build argument's default stands in the build line, as docker build without --build-arg
	// would have it (the image's reins version stamps).
	if !slices.Contains(image.BuildFlags, "-ldflags=-s -w -X main.stampedVersion= -X main.stampedCommit=") {
		t.Errorf("the image's build flags %q: want the version stamps, their ARG defaults expanded", image.BuildFlags)
	}
	path := filepath.Join(t.TempDir(), "Dockerfile")
	if err := os.WriteFile(path, []byte("ARG V=\"v1\"\nARG C\nRUN go build -ldflags=\"-X a=${V} -X b=$C\" ./cmd/reins\nCMD [\"serve\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := ReadDockerfile(path); err != nil || !slices.Equal(d.BuildFlags, []string{"-ldflags=-X a=v1 -X b="}) {
		t.Errorf("ReadDockerfile with ARGs: %+v, %v; want -ldflags=-X a=v1 -X b=", d, err)
	}
	for _, tc := range []struct{ name, text, want string }{
		{"no build", "FROM x\nRUN go mod download\n", "no RUN builds ./cmd/reins"},
		{"another package", "RUN go build -o /x ./cmd/other\n", `builds "./cmd/other"`},
		{"chained", "RUN go mod download && \\\n  go build ./cmd/reins\n", "chains commands"},
		{"shell form", "RUN go build ./cmd/reins\nCMD serve --data x\n", "not in the exec form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "Dockerfile")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadDockerfile(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadDockerfile: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func FuzzShellWords(f *testing.F) {
	for _, s := range []string{`CGO_ENABLED=0 go build -ldflags="-s -w" ./cmd/reins`, `'a' "b\"c"`, `x && y`, `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := shellWords(s)
		if err != nil {
			return
		}
		// Words without quotes, blanks or backslashes come out as they went in.
		other := func(r rune) bool { return unicode.IsSpace(r) && r != ' ' && r != '\t' }
		if !strings.ContainsAny(s, "'\"\\") && !strings.ContainsFunc(s, other) {
			if got, want := strings.Join(words, " "), strings.Join(strings.Fields(s), " "); got != want {
				t.Errorf("shellWords(%q) = %q", s, words)
			}
		}
	})
}

// TestDecide: a heavy test uses what is there, installs what it can as root, and otherwise
// skips, except in CI, where it fails.
func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		found, root, ci bool
		want            verdict
	}{
		{true, false, false, use},
		{true, true, true, use},
		{true, false, true, use},
		{false, true, false, install},
		{false, true, true, install},
		{false, false, false, skip},
		{false, false, true, fail},
	} {
		if got := decide(tc.found, tc.root, tc.ci); got != tc.want {
			t.Errorf("decide(found %v, root %v, CI %v) = %d, want %d", tc.found, tc.root, tc.ci, got, tc.want)
		}
	}
}

func TestInCI(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want bool
	}{{"true", true}, {"1", true}, {"TRUE", true}, {"", false}, {"false", false}, {"yes please", false}} {
		t.Setenv("CI", tc.env)
		if got := inCI(); got != tc.want {
			t.Errorf("CI=%q: inCI() = %v, want %v", tc.env, got, tc.want)
		}
	}
}

// stopped is how fakeTB ends a test: Skip and Fatal panic with it, and the test recovers.
type stopped struct{ skipped bool }

// fakeTB records how Need stopped a test, which a real subtest cannot report without failing
// its parent.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper()      {}
func (f *fakeTB) Name() string { return "TestConsole/approver" }
func (f *fakeTB) Skip(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic(stopped{skipped: true})
}
func (f *fakeTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic(stopped{})
}
func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }

// TestNeedSays: a test that cannot have what it needs says, in one sentence, which Debian
// package to install and which command runs it; outside CI it skips, in CI it fails.
func TestNeedSays(t *testing.T) {
	present := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(present, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	there := System{What: "Chromium", Debian: "chromium", Paths: []string{"no-such-command-reins", present}}
	if got := need(t, there, false, true); got != present {
		t.Errorf("need of a file that is there = %q, want %q", got, present)
	}
	gone := System{What: "Chromium", Debian: "chromium", Paths: []string{"no-such-command-reins", filepath.Join(t.TempDir(), "none")}}
	want := "TestConsole/approver needs Chromium, which is not installed: install the Debian package chromium as root (apt-get install -y chromium), then run go test -tags e2e ./internal/testkit/buildtest -run TestConsole"
	for _, ci := range []bool{false, true} {
		f := &fakeTB{TB: t}
		var how stopped
		func() {
			defer func() { how, _ = recover().(stopped) }()
			need(f, gone, false, ci)
		}()
		if how.skipped == ci || !strings.HasPrefix(f.msg, want) {
			t.Errorf("CI %v: skipped %v, said %q; want skipped %v, saying %q", ci, how.skipped, f.msg, !ci, want)
		}
	}
}

func TestRunCommand(t *testing.T) {
	for name, want := range map[string]string{
		"TestConsole":                  "go test -tags e2e ./e2e -run TestConsole",
		"TestPythonWorkerCrash/kill_1": "go test -tags e2e ./e2e -run TestPythonWorkerCrash",
		"BenchmarkPythonWorker/one":    "go test -tags e2e ./e2e -run '^$' -bench BenchmarkPythonWorker",
	} {
		if got := runCommand("./e2e", name); got != want {
			t.Errorf("runCommand(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestName(t *testing.T) {
	for pkg, want := range map[string]string{
		"github.com/nats-io/nats-server/v2":              "nats-server",
		"github.com/reins-run/reins/cmd/reins":           "reins",
		"github.com/reins-run/reins/examples/mcp-orders": "mcp-orders",
		"v2": "v2",
	} {
		if got := Name(pkg); got != want {
			t.Errorf("Name(%q) = %q, want %q", pkg, got, want)
		}
	}
	// One directory holds them all: no two may have the same name.
	seen := map[string]string{}
	for _, pkg := range Programs {
		if other, ok := seen[Name(pkg)]; ok {
			t.Errorf("%s and %s are both built as %s", other, pkg, Name(pkg))
		}
		seen[Name(pkg)] = pkg
	}
}

// TestProgramPrebuilt: with REINS_TEST_BIN set, Program takes the program from it and builds
// nothing; one missing there, or a package not in Programs, is an error that says what to do.
func TestProgramPrebuilt(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(BinEnv, dir)
	reins := filepath.Join(dir, "reins")
	if err := os.WriteFile(reins, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := ProgramIn(t.TempDir(), "github.com/reins-run/reins/cmd/reins"); err != nil || got != reins {
		t.Errorf("ProgramIn(reins) = %q, %v; want %q", got, err, reins)
	}
	for pkg, want := range map[string]string{
		"github.com/nats-io/nats-server/v2":       "has no nats-server",
		"github.com/reins-run/reins/cmd/unlisted": "is not one of buildtest.Programs",
	} {
		if _, err := ProgramIn(t.TempDir(), pkg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ProgramIn(%s) = %v; want an error saying %q", pkg, err, want)
		}
	}
}
