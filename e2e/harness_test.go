//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/reins-run/reins/internal/natsbox/embed" // natsbox.Open starts embedded servers
	"github.com/reins-run/reins/internal/testkit/buildtest"
)

// bins holds the programs most tests run, found or built once by TestMain.
var bins struct {
	reins, natsServer, loopworker string
}

// TestMain takes the programs from the directory REINS_TEST_BIN names (.ci/run builds them
// there first, so that no build counts against -timeout), or builds them once. Either way they
// are built as the container image builds reins (package buildtest), so that the tests run the
// binary the image ships.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reins-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	found, err := buildtest.ProgramsIn(dir,
		"github.com/reins-run/reins/cmd/reins",
		"github.com/nats-io/nats-server/v2",
		"github.com/reins-run/reins/e2e/testdata/loopworker")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	bins.reins, bins.natsServer, bins.loopworker = found[0], found[1], found[2]
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a child process whose output lines are delivered on a channel.
type proc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	lines  chan string
	mu     sync.Mutex
	all    []string
	grew   chan struct{} // closed and replaced when a line arrives
	exited chan struct{}
}

// start starts a process; its stdout and stderr lines both go to lines (and to the test log
// when the test fails).
func start(t testing.TB, name string, env []string, argv ...string) *proc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, name, cmd)
}

// startCmd starts cmd, prepared by the caller (its environment, its user), as start does.
func startCmd(t testing.TB, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	p := &proc{t: t, name: name, cmd: cmd, lines: make(chan string, 4096), exited: make(chan struct{}), grew: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.all = append(p.all, line)
			close(p.grew)
			p.grew = make(chan struct{})
			p.mu.Unlock()
			select {
			case p.lines <- line:
			default: // nobody waits for it; it stays in all
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		w.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			p.dumpStacks()
		}
		p.kill()
		if dir := os.Getenv("REINS_E2E_LOGS"); dir != "" {
			// The output of every process, kept for a reader: a benchmark passes without it.
			p.mu.Lock()
			out := strings.Join(p.all, "\n") + "\n"
			p.mu.Unlock()
			file := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(name)+"-"+strconv.Itoa(cmd.Process.Pid)+".log")
			if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
				t.Logf("keep the output of %s: %v", name, err)
			}
		}
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s output:\n%s", name, strings.Join(p.all, "\n"))
			p.mu.Unlock()
		}
	})
	return p
}

// waitFor reads lines until one contains want, or fails the test after the timeout.
func (p *proc) waitFor(want string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line := <-p.lines:
			if strings.Contains(line, want) {
				return line
			}
		case <-p.exited:
			p.t.Fatalf("%s exited while waiting for %q", p.name, want)
		case <-deadline.C:
			p.t.Fatalf("%s: no line with %q within %s", p.name, want, timeout)
		}
	}
}

// dumpStacks asks a Go process still running for its goroutines (SIGQUIT makes the runtime
// print them and exit), so that a failed test shows where a process was stuck.
func (p *proc) dumpStacks() {
	select {
	case <-p.exited:
		return
	default:
	}
	if p.cmd.Process == nil || p.cmd.Process.Signal(syscall.SIGQUIT) != nil {
		return
	}
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() { p.signal(syscall.SIGKILL) }

// signal sends sig to the process and waits until it exited.
func (p *proc) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
	<-p.exited
}

// awaitLine waits until some line printed so far (or later) contains want.
func (p *proc) awaitLine(want string, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		grew := p.grew
		for _, l := range p.all {
			if strings.Contains(l, want) {
				p.mu.Unlock()
				return true
			}
		}
		p.mu.Unlock()
		select {
		case <-grew:
		case <-p.exited:
			return hasLine(p, want)
		case <-deadline.C:
			return false
		}
	}
}

// output returns every line the process printed so far.
// awaitAny reports whether one of ps prints a line containing want within timeout; it returns
// false at once when every one of them has exited without printing it.
func awaitAny(ps []*proc, want string, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline.C)}}
		for _, p := range ps {
			p.mu.Lock()
			grew, found := p.grew, slices.ContainsFunc(p.all, func(l string) bool { return strings.Contains(l, want) })
			p.mu.Unlock()
			if found {
				return true
			}
			select {
			case <-p.exited:
				if hasLine(p, want) { // lines read after the last look
					return true
				}
			default:
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(grew)},
					reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.exited)})
			}
		}
		if len(cases) == 1 {
			return false // every one exited
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			return false
		}
	}
}

func (p *proc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.all...)
}

// natsServer starts nats-server with JetStream storing in dir on port.
func natsServer(t testing.TB, dir string, port int) *proc {
	t.Helper()
	p := start(t, "nats-server", nil, bins.natsServer, "-js", "-sd", dir, "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	p.waitFor("Server is ready", 30*time.Second)
	return p
}

// serve starts the engine (reins serve --no-workers) against url.
func serve(t testing.TB, url string, env ...string) *proc {
	t.Helper()
	p := start(t, "reins serve", env, bins.reins, "serve", "--nats", url, "--listen", "127.0.0.1:0", "--no-workers", "--ack-wait", "1s")
	p.waitFor("reins serving", 30*time.Second)
	return p
}

// loopWorker starts a worker process serving "count".
func loopWorker(t testing.TB, url, state string, hang int) *proc {
	t.Helper()
	p := start(t, "loopworker", nil, bins.loopworker, "-nats", url, "-ack-wait", "1s", "-state", state, "-hang", fmt.Sprint(hang))
	p.waitFor("ready", 30*time.Second)
	return p
}

// reins runs the reins binary to its end and returns its stdout.
func reins(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.reins, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reins %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
