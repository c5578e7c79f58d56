// Package otlptest is an OTLP/HTTP trace receiver for tests (tests only): it listens on
// 127.0.0.1, decodes what exporters send (protobuf, gzipped or not) with OpenTelemetry's own
// generated types, and lets a test wait until the spans it expects have arrived. It keeps the raw bodies
// too, for tests that look for what must never be exported.
//
// It must not import any reins package: it is the outside world the spans go to.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Service                   string // the resource's service.name
	Name                      string
	TraceID, SpanID, ParentID string // hex; ParentID empty for a root
	Kind                      string
	StartNano, EndNano        uint64
	Attrs                     map[string]any // string, int64, float64, bool, []any
	Links                     []string       // the linked spans' ids, hex
	Error                     string         // the status message of a failed span
	Failed                    bool
}

// Str returns string attribute key ("" when absent).
func (s Span) Str(key string) string { v, _ := s.Attrs[key].(string); return v }

// Int returns int attribute key (-1 when absent).
func (s Span) Int(key string) int64 {
	if v, ok := s.Attrs[key].(int64); ok {
		return v
	}
	return -1
}

// Receiver collects the spans posted to it.
type Receiver struct {
	srv *http.Server
	ln  net.Listener

	mu      sync.Mutex
	spans   []Span
	raw     [][]byte
	changed chan struct{} // closed and replaced on every arrival
}

// Start starts a receiver on a free port of 127.0.0.1; Close stops it.
func Start() (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlptest: listen: %w", err)
	}
	r := &Receiver{ln: ln, changed: make(chan struct{})}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Endpoint is the base URL to give OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *Receiver) Endpoint() string { return "http://" + r.ln.Addr().String() }

// Close stops the receiver.
func (r *Receiver) Close() error { return r.srv.Close() }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	body, err := readBody(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// An ExportTraceServiceRequest is TracesData on the wire (field 1, the resource spans);
	// the collector's package that declares it imports gRPC, which tests need not compile.
	var msg tracepb.TracesData
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	spans := flatten(&msg)
	r.mu.Lock()
	r.spans = append(r.spans, spans...)
	r.raw = append(r.raw, body)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(ExportResponse(0, "")) // full success
}

func readBody(req *http.Request) ([]byte, error) {
	var rd io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, err
		}
		defer z.Close()
		rd = z
	}
	return io.ReadAll(rd)
}

func flatten(msg *tracepb.TracesData) []Span {
	var out []Span
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{Service: service, Name: sp.GetName(), TraceID: hex.EncodeToString(sp.GetTraceId()),
					SpanID: hex.EncodeToString(sp.GetSpanId()), ParentID: hex.EncodeToString(sp.GetParentSpanId()),
					Kind: strings.TrimPrefix(sp.GetKind().String(), "SPAN_KIND_"), StartNano: sp.GetStartTimeUnixNano(),
					EndNano: sp.GetEndTimeUnixNano(), Attrs: map[string]any{}}
				for _, kv := range sp.GetAttributes() {
					s.Attrs[kv.GetKey()] = value(kv.GetValue())
				}
				for _, l := range sp.GetLinks() {
					s.Links = append(s.Links, hex.EncodeToString(l.GetSpanId()))
				}
				if st := sp.GetStatus(); st.GetCode() == 2 { // STATUS_CODE_ERROR
					s.Failed, s.Error = true, st.GetMessage()
				}
				out = append(out, s)
			}
		}
	}
	return out
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	}
	return nil
}

// Spans returns a copy of the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Contains reports whether any body received holds s, as bytes.
func (r *Receiver) Contains(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.raw {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// Wait waits until done holds for the spans received, or ctx ends (its error then, with the
// spans received so far for the message).
func (r *Receiver) Wait(ctx context.Context, done func([]Span) bool) ([]Span, error) {
	for {
		r.mu.Lock()
		spans, changed := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if done(spans) {
			return spans, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return spans, fmt.Errorf("otlptest: %d spans received, not the ones awaited: %w", len(spans), ctx.Err())
		}
	}
}
