//go:build e2e && unix

package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/protocol"
)

// napFewSeconds sleeps long enough for the test to kill its command while it sleeps; serve
// then finishes it.
const napFewSeconds = `name = "nap"

[[steps]]
id = "nap"
type = "sleep"
duration = "3s"
`

// proc is a reins command running as a process of the test.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan int
}

// startProc starts bin with args and returns once its stderr says text.
func startProc(t *testing.T, bin, text string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan int, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	go func() { p.done <- procExit(p.cmd.Wait()) }()
	awaitText(t, p.stderr, text, p.done, "reins "+args[0])
	return p
}

// procExit is the exit status of a process that ended with err (-1: killed by a signal).
func procExit(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// runsOf is `reins runs list --json` of data, run as a process.
func runsOf(t *testing.T, bin, data string) []listEntry {
	t.Helper()
	out, err := exec.Command(bin, "runs", "list", "--data", data, "--json").Output()
	if err != nil {
		t.Fatalf("runs list: %v\n%s", err, out)
	}
	var entries []listEntry
	if err := json.Unmarshal(out, &entries); err != nil {
		t.Fatalf("runs list --json: %v\n%s", err, out)
	}
	return entries
}

// One terminal or two with real processes: a second process reads and runs on a data
// directory while reins run holds it; SIGTERM ends reins run as SIGINT does; a run whose
// command was killed with SIGKILL is orphaned until reins serve carries it on.
func TestTerminalsProcesses(t *testing.T) {
	bin := buildtest.Program(t, "github.com/reins-run/reins/cmd/reins")
	nap := writeWorkflow(t, "nap.toml", napWorkflow)
	quick := writeWorkflow(t, "quick.toml", quickWorkflow)

	t.Run("second terminal and SIGTERM", func(t *testing.T) {
		data := t.TempDir()
		p := startProc(t, bin, "running", "run", nap, "--data", data, "--run-id", "term")
		if out, err := exec.Command(bin, "run", quick, "--data", data, "--json", "--quiet").CombinedOutput(); err != nil || decodeResult(t, string(out)).Status != "completed" {
			t.Fatalf("a second reins run: %v\n%s", err, out)
		}
		if e := runsOf(t, bin, data); len(e) != 2 || !slices.ContainsFunc(e, func(e listEntry) bool { return e.RunID == "term" && e.Status == protocol.RunRunning }) {
			t.Errorf("runs list from a second process: %+v", e)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := awaitExit(t, p.done, "reins run"); code != exitFailed {
			t.Errorf("SIGTERM: exit %d, want 1\n%s%s", code, p.stdout.String(), p.stderr.String())
		}
		if !strings.Contains(p.stdout.String(), "run term cancelled") || !strings.Contains(p.stderr.String(), "interrupted: cancelling run term") {
			t.Errorf("SIGTERM did not cancel the run as SIGINT does:\n%s%s", p.stdout.String(), p.stderr.String())
		}
		if _, err := os.Stat(filepath.Join(data, urlFile)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after SIGTERM: %v", urlFile, err)
		}
		for _, e := range runsOf(t, bin, data) {
			if e.RunID == "term" && (e.Status != protocol.RunCancelled || e.Orphaned) {
				t.Errorf("after SIGTERM: %+v; want cancelled", e)
			}
		}
	})

	t.Run("SIGKILL leaves an orphan that serve finishes", func(t *testing.T) {
		data := t.TempDir()
		p := startProc(t, bin, "running", "run", writeWorkflow(t, "few.toml", napFewSeconds), "--data", data, "--run-id", "left")
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		awaitExit(t, p.done, "reins run")
		if _, ok := readHolder(data); !ok {
			t.Fatalf("SIGKILL left no %s: the stale file this test is about", urlFile)
		}
		if e := runsOf(t, bin, data); len(e) != 1 || e[0].Status != protocol.RunRunning || !e[0].Orphaned {
			t.Errorf("runs list after SIGKILL: %+v; want the run running and orphaned", e)
		}
		out, err := exec.Command(bin, "runs", "list", "--data", data).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "running (orphaned)") || !strings.Contains(string(out), "reins serve --data "+data+" carries it on to the end") {
			t.Errorf("runs list: %v\n%s", err, out)
		}
		s := startServe(t, data)
		if rec := wait(t, s.client(t), "left"); rec.Run.Status != protocol.RunCompleted {
			t.Errorf("under reins serve the orphan ended %s, want completed", rec.Run.Status)
		}
	})
}
