package mcpserver

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/reins-run/reins/operator"
)

// tasksCapability is the tasks capability (MCP 2025-11-25) added to the answer of initialize:
// tools/call may be a task, and tasks may be listed and cancelled.
const tasksCapability = `"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`

// withTasks returns the answer of initialize, result, with the tasks capability, which the
// SDK cannot say.
func withTasks(result []byte) []byte {
	const caps = `"capabilities":{`
	i := strings.Index(string(result), caps)
	if i < 0 || strings.Contains(string(result), `"tasks":`) {
		return result
	}
	i += len(caps)
	sep := ","
	if i < len(result) && result[i] == '}' {
		sep = ""
	}
	out := make([]byte, 0, len(result)+len(tasksCapability)+1)
	out = append(out, result[:i]...)
	out = append(out, tasksCapability+sep...)
	return append(out, result[i:]...)
}

// front returns what answers req when it is a method the server answers in front of the SDK
// (tools/list, a task-augmented tools/call, resources, tasks), as p in session (over stdio,
// the connection's own); ok is false for any other, which goes on to the SDK, a tools/call with the id of its
// run in its _meta (RunIDMetaKey). What it returns may take as long as a run (tasks/result):
// the transport runs it apart from the messages that follow. Its second result is the task it
// created (nil for none).
func (s *Server) front(p operator.Principal, session string, req *jsonrpc.Request) (handle func(context.Context) (*jsonrpc.Response, *created), ok bool) {
	if !req.IsCall() {
		return nil, false
	}
	answer := func(f func(context.Context) (any, error)) func(context.Context) (*jsonrpc.Response, *created) {
		return func(ctx context.Context) (*jsonrpc.Response, *created) {
			result, err := f(ctx)
			return s.answer(req, p, result, err), nil
		}
	}
	withParams := func(f func(context.Context, operator.Principal, json.RawMessage) (any, error)) func(context.Context) (*jsonrpc.Response, *created) {
		return answer(func(ctx context.Context) (any, error) { return f(ctx, p, req.Params) })
	}
	switch req.Method {
	case "tools/list":
		return answer(func(ctx context.Context) (any, error) { return s.listTools(ctx, p) }), true
	case "tools/call":
		var prm callParams
		if json.Unmarshal(req.Params, &prm) != nil {
			return nil, false // the SDK says what is wrong with it
		}
		runID := RunID(p.Name, session, prm.Name, prm.Arguments, req.ID.Raw(), prm.idempotencyKey())
		if prm.Task == nil {
			stampRunID(req, runID)
			return nil, false
		}
		return func(ctx context.Context) (*jsonrpc.Response, *created) {
			result, err := s.callAsTask(ctx, p, prm, runID)
			var c *created
			if _, isTask := result.(taskCreated); err == nil && isTask {
				c = &created{runID: runID, progress: progressToken(prm.Meta)}
			}
			return s.answer(req, p, result, err), c
		}, true
	case "resources/list":
		return withParams(s.listResources), true
	case "resources/templates/list":
		return answer(func(context.Context) (any, error) { return resourceTemplates(), nil }), true
	case "resources/read":
		return withParams(s.readResource), true
	case "tasks/get":
		return withParams(s.getTask), true
	case "tasks/result":
		return withParams(s.taskResult), true
	case "tasks/list":
		return withParams(s.listTasks), true
	case "tasks/cancel":
		return withParams(s.cancelTask), true
	}
	return nil, false
}

// answer is the JSON-RPC response to req of result or err.
func (s *Server) answer(req *jsonrpc.Request, p operator.Principal, result any, err error) *jsonrpc.Response {
	if err == nil {
		b, merr := json.Marshal(result)
		if merr == nil {
			return &jsonrpc.Response{ID: req.ID, Result: b}
		}
		err = merr
	}
	return &jsonrpc.Response{ID: req.ID, Error: s.internal(err, req.Method, p)}
}

// stampRunID puts runID in the _meta of the tools/call req, replacing a host's own.
func stampRunID(req *jsonrpc.Request, runID string) {
	var params map[string]json.RawMessage
	if json.Unmarshal(req.Params, &params) != nil || params == nil {
		return
	}
	meta := map[string]any{}
	if m, ok := params["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
		meta = map[string]any{}
	}
	meta[RunIDMetaKey] = runID
	b, _ := json.Marshal(meta)
	params["_meta"] = b
	if b, err := json.Marshal(params); err == nil {
		req.Params = b
	}
}

// decodeParams decodes params into v, or says which method's params are wrong.
func decodeParams(method string, params json.RawMessage, v any) error {
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	if err := json.Unmarshal(params, v); err != nil {
		return rpcError(jsonrpc.CodeInvalidParams, "the params of %s are not what it takes: %v", method, err)
	}
	return nil
}
