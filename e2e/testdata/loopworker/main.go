// Command loopworker is the worker process of the crash tests: it serves the agent_loop handler
// "count", which iterates until the iteration in its input's "until" and completes with the
// iteration count. It prints one line per event the tests wait for, on stdout:
//
//	start RUN ITERATION ATTEMPT    the handler began an iteration
//	done RUN ITERATION             the handler answered (Continue or Complete) and it was stored
//	hang RUN ITERATION             the handler will never answer this iteration (-hang)
//	stopped RUN ITERATION: CAUSE   the hanging handler's context ended (the run was cancelled)
//
// With -hang N it never answers iteration N the first time any worker reaches it (a marker
// file in -state records that), so that the test can kill it mid-iteration. With -effects FILE
// each iteration has a side effect, through the worker's effect leases: the line "RUN
// ITERATION" appended to FILE, which the tests count. With -stop FILE an iteration that finds
// FILE there completes the run, whatever its "until": runs that last as long as the test needs.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/telemetry"
	"github.com/reins-run/reins/worker"
)

func main() {
	url := flag.String("nats", "", "NATS URL")
	ackWait := flag.Duration("ack-wait", time.Second, "consumer AckWait")
	hang := flag.Int("hang", 0, "never answer this iteration the first time it runs")
	state := flag.String("state", "", "directory for the hang marker")
	flag.StringVar(&effects, "effects", "", "file each iteration appends a line to, once (an effect)")
	flag.DurationVar(&pace, "pace", 0, "how long each iteration works before it answers")
	flag.StringVar(&stop, "stop", "", "a file whose presence makes the next iteration complete the run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *ackWait, *hang, *state); err != nil {
		fmt.Fprintln(os.Stderr, "loopworker:", err)
		os.Exit(1)
	}
}

var (
	out     sync.Mutex
	effects string
	pace    time.Duration
	stop    string
)

// stopped reports whether the -stop file is there.
func stopped() bool {
	if stop == "" {
		return false
	}
	_, err := os.Stat(stop)
	return err == nil
}

// effect applies the effect "RUN ITERATION" once per iteration, whatever crashes: through the
// worker's effect leases, and, in the system it changes, by its idempotency key, as
// docs/engine.md asks of an effect that must never repeat: a holder killed after the effect and
// before its result was recorded has the call made again with the same key. The system here is
// the directory FILE.keys, one file per key (named by its SHA-256) holding "RUN ITERATION", linked into place
// atomically (a link fails when the key is there). Every call is also appended to FILE.calls,
// for the tests to count the calls made again.
func effect(t worker.TaskContext) error {
	if effects == "" {
		return nil
	}
	_, err := t.Effect("append", func(_ context.Context, key string) (any, error) {
		line := fmt.Sprintf("%s %d", t.RunID(), t.Iteration())
		if err := appendSync(effects+".calls", line+"\n"); err != nil {
			return nil, err
		}
		dir := effects + ".keys"
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		tmp, err := os.CreateTemp(dir, ".tmp-*")
		if err != nil {
			return nil, err
		}
		defer os.Remove(tmp.Name())
		if _, err := tmp.WriteString(line); err != nil {
			tmp.Close()
			return nil, err
		}
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return nil, err
		}
		tmp.Close()
		name := sha256.Sum256([]byte(key)) // a key holds slashes
		if err := os.Link(tmp.Name(), filepath.Join(dir, hex.EncodeToString(name[:]))); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		return line, nil
	})
	return err
}

// appendSync appends s to file and syncs it.
func appendSync(file, s string) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		return err
	}
	return f.Sync()
}

func say(format string, v ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", v...)
}

func run(ctx context.Context, url string, ackWait time.Duration, hang int, state string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Traces when the OTEL_* environment asks for them, as a worker program would set them up.
	tp, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "loopworker"})
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	c, err := conn.Dial(ctx, url, conn.Name("loopworker"), conn.Logger(log))
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := worker.New(c, worker.Options{AckWait: ackWait, Logger: log})
	if err != nil {
		return err
	}
	w.Handle("count", func(t worker.TaskContext) error {
		var in struct {
			Until int `json:"until"`
			// FailFirst fails the first attempt of iteration 1 (retryably), for the retry
			// backoff tests.
			FailFirst bool `json:"fail_first,omitempty"`
		}
		first := t.Iteration() == 1
		raw := t.Input()
		if !first {
			// later iterations receive the previous output; the bound is in the checkpoint
			ck, err := t.LoadCheckpoint()
			if err != nil {
				return err
			}
			raw = ck
		}
		if err := json.Unmarshal(raw, &in); err != nil || in.Until < 1 {
			return t.FailPermanent(fmt.Errorf("input %s: want {\"until\": N > 0}", raw))
		}
		if first {
			if err := t.Checkpoint(in); err != nil {
				return err
			}
		}
		say("start %s %d %d", t.RunID(), t.Iteration(), t.Attempt())
		if first && in.FailFirst && t.Attempt() == 1 {
			return t.Fail(errors.New("the first attempt fails, as fail_first asks"))
		}
		if t.Iteration() == hang && claim(state, t.RunID()) {
			say("hang %s %d", t.RunID(), t.Iteration()) // the marker exists: the test may kill
			<-t.Done()                                  // killed here by the test, or the run is cancelled
			say("stopped %s %d: %v", t.RunID(), t.Iteration(), context.Cause(t))
			return t.Err()
		}
		if pace > 0 {
			select {
			case <-time.After(pace):
			case <-t.Done():
				return t.Err()
			}
		}
		if err := effect(t); err != nil {
			say("effect failed %s %d: %v", t.RunID(), t.Iteration(), err)
			return t.Fail(err)
		}
		var err error
		if t.Iteration() >= in.Until || stopped() {
			err = t.Complete(map[string]int{"iterations": t.Iteration()})
		} else {
			err = t.Continue(map[string]int{"iteration": t.Iteration()})
		}
		if err == nil {
			say("done %s %d", t.RunID(), t.Iteration())
		}
		return err
	})
	go func() {
		<-w.Ready()
		say("ready")
	}()
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// claim creates the hang marker of run; it reports whether this call created it.
func claim(dir, run string) bool {
	if dir == "" {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, "hang-"+filepath.Base(run)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
