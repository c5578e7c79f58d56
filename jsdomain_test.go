package reins_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/internal/testkit/natstest"
)

// TestConfigJSDomain: Config.JSDomain reaches the Box: on a leaf node with a JetStream domain
// of its own, New with JSDomain "hub" makes the layout in the hub's JetStream; without NATSURL
// it is refused, as the embedded server's JetStream is its own.
func TestConfigJSDomain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r, err := reins.New(ctx, reins.Config{JSDomain: "hub"}); err == nil || !strings.Contains(err.Error(), "external server only") {
		if r != nil {
			r.Close()
		}
		t.Errorf("New with JSDomain and no NATSURL = %v, want a refusal", err)
	}
	hub, leaf := natstest.HubAndLeaf(t, ctx, "hub", "leaf")
	r, err := reins.New(ctx, reins.Config{NATSURL: leaf.ClientURL(), JSDomain: "hub", Namespace: "front"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := natstest.JetStream(t, hub.ClientURL()).Stream(ctx, "front_REINS_TASKS"); err != nil {
		t.Errorf("the hub's front_REINS_TASKS: %v", err)
	}
}
