package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed"
	"github.com/reins-run/reins/internal/outbox"
)

// lossy answers the publishes of subject as a stream would, after dropping the first drop of
// them (a stream whose leader died drops what it gets), and records every message id it got.
type lossy struct {
	mu   sync.Mutex
	ids  []string
	drop int
}

func (l *lossy) serve(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		l.mu.Lock()
		l.ids = append(l.ids, m.Header.Get(jetstream.MsgIDHeader))
		n := len(l.ids)
		l.mu.Unlock()
		if n > l.drop {
			_ = m.Respond([]byte(`{"stream":"LOSSY","seq":1}`))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

func (l *lossy) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

// The messages of a decision that are not acknowledged within natsbox.PublishAttempt are sent
// again, with their message ids, until they are; those acknowledged are not.
func TestPublishSendsAgainWhatWasNotAcknowledged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	answered, dropped := &lossy{}, &lossy{drop: 1}
	answered.serve(t, box.Conn(), "lossy.answered")
	dropped.serve(t, box.Conn(), "lossy.dropped")
	o := &outbox.Outbox{JS: box.JetStream()}
	err = o.Publish(ctx, []*nats.Msg{
		outbox.NewMsg("lossy.answered", []byte(`{}`), "id-a"),
		outbox.NewMsg("lossy.dropped", []byte(`{}`), "id-d"),
	})
	if err != nil {
		t.Fatalf("Publish: %v, want both stored", err)
	}
	if got := answered.got(); len(got) != 1 || got[0] != "id-a" {
		t.Errorf("the message acknowledged at once was sent as %v, want once as id-a", got)
	}
	if got := dropped.got(); len(got) != 2 || got[0] != "id-d" || got[1] != "id-d" {
		t.Errorf("the message dropped once was sent as %v, want twice as id-d: stored once", got)
	}
}
