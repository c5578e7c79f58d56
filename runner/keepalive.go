package runner

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Keeping events. The server delivers an event again when the engine has not acknowledged it
// within AckWait, and that is also how an event comes back whose delivery, acknowledgement or
// nak was lost with a NATS node (the node that led the partition's consumer died with it in
// its buffers, or the engine's own connection went with the node): JetStream has no other
// way to learn of it. So AckWait is short (DefaultAckWait, 5 s: a run waits no longer than
// that for a lost event once its partition's consumer has a leader again), and an event the
// engine holds longer than a third of it, queued behind a decision waiting for a stream
// between leaders, is kept from redelivery by a progress acknowledgement, sent again every
// third of AckWait until it is settled.

// keepAlive sends a progress acknowledgement for every event held since a third of AckWait or
// longer, every third of AckWait, until ctx ends.
func (e *Engine) keepAlive(ctx context.Context) {
	every := e.ackWait / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, m := range e.flight.heldSince(now.Add(-every)) {
				_ = m.InProgress() // a lost one is sent again at the next tick
			}
		}
	}
}

// heldSince returns the events held since before cutoff.
func (f *flight) heldSince(cutoff time.Time) []jetstream.Msg {
	f.mu.Lock()
	defer f.mu.Unlock()
	var old []jetstream.Msg
	for _, held := range f.held {
		for _, h := range held {
			if h.at.Before(cutoff) {
				old = append(old, h.Msg)
			}
		}
	}
	return old
}
