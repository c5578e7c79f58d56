package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The attributes of reins's spans: the GenAI semantic conventions' where they have one, reins's
// own otherwise.
const (
	AttrOperation      = attribute.Key("gen_ai.operation.name")
	AttrProvider       = attribute.Key("gen_ai.provider.name")
	AttrRequestModel   = attribute.Key("gen_ai.request.model")
	AttrResponseModel  = attribute.Key("gen_ai.response.model")
	AttrInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	AttrFinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	AttrToolName       = attribute.Key("gen_ai.tool.name")
	AttrToolCallID     = attribute.Key("gen_ai.tool.call.id")
	AttrToolArguments  = attribute.Key("gen_ai.tool.call.arguments")
	AttrToolResult     = attribute.Key("gen_ai.tool.call.result")
	AttrInputMessages  = attribute.Key("gen_ai.input.messages")
	AttrOutputMessages = attribute.Key("gen_ai.output.messages")
	AttrInstructions   = attribute.Key("gen_ai.system_instructions")
	AttrErrorType      = attribute.Key("error.type")

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
)

// Ended is a span that ended already, emitted with the ids ID names (RunSpan, StepSpan).
type Ended struct {
	ID, Parent trace.SpanContext // Parent invalid: a root span
	Name       string
	Start, End time.Time
	Attrs      []attribute.KeyValue
	Links      []trace.Link
	// Error, when not empty, marks the span failed with this description.
	Error string
}

// Emit exports s. It does nothing when tracing is off.
func Emit(s Ended) {
	t := active.Load()
	if t == nil {
		return
	}
	ctx := withIDs(context.Background(), s.ID)
	if s.Parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, s.Parent)
	}
	_, span := t.tracer.Start(ctx, s.Name, trace.WithTimestamp(s.Start), trace.WithAttributes(s.Attrs...), trace.WithLinks(s.Links...))
	if s.Error != "" {
		span.SetStatus(codes.Error, s.Error)
	}
	span.End(trace.WithTimestamp(s.End))
}

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
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}
