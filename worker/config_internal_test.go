package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
)

// TestOptionsZeroMeansDefault: each number of zero Options is its default, one set is kept,
// and a negative one is refused in a sentence naming the field and what 0 means.
func TestOptionsZeroMeansDefault(t *testing.T) {
	box, err := natsbox.Open(context.Background(), natsbox.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	c := (*conn.Conn)(box)
	for _, tt := range []struct {
		name            string
		opts            Options
		ackWait, effect time.Duration
		concurrency     int
		err             string
	}{
		{name: "zero", opts: Options{}, ackWait: DefaultAckWait, effect: DefaultEffectTimeout, concurrency: DefaultConcurrency},
		{name: "set", opts: Options{AckWait: time.Second, EffectTimeout: 2 * time.Second, Concurrency: 3},
			ackWait: time.Second, effect: 2 * time.Second, concurrency: 3},
		{name: "negative AckWait", opts: Options{AckWait: -1}, err: "Options.AckWait is -1ns: want 0 (meaning 5s) or more"},
		{name: "negative Concurrency", opts: Options{Concurrency: -1}, err: "Options.Concurrency is -1: want 0 (meaning 64) or more"},
		{name: "negative EffectTimeout", opts: Options{EffectTimeout: -1}, err: "Options.EffectTimeout is -1ns: want 0 (meaning 1m0s) or more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := New(c, tt.opts)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("New: %v, want an error saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.ackWait != tt.ackWait || w.effects.timeout != tt.effect || w.concurrency != tt.concurrency {
				t.Errorf("AckWait %s, EffectTimeout %s, Concurrency %d; want %s, %s, %d",
					w.ackWait, w.effects.timeout, w.concurrency, tt.ackWait, tt.effect, tt.concurrency)
			}
		})
	}
}
