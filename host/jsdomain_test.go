package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/natstest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
)

// TestJSDomain: an engine and a worker connected to a leaf node, which runs a JetStream domain
// of its own ("leaf"), use its hub's JetStream through JSDomain "hub": a run completes, and
// its streams, events and record are in the hub's JetStream, none in the leaf's.
func TestJSDomain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hub, leaf := natstest.HubAndLeaf(t, ctx, "hub", "leaf")
	box, err := natsbox.Open(ctx, natsbox.Options{URL: leaf.ClientURL(), JSDomain: "hub", Namespace: "d"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	tn := startTenant(ctx, t, box)

	id, err := tn.c.Start(ctx, oneTask(t, "tag"), json.RawMessage(`7`), "")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := tn.c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"in":7,"ns":"d"}`; rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != want {
		t.Errorf("run %s with output %s, want completed with %s", rec.Run.Status, rec.Run.Output, want)
	}

	hubJS, leafJS := natstest.JetStream(t, hub.ClientURL()), natstest.JetStream(t, leaf.ClientURL())
	names := box.Names()
	events, err := hubJS.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatalf("the hub's %s: %v", names.EventsStream(), err)
	}
	if info, err := events.Info(ctx); err != nil || info.State.Msgs == 0 {
		t.Errorf("the hub's events of run %s: %v, err %v; want some", id, info, err)
	}
	runs, err := hubJS.KeyValue(ctx, names.RunsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Get(ctx, id); err != nil {
		t.Errorf("the hub's record of run %s: %v", id, err)
	}
	for name := range leafJS.StreamNames(ctx).Name() {
		t.Errorf("the leaf's own JetStream has stream %s, want none", name)
	}
	if _, err := leafJS.Stream(ctx, names.EventsStream()); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the leaf's %s: %v, want ErrStreamNotFound", names.EventsStream(), err)
	}
}

// TestJSAPIPrefixRun: an engine, a worker and a client in account I, which reaches account A's
// JetStream through an imported API prefix (the accounts below: docs/deploy.md gives them to
// operators), run a workflow to its end; the run's events and record are in A's JetStream.
func TestJSAPIPrefixRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	as := natstest.StartAccounts(t, apiPrefixAccounts)
	box, err := natsbox.Open(ctx, natsbox.Options{URL: as("i:i"), JSAPIPrefix: "fromA"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	h, err := host.Start(ctx, host.Config{Conn: (*conn.Conn)(box), Engine: true, Handlers: map[string]worker.Handler{
		"tag": func(tc worker.TaskContext) error { return tc.Complete(tc.Input()) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	c := client.New(client.Config{Conn: (*conn.Conn)(box)})
	id, err := c.Start(ctx, oneTask(t, "tag"), json.RawMessage(`7`), "")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != "7" {
		t.Errorf("run %s with output %s, want completed with 7", rec.Run.Status, rec.Run.Output)
	}
	h.Stop() // what was acknowledged has reached the server
	if err := box.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	owner := natstest.JetStream(t, as("a:a"))
	runs, err := owner.KeyValue(ctx, box.Names().RunsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Get(ctx, id); err != nil {
		t.Errorf("account A's record of run %s: %v", id, err)
	}
	// The acknowledgements crossed the import: no task or event waits for its AckWait again.
	for _, stream := range []string{box.Names().TasksStream(), box.Names().EventsStream()} {
		s, err := owner.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		list := s.ListConsumers(ctx)
		for info := range list.Info() {
			if info.NumAckPending != 0 || info.NumRedelivered != 0 {
				t.Errorf("consumer %s of %s: %d unacknowledged, %d redelivered; want none", info.Name, stream, info.NumAckPending, info.NumRedelivered)
			}
		}
		if err := list.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// apiPrefixAccounts is account A, which has JetStream, and account I, which uses it under the
// API prefix "fromA": the JetStream API with its acknowledgements and flow control, the KV
// subjects, the subjects reins publishes into streams, and the subjects consumers deliver to.
const apiPrefixAccounts = `
accounts: {
  A: {
    users: [{user: a, password: a}]
    jetstream: enabled
    exports: [
      {service: "$JS.API.>", response_type: stream}
      {service: "$JS.ACK.>"}
      {service: "$JS.FC.>"}
      {service: "$KV.>"}
      {service: "reins.>"}
      {stream: "_INBOX.>"}
    ]
  }
  I: {
    users: [{user: i, password: i}]
    imports: [
      {service: {account: A, subject: "$JS.API.>"}, to: "fromA.>"}
      {service: {account: A, subject: "$JS.ACK.>"}}
      {service: {account: A, subject: "$JS.FC.>"}}
      {service: {account: A, subject: "$KV.>"}, to: "fromA.$KV.>"}
      {service: {account: A, subject: "reins.>"}}
      {stream: {account: A, subject: "_INBOX.>"}}
    ]
  }
}
`
