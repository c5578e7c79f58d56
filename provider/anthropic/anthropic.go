// Package anthropic is the model provider for Anthropic's Messages API (and any server speaking
// it), built on the official SDK github.com/anthropics/anthropic-sdk-go.
//
// It turns a model.Request into one Messages call and the reply into a model.Response: text
// becomes an answer, tool_use blocks become tool calls, a refusal becomes a refuse proposal.
// Tool results are sent back as tool_result blocks, the results of one turn grouped in one user
// message as the API requires. Failures are classified with provider.StatusError and
// provider.TransportError, so the loop retries what is worth retrying and honours Retry-After.
//
// It must not retry on its own (the SDK's retries default to 0: the loop retries on its clock)
// nor decide anything about budgets or policy.
package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
)

// name is the provider's name in error messages.
const name = "anthropic"

// Model is a client for one Anthropic model. It is safe for concurrent use.
type Model struct {
	cfg    provider.Config
	client anthropic.Client
}

var _ model.Model = (*Model)(nil)

// New returns a client for cfg with its defaults filled in. The SDK reads nothing from the
// environment: the key and the base URL are the ones in cfg. An empty APIKey is accepted only
// with a BaseURL (a local or compatible server that needs no key).
func New(cfg provider.Config) (*Model, error) {
	cfg = cfg.WithDefaults()
	if cfg.Model == "" {
		return nil, errors.New("anthropic: no model name (e.g. claude-sonnet-4-5)")
	}
	if cfg.APIKey == "" && cfg.BaseURL == "" {
		return nil, errors.New("anthropic: no API key (set ANTHROPIC_API_KEY, or a base URL for a server that needs none)")
	}
	opts := []option.RequestOption{
		// reins resolves credentials and the base URL itself; the SDK must not add others.
		option.WithoutEnvironmentDefaults(),
		option.WithMaxRetries(cfg.MaxRetries),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Model{cfg: cfg, client: anthropic.NewClient(opts...)}, nil
}

// Generate makes one Messages call: streamed when req.OnDelta is set or the config asks for it
// (and when max_tokens is too large for the SDK to allow a non-streaming call), whole otherwise.
// Both ways give the same Response.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	params, err := m.params(req)
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()

	var (
		msg  *anthropic.Message
		args map[int]string
	)
	if req.OnDelta != nil || m.cfg.Stream || needsStream(params) {
		msg, args, err = m.stream(callCtx, params, req.OnDelta)
	} else {
		msg, err = m.client.Messages.New(callCtx, params)
	}
	if err != nil {
		return nil, provider.Redact(m.classify(ctx, callCtx, err), m.cfg.APIKey)
	}
	if msg == nil {
		// A body of `null` decodes to no message and no error.
		return nil, &model.Error{Message: "anthropic: the reply holds no message, so there is nothing to act on"}
	}
	return m.response(msg, args), nil
}

// needsStream reports whether the SDK refuses params without streaming: it does so when the
// reply could take longer than ten minutes (a large max_tokens) or exceed a model's limit.
func needsStream(params anthropic.MessageNewParams) bool {
	_, err := anthropic.CalculateNonStreamingTimeout(int(params.MaxTokens), params.Model, nil)
	return err != nil
}

// errNoMessageStop is the error of a stream that ended without its message_stop event.
var errNoMessageStop = errors.New("the reply stream ended before message_stop (connection dropped?)")

// stream makes a streaming call, reporting each text and tool-use piece to onDelta (if set) in
// order, and returns the accumulated message together with the raw input JSON of every tool_use
// block that received input deltas, by content index: Accumulate replaces input that is not
// valid JSON with {}, but the loop must see what the model really sent to reject it.
func (m *Model) stream(ctx context.Context, params anthropic.MessageNewParams, onDelta func(model.Delta)) (*anthropic.Message, map[int]string, error) {
	s := m.client.Messages.NewStreaming(ctx, params)
	defer s.Close()
	var (
		msg     anthropic.Message
		stopped bool
		calls   = map[int]int{} // content index → call index, tool_use blocks only
		inputs  = map[int]*strings.Builder{}
		emit    = func(d model.Delta) {
			if onDelta != nil {
				onDelta(d)
			}
		}
	)
	for s.Next() {
		ev := s.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, nil, fmt.Errorf("malformed reply stream: %w", err)
		}
		idx := int(ev.Index)
		switch ev.Type {
		case "content_block_start":
			switch cb := ev.ContentBlock; cb.Type {
			case "text":
				if cb.Text != "" {
					emit(model.Delta{Text: cb.Text})
				}
			case "tool_use":
				n := len(calls)
				calls[idx] = n
				emit(model.Delta{CallIndex: n, CallID: cb.ID, CallName: cb.Name})
			}
		case "content_block_delta":
			switch d := ev.Delta; d.Type {
			case "text_delta":
				if d.Text != "" {
					emit(model.Delta{Text: d.Text})
				}
			case "input_json_delta":
				n, ok := calls[idx]
				if !ok || d.PartialJSON == "" {
					continue
				}
				b := inputs[idx]
				if b == nil {
					b = &strings.Builder{}
					inputs[idx] = b
				}
				b.WriteString(d.PartialJSON)
				emit(model.Delta{CallIndex: n, Arguments: d.PartialJSON})
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := s.Err(); err != nil {
		var aerr *anthropic.Error
		if errors.As(err, &aerr) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("the reply stream broke off: %w", err)
	}
	if !stopped {
		return nil, nil, errNoMessageStop
	}
	args := make(map[int]string, len(inputs))
	for i, b := range inputs {
		args[i] = b.String()
	}
	return &msg, args, nil
}

// response maps a reply to a Response. args holds the streamed raw input of tool_use blocks by
// content index (nil for a non-streamed reply, whose input is always JSON).
func (m *Model) response(msg *anthropic.Message, args map[int]string) *model.Response {
	var (
		text  strings.Builder
		calls []model.ToolCall
	)
	for i, block := range msg.Content {
		switch block.Type {
		case "text":
			text.WriteString(block.Text)
		case "tool_use":
			raw := []byte(block.Input)
			if a, ok := args[i]; ok {
				raw = []byte(a)
			}
			calls = append(calls, model.ToolCall{ID: block.ID, Name: block.Name, Arguments: compact(raw)})
		}
	}
	var p model.Proposal
	switch {
	case msg.StopReason == anthropic.StopReasonRefusal:
		// A refused turn is cut off by the safety system: its calls, if any, are not acted on.
		p = model.Proposal{Kind: model.KindRefuse, Reason: text.String()}
		if strings.TrimSpace(p.Reason) == "" {
			p.Reason = "refusal"
		}
	case len(calls) > 0:
		p = model.Proposal{Kind: model.KindToolCalls, Text: text.String(), Calls: calls}
	default:
		p = model.Proposal{Kind: model.KindAnswer, Text: text.String()}
	}
	u := msg.Usage
	usage := model.Usage{
		InputTokens:  u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens: u.OutputTokens,
	}
	return &model.Response{Proposal: p, Usage: usage, CostUSD: m.cfg.Prices.Cost(m.cfg.Model, usage),
		Model: msg.Model, FinishReason: string(msg.StopReason), Truncated: truncated(msg.StopReason)}
}

// truncated reports whether a reply ended on a limit rather than by the model's choice: its
// max_tokens, or the model's context window filling up; either way it may be cut off anywhere.
func truncated(r anthropic.StopReason) bool {
	return r == anthropic.StopReasonMaxTokens || r == anthropic.StopReasonModelContextWindowExceeded
}

// compact returns valid JSON without insignificant whitespace, so that a streamed and a whole
// reply give the same arguments, and anything else unchanged: the loop rejects it as not JSON.
func compact(raw []byte) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return json.RawMessage(bytes.Clone(raw))
	}
	return b.Bytes()
}

// classify turns a failed call into the loop's error rules. callerCtx is the caller's context,
// callCtx the one bounded by the configured Timeout.
func (m *Model) classify(callerCtx, callCtx context.Context, err error) error {
	var aerr *anthropic.Error
	if errors.As(err, &aerr) {
		typ, msg := errorBody(aerr)
		if aerr.StatusCode >= 400 {
			var header http.Header
			if aerr.Response != nil {
				header = aerr.Response.Header
			}
			if typ != "" {
				msg = fmt.Sprintf("%s (%s)", msg, typ)
			}
			return provider.StatusError(name, aerr.StatusCode, header, msg, err)
		}
		// An error event inside a stream that had started with 200 OK.
		return streamError(typ, msg, err)
	}
	if callerCtx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		// The Timeout ran out while the body was read; make sure the error says so.
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return provider.TransportError(name, callerCtx, m.cfg.Timeout, err)
}

// errorBody reads the type and message of an API error body
// ({"type":"error","error":{"type":"...","message":"..."}}); a body that is not such JSON is
// returned as the message, cut short.
func errorBody(aerr *anthropic.Error) (typ, msg string) {
	raw := strings.TrimSpace(aerr.RawJSON())
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &body) == nil && (body.Error.Type != "" || body.Error.Message != "") {
		return body.Error.Type, strings.TrimSpace(body.Error.Message)
	}
	if len(raw) > 300 {
		raw = raw[:300] + "…"
	}
	return string(aerr.Type()), raw
}

// streamStatus is the HTTP status the API gives each error type when it can still send one; an
// error event inside a stream is classified as that status would be.
var streamStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusPaymentRequired,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      529,
}

// streamError is the error for an SSE error event. Unknown types are taken as server errors, so
// retryable: the stream failed part-way through a reply that had been accepted.
func streamError(typ, msg string, err error) *model.Error {
	status, ok := streamStatus[typ]
	if !ok {
		status = http.StatusInternalServerError
	}
	what := typ
	if what == "" {
		what = "an error"
	}
	if msg == "" {
		msg = "no message"
	}
	return &model.Error{
		Message:   fmt.Sprintf("%s: the reply stream failed with %s: %s", name, what, msg),
		Retryable: provider.RetryableStatus(status),
		Err:       err,
	}
}

// params maps a Request to the Messages parameters, checking first that every tool_use is
// answered by a tool_result in the next user message and the reverse, as the API requires.
func (m *Model) params(req *model.Request) (anthropic.MessageNewParams, error) {
	msgs, err := messages(req.Messages)
	if err != nil {
		return anthropic.MessageNewParams{}, err
	}
	p := anthropic.MessageNewParams{
		Model:     m.cfg.Model,
		MaxTokens: provider.ReplyCap(m.cfg, req),
		Messages:  msgs,
	}
	if req.Instructions != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.Instructions}}
	}
	for _, t := range req.Tools {
		schema, err := inputSchema(t.InputSchema)
		if err != nil {
			return anthropic.MessageNewParams{}, &model.Error{Message: fmt.Sprintf("%s: the input schema of tool %s: %v", name, t.Name, err), Err: err}
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	// The API accepts tool_choice only alongside tools.
	if len(req.Tools) > 0 {
		switch req.ToolChoice {
		case "":
		case "auto":
			p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}}
		case "required":
			p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}
		case "none":
			p.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
		default:
			p.ToolChoice = anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: req.ToolChoice}}
		}
	}
	return p, nil
}

// defaultSchema is the input schema of a tool without one: any object.
var defaultSchema = json.RawMessage(`{"type":"object","properties":{}}`)

// inputSchema sends a tool's JSON Schema as it is, adding "type":"object" when it has no type
// (the API requires object schemas).
func inputSchema(schema json.RawMessage) (anthropic.ToolInputSchemaParam, error) {
	if len(bytes.TrimSpace(schema)) == 0 || bytes.Equal(bytes.TrimSpace(schema), []byte("null")) {
		schema = defaultSchema
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(schema, &fields); err != nil || fields == nil {
		return anthropic.ToolInputSchemaParam{}, errors.New("not a JSON object")
	}
	if _, ok := fields["type"]; !ok {
		fields["type"] = json.RawMessage(`"object"`)
		b, err := json.Marshal(fields)
		if err != nil {
			return anthropic.ToolInputSchemaParam{}, err
		}
		schema = b
	}
	return param.Override[anthropic.ToolInputSchemaParam](json.RawMessage(compact(schema))), nil
}

// messages maps the conversation to Messages turns. Consecutive tool messages, and any user
// messages right after them, become one user message (tool_result blocks first); empty text is
// left out, since the API rejects empty text blocks.
func messages(conv []model.Message) ([]anthropic.MessageParam, error) {
	if err := checkPairing(conv); err != nil {
		return nil, err
	}
	var out []anthropic.MessageParam
	add := func(role anthropic.MessageParamRole, blocks ...anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			return
		}
		out = append(out, anthropic.MessageParam{Role: role, Content: blocks})
	}
	for i := range conv {
		msg := &conv[i]
		switch msg.Role {
		case model.RoleUser:
			if msg.Content != "" {
				add(anthropic.MessageParamRoleUser, anthropic.NewTextBlock(msg.Content))
			}
		case model.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if msg.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(msg.Content))
			}
			for _, c := range msg.Calls {
				blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolUse: &anthropic.ToolUseBlockParam{
					ID: c.ID, Name: c.Name, Input: objectOrEmpty(c.Arguments),
				}})
			}
			add(anthropic.MessageParamRoleAssistant, blocks...)
		case model.RoleTool:
			tr := anthropic.ToolResultBlockParam{ToolUseID: msg.CallID}
			if msg.Content != "" {
				tr.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: msg.Content}}}
			}
			if msg.IsError {
				tr.IsError = anthropic.Bool(true)
			}
			add(anthropic.MessageParamRoleUser, anthropic.ContentBlockParamUnion{OfToolResult: &tr})
		default:
			return nil, &model.Error{Message: fmt.Sprintf("%s: message %d has the unknown role %q", name, i, msg.Role)}
		}
	}
	return out, nil
}

// objectOrEmpty returns args when they are a JSON object, else {}: the API requires an object,
// and the loop's tool_result for such a call already says what was wrong with it.
func objectOrEmpty(args json.RawMessage) json.RawMessage {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		return compact(trimmed)
	}
	return json.RawMessage("{}")
}

// checkPairing verifies that each assistant message's calls are answered, each exactly once, by
// the tool messages that directly follow it, and that every tool message answers such a call.
// A conversation that breaks this would be rejected by the API with a 400; it is a bug of the
// caller, reported before anything is sent.
func checkPairing(conv []model.Message) error {
	fail := func(format string, args ...any) error {
		return &model.Error{Message: fmt.Sprintf("%s: invalid conversation: "+format, append([]any{name}, args...)...)}
	}
	for i := 0; i < len(conv); {
		msg := &conv[i]
		if msg.Role == model.RoleTool {
			return fail("the tool result for call %q (message %d) does not follow the assistant turn that made the call", msg.CallID, i)
		}
		i++
		if msg.Role != model.RoleAssistant || len(msg.Calls) == 0 {
			continue
		}
		open := make(map[string]bool, len(msg.Calls))
		for _, c := range msg.Calls {
			if c.ID == "" {
				return fail("the call of %s in message %d has no id", c.Name, i-1)
			}
			if open[c.ID] {
				return fail("the call id %q appears twice in message %d", c.ID, i-1)
			}
			open[c.ID] = true
		}
		answered := make(map[string]bool, len(msg.Calls))
		for ; i < len(conv) && conv[i].Role == model.RoleTool; i++ {
			id := conv[i].CallID
			switch {
			case answered[id]:
				return fail("the call %q has two tool results (message %d)", id, i)
			case !open[id]:
				return fail("the tool result for call %q (message %d) answers no call of the assistant turn before it", id, i)
			}
			delete(open, id)
			answered[id] = true
		}
		for _, c := range msg.Calls {
			if open[c.ID] {
				return fail("the call %q (%s) has no tool result", c.ID, c.Name)
			}
		}
	}
	return nil
}

// TokenPrices implements model.Pricing from the client's price table.
func (m *Model) TokenPrices() (input, output float64, ok bool) {
	return m.cfg.Prices.PerToken(m.cfg.Model)
}
