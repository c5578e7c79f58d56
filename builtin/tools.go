package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"github.com/reins-run/reins/eval"
	"github.com/reins-run/reins/tool"
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
		out = append(out, fx.wrap(t))
	}
	return out, nil
}

// tool builds one workflow tool: mocked, or the Go tool registered under its handler.
func (h *Handlers) tool(j *job, name string, def workflow.ToolDef, forbidden bool) (tool.Tool, error) {
	spec := tool.Spec{Name: name, Description: def.Description, InputSchema: def.InputSchema, SideEffect: def.SideEffect}
	switch {
	case len(bytes.TrimSpace(def.Mock)) > 0:
		m, err := eval.MockedTool("tools."+name+".mock", spec, def.Mock, h.clock)
		if err != nil {
			return nil, j.failf("%w", err)
		}
		return m, nil
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
