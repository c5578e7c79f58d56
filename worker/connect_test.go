package worker

import (
	"context"
	"strings"
	"testing"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
)

// A worker program connects with Connect: over TCP, with a worker principal's token, to the
// embedded server of another process. It serves, and its connection closes when Run returns.
func TestConnect(t *testing.T) {
	const token = "worker-token-0123456789"
	e := newEnvOpts(t, natsbox.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		Authenticate: func(tok string) (natsbox.Identity, bool) {
			return natsbox.Identity{Name: "w1", Roles: []string{natsbox.RoleWorker}}, tok == token
		}})
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	w, err := Connect(ctx, Config{NATS: NATS{URL: e.box.ClientURL(), Token: token}})
	if err != nil {
		t.Fatal(err)
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
	if !w.box.Conn().IsClosed() {
		t.Error("the connection Connect opened is still open after Run returned")
	}

	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.NATS.URL is empty"},
		{Config{Conn: (*conn.Conn)(e.box), NATS: NATS{URL: e.box.ClientURL()}}, "give Config.Conn to New"},
		{Config{NATS: NATS{URL: e.box.ClientURL(), Token: "not-the-token-4711"}}, "refused the credentials"},
		{Config{NATS: NATS{URL: e.box.ClientURL(), Token: token, JSDomain: "hub.east"}}, `JetStream domain "hub.east" is not one subject token`},
		{Config{NATS: NATS{URL: e.box.ClientURL(), Token: token, JSAPIPrefix: "JS.>"}}, `API prefix "JS.>" is not a subject without wildcards`},
	} {
		_, err := Connect(testCtx(t), c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Connect to %q: %v, want an error with %q", c.cfg.NATS.URL, err, c.want)
		} else if strings.Contains(err.Error(), "4711") {
			t.Errorf("the error shows the token: %v", err)
		}
	}
}
