// Command effectworker is the worker process of the side-effect tests: it serves the built-in
// agent handler with one Go tool, "counter.append", whose side effect is a line appended to the
// file named by REINS_COUNTER_FILE (outside the worker, so that the test counts every time the
// effect really happened). It prints one line per event the tests wait for, on stdout:
//
//	ready                        the worker consumes tasks
//	effect-start KEY             the tool was called (call KEY); with -slow it then waits that
//	                             long, whatever its context says, before its effect
//	effect KEY LINE              the tool appended LINE to the counter file (call KEY)
//	effect-replayed KEY          call KEY returned its recorded result: the tool was not called
//	fault kill-after-effect N    the process kills itself (REINS_FAULT, below)
//
// With -config FILE it serves as a server's worker does: the MCP servers of the operator's
// configuration serve the workflows' mcp tools.
//
// REINS_FAULT=kill-after-effect:N makes the process SIGKILL itself right after the N-th result
// of a side-effecting call was recorded in reins_effects: after the tool ran and before the
// loop goes on, so before the iteration is checkpointed and its task answered or acknowledged.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/worker"
)

// faultEnv names the fault injection; counterEnv the counter file.
const (
	faultEnv   = "REINS_FAULT"
	counterEnv = "REINS_COUNTER_FILE"
)

func main() {
	url := flag.String("nats", "", "NATS URL")
	ackWait := flag.Duration("ack-wait", time.Second, "consumer AckWait")
	slow := flag.Duration("slow", 0, "how long the tool takes before its effect, ignoring its context (a remote system that finishes what it started)")
	config := flag.String("config", "", "the operator's configuration: its MCP servers serve the workflows' mcp tools")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *ackWait, *slow, *config); err != nil {
		fmt.Fprintln(os.Stderr, "effectworker:", err)
		os.Exit(1)
	}
}

var out sync.Mutex

// say prints a line on stdout, unbuffered, so that it is out before a SIGKILL.
func say(format string, v ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", v...)
}

func run(ctx context.Context, url string, ackWait, slow time.Duration, config string) error {
	counter := os.Getenv(counterEnv)
	if counter == "" {
		return fmt.Errorf("%s is not set: name the file the tool appends to", counterEnv)
	}
	killAfter, err := parseFault(os.Getenv(faultEnv))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := conn.Dial(ctx, url, conn.Name("effectworker"), conn.Logger(log))
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := worker.New(c, worker.Options{AckWait: ackWait, Logger: log})
	if err != nil {
		return err
	}
	cfg := builtin.Config{
		Tools:   map[string]tool.Tool{"counter.append": appendTool(counter, slow)},
		Effects: &faulty{EffectStore: w.Effects(), after: killAfter},
		Logger:  log,
	}
	if config != "" { // as reins worker --config: the operator's MCP servers and limits
		op, err := operator.Load(config)
		if err != nil {
			return err
		}
		res, err := op.Resolve(nil, nil)
		if err != nil {
			return err
		}
		cfg.Operator, cfg.ToolTimeout = res, op.Limits.ToolTimeout
	}
	if err := builtin.Register(w, cfg, protocol.HandlerAgent); err != nil {
		return err
	}
	go func() {
		<-w.Ready()
		say("ready")
	}()
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// appendTool appends a line naming the call, the process and a random nonce to the counter
// file, and returns that line and the file's line count: a result that a second execution
// could not reproduce. It first waits slow.
func appendTool(path string, slow time.Duration) tool.Tool {
	spec := tool.Spec{Name: "append_line", Description: "Append a line to the counter file.", SideEffect: true}
	return tool.New(spec, func(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
		var in struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, &tool.Error{Message: "append_line: arguments: " + err.Error()}
		}
		say("effect-start %s", key)
		time.Sleep(slow) // the remote system's work: it does not stop when the caller gives up
		nonce := make([]byte, 8)
		_, _ = rand.Read(nonce)
		line := fmt.Sprintf("%s %s pid=%d nonce=%s", key, in.Text, os.Getpid(), hex.EncodeToString(nonce))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		_, werr := f.WriteString(line + "\n")
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		say("effect %s %s", key, line)
		return json.Marshal(map[string]any{"line": line, "lines": strings.Count(string(data), "\n")})
	})
}

// faulty is the worker's record of side effects, killing the process right after its after-th
// result was recorded (0: never).
type faulty struct {
	builtin.EffectStore
	after int64
	n     atomic.Int64
}

func (f *faulty) Once(ctx context.Context, id string, lease worker.Lease, do func(context.Context) ([]byte, error)) ([]byte, error) {
	ran := false
	v, err := f.EffectStore.Once(ctx, id, lease, func(ctx context.Context) ([]byte, error) {
		ran = true
		return do(ctx)
	})
	if err == nil && !ran {
		say("effect-replayed %s", strings.SplitN(id, "\x00", 2)[0])
	}
	if err == nil && ran && f.after > 0 && f.n.Add(1) == f.after {
		say("fault kill-after-effect %d", f.after)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal ends the process before anything else runs here
	}
	return v, err
}

// parseFault reads REINS_FAULT: empty, or kill-after-effect:N with N a positive integer.
func parseFault(f string) (int64, error) {
	if f == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(f, "kill-after-effect:"), 10, 64)
	if !strings.HasPrefix(f, "kill-after-effect:") || err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want kill-after-effect:N with N a positive integer", faultEnv, f)
	}
	return n, nil
}
