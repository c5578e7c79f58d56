package operator_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/operator"
)

// TestHTTPLimits: the HTTP keys of [limits] are read with their units, default when left out,
// and refused, naming the key and line, when they are not what they say.
func TestHTTPLimits(t *testing.T) {
	cfg, err := operator.Parse("ops.toml", []byte(`[limits]
max_webhook_bytes = "256KiB"
max_header_bytes = 8192
http_read_header_timeout = "2s"
http_read_timeout = "45s"
http_write_timeout = "2m"
http_idle_timeout = "90s"
max_unauthenticated_requests = 8
max_event_streams_per_principal = 3
`))
	if err != nil {
		t.Fatal(err)
	}
	want := operator.HTTPLimits{MaxWebhookBytes: 256 << 10, MaxHeaderBytes: 8192, ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout: 45 * time.Second, WriteTimeout: 2 * time.Minute, IdleTimeout: 90 * time.Second, MaxUnauthenticated: 8, MaxEventStreams: 3}
	if cfg.Limits.HTTP != want {
		t.Errorf("limits %+v\nwant %+v", cfg.Limits.HTTP, want)
	}
	// Left out: the defaults, as a server without --config has them.
	cfg, err = operator.Parse("ops.toml", []byte("[limits]\nmax_webhook_bytes = \"2MiB\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := operator.DefaultHTTPLimits()
	if got := cfg.Limits.HTTP; got.MaxWebhookBytes != 2<<20 || got.ReadTimeout != d.ReadTimeout || got.MaxEventStreams != d.MaxEventStreams {
		t.Errorf("limits %+v: want the defaults but max_webhook_bytes", got)
	}
	if operator.Default().Limits.HTTP != d || (operator.HTTPLimits{}).WithDefaults() != d {
		t.Errorf("the defaults differ: %+v, %+v, %+v", operator.Default().Limits.HTTP, (operator.HTTPLimits{}).WithDefaults(), d)
	}
	if d.MaxWebhookBytes != 1<<20 || d.ReadHeaderTimeout != 10*time.Second || d.ReadTimeout != 30*time.Second || d.WriteTimeout != time.Minute ||
		d.IdleTimeout != time.Minute || d.MaxHeaderBytes != 64<<10 || d.MaxUnauthenticated != 64 || d.MaxEventStreams != 16 {
		t.Errorf("defaults %+v: not those docs/security.md gives", d)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"a duration without a unit", "[limits]\nhttp_read_timeout = \"30\"\n", "ops.toml:2: key limits.http_read_timeout: want a duration"},
		{"a number for a duration", "[limits]\nhttp_idle_timeout = 30\n", "ops.toml:2: key limits.http_idle_timeout: want a duration: a string"},
		{"no time", "[limits]\nhttp_write_timeout = \"0s\"\n", "ops.toml:2: key limits.http_write_timeout: want a duration of more than 0"},
		{"too long", "[limits]\nhttp_read_header_timeout = \"25h\"\n", "ops.toml:2: key limits.http_read_header_timeout: want a duration of more than 0 and at most 24h"},
		{"no streams", "[limits]\nmax_event_streams_per_principal = 0\n", "ops.toml:2: key limits.max_event_streams_per_principal: want a whole number from 1"},
		{"a size for a count", "[limits]\nmax_unauthenticated_requests = \"8\"\n", "ops.toml:2: key limits.max_unauthenticated_requests: want a whole number from 1"},
		{"a header too small", "[limits]\nmax_header_bytes = 100\n", "ops.toml:2: key limits.max_header_bytes: want at least 4KiB"},
		{"a bad size", "[limits]\nmax_webhook_bytes = \"1 lot\"\n", "ops.toml:2: key limits.max_webhook_bytes: want a size"},
		{"an unknown key", "[limits]\nmax_streams = 3\n", "ops.toml:2: key limits.max_streams: unknown key (known: max_input_bytes, max_output_bytes, "},
	} {
		_, err := operator.Parse("ops.toml", []byte(tc.file))
		var ps operator.Problems
		if !errors.As(err, &ps) || len(ps) != 1 || !strings.HasPrefix(ps[0].String(), tc.want) {
			t.Errorf("%s: %v\nwant one problem beginning %q", tc.name, err, tc.want)
		}
	}
}
