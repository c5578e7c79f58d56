package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/natstest"
	"github.com/reins-run/reins/protocol"
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
