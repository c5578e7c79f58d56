package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/trigger"
	"github.com/reins-run/reins/workflow"
)

// TestServeSubjectTrigger: reins serve with an operator that allows orders.> runs the subject
// triggers of the registered workflows: a message on orders.created starts a run with the
// message as its input.
func TestServeSubjectTrigger(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ops.toml")
	if err := os.WriteFile(cfg, []byte("[triggers]\nsubjects = [\"orders.>\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, filepath.Join(dir, "data"), "--config", cfg)
	box, err := natsbox.Open(t.Context(), natsbox.Options{URL: s.url, Token: s.token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	c := s.client(t)
	src := "name = \"orders\"\n[[steps]]\nid = \"done\"\ntype = \"terminate\"\n[[triggers]]\nname = \"created\"\nsubject = \"orders.created\"\n"
	def, ps := workflow.Parse("orders.toml", []byte(src))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	def.Normalize()
	if _, _, err := c.Register(t.Context(), "orders", []byte(src), def); err != nil {
		t.Fatal(err)
	}
	// serve reads the registry every few seconds and then makes the trigger's consumer: a
	// message published before it exists is not kept (nothing listens on it yet).
	id := trigger.RunID("subject", "orders", "created", "id:m-1")
	m := nats.NewMsg("orders.created")
	m.Data = []byte(`{"order_id": "O-1"}`)
	m.Header.Set(nats.MsgIdHdr, "m-1")
	awaitConsumer(t, box)
	if _, err := box.JetStream().PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	rec := wait(t, c, id)
	if got := string(rec.Run.Input); got != `{"order_id": "O-1"}` && got != `{"order_id":"O-1"}` {
		t.Fatalf("input %s", got)
	}
}

// awaitConsumer waits until the stream of subject triggers has a consumer: serve makes the
// stream when its triggers start, and the trigger's consumer once it read the registry. It
// looks again at each JetStream advisory (a stream or consumer created).
func awaitConsumer(t *testing.T, box *natsbox.Box) {
	t.Helper()
	ctx := t.Context()
	sub, err := box.Conn().SubscribeSync("$JS.EVENT.ADVISORY.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for {
		if st, err := box.JetStream().Stream(ctx, box.Names().TriggersStream()); err == nil {
			if info, err := st.Info(ctx); err == nil && info.State.Consumers > 0 {
				return
			}
		}
		if _, err := sub.NextMsgWithContext(ctx); err != nil {
			t.Fatalf("no consumer of subject triggers was made: %v", err)
		}
	}
}

// TestRunIgnoresTriggers: reins run runs a workflow with triggers once, and says that it
// ignores them.
func TestRunIgnoresTriggers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tick.toml")
	src := "name = \"tick\"\n[[steps]]\nid = \"done\"\ntype = \"terminate\"\n[[triggers]]\nname = \"every-5\"\nschedule = \"*/5 * * * *\"\n"
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, "run", file, "--data", filepath.Join(dir, "data"))
	if code != 0 || !strings.Contains(errOut, "reins: note: workflow tick has 1 trigger(s): reins run runs it once, now, and ignores them") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
}
