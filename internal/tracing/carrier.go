package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// header carries W3C trace context (traceparent, tracestate) in the headers of a NATS
// message. Its keys are used as written, as nats.Header's own methods do.
type header nats.Header

var _ propagation.TextMapCarrier = header(nil)

func (h header) Get(key string) string {
	if vs := h[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (h header) Set(key, value string) { h[key] = []string{value} }

func (h header) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

var propagator = propagation.TraceContext{}

// Inject writes sc into h as traceparent (and tracestate); an invalid sc writes nothing.
func Inject(h nats.Header, sc trace.SpanContext) {
	if !sc.IsValid() || h == nil {
		return
	}
	propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), header(h))
}

// Extract reads the span context h carries; invalid when it carries none, or one that does
// not parse.
func Extract(h nats.Header) trace.SpanContext {
	if h == nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), header(h)))
}

// traceparentSize is what Inject adds to a message's headers as the server counts them:
// "traceparent: 00-TRACEID-SPANID-FLAGS\r\n".
const traceparentSize = len("traceparent: \r\n") + 55

// HeaderSize is what Inject adds to a message's headers when tracing is on (0 when off), for
// the callers that check a message against the server's max payload before building it.
func HeaderSize() int {
	if !Enabled() {
		return 0
	}
	return traceparentSize
}
