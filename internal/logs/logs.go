// Package logs owns the structured log of the long-running processes (reins serve, reins
// worker): the values of their --log-format and --log-level flags, the slog handler they make,
// and the trace and span ids of a context's OpenTelemetry span on every record logged with
// that context (the *Context methods of slog.Logger), or, when tracing is on, the trace id of
// the run a record names (run_id): a run's trace id is derived from its id (package telemetry),
// so that the engine's lines about a run, logged with no span at hand, lead to its trace too.
//
// It must not decide what is logged, nor start spans or export traces: the parts log what they
// do, and tracing puts spans in their contexts.
package logs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/telemetry"
)

// Formats of --log-format.
const (
	Text = "text"
	JSON = "json"
)

// Formats and Levels are the values the flags take, for help and errors.
var (
	Formats = []string{Text, JSON}
	Levels  = []string{"debug", "info", "warn", "error"}
)

// Keys of the attributes that tie a record to a run and a trace.
const (
	RunIDKey   = "run_id"
	TraceIDKey = "trace_id"
	SpanIDKey  = "span_id"
)

// ParseLevel reads a --log-level value.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: want one of %s", s, strings.Join(Levels, ", "))
}

// CheckFormat checks a --log-format value.
func CheckFormat(s string) error {
	if s != Text && s != JSON {
		return fmt.Errorf("--log-format %q: want one of %s", s, strings.Join(Formats, ", "))
	}
	return nil
}

// New returns the logger of a process writing to w in format (Text: slog's key=value lines,
// JSON: one object a line) at level and above, with the trace ids of a record's context
// (WithTraceIDs). An unknown format is Text.
func New(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if format == JSON {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(WithTraceIDs(h))
}

// WithTraceIDs wraps h so that a record logged with a context that holds a valid span carries
// its trace_id and span_id, and, when tracing is on (telemetry.Enabled), a record without one
// that names a run (run_id, in the record or the logger's attributes) carries the run's
// trace_id. Other records pass unchanged: the check is one context lookup and, with tracing
// on, a look at the record's attributes.
func WithTraceIDs(h slog.Handler) slog.Handler {
	if _, ok := h.(traceHandler); ok {
		return h
	}
	return traceHandler{Handler: h}
}

type traceHandler struct {
	slog.Handler
	run string // the run_id of the logger's attributes (WithAttrs), if any
}

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone() // the record's attributes may be shared with the caller's
		r.AddAttrs(slog.String(TraceIDKey, sc.TraceID().String()), slog.String(SpanIDKey, sc.SpanID().String()))
	} else if telemetry.Enabled() {
		if run := h.runOf(r); run != "" {
			r = r.Clone()
			r.AddAttrs(slog.String(TraceIDKey, telemetry.TraceID(run).String()))
		}
	}
	return h.Handler.Handle(ctx, r)
}

// runOf returns the run a record names: its own run_id, else the logger's.
func (h traceHandler) runOf(r slog.Record) string {
	run := h.run
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == RunIDKey && a.Value.Kind() == slog.KindString {
			run = a.Value.String()
			return false
		}
		return true
	})
	return run
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	run := h.run
	for _, a := range as {
		if a.Key == RunIDKey && a.Value.Kind() == slog.KindString {
			run = a.Value.String()
		}
	}
	return traceHandler{Handler: h.Handler.WithAttrs(as), run: run}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{Handler: h.Handler.WithGroup(name)} // a run_id in a group is not the record's
}
