package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// The attributes of reins's spans: the GenAI semantic conventions' where they have one, named
// by OpenTelemetry's semconv package (the newest version the pinned otel module ships with the
// gen_ai attributes), reins's own (reins.*) otherwise.
const (
	AttrOperation      = semconv.GenAIOperationNameKey
	AttrProvider       = semconv.GenAIProviderNameKey
	AttrRequestModel   = semconv.GenAIRequestModelKey
	AttrResponseModel  = semconv.GenAIResponseModelKey
	AttrInputTokens    = semconv.GenAIUsageInputTokensKey
	AttrOutputTokens   = semconv.GenAIUsageOutputTokensKey
	AttrFinishReasons  = semconv.GenAIResponseFinishReasonsKey
	AttrToolName       = semconv.GenAIToolNameKey
	AttrToolCallID     = semconv.GenAIToolCallIDKey
	AttrToolArguments  = semconv.GenAIToolCallArgumentsKey
	AttrToolResult     = semconv.GenAIToolCallResultKey
	AttrInputMessages  = semconv.GenAIInputMessagesKey
	AttrOutputMessages = semconv.GenAIOutputMessagesKey
	AttrInstructions   = semconv.GenAISystemInstructionsKey
	AttrErrorType      = semconv.ErrorTypeKey

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
