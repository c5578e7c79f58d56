package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kballard/go-shellquote"

	"github.com/reins-run/reins/fixture"
	"github.com/reins-run/reins/mcptool"
	"github.com/reins-run/reins/telemetry"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// tools builds the agent step's tools, in the order the step lists them; fx records the
// results of those with side effects.
func (h *Handlers) tools(j *job, fx *effects) ([]tool.Tool, error) {
	var forbid []string
	if j.step.Policy != nil {
		forbid = j.step.Policy.Forbid
	}
	out := make([]tool.Tool, 0, len(j.step.Tools))
	for _, name := range j.step.Tools {
		def, ok := j.bundle.Definition.Tools[name]
		if !ok {
			return nil, j.failf("tool %q is not declared in the workflow's tools", name)
		}
		t, err := h.tool(j, name, def, slices.Contains(forbid, name))
		if err != nil {
			return nil, err
		}
		if !def.RunsChild() {
			d := h.toolTimeout(def, fx)
			t = fx.wrap(timed(scrubTool(t, h.scrub), d), d)
		}
		out = append(out, telemetry.WrapTool(t))
	}
	return out, nil
}

// toolTimeout is how long one call of def may take: its own timeout, else the operator's
// (Config.ToolTimeout), else the worker's for side effects (the lease's).
func (h *Handlers) toolTimeout(def workflow.ToolDef, fx *effects) time.Duration {
	switch {
	case def.Timeout > 0:
		return def.Timeout.Std()
	case h.cfg.ToolTimeout > 0:
		return h.cfg.ToolTimeout
	case fx != nil && fx.lease.Timeout > 0:
		return fx.lease.Timeout
	}
	return worker.DefaultEffectTimeout
}

// timedTool bounds every call of a tool by its timeout: a call past it fails, retryable (the
// model may call again; a side effect's call is not recorded, and is made again with the same
// idempotency key).
type timedTool struct {
	tool.Tool
	d time.Duration
}

func timed(t tool.Tool, d time.Duration) tool.Tool { return timedTool{Tool: t, d: d} }

func (t timedTool) Call(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
	cctx, cancel := context.WithTimeoutCause(ctx, t.d, errToolTimeout)
	defer cancel()
	out, err := t.Tool.Call(cctx, args, key)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errToolTimeout) {
		return nil, &tool.Error{Message: fmt.Sprintf("tool %s did not answer within its timeout of %s", t.Spec().Name, t.d), Retryable: true, Err: context.DeadlineExceeded}
	}
	return out, err
}

// errToolTimeout ends the context of a call at its tool's timeout.
var errToolTimeout = errors.New("the tool's timeout passed")

// tool builds one workflow tool: one that runs as a sub-run (never called), mocked, an MCP
// server's, or the Go tool registered under its handler.
func (h *Handlers) tool(j *job, name string, def workflow.ToolDef, forbidden bool) (tool.Tool, error) {
	spec := tool.Spec{Name: name, Description: def.Description, InputSchema: def.InputSchema, SideEffect: def.SideEffect}
	switch {
	case def.RunsChild():
		return childTool{spec: spec}, nil
	case len(bytes.TrimSpace(def.Mock)) > 0:
		m, err := fixture.MockedTool("tools."+name+".mock", spec, def.Mock, h.clock)
		if err != nil {
			return nil, j.failf("%w", err)
		}
		return m, nil
	case def.MCP != "":
		return h.mcpTool(j, name, spec, def.MCP)
	case def.Handler == "":
		return nil, j.failf("tool %s has neither a handler nor a mock", name)
	}
	goTool := h.cfg.Tools[def.Handler]
	switch {
	case goTool != nil:
		return renamed(spec, goTool), nil
	case forbidden:
		return unavailable{spec: spec, handler: def.Handler}, nil
	}
	return nil, j.failf("tool %s needs the Go tool %q, which this worker does not register", name, def.Handler)
}

// renamed returns t under the workflow's spec, filling in what the workflow leaves out from t's
// own spec.
func renamed(spec tool.Spec, t tool.Tool) tool.Tool {
	own := t.Spec()
	if spec.Description == "" {
		spec.Description = own.Description
	}
	if len(bytes.TrimSpace(spec.InputSchema)) == 0 {
		spec.InputSchema = own.InputSchema
	}
	spec.SideEffect = spec.SideEffect || own.SideEffect
	spec.NeedsApproval = own.NeedsApproval
	return tool.New(spec, t.Call)
}

// unavailable stands for a forbidden tool whose handler this worker does not register: the loop
// refuses to run a forbidden tool, so Call is never reached.
type unavailable struct {
	spec    tool.Spec
	handler string
}

func (u unavailable) Spec() tool.Spec { return u.spec }

func (u unavailable) Call(context.Context, json.RawMessage, string) (json.RawMessage, error) {
	return nil, &tool.Error{Message: "tool " + u.spec.Name + " is forbidden and its handler " + u.handler + " is not registered"}
}

// mcpKey names a kept MCP connection: the operator's server (workflow "") or a workflow's own
// (by the workflow's hash), so that a workflow's "orders" never serves another's.
type mcpKey struct{ workflow, name string }

// mcpTool returns the tool name of the MCP server server under the workflow's spec: the
// operator's server on a shared server, else the workflow's own [mcp.NAME]. A tool the server
// has but reins cannot call (it requires MCP tasks) fails the step for good, before the model
// is offered anything.
func (h *Handlers) mcpTool(j *job, name string, spec tool.Spec, server string) (tool.Tool, error) {
	ts, err := h.mcpServer(j, server)
	if err != nil {
		return nil, err
	}
	if why, ok := ts.Refused()[name]; ok {
		return nil, j.failf("tool %s cannot be offered: %s", name, why)
	}
	var names []string
	for _, t := range ts.Tools() {
		if t.Spec().Name == name {
			return downNoted{Tool: renamed(spec, t), down: &j.down}, nil
		}
		names = append(names, t.Spec().Name)
	}
	return nil, j.failf("tool %s: the MCP server %s has no tool %s (it has: %s)", name, server, name, strings.Join(names, ", "))
}

// startMCP starts the operator's MCP servers, each kept up (restarted, or reached again, when
// it dies) until Close: started once per worker, not per run. The first task that needs one
// waits for it.
func (h *Handlers) startMCP() error {
	op := h.cfg.Operator
	if op == nil {
		return nil
	}
	for _, name := range op.MCPServers() {
		srv, ok := op.MCPServer(name)
		if !ok {
			continue
		}
		ts, err := mcptool.Start(mcpTarget(srv.Command, srv.URL), mcptool.Options{Name: name, Logger: h.log})
		if err != nil {
			return fmt.Errorf("builtin: %w", err)
		}
		h.mcp[mcpKey{name: name}] = ts
	}
	return nil
}

// mcpServer returns the connection to MCP server name once it is up: the operator's, started
// by New, or the workflow's own, connected the first time (a failed connection is not kept:
// the next task tries again). A server that is not up fails the attempt, which the step's
// retry runs again.
func (h *Handlers) mcpServer(j *job, name string) (*mcptool.Toolset, error) {
	ctx, cancel := context.WithTimeout(j.t, mcpConnectTimeout)
	defer cancel()
	if op := h.cfg.Operator; op != nil {
		h.mu.Lock()
		ts, ok := h.mcp[mcpKey{name: name}]
		closed := h.closed
		h.mu.Unlock()
		switch {
		case closed:
			return nil, fmt.Errorf("step %s: the handlers are closed", j.name)
		case !ok:
			return nil, j.failf("the server runs no MCP server %q", name)
		}
		if err := ts.Ready(ctx); err != nil {
			return nil, fmt.Errorf("step %s: %w", j.name, err)
		}
		return ts, nil
	}
	def, ok := j.bundle.Definition.MCP[name]
	if !ok {
		return nil, j.failf("MCP server %q is not declared in the workflow's [mcp]", name)
	}
	key := mcpKey{workflow: j.task.Workflow, name: name}
	h.mu.Lock()
	ts, ok := h.mcp[key]
	closed := h.closed
	h.mu.Unlock()
	if ok {
		if err := ts.Ready(ctx); err != nil {
			return nil, fmt.Errorf("step %s: %w", j.name, err)
		}
		return ts, nil
	}
	if closed {
		return nil, fmt.Errorf("step %s: the handlers are closed", j.name)
	}
	ts, err := mcptool.Connect(ctx, mcpTarget(def.Command, def.URL), mcptool.Options{Name: name, Dir: j.bundle.BaseDir, Logger: h.log})
	if err != nil {
		return nil, fmt.Errorf("step %s: %w", j.name, err) // the next attempt connects again
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev, ok := h.mcp[key]; ok || h.closed {
		_ = ts.Close() // connected concurrently, or closed meanwhile: keep one
		if ok {
			return prev, nil
		}
		return nil, fmt.Errorf("step %s: the handlers are closed", j.name)
	}
	h.mcp[key] = ts
	return ts, nil
}

// mcpConnectTimeout bounds the wait of a task for an MCP server to be up.
const mcpConnectTimeout = 30 * time.Second

// mcpTarget is what mcptool.Connect takes: the URL, or the command line quoted as a shell would.
func mcpTarget(command []string, url string) string {
	if url != "" {
		return url
	}
	return shellquote.Join(command...)
}

// mcpDown keeps the first call of a task that met a dead MCP server (mcptool.ErrUnavailable):
// the handler then fails the attempt, so that the iteration runs again once the server is
// back, rather than the loop going on without the call's result.
type mcpDown struct {
	mu    sync.Mutex
	first error
}

func (d *mcpDown) note(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.first == nil {
		d.first = err
	}
}

// err returns the first call that met a dead server, if any.
func (d *mcpDown) err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.first
}

// downNoted is an MCP tool whose calls that meet a dead server are noted in down.
type downNoted struct {
	tool.Tool
	down *mcpDown
}

func (t downNoted) Call(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
	out, err := t.Tool.Call(ctx, args, key)
	if errors.Is(err, mcptool.ErrUnavailable) {
		t.down.note(err)
	}
	return out, err
}

// Close closes the MCP connections (ending the servers started as commands); the handlers
// connect to none after it.
func (h *Handlers) Close() error {
	h.mu.Lock()
	h.closed = true
	all := h.mcp
	h.mcp = map[mcpKey]*mcptool.Toolset{}
	h.mu.Unlock()
	var errs []error
	for _, ts := range all {
		errs = append(errs, ts.Close())
	}
	return errors.Join(errs...)
}
