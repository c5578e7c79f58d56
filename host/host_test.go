package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

func openBox(t *testing.T) *natsbox.Box {
	t.Helper()
	return openBoxAt(t, t.TempDir())
}

func openBoxAt(t *testing.T, dir string) *natsbox.Box {
	t.Helper()
	box, err := natsbox.Open(context.Background(), natsbox.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	return box
}

// failureLog is a logger whose lines the test prints only when it fails: a run that does not
// complete in time shows what the engine and the worker did.
func failureLog(t *testing.T) *slog.Logger {
	t.Helper()
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("the parts logged:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// oneTask is a workflow of one task step served by handler.
func oneTask(t *testing.T, handler string) *workflow.Bundles {
	t.Helper()
	wf := workflow.New(handler)
	wf.Task("work", handler)
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// The engine and a worker hosted together run a workflow to its end; Stop stops both, and a
// second Stop does nothing.
func TestHostRunsAWorkflow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	box := openBox(t)
	registered := false
	h, err := host.Start(ctx, host.Config{
		Conn: (*conn.Conn)(box), Engine: true,
		Handlers: map[string]worker.Handler{"double": func(t worker.TaskContext) error {
			var n int
			if err := json.Unmarshal(t.Input(), &n); err != nil {
				return t.FailPermanent(err)
			}
			return t.Complete(2 * n)
		}},
		Register: func(*worker.Worker) error { registered = true; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !registered {
		t.Error("Register was not called")
	}
	c := client.New(client.Config{Conn: (*conn.Conn)(box)})
	id, err := c.Start(ctx, oneTask(t, "double"), json.RawMessage(`21`), "")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != "42" {
		t.Errorf("run %s with output %s; want completed with 42", rec.Run.Status, rec.Run.Output)
	}
	h.Stop()
	h.Stop()
}

// A worker that cannot be built fails Start with its error, and nothing is left running.
func TestStartFails(t *testing.T) {
	box := openBox(t)
	refused := errors.New("no handlers today")
	_, err := host.Start(context.Background(), host.Config{Conn: (*conn.Conn)(box), Engine: true,
		Register: func(*worker.Worker) error { return refused }})
	if !errors.Is(err, refused) {
		t.Fatalf("Start: %v, want the Register error", err)
	}
}

// Wait returns nil once its context is done, after stopping the parts.
func TestWaitUntilDone(t *testing.T) {
	box := openBox(t)
	h, err := host.Start(context.Background(), host.Config{Conn: (*conn.Conn)(box), Engine: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Wait(ctx); err != nil {
		t.Errorf("Wait: %v, want nil when its context is done", err)
	}
}

// StartEmbedded hosts the parts on a server of its own, and Stop closes that server too: the
// data directory is free again for the next one, which finds the run there.
func TestStartEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	h, err := host.StartEmbedded(ctx, dir, host.Config{Engine: true, Logger: failureLog(t), Handlers: map[string]worker.Handler{
		"hello": func(t worker.TaskContext) error { return t.Complete("hello") },
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Config{Conn: h.Conn()})
	id, err := c.Start(ctx, oneTask(t, "hello"), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := c.Wait(ctx, id); err != nil || rec.Run.Status != protocol.RunCompleted {
		now, gerr := c.Get(context.Background(), id)
		t.Fatalf("Wait: %v, %v; the run now: %+v (%v)", rec, err, now, gerr)
	}
	h.Stop()
	if !(*natsbox.Box)(h.Conn()).Conn().IsClosed() {
		t.Error("the connection is open after Stop")
	}
	again := openBoxAt(t, dir)
	rec, err := client.New(client.Config{Conn: (*conn.Conn)(again)}).Get(ctx, id)
	if err != nil || string(rec.Run.Output) != `"hello"` {
		t.Fatalf("the run on the next server: %v, %v", rec, err)
	}
}
