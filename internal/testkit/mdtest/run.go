package mdtest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Runner runs a README's shell sessions as written, one command after another, in order.
type Runner struct {
	Dir string   // the working directory of every command
	Env []string // the commands' environment (PATH finds the shims)
	// Programs are the commands the README may run: a command must start with one of them (a
	// whole word), so that a README's new command is not run unseen, nor left unchecked.
	Programs []string
	Timeout  time.Duration // for each command; a minute when zero
}

// Check runs every session of file's blocks and fails t where the output differs from what the
// README shows. Each command runs with sh -c as the README writes it, the run ids it shows
// replaced by the real ones (Matcher); what it prints on stdout and stderr is compared as one
// output, in the order it was printed, as in a terminal. The exit status is not compared: the
// README shows output, and a command that fails says so there.
//
// A command that ends in " &" runs in the background, as in a shell, until the file's sessions
// end; then it is interrupted (SIGINT, to its process group). The lines the README shows under
// it (a log, whose lines carry times and paths) are parts of lines it must print, in order,
// before the next command runs; "..." lines are ignored there.
func (r Runner) Check(t *testing.T, file string, src []byte) {
	t.Helper()
	blocks, err := Blocks(file, src)
	if err != nil {
		t.Fatal(err)
	}
	var m Matcher
	ran := 0
	for _, b := range blocks {
		for _, c := range Session(b) {
			if !r.known(c.Text) {
				t.Errorf("%s:%d: the README runs %q, which is none of the programs this test runs (%s)",
					file, c.Line, c.Text, strings.Join(r.Programs, ", "))
				continue
			}
			text := m.Command(c.Text)
			if bg, ok := strings.CutSuffix(text, " &"); ok {
				if err := r.background(t, bg, c.Want); err != nil {
					t.Fatalf("%s:%d: $ %s: %v", file, c.Line, text, err)
				}
				ran++
				continue
			}
			out := r.run(t, text)
			if err := m.Output(c.Want, out); err != nil {
				t.Errorf("%s:%d: $ %s: %v", file, c.Line, text, err)
			}
			ran++
		}
	}
	if ran == 0 {
		t.Errorf("%s: no command ran: the README shows no session (lines that start with \"$ \")", file)
	}
}

// known reports whether text starts with one of the programs.
func (r Runner) known(text string) bool {
	for _, p := range r.Programs {
		if text == p || strings.HasPrefix(text, p+" ") {
			return true
		}
	}
	return false
}

// run runs text with sh -c and returns what it printed.
func (r Runner) run(t *testing.T, text string) string {
	t.Helper()
	d := r.Timeout
	if d == 0 {
		d = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", text)
	cmd.Dir, cmd.Env = r.Dir, r.Env
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && (!exited || ctx.Err() != nil) {
		t.Fatalf("$ %s: %v (after %s)\n%s", text, err, d, out.String())
	}
	return out.String()
}

// background starts text in the background, stopped when t ends, and waits until it has
// printed the parts of lines want shows, in order (within the command's timeout).
func (r Runner) background(t *testing.T, text string, want []string) error {
	t.Helper()
	d := cmp.Or(r.Timeout, time.Minute)
	cmd := exec.Command("sh", "-c", text)
	cmd.Dir, cmd.Env = r.Dir, r.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &lines{grew: make(chan struct{}, 1)}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{}) // closed when cmd ended, with waitErr set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(d):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Errorf("$ %s &: still running %s after it was interrupted", text, d)
		}
	})
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for !out.has(want) {
		select {
		case <-out.grew:
		case <-exited:
			return fmt.Errorf("it ended (%v) before it printed what the README shows\n%s", waitErr, out.String())
		case <-deadline.C:
			return fmt.Errorf("it did not print what the README shows within %s\n%s", d, out.String())
		}
	}
	return nil
}

// lines is the output of a background command, which it signals on grew as it grows.
type lines struct {
	mu   sync.Mutex
	b    strings.Builder
	grew chan struct{}
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	select {
	case l.grew <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// has reports whether the output has lines holding each of want's, in order; "..." lines
// aside.
func (l *lines) has(want []string) bool {
	got := strings.Split(l.String(), "\n")
	i := 0
	for _, w := range want {
		if strings.TrimSpace(w) == Elided {
			continue
		}
		for i < len(got) && !strings.Contains(got[i], w) {
			i++
		}
		if i == len(got) {
			return false
		}
		i++
	}
	return true
}

// Env returns the environment of the commands: this process's, with dir first on PATH and
// without the REINS_ variables (a reader's $REINS_SERVER or $REINS_TOKEN would send the
// README's commands elsewhere than the embedded defaults it shows).
func Env(dir string) []string {
	env := []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "REINS_") {
			env = append(env, kv)
		}
	}
	return env
}
