package telemetry

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/internal/tracing"
)

// The attributes of reins's spans: the GenAI semantic conventions' where they have one, named
// by OpenTelemetry's semconv package (the newest version the pinned otel module ships with the
// gen_ai attributes), reins's own (reins.*, the tokens' sums among them) otherwise.
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

	AttrRunID           = tracing.AttrRunID
	AttrParentRunID     = tracing.AttrParentRunID
	AttrWorkflow        = tracing.AttrWorkflow
	AttrStatus          = tracing.AttrStatus
	AttrStep            = tracing.AttrStep
	AttrItem            = tracing.AttrItem
	AttrActivation      = tracing.AttrActivation
	AttrIteration       = tracing.AttrIteration
	AttrAttempt         = tracing.AttrAttempt
	AttrHandler         = tracing.AttrHandler
	AttrAnswer          = tracing.AttrAnswer
	AttrRedelivered     = tracing.AttrRedelivered
	AttrStopReason      = tracing.AttrStopReason
	AttrCostUSD         = tracing.AttrCostUSD
	AttrModelCalls      = tracing.AttrModelCalls
	AttrToolCalls       = tracing.AttrToolCalls
	AttrSumInputTokens  = tracing.AttrSumInputTokens
	AttrSumOutputTokens = tracing.AttrSumOutputTokens
)

// Usage is the attributes of what the model and tool calls under an iteration, step or run
// span spent: never gen_ai.usage.*, which only a chat span carries.
func Usage(modelCalls, toolCalls, inputTokens, outputTokens int, costUSD float64) []attribute.KeyValue {
	return tracing.Usage(modelCalls, toolCalls, inputTokens, outputTokens, costUSD)
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
	t := tracing.Active()
	if t == nil {
		return
	}
	ctx := withIDs(context.Background(), s.ID)
	if s.Parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, s.Parent)
	}
	_, span := t.Tracer.Start(ctx, s.Name, trace.WithTimestamp(s.Start), trace.WithAttributes(s.Attrs...), trace.WithLinks(s.Links...))
	if s.Error != "" {
		span.SetStatus(codes.Error, s.Error)
	}
	span.End(trace.WithTimestamp(s.End))
}

// Start starts a span in ctx under parent (invalid: ctx's span) when tracing is on; when off
// it returns ctx and a span that does nothing, without allocating.
func Start(ctx context.Context, parent trace.SpanContext, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return tracing.Start(ctx, parent, name, kind, attrs...)
}

// Inject writes sc into h as traceparent (and tracestate); an invalid sc writes nothing.
func Inject(h nats.Header, sc trace.SpanContext) { tracing.Inject(h, sc) }

// Extract reads the span context h carries; invalid when it carries none, or one that does
// not parse.
func Extract(h nats.Header) trace.SpanContext { return tracing.Extract(h) }

// HeaderSize is what Inject adds to a message's headers when tracing is on (0 when off), for
// the callers that check a message against the server's max payload before building it.
func HeaderSize() int { return tracing.HeaderSize() }
