package telemetry

import (
	"encoding/json"
	"strings"

	"github.com/reins-run/reins/model"
)

// The contents a chat span records when capture is on, in the JSON format the GenAI semantic
// conventions give gen_ai.system_instructions, gen_ai.input.messages and
// gen_ai.output.messages: messages of a role and a list of typed parts.

// chatMessage is one message of gen_ai.input.messages.
type chatMessage struct {
	Role  string `json:"role"`
	Parts []any  `json:"parts"`
}

// outputMessage is one message of gen_ai.output.messages: a choice of the reply, with why it
// ended.
type outputMessage struct {
	Role         string `json:"role"`
	Parts        []any  `json:"parts"`
	FinishReason string `json:"finish_reason"`
}

type textPart struct {
	Type    string `json:"type"` // text
	Content string `json:"content"`
}

type toolCallPart struct {
	Type      string `json:"type"` // tool_call
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments any    `json:"arguments"`
}

type toolCallResponsePart struct {
	Type     string `json:"type"` // tool_call_response
	ID       string `json:"id,omitempty"`
	Response string `json:"response"`
}

func text(s string) textPart { return textPart{Type: "text", Content: s} }

func toolCall(c model.ToolCall) toolCallPart {
	// The arguments as the JSON they are; a model's malformed arguments as their text.
	var args any
	if json.Valid(c.Arguments) {
		args = json.RawMessage(c.Arguments)
	} else if len(c.Arguments) > 0 {
		args = string(c.Arguments)
	}
	return toolCallPart{Type: "tool_call", ID: c.ID, Name: c.Name, Arguments: args}
}

// systemInstructions is gen_ai.system_instructions: a list of parts.
func systemInstructions(s string) []any { return []any{text(s)} }

// inputMessages is gen_ai.input.messages of the conversation sent.
func inputMessages(msgs []model.Message) []chatMessage {
	out := make([]chatMessage, 0, len(msgs))
	for _, m := range msgs {
		parts := []any{}
		switch m.Role {
		case model.RoleTool:
			parts = append(parts, toolCallResponsePart{Type: "tool_call_response", ID: m.CallID, Response: m.Content})
		default:
			if m.Content != "" || len(m.Calls) == 0 {
				parts = append(parts, text(m.Content))
			}
			for _, c := range m.Calls {
				parts = append(parts, toolCall(c))
			}
		}
		out = append(out, chatMessage{Role: string(m.Role), Parts: parts})
	}
	return out
}

// outputMessages is gen_ai.output.messages of a reply: its one choice.
func outputMessages(resp *model.Response) []outputMessage {
	p := resp.Proposal
	parts := []any{}
	switch p.Kind {
	case model.KindAnswer:
		parts = append(parts, text(p.Text))
	case model.KindToolCalls:
		if p.Text != "" {
			parts = append(parts, text(p.Text))
		}
		for _, c := range p.Calls {
			parts = append(parts, toolCall(c))
		}
	default: // escalate, refuse: the model's reason is what it said
		parts = append(parts, text(p.Reason))
	}
	return []outputMessage{{Role: string(model.RoleAssistant), Parts: parts, FinishReason: outputFinish(resp)}}
}

// outputFinish is the finish_reason an output message must carry, in the conventions' words
// (stop, length, content_filter, tool_call, error) for the providers' reasons they name, else
// the provider's own; a reply whose provider gave none says what it is (tool_call or stop).
func outputFinish(resp *model.Response) string {
	if resp.Truncated {
		return "length"
	}
	switch strings.ToLower(resp.FinishReason) {
	case "stop", "end_turn", "stop_sequence":
		return "stop"
	case "length", "max_tokens", "model_length":
		return "length"
	case "tool_calls", "tool_use", "function_call":
		return "tool_call"
	case "content_filter", "refusal":
		return "content_filter"
	case "":
		if resp.Proposal.Kind == model.KindToolCalls {
			return "tool_call"
		}
		return "stop"
	}
	return resp.FinishReason
}
