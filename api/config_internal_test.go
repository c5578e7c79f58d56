package api

import (
	"testing"
	"time"

	"github.com/reins-run/reins/operator"
)

// TestConfigZeroMeansDefault checks that each bound of a zero Config is the one reins serve
// applies when the operator's configuration sets none, that a negative timeout is none, and
// that a value set is kept.
func TestConfigZeroMeansDefault(t *testing.T) {
	op := operator.DefaultHTTPLimits()
	tests := []struct {
		name string
		in   Config
		want Config
	}{
		{"zero", Config{}, Config{MaxInputBytes: operator.DefaultMaxBytes, EngineWait: 30 * time.Second,
			MaxWebhookBytes: op.MaxWebhookBytes, MaxUnauthenticated: op.MaxUnauthenticated, MaxEventStreams: op.MaxEventStreams,
			ReadTimeout: op.ReadTimeout, WriteTimeout: op.WriteTimeout}},
		{"negative", Config{MaxInputBytes: -1, EngineWait: -1, MaxWebhookBytes: -1, MaxUnauthenticated: -1, MaxEventStreams: -1,
			ReadTimeout: -1, WriteTimeout: -time.Second},
			Config{MaxInputBytes: operator.DefaultMaxBytes, EngineWait: 30 * time.Second,
				MaxWebhookBytes: op.MaxWebhookBytes, MaxUnauthenticated: op.MaxUnauthenticated, MaxEventStreams: op.MaxEventStreams}},
		{"set", Config{MaxInputBytes: 10, EngineWait: time.Second, MaxWebhookBytes: 11, MaxUnauthenticated: 2, MaxEventStreams: 3,
			ReadTimeout: 4 * time.Second, WriteTimeout: 5 * time.Second},
			Config{MaxInputBytes: 10, EngineWait: time.Second, MaxWebhookBytes: 11, MaxUnauthenticated: 2, MaxEventStreams: 3,
				ReadTimeout: 4 * time.Second, WriteTimeout: 5 * time.Second}},
		// reins serve's http_write_timeout = "10s": the 202 past EngineWait is written in time.
		{"short write timeout", Config{WriteTimeout: 10 * time.Second},
			Config{MaxInputBytes: operator.DefaultMaxBytes, EngineWait: 5 * time.Second,
				MaxWebhookBytes: op.MaxWebhookBytes, MaxUnauthenticated: op.MaxUnauthenticated, MaxEventStreams: op.MaxEventStreams,
				ReadTimeout: op.ReadTimeout, WriteTimeout: 10 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := boundsOf(New(tt.in).cfg), boundsOf(tt.want); got != want {
				t.Errorf("New(%+v) bounds by\n%+v, want\n%+v", boundsOf(tt.in), got, want)
			}
		})
	}
}

// bounds are the numbers of a Config.
type bounds struct {
	MaxInputBytes, MaxWebhookBytes        int64
	MaxUnauthenticated, MaxEventStreams   int
	EngineWait, ReadTimeout, WriteTimeout time.Duration
}

func boundsOf(c Config) bounds {
	return bounds{c.MaxInputBytes, c.MaxWebhookBytes, c.MaxUnauthenticated, c.MaxEventStreams, c.EngineWait, c.ReadTimeout, c.WriteTimeout}
}
