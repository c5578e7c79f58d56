// Package openai is the OpenAI Chat Completions provider: it turns a model.Request into a call of
// POST /chat/completions through the official SDK (github.com/openai/openai-go/v3) and the reply
// into a model.Response. It speaks to OpenAI's own API and, through Config.BaseURL, to any server
// of the same protocol (vLLM, Ollama, llama.cpp server, a local test server).
//
// It owns the mapping between reins' conversation and the Chat Completions wire format, streaming,
// and the classification of failures (through provider.StatusError and provider.TransportError).
// It must not decide anything about budgets, validation or retries: the loop does that.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
)

// name prefixes every error message of this provider.
const name = "openai"

// emptyParameters is the schema of a tool that declares none: an object with no properties.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// Model is an OpenAI Chat Completions client. It is safe for concurrent use.
type Model struct {
	cfg    provider.Config
	client openai.Client
	// completionTokens sends the reply cap as max_completion_tokens rather than max_tokens (see
	// needsCompletionTokens).
	completionTokens bool
}

var _ model.Model = (*Model)(nil)

// New returns a client for cfg, with cfg's defaults filled in. cfg.Model is required; an empty
// APIKey is accepted when a BaseURL or an HTTPClient is set (local servers and replayed
// cassettes need no key). Settings the SDK reads from the environment (OPENAI_BASE_URL,
// OPENAI_ORG_ID, ...) apply where cfg leaves them unset; the API key is always cfg.APIKey.
func New(cfg provider.Config) (*Model, error) {
	cfg = cfg.WithDefaults()
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("openai: no model name given (for example gpt-4.1-mini)")
	}
	if cfg.APIKey == "" && cfg.BaseURL == "" && cfg.HTTPClient == nil {
		return nil, errors.New("openai: no API key given (set one, or a BaseURL for a server that needs none)")
	}
	opts := []option.RequestOption{option.WithAPIKey(cfg.APIKey), option.WithMaxRetries(cfg.MaxRetries)}
	if cfg.BaseURL != "" {
		u, err := url.Parse(cfg.BaseURL)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("openai: base URL %q is not an absolute URL such as http://127.0.0.1:8000/v1", cfg.BaseURL)
		}
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Model{cfg: cfg, client: openai.NewClient(opts...), completionTokens: needsCompletionTokens(cfg.Model)}, nil
}

// needsCompletionTokens reports whether modelName is an OpenAI reasoning model (o1, o3, o4-mini,
// gpt-5 and later), which rejects max_tokens and takes max_completion_tokens instead. Every other
// model gets max_tokens, which OpenAI's older models and every compatible server read (vLLM,
// Ollama and llama.cpp server ignored max_completion_tokens until recently, and would then
// generate without a cap). The choice depends on the model name only, not on the server, so a
// cassette recorded against the API matches its replay.
func needsCompletionTokens(modelName string) bool {
	name := strings.ToLower(modelName[strings.LastIndex(modelName, "/")+1:]) // "openai/o3" on routers
	if len(name) >= 2 && name[0] == 'o' && name[1] >= '1' && name[1] <= '9' {
		return true
	}
	rest, ok := strings.CutPrefix(name, "gpt-")
	if !ok {
		return false
	}
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	major, err := strconv.Atoi(rest[:digits])
	return err == nil && major >= 5
}

// Generate sends req and returns the model's proposal. It streams when req.OnDelta is set or the
// client was configured to stream; the Response is the same either way.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	params, err := m.params(req)
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	// The raw reply, kept for error statuses whose body the SDK cannot parse (servers that
	// answer {"error": "text"} or plain text).
	var raw *http.Response
	opts := []option.RequestOption{option.WithResponseInto(&raw)}
	var completion *openai.ChatCompletion
	if req.OnDelta != nil || m.cfg.Stream {
		completion, err = m.stream(callCtx, params, req.OnDelta, opts)
	} else {
		completion, err = m.client.Chat.Completions.New(callCtx, params, opts...)
	}
	if err != nil {
		return nil, provider.Redact(m.classify(ctx, callCtx, err, raw), m.cfg.APIKey)
	}
	return m.response(completion)
}

// params maps a request to the SDK's request parameters.
func (m *Model) params(req *model.Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(m.cfg.Model)}
	if m.completionTokens {
		p.MaxCompletionTokens = openai.Int(provider.ReplyCap(m.cfg, req))
	} else {
		p.MaxTokens = openai.Int(provider.ReplyCap(m.cfg, req))
	}
	p.Messages = make([]openai.ChatCompletionMessageParamUnion, 0, len(req.Messages)+1)
	if req.Instructions != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.Instructions))
	}
	for i := range req.Messages {
		msg, err := message(&req.Messages[i])
		if err != nil {
			return p, &model.Error{Message: fmt.Sprintf("openai: message %d: %v", i, err)}
		}
		p.Messages = append(p.Messages, msg)
	}
	for _, def := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: def.Name}
		if def.Description != "" {
			fn.Description = openai.String(def.Description)
		}
		schema := def.InputSchema
		if len(strings.TrimSpace(string(schema))) == 0 || string(schema) == "null" {
			schema = emptyParameters
		}
		if !json.Valid(schema) {
			return p, &model.Error{Message: fmt.Sprintf("openai: the input schema of tool %s is not valid JSON", def.Name)}
		}
		// The schema goes out byte for byte: decoding it into the SDK's map would reorder its
		// properties, and models tend to fill arguments in the order the schema lists them.
		fn.SetExtraFields(map[string]any{"parameters": schema})
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	switch req.ToolChoice {
	case "":
	case "auto", "none", "required":
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String(req.ToolChoice)}
	default:
		p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: req.ToolChoice})
	}
	return p, nil
}

// message maps one conversation message to its Chat Completions form.
func message(msg *model.Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch msg.Role {
	case model.RoleUser:
		return openai.UserMessage(msg.Content), nil
	case model.RoleAssistant:
		if len(msg.Calls) == 0 {
			return openai.AssistantMessage(msg.Content), nil
		}
		var a openai.ChatCompletionAssistantMessageParam
		if msg.Content != "" {
			a.Content.OfString = openai.String(msg.Content)
		}
		a.ToolCalls = make([]openai.ChatCompletionMessageToolCallUnionParam, len(msg.Calls))
		for i, call := range msg.Calls {
			a.ToolCalls[i] = openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID:       call.ID,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: call.Name, Arguments: arguments(call.Arguments)},
			}}
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	case model.RoleTool:
		return openai.ToolMessage(msg.Content, msg.CallID), nil
	}
	return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("role %q is not user, assistant or tool", msg.Role)
}

// arguments is the arguments text of a call as the model sent it. The loop stores arguments that
// were not JSON as a JSON string holding their text: that text goes back, so the model sees what
// it actually wrote next to the error about it.
func arguments(args json.RawMessage) string {
	trimmed := strings.TrimSpace(string(args))
	if trimmed == "" {
		return "{}"
	}
	if trimmed[0] == '"' {
		var text string
		if json.Unmarshal(args, &text) == nil {
			return text
		}
	}
	return string(args)
}

// response maps a completed reply to the loop's Response.
func (m *Model) response(c *openai.ChatCompletion) (*model.Response, error) {
	if c == nil || len(c.Choices) == 0 {
		return nil, &model.Error{Message: "openai: the reply has no choices, so there is no message to act on"}
	}
	msg := &c.Choices[0].Message
	resp := &model.Response{
		Usage:        model.Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens},
		Model:        c.Model,
		FinishReason: c.Choices[0].FinishReason,
		// "length": the reply reached max_tokens (or the context window); its text or calls
		// may be cut off anywhere.
		Truncated: c.Choices[0].FinishReason == "length",
	}
	switch {
	case len(msg.ToolCalls) > 0:
		calls := make([]model.ToolCall, len(msg.ToolCalls))
		for i, tc := range msg.ToolCalls {
			calls[i] = model.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)}
		}
		resp.Proposal = model.Proposal{Kind: model.KindToolCalls, Text: msg.Content, Calls: calls}
	case msg.Refusal != "":
		resp.Proposal = model.Proposal{Kind: model.KindRefuse, Reason: msg.Refusal}
	default:
		resp.Proposal = model.Proposal{Kind: model.KindAnswer, Text: msg.Content}
	}
	resp.CostUSD = m.cfg.Prices.Cost(m.cfg.Model, resp.Usage)
	return resp, nil
}

// TokenPrices implements model.Pricing from the client's price table.
func (m *Model) TokenPrices() (input, output float64, ok bool) {
	return m.cfg.Prices.PerToken(m.cfg.Model)
}
