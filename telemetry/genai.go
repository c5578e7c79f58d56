package telemetry

import (
	"context"
	"encoding/json"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
)

// WrapModel returns m with a chat span around each call (GenAI conventions) when tracing is
// on, and m itself when off. provider and name are the model's provider and its name there:
// nothing of the model's configuration (keys, endpoints) reaches a span.
func WrapModel(m model.Model, provider, name string) model.Model {
	if !Enabled() || m == nil {
		return m
	}
	return &tracedModel{m: m, provider: provider, name: name}
}

type tracedModel struct {
	m              model.Model
	provider, name string
}

func (t *tracedModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	ctx, span := Start(ctx, trace.SpanContext{}, "chat "+t.name, trace.SpanKindClient,
		semconv.GenAIOperationNameChat, AttrProvider.String(t.provider), AttrRequestModel.String(t.name))
	defer span.End()
	if CaptureContent() {
		if req.Instructions != "" {
			span.SetAttributes(AttrInstructions.String(jsonText(systemInstructions(req.Instructions))))
		}
		span.SetAttributes(AttrInputMessages.String(jsonText(inputMessages(req.Messages))))
	}
	resp, err := t.m.Generate(ctx, req)
	if err != nil {
		failed(span, modelErrorType(err))
		return resp, err
	}
	span.SetAttributes(responseAttrs(resp)...)
	if CaptureContent() {
		span.SetAttributes(AttrOutputMessages.String(jsonText(outputMessages(resp))))
	}
	return resp, nil
}

// responseAttrs are what the reply says of itself: the model that answered and why it ended,
// as the server said them (left out when it did not: never the requested name, nor a reason
// made up from the proposal), its usage and its cost.
func responseAttrs(resp *model.Response) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrInputTokens.Int64(resp.Usage.InputTokens),
		AttrOutputTokens.Int64(resp.Usage.OutputTokens), AttrCostUSD.Float64(resp.CostUSD)}
	if resp.Model != "" {
		attrs = append(attrs, AttrResponseModel.String(resp.Model))
	}
	if resp.FinishReason != "" {
		attrs = append(attrs, AttrFinishReasons.StringSlice([]string{resp.FinishReason}))
	}
	return attrs
}

func modelErrorType(err error) string {
	var me *model.Error
	if errors.As(err, &me) && me.Retryable {
		return "retryable"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// WrapTool returns t with an execute_tool span around each call when tracing is on, and t
// itself when off.
func WrapTool(t tool.Tool) tool.Tool {
	if !Enabled() || t == nil {
		return t
	}
	return &tracedTool{Tool: t}
}

type tracedTool struct{ tool.Tool }

func (t *tracedTool) Call(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
	name := t.Spec().Name
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameExecuteTool, AttrToolName.String(name)}
	if info := tool.InfoFrom(ctx); info != nil && info.CallID != "" {
		attrs = append(attrs, AttrToolCallID.String(info.CallID))
	}
	ctx, span := Start(ctx, trace.SpanContext{}, "execute_tool "+name, trace.SpanKindInternal, attrs...)
	defer span.End()
	content := CaptureContent()
	if content {
		span.SetAttributes(AttrToolArguments.String(string(args)))
	}
	out, err := t.Tool.Call(ctx, args, key)
	if err != nil {
		failed(span, "tool_error")
		return out, err
	}
	if content {
		span.SetAttributes(AttrToolResult.String(string(out)))
	}
	return out, nil
}

// failed marks span failed with the type of its error, never the message: a provider's or a
// tool's message may quote the call's contents.
func failed(span trace.Span, errType string) {
	span.SetAttributes(AttrErrorType.String(errType))
	span.SetStatus(codes.Error, errType)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}
