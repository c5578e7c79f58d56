package mdtest

import (
	"context"
	"os"
	"os/exec"
	"strings"
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
