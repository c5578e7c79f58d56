package tracing

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// TestCarrier: the headers of a message carry the trace context beside what they hold, under
// the keys as written, and the propagator sees every key.
func TestCarrier(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled, Remote: true})
	h := nats.Header{"Nats-Msg-Id": {"r/s/1/1/1"}}
	Inject(h, sc)
	if got, want := slices.Sorted(slices.Values(header(h).Keys())), []string{"Nats-Msg-Id", "traceparent"}; !slices.Equal(got, want) {
		t.Errorf("Keys = %v, want %v", got, want)
	}
	if got := Extract(h); !got.Equal(sc) {
		t.Errorf("Extract = %v, want %v", got, sc)
	}
	if n := HeaderSize(); n != 0 {
		t.Errorf("HeaderSize with tracing off = %d, want 0", n)
	}
	Inject(h, trace.SpanContext{})
	Inject(nil, sc) // nothing to write into
	if got := header(h).Get("traceparent"); got != "00-01000000000000000000000000000000-0200000000000000-01" {
		t.Errorf("traceparent = %q after an invalid context was injected", got)
	}
}
