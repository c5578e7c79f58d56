package mcpserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/mcptool"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
)

// RunIDMetaKey is the key of a tools/call's _meta under which the server puts the id of the
// run the call starts, derived in front of the SDK ([RunID]) and read by the call's handler; a
// host's own value under it is replaced. Every answer of a call names its run under it too.
const RunIDMetaKey = "reins/run_id"

// RunIDPrefix begins the id of every run a tool call starts: a task's id is its run's.
const RunIDPrefix = "mcp-"

// RunID returns the id of the run that a tools/call of tool with arguments args starts as
// principal, so that a call made again starts no second run: with an idempotency key
// (the request's _meta "reins/idempotency_key"), the hash of the principal, the tool and the
// key, whatever the session; without one, the hash of the principal, the session, the tool, the
// arguments and the request's JSON-RPC id, so that a request sent again within its session
// (the same id) finds the run the first one started.
func RunID(principal, session, tool string, args json.RawMessage, requestID any, idempotencyKey string) string {
	h := sha256.New()
	if idempotencyKey != "" {
		fmt.Fprintf(h, "key\x00%s\x00%s\x00%s", principal, tool, idempotencyKey)
	} else {
		var compact bytes.Buffer
		if json.Compact(&compact, args) != nil {
			compact.Write(args)
		}
		id, _ := json.Marshal(requestID)
		fmt.Fprintf(h, "call\x00%s\x00%s\x00%s\x00%s\x00%s", principal, session, tool, compact.Bytes(), id)
	}
	return RunIDPrefix + hex.EncodeToString(h.Sum(nil))[:32]
}

// callParams is what the server reads of a tools/call's params.
type callParams struct {
	Meta      map[string]any  `json:"_meta,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Task asks for the call to run as a task (MCP 2025-11-25).
	Task *taskParams `json:"task,omitempty"`
}

// taskParams is a task-augmented request's params.task.
type taskParams struct {
	TTL *int64 `json:"ttl,omitempty"`
}

// idempotencyKey returns the call's idempotency key ("": none).
func (c callParams) idempotencyKey() string {
	k, _ := c.Meta[mcptool.IdempotencyMetaKey].(string)
	return k
}

// toolError is a call's failure that the host's model should see: answered as a tool result
// with isError, not as a JSON-RPC error.
type toolError struct{ msg string }

func (e *toolError) Error() string { return e.msg }

// rpcError returns the JSON-RPC error of code with one sentence.
func rpcError(code int64, format string, args ...any) error {
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// refuseStart is the answer to a call by a principal that may not start runs.
func refuseStart(p operator.Principal) error {
	return rpcError(jsonrpc.CodeInvalidRequest, "principal %s (roles %s) may not call tools: starting a run needs the role submitter or admin", p.Name, strings.Join(p.Roles, ", "))
}

// begin starts the run runID of the workflow registered as tool, with args as its input, as
// p; a run of that id that p started before (a call made again) is left as it is. The error
// is a *toolError when the host's model should see it, else a JSON-RPC error.
func (s *Server) begin(ctx context.Context, p operator.Principal, tool string, args json.RawMessage, runID string) error {
	if !p.MayStart() {
		return refuseStart(p)
	}
	c := s.cfg.As(p)
	reg, err := c.Workflow(ctx, tool, 0)
	if errors.Is(err, client.ErrNoWorkflow) || client.CheckName(tool) != nil {
		return rpcError(jsonrpc.CodeInvalidParams, "there is no tool %q: the tools are the workflows registered on this server (tools/list)", tool)
	}
	if err != nil {
		return err
	}
	bs, err := c.Bundles(ctx, reg)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(args)) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if err := bs.All[bs.Root].Definition.CheckInput(args); err != nil {
		return &toolError{fmt.Sprintf("tool %s: %s", tool, err)}
	}
	_, err = c.StartWith(ctx, bs, args, client.StartOptions{RunID: runID, Registered: &reg})
	switch {
	case errors.Is(err, client.ErrExists):
		return s.startedBefore(ctx, p, c, runID)
	case errors.Is(err, client.ErrForbidden):
		return &toolError{strings.TrimPrefix(err.Error(), "client: ")}
	}
	return err
}

// startedBefore accepts a run that exists under the id of a call made again, when p started it.
func (s *Server) startedBefore(ctx context.Context, p operator.Principal, c *client.Client, runID string) error {
	o, err := c.Origin(ctx, runID)
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		return err
	}
	if err != nil || o.By != p.Name {
		return &toolError{fmt.Sprintf("run %s exists and principal %s did not start it: send the call with another idempotency key", runID, p.Name)}
	}
	return nil
}

// calls is the SDK's middleware of principal p's sessions: a tools/call without a task runs
// here, where the session can send its progress.
func (s *Server) calls(p operator.Principal) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			r, ok := req.(*mcp.CallToolRequest)
			if method != "tools/call" || !ok {
				return next(ctx, method, req)
			}
			return s.callTool(ctx, p, r)
		}
	}
}

// callTool starts the call's run, waits for its end, and answers with its outcome; with a
// progress token, each iteration of the run is a progress notification, and a host that can
// elicit is asked about each wait for approval (follower).
func (s *Server) callTool(ctx context.Context, p operator.Principal, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	prm := r.Params
	runID, _ := prm.Meta[RunIDMetaKey].(string)
	if !strings.HasPrefix(runID, RunIDPrefix) { // the front derives it; a call it did not see
		key, _ := prm.Meta[mcptool.IdempotencyMetaKey].(string)
		runID = RunID(p.Name, r.Session.ID(), prm.Name, prm.Arguments, nil, key)
	}
	err := s.begin(ctx, p, prm.Name, prm.Arguments, runID)
	var te *toolError
	if errors.As(err, &te) {
		return toolFailure(te.msg, runID), nil
	}
	if err != nil {
		return nil, s.internal(err, "tools/call", p)
	}
	c := s.cfg.As(p)
	f := s.newFollower(ctx, p, r.Session, runID, prm.GetProgressToken())
	rec, err := s.await(ctx, c, runID, f)
	f.wait()
	if err != nil {
		return nil, s.internal(err, "tools/call", p)
	}
	return s.outcome(ctx, c, rec)
}

// progress returns what sends to session ss a progress notification of token per iteration
// of a run.
func (s *Server) progress(ctx context.Context, ss *mcp.ServerSession, token any) func(*protocol.Event) {
	n := 0
	return func(ev *protocol.Event) {
		if ev.Type != protocol.EvContinued && (ev.Type != protocol.EvCompleted || ev.Iteration == 0) {
			return
		}
		n++
		var u protocol.Usage
		if ev.Usage != nil {
			u = *ev.Usage
		}
		msg := fmt.Sprintf("step %s iteration %d: %d tool calls, %d tokens", ev.Step, ev.Iteration, u.ToolCalls, u.InputTokens+u.OutputTokens)
		err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: msg})
		if err != nil {
			s.cfg.Log.Debug("mcp: a progress notification was not sent", "err", err)
		}
	}
}

// await waits for the end of run runID and returns its record; each update of the run goes to
// f first when it is not nil.
func (s *Server) await(ctx context.Context, c *client.Client, runID string, f *follower) (*client.Record, error) {
	if f == nil {
		return c.Wait(ctx, runID)
	}
	for u, err := range c.Watch(ctx, runID, client.WatchOptions{}) {
		if err != nil {
			return nil, err
		}
		f.see(ctx, u)
		if u.Record != nil && u.Record.Finished() {
			return u.Record, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("the events of run %s ended before its end", runID)
}

// outcome is the answer of a call whose run ended: its output as structured content, or its
// failure as a tool error with its stop reason.
func (s *Server) outcome(ctx context.Context, c *client.Client, rec *client.Record) (*mcp.CallToolResult, error) {
	res, err := c.Result(ctx, rec)
	if err != nil {
		return nil, err
	}
	if res.Status != protocol.RunCompleted {
		why := "no reason recorded"
		if res.Error != nil {
			why = res.Error.Error()
		}
		return toolFailure(fmt.Sprintf("run %s of workflow %s %s: %s", res.RunID, rec.Run.Workflow, res.Status, why), res.RunID), nil
	}
	out := res.Output
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	var structured any = out
	if !bytes.HasPrefix(bytes.TrimSpace(out), []byte("{")) { // structured content is an object
		structured = map[string]json.RawMessage{"output": out}
	}
	return &mcp.CallToolResult{
		Meta:              mcp.Meta{RunIDMetaKey: res.RunID},
		Content:           []mcp.Content{&mcp.TextContent{Text: string(out)}},
		StructuredContent: structured,
	}, nil
}

// toolFailure is a tool result with isError and one sentence.
func toolFailure(msg, runID string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Meta: mcp.Meta{RunIDMetaKey: runID}, IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// internal logs err, which the host must not see, and returns the JSON-RPC error it sees.
func (s *Server) internal(err error, method string, p operator.Principal) error {
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		return rpc
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return rpcError(jsonrpc.CodeInternalError, "%s ended before the run did: the run goes on, and a call made again with the same idempotency key finds it", method)
	}
	s.cfg.Log.Error("mcp: a request failed", "method", method, "principal", p.Name, "err", err)
	return rpcError(jsonrpc.CodeInternalError, "%s failed inside the server: its log says why", method)
}
