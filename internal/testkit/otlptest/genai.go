package otlptest

import (
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// semconvKeys are the attribute names of the GenAI semantic conventions, and the general ones a
// GenAI span carries, as OpenTelemetry's semconv package names them.
var semconvKeys = func() map[string]bool {
	keys := map[string]bool{}
	for _, k := range []attribute.Key{
		semconv.ErrorTypeKey, semconv.ServerAddressKey, semconv.ServerPortKey,
		semconv.GenAIAgentDescriptionKey,
		semconv.GenAIAgentIDKey,
		semconv.GenAIAgentNameKey,
		semconv.GenAIAgentVersionKey,
		semconv.GenAIConversationIDKey,
		semconv.GenAIDataSourceIDKey,
		semconv.GenAIEmbeddingsDimensionCountKey,
		semconv.GenAIEvaluationExplanationKey,
		semconv.GenAIEvaluationNameKey,
		semconv.GenAIEvaluationScoreLabelKey,
		semconv.GenAIEvaluationScoreValueKey,
		semconv.GenAIInputMessagesKey,
		semconv.GenAIOperationNameKey,
		semconv.GenAIOutputMessagesKey,
		semconv.GenAIOutputTypeKey,
		semconv.GenAIPromptNameKey,
		semconv.GenAIProviderNameKey,
		semconv.GenAIRequestChoiceCountKey,
		semconv.GenAIRequestEncodingFormatsKey,
		semconv.GenAIRequestFrequencyPenaltyKey,
		semconv.GenAIRequestMaxTokensKey,
		semconv.GenAIRequestModelKey,
		semconv.GenAIRequestPresencePenaltyKey,
		semconv.GenAIRequestSeedKey,
		semconv.GenAIRequestStopSequencesKey,
		semconv.GenAIRequestStreamKey,
		semconv.GenAIRequestTemperatureKey,
		semconv.GenAIRequestTopKKey,
		semconv.GenAIRequestTopPKey,
		semconv.GenAIResponseFinishReasonsKey,
		semconv.GenAIResponseIDKey,
		semconv.GenAIResponseModelKey,
		semconv.GenAIResponseTimeToFirstChunkKey,
		semconv.GenAIRetrievalDocumentsKey,
		semconv.GenAIRetrievalQueryTextKey,
		semconv.GenAISystemInstructionsKey,
		semconv.GenAITokenTypeKey,
		semconv.GenAIToolCallArgumentsKey,
		semconv.GenAIToolCallIDKey,
		semconv.GenAIToolCallResultKey,
		semconv.GenAIToolDefinitionsKey,
		semconv.GenAIToolDescriptionKey,
		semconv.GenAIToolNameKey,
		semconv.GenAIToolTypeKey,
		semconv.GenAIUsageCacheCreationInputTokensKey,
		semconv.GenAIUsageCacheReadInputTokensKey,
		semconv.GenAIUsageInputTokensKey,
		semconv.GenAIUsageOutputTokensKey,
		semconv.GenAIUsageReasoningOutputTokensKey,
		semconv.GenAIWorkflowNameKey,
	} {
		keys[string(k)] = true
	}
	return keys
}()

// SemconvName reports whether key is an attribute name of the semantic conventions (the GenAI
// ones, error.type, server.address and server.port) in the semconv package.
func SemconvName(key string) bool { return semconvKeys[key] }

// The JSON format of gen_ai.input.messages, gen_ai.output.messages and
// gen_ai.system_instructions, as a collector decodes it: only what the conventions' schemas
// require is checked, parts of the types they define.

type message struct {
	Role         *string           `json:"role"`
	Parts        []json.RawMessage `json:"parts"`
	FinishReason *string           `json:"finish_reason"`
}

type part struct {
	Type      *string         `json:"type"`
	Content   *string         `json:"content"`
	ID        *string         `json:"id"`
	Name      *string         `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Response  json.RawMessage `json:"response"`
}

// Message is a decoded message of gen_ai.input.messages or gen_ai.output.messages.
type Message struct {
	Role         string
	Parts        []Part
	FinishReason string // output messages only
}

// Part is one part of a Message, or of gen_ai.system_instructions.
type Part struct {
	Type      string // text, tool_call, tool_call_response
	Content   string // text
	ID, Name  string // tool_call (ID of tool_call_response too)
	Arguments json.RawMessage
	Response  json.RawMessage
}

// InputMessages decodes gen_ai.input.messages, failing on what the conventions' format does not
// allow.
func InputMessages(raw string) ([]Message, error) { return messages(raw, false) }

// OutputMessages decodes gen_ai.output.messages; each message must say why it ended.
func OutputMessages(raw string) ([]Message, error) { return messages(raw, true) }

// SystemInstructions decodes gen_ai.system_instructions: a list of parts.
func SystemInstructions(raw string) ([]Part, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal([]byte(raw), &parts); err != nil {
		return nil, fmt.Errorf("gen_ai.system_instructions is not a JSON array: %w", err)
	}
	return decodeParts(parts, "gen_ai.system_instructions")
}

func messages(raw string, output bool) ([]Message, error) {
	var ms []message
	if err := json.Unmarshal([]byte(raw), &ms); err != nil {
		return nil, fmt.Errorf("not a JSON array of messages: %w", err)
	}
	out := make([]Message, 0, len(ms))
	for i, m := range ms {
		where := fmt.Sprintf("message %d", i)
		if m.Role == nil || m.Parts == nil {
			return nil, fmt.Errorf("%s lacks role or parts", where)
		}
		switch *m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return nil, fmt.Errorf("%s has role %q", where, *m.Role)
		}
		if output && (m.FinishReason == nil || *m.FinishReason == "") {
			return nil, fmt.Errorf("%s (output) lacks finish_reason", where)
		}
		parts, err := decodeParts(m.Parts, where)
		if err != nil {
			return nil, err
		}
		msg := Message{Role: *m.Role, Parts: parts}
		if m.FinishReason != nil {
			msg.FinishReason = *m.FinishReason
		}
		out = append(out, msg)
	}
	return out, nil
}

func decodeParts(raw []json.RawMessage, where string) ([]Part, error) {
	out := make([]Part, 0, len(raw))
	for j, r := range raw {
		var p part
		if err := json.Unmarshal(r, &p); err != nil {
			return nil, fmt.Errorf("%s, part %d: %w", where, j, err)
		}
		if p.Type == nil {
			return nil, fmt.Errorf("%s, part %d lacks type", where, j)
		}
		got := Part{Type: *p.Type, Arguments: p.Arguments, Response: p.Response}
		if p.ID != nil {
			got.ID = *p.ID
		}
		switch *p.Type {
		case "text":
			if p.Content == nil {
				return nil, fmt.Errorf("%s, part %d: a text part without content", where, j)
			}
			got.Content = *p.Content
		case "tool_call":
			if p.Name == nil {
				return nil, fmt.Errorf("%s, part %d: a tool_call part without name", where, j)
			}
			got.Name = *p.Name
		case "tool_call_response":
			if p.Response == nil {
				return nil, fmt.Errorf("%s, part %d: a tool_call_response part without response", where, j)
			}
		default:
			return nil, fmt.Errorf("%s, part %d has type %q, not one reins sends", where, j, *p.Type)
		}
		out = append(out, got)
	}
	return out, nil
}
