package worker

import (
	"context"
	"testing"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
)

// A worker program dials with conn.Dial (over TCP, with a worker principal's token, to the
// embedded server of another process) and builds its worker on that connection: it serves,
// and the connection stays open when Run returns, for the program to close.
func TestNewOnDialedConn(t *testing.T) {
	const token = "worker-token-0123456789"
	e := newEnvOpts(t, natsbox.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		Authenticate: func(tok string) (natsbox.Identity, bool) {
			return natsbox.Identity{Name: "w1", Roles: []string{natsbox.RoleWorker}}, tok == token
		}})
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	c, err := conn.Dial(ctx, e.box.ClientURL(), conn.Token(token), conn.Name("test-worker"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Conn() != c {
		t.Error("Conn is not the connection the worker was built on")
	}
	w.Handle("echo", func(tc TaskContext) error { return tc.Complete(tc.Input()) })
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-w.Ready()
	e.publish(task("r1", "s", "echo", 1, 1))
	if ev := e.event(); ev.Type != protocol.EvCompleted || string(ev.Output) != `{"n":1}` {
		t.Fatalf("the answer: %s %s", ev.Type, ev.Output)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w.box.Conn().IsClosed() {
		t.Error("Run closed the connection it was given: its program closes it")
	}
	if p, err := c.Principal(testCtx(t)); err != nil || p != "w1" {
		t.Errorf("after Run: Principal %q, %v; want w1 on the open connection", p, err)
	}
}
