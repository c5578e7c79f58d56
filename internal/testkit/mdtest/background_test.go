package mdtest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A command ending in " &" runs in the background: the next command runs once it printed the
// parts of lines the README shows, and it is interrupted when the sessions end.
func TestRunnerBackground(t *testing.T) {
	dir := t.TempDir()
	readme := "```\n" +
		"$ sh -c 'echo $$ > pid; echo \"time=1 msg=\\\"serving at 7400\\\" path=/tmp/x\"; echo second; exec sleep 600' &\n" +
		"msg=\"serving at\n" +
		"...\n" +
		"second\n" +
		"$ cat pid\n" +
		"...\n" +
		"```\n"
	t.Run("check", func(t *testing.T) {
		r := Runner{Dir: dir, Env: os.Environ(), Programs: []string{"sh", "cat"}, Timeout: 30 * time.Second}
		r.Check(t, "README.md", []byte(readme))
	})
	raw, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the background command (pid %d) still runs after the sessions ended: %v", pid, err)
	}
}

// A background command that ends, or never prints what the README shows, is an error saying so
// with what it printed.
func TestRunnerBackgroundMissing(t *testing.T) {
	r := Runner{Dir: t.TempDir(), Env: os.Environ(), Timeout: 30 * time.Second}
	err := r.background(t, "echo something else", []string{"serving"})
	if err == nil || !strings.Contains(err.Error(), "it ended (<nil>) before it printed what the README shows\nsomething else") {
		t.Errorf("background: %v", err)
	}
	r.Timeout = 50 * time.Millisecond // the bound under test, not a wait for something to happen
	err = r.background(t, "echo something else; exec sleep 600", []string{"serving"})
	if err == nil || !strings.Contains(err.Error(), "it did not print what the README shows within 50ms") {
		t.Errorf("background: %v", err)
	}
}
