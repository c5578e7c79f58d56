//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
)

// TestAttackReadsLeaveNoConsumers: a viewer who reads bob's run again and again
// (GET /v1/runs/{id}, 1,500 times) gets every answer and leaves no consumer behind on the
// server: each read used to leave one for its inactive threshold, and after about a thousand
// the server refused to make more, so every reader of every run got 500s.
func TestAttackReadsLeaveNoConsumers(t *testing.T) {
	h := hostileServer(t, "")
	h.register(attackBobToken, "nap", "name = \"nap\"\n\n[[steps]]\nid = \"s\"\ntype = \"sleep\"\nduration = \"1h\"\n")
	id := h.startAs(attackBobToken, "nap")
	for i := range 1500 {
		if status, _, body := h.do(attackViewerToken, "GET", "/v1/runs/"+id, ""); status != http.StatusOK {
			t.Fatalf("read %d: %d %s", i+1, status, body)
		}
	}
	if status, _, body := h.do(attackBobToken, "GET", "/v1/runs/"+id, ""); status != http.StatusOK {
		t.Fatalf("bob reads his run after the flood: %d %s", status, body)
	}
	h.healthy()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	box, _ := h.client(ctx, h.admin)
	s, err := box.JetStream().Stream(ctx, natsbox.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for info, err := range consumersOf(ctx, s) {
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Name) < len(natsbox.EngineConsumerPrefix) || info.Name[:len(natsbox.EngineConsumerPrefix)] != natsbox.EngineConsumerPrefix {
			n++
		}
	}
	if n > 4 {
		t.Fatalf("%d consumers other than the engine's are left on the events stream after the reads", n)
	}
}

// consumersOf yields the information of every consumer of s.
func consumersOf(ctx context.Context, s jetstream.Stream) func(func(*jetstream.ConsumerInfo, error) bool) {
	return func(yield func(*jetstream.ConsumerInfo, error) bool) {
		l := s.ListConsumers(ctx)
		for info := range l.Info() {
			if !yield(info, nil) {
				return
			}
		}
		if err := l.Err(); err != nil {
			yield(nil, err)
		}
	}
}
