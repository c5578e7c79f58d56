// Package tracing is the process's tracing as the code that makes spans sees it, on the
// OpenTelemetry API alone: whether tracing is on (Enabled), the spans started under a remote
// parent (Start), whether a trace is kept and contents recorded (Active), the W3C trace
// context in NATS message headers (Inject, Extract, HeaderSize), and the names of reins's own
// attributes. A worker links it without OpenTelemetry's SDK, its exporters or protobuf.
//
// It must not set tracing up, export spans or read the environment: package telemetry does,
// and turns tracing on and off here (Use). Off, every call returns at once and allocates
// nothing.
package tracing

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// On is what a process traces with while tracing is on.
type On struct {
	// Tracer starts the process's spans.
	Tracer trace.Tracer
	// Sampled reports whether the spans of trace id are kept: decided on the trace id alone,
	// so that every process keeps or drops the whole of a run's trace alike.
	Sampled func(id trace.TraceID) bool
	// Content reports whether prompts, completions and tool payloads may be recorded.
	Content bool
}

// active is the process's tracing; nil when off.
var active atomic.Pointer[On]

// Use turns tracing on with on, or off with nil. The process has one tracing, like
// OpenTelemetry's own global: the packages that make spans reach it without plumbing.
func Use(on *On) { active.Store(on) }

// Active is the process's tracing, nil when off.
func Active() *On { return active.Load() }

// Enabled reports whether the process exports spans: callers do nothing for traces otherwise.
func Enabled() bool { return active.Load() != nil }

// Start starts a span in ctx under parent (invalid: ctx's span) when tracing is on; when off
// it returns ctx and a span that does nothing, without allocating.
func Start(ctx context.Context, parent trace.SpanContext, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	t := active.Load()
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background()) // the no-op span
	}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	return t.Tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// reins's own attributes (reins.*), beside the GenAI semantic conventions' that package
// telemetry names.
const (
	AttrRunID       = attribute.Key("reins.run_id")
	AttrParentRunID = attribute.Key("reins.parent_run_id")
	AttrWorkflow    = attribute.Key("reins.workflow")
	AttrStatus      = attribute.Key("reins.status")
	AttrStep        = attribute.Key("reins.step")
	AttrItem        = attribute.Key("reins.item")
	AttrActivation  = attribute.Key("reins.activation")
	AttrIteration   = attribute.Key("reins.iteration")
	AttrAttempt     = attribute.Key("reins.attempt")
	AttrHandler     = attribute.Key("reins.handler")
	AttrAnswer      = attribute.Key("reins.answer")
	AttrRedelivered = attribute.Key("reins.redelivered")
	AttrStopReason  = attribute.Key("reins.stop_reason")
	AttrCostUSD     = attribute.Key("reins.cost_usd")
	AttrModelCalls  = attribute.Key("reins.model_calls")
	AttrToolCalls   = attribute.Key("reins.tool_calls")
	// AttrSumInputTokens and AttrSumOutputTokens are the tokens of the model calls under an
	// iteration, step or run span: sums, under reins's own names, so that a backend adding up
	// gen_ai.usage.* over a trace counts each call once (on its chat span).
	AttrSumInputTokens  = attribute.Key("reins.input_tokens")
	AttrSumOutputTokens = attribute.Key("reins.output_tokens")
)

// Usage is the attributes of what the model and tool calls under an iteration, step or run
// span spent: never gen_ai.usage.*, which only a chat span carries.
func Usage(modelCalls, toolCalls, inputTokens, outputTokens int, costUSD float64) []attribute.KeyValue {
	return []attribute.KeyValue{AttrModelCalls.Int(modelCalls), AttrToolCalls.Int(toolCalls),
		AttrSumInputTokens.Int(inputTokens), AttrSumOutputTokens.Int(outputTokens), AttrCostUSD.Float64(costUSD)}
}
