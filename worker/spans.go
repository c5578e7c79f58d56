package worker

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/internal/tracing"
	"github.com/reins-run/reins/protocol"
)

// startSpan starts the span of the task's iteration, when tracing is on, as a child of the
// step span whose context the task's message carries (the engine wrote it; JetStream keeps
// it, so a redelivery runs under the same step span), and makes it the handler's context's:
// the model and tool calls of the handler nest under it.
func (tc *taskContext) startSpan() {
	if !tracing.Enabled() {
		return
	}
	t := tc.task
	attrs := []attribute.KeyValue{
		tracing.AttrRunID.String(t.RunID), tracing.AttrStep.String(t.Step),
		tracing.AttrActivation.Int(t.Activation), tracing.AttrIteration.Int(t.Iteration),
		tracing.AttrAttempt.Int(t.Attempt), tracing.AttrHandler.String(tc.handler),
	}
	if t.Item >= 0 {
		attrs = append(attrs, tracing.AttrItem.Int(t.Item))
	}
	if tc.redelivered {
		attrs = append(attrs, tracing.AttrRedelivered.Bool(true))
	}
	tc.Context, tc.span = tracing.Start(tc.Context, tracing.Extract(tc.msg.Headers()),
		"iteration "+protocol.StepKey(t.Step, t.Item), trace.SpanKindConsumer, attrs...)
}

// spanAnswer records the task's answer on its span: its stop reason, and a failure as the
// answer's type only (its message may quote the step's data).
func (tc *taskContext) spanAnswer(ev *protocol.Event) {
	if tc.span == nil {
		return
	}
	if ev.StopReason != "" {
		tc.span.SetAttributes(tracing.AttrStopReason.String(ev.StopReason))
	}
	if ev.Type == protocol.EvFailed || ev.Type == protocol.EvTimedOut {
		tc.span.SetStatus(codes.Error, string(ev.Type))
	}
}

// endSpan ends the task's span with how the task was settled and what its calls spent (as
// sums under reins.* names: the tokens themselves are on the chat spans).
func (tc *taskContext) endSpan(how string, u protocol.Usage) {
	if tc.span == nil {
		return
	}
	tc.span.SetAttributes(tracing.AttrAnswer.String(how))
	tc.span.SetAttributes(tracing.Usage(u.ModelCalls, u.ToolCalls, u.InputTokens, u.OutputTokens, u.CostUSD)...)
	tc.span.End()
}

// spanContext is the context of the task's span, which its answer carries back to the engine
// (invalid when tracing is off).
func (tc *taskContext) spanContext() trace.SpanContext {
	if tc.span == nil {
		return trace.SpanContext{}
	}
	return tc.span.SpanContext()
}
