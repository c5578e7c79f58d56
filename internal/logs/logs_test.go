package logs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/internal/logs"
	"github.com/reins-run/reins/telemetry"
)

// TestTraceIDs: a record logged with a context holding a valid span carries its trace and span
// ids, also through With and in the text format; one without a span, or logged without a
// context, carries none.
func TestTraceIDs(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

	var buf bytes.Buffer
	log := logs.New(&buf, logs.JSON, slog.LevelInfo).With("run_id", "r-1")
	log.InfoContext(traced, "with a span")
	log.InfoContext(context.Background(), "without a span")
	log.Info("without a context")
	log.DebugContext(traced, "below the level")

	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %v: %s", err, line)
		}
		got = append(got, m)
	}
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(got), buf.String())
	}
	if got[0]["trace_id"] != traceID || got[0]["span_id"] != spanID || got[0]["run_id"] != "r-1" {
		t.Errorf("the line with a span: %v", got[0])
	}
	for _, m := range got[1:] {
		if _, ok := m["trace_id"]; ok {
			t.Errorf("a line without a span has a trace id: %v", m)
		}
	}

	buf.Reset()
	logs.New(&buf, logs.Text, slog.LevelDebug).DebugContext(traced, "text")
	if !strings.Contains(buf.String(), "trace_id="+traceID+" span_id="+spanID) {
		t.Errorf("the text line has no trace ids: %s", buf.String())
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		in    string
		level slog.Level
		err   string
	}{
		{"debug", slog.LevelDebug, ""},
		{"info", slog.LevelInfo, ""},
		{"WARN", slog.LevelWarn, ""},
		{"error", slog.LevelError, ""},
		{"trace", 0, `--log-level "trace": want one of debug, info, warn, error`},
		{"", 0, `--log-level "": want one of debug, info, warn, error`},
	} {
		l, err := logs.ParseLevel(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ParseLevel(%q): %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || l != tc.level {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", tc.in, l, err, tc.level)
		}
	}
	for _, f := range logs.Formats {
		if err := logs.CheckFormat(f); err != nil {
			t.Errorf("CheckFormat(%q): %v", f, err)
		}
	}
	if err := logs.CheckFormat("xml"); err == nil || err.Error() != `--log-format "xml": want one of text, json` {
		t.Errorf("CheckFormat(xml): %v", err)
	}
}

// With tracing on, a line about a run logged with no span at hand (the engine's) carries the
// run's trace id, derived from its run id as the run's spans are; with tracing off, none.
func TestRunTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := logs.New(&buf, logs.JSON, slog.LevelInfo)
	log.Info("off", "run_id", "r-1")

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // nothing is exported here
	p, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "logs-test"})
	if err != nil || p == nil {
		t.Fatalf("Setup: %v, %v", p, err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	log.Info("in the record", "run_id", "r-1")
	log.With("run_id", "r-2").Info("in the logger")
	log.With("run_id", "r-2").Info("the record's own wins", "run_id", "r-1")
	log.Info("no run")

	want := []string{"", telemetry.TraceID("r-1").String(), telemetry.TraceID("r-2").String(), telemetry.TraceID("r-1").String(), ""}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %v: %s", err, line)
		}
		got, _ := m["trace_id"].(string)
		if got != want[i] {
			t.Errorf("line %d (%s): trace_id %q, want %q", i, m["msg"], got, want[i])
		}
	}
}
