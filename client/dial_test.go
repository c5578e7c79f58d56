package client_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// server is a program that embeds reins and listens on loopback: the engine runs there, and
// nothing of it in the test's client, which reaches it over TCP with the admin's token.
func server(t *testing.T, ctx context.Context) (url, token string) {
	t.Helper()
	dir := t.TempDir()
	r, err := reins.New(ctx, reins.Config{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	token, err = operator.ReadAdminToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r.ClientURL(), token
}

// shipFlow waits for an approval, then runs the task "pack" (served by a worker of the
// client's program) and waits for the signal "go".
func shipFlow(t *testing.T) *workflow.Bundles {
	t.Helper()
	wf := workflow.New("ship")
	wf.Approval("ask", "Ship?")
	wf.Task("pack", "pack")
	wf.WaitEvent("await", "go")
	wf.Edge("ask", "pack").When("approved")
	wf.Edge("pack", "await")
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

// TestDial: a program with no engine dials a listening server, serves a handler with a worker
// on the same connection, starts a run, approves it, signals it and watches it to its end;
// a wrong token is refused in one sentence.
func TestDial(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url, token := server(t, ctx)

	if _, err := client.Dial(ctx, url, conn.Token("not-the-token")); err == nil {
		t.Fatal("Dial with a wrong token: no error")
	} else if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "the token is not one the server knows") || !strings.Contains(msg, url) || strings.Contains(msg, "not-the-token") {
		t.Errorf("Dial with a wrong token: %q: want one sentence naming the server and the unknown token, without it", msg)
	}

	c, err := client.Dial(ctx, url, conn.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Principal() != "admin" {
		t.Errorf("Principal: %q, want admin", c.Principal())
	}
	w, err := worker.New(c.Conn(), worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("pack", func(tc worker.TaskContext) error { return tc.Complete("packed") })
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()
	<-w.Ready()

	id, err := c.Start(ctx, shipFlow(t), json.RawMessage(`{"order":"O-1"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	var events []protocol.EventType
	var last *client.Record
	approved, signalled := false, false
	for u, err := range c.Watch(ctx, id, client.WatchOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if u.Event != nil {
			events = append(events, u.Event.Type)
			continue
		}
		last = u.Record
		for _, ws := range client.WaitingSteps(nil, u.Record.Run) {
			switch {
			case ws.Wait == protocol.WaitApproval && !approved:
				approved = true
				if err := c.Approve(ctx, id, ws.Key, "go ahead"); err != nil {
					t.Fatal(err)
				}
			case ws.Wait == protocol.WaitEvent && !signalled:
				signalled = true
				if err := c.Signal(ctx, id, "go", json.RawMessage(`{"truck":7}`)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if last == nil || last.Run.Status != protocol.RunCompleted {
		t.Fatalf("the watch ended on %+v, want the completed run", last)
	}
	want := []protocol.EventType{protocol.EvStart, protocol.EvDecision, protocol.EvCompleted, protocol.EvSignal}
	if !slices.Equal(events, want) {
		t.Errorf("events watched: %q, want %q", events, want)
	}
	got, err := c.Get(ctx, id)
	if err != nil || !got.Finished() {
		t.Fatalf("Get after the watch: %+v, %v", got, err)
	}
	if out := string(got.Run.Output); out != `{"truck":7}` {
		t.Errorf("the run's output: %s, want the signal's data", out)
	}
}
