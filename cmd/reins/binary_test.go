//go:build e2e

package main

// The tests of the reins binary itself, built as the container image builds it
// (buildtest.Program): heavy tests, run by go test -tags e2e ./cmd/reins. The same commands run
// in process in the other tests of the package.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/buildtest"
)

// TestBinary runs the real reins binary, built as the container image builds it, as a user
// would.
func TestBinary(t *testing.T) {
	bin := buildtest.Program(t, "github.com/reins-run/reins/cmd/reins")
	evals, err := filepath.Abs(evalsDir)
	if err != nil {
		t.Fatal(err)
	}
	ids := caseIDs(t, evals)

	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "eval", evals)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("reins eval: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	ls := lines(stdout.String())
	if last, want := ls[len(ls)-1], fmt.Sprintf("%d passed, 0 failed", len(ids)); last != want {
		t.Fatalf("last line %q, want %q", last, want)
	}

	// The exit status of an invalid fixture survives the real process exit.
	bad := writeFixture(t, t.TempDir(), "bad.json", `{"case_id": "x"}`)
	stderr.Reset()
	cmd = exec.Command(bin, "eval", bad)
	cmd.Stderr = &stderr
	var ee *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("reins eval on an invalid fixture: %v, want exit status 2\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), bad) {
		t.Errorf("stderr %q does not name %s", stderr.String(), bad)
	}
	assertNoStackTrace(t, stderr.String())
}

// TestRunBinary runs the real binary: exit statuses survive the process exit, and an interrupt
// (SIGINT) cancels the run and ends the command with its result.
func TestRunBinary(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	bin := buildtest.Program(t, "github.com/reins-run/reins/cmd/reins")
	data := t.TempDir()
	exitCode := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}

	out, err := exec.Command(bin, "run", refundFile, "--input", refundInput, "--data", data, "--json", "--quiet").Output()
	if code := exitCode(err); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, out)
	}
	if r := decodeResult(t, string(out)); r.Status != "completed" {
		t.Errorf("status %s", r.Status)
	}
	if code := exitCode(exec.Command(bin, "run", refundFile, "--input", "not json", "--data", data).Run()); code != exitUsage {
		t.Errorf("--input 'not json': exit %d, want 2", code)
	}

	wf := writeWorkflow(t, "task.toml", taskWorkflow)
	cmd := exec.Command(bin, "run", wf, "--data", data, "--listen", "127.0.0.1:0")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stderr)
	var progress []string
	for sc.Scan() {
		progress = append(progress, sc.Text())
		if strings.HasPrefix(sc.Text(), "work ") && strings.Contains(sc.Text(), "running") {
			break
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stderr)
	code := exitCode(cmd.Wait())
	errOut := strings.Join(progress, "\n") + "\n" + string(rest)
	if code != exitFailed {
		t.Fatalf("interrupted: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), errOut)
	}
	if !strings.Contains(stdout.String(), " cancelled\n") || !strings.Contains(stdout.String(), "error: E_CANCELLED: interrupted") {
		t.Errorf("stdout does not report the cancelled run:\n%s", stdout.String())
	}
	if !strings.Contains(errOut, "interrupted: cancelling run ") {
		t.Errorf("stderr:\n%s", errOut)
	}
}
