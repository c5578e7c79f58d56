package mcpserver

import (
	"context"
	"encoding/json"

	"github.com/reins-run/reins/operator"
)

// toolDef is a tool of tools/list: mcp.Tool with its execution, which the SDK's has not.
type toolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
	Execution   toolExecution   `json:"execution"`
}

// toolExecution says that a tool may be called as a task or not (MCP 2025-11-25).
type toolExecution struct {
	TaskSupport string `json:"taskSupport"`
}

// openObject is the input schema of a workflow without input_schema.
var openObject = json.RawMessage(`{"type":"object"}`)

// listTools answers tools/list: the latest version of every registered workflow, when p may
// start runs (none otherwise), named after it, with its input_schema and description.
func (s *Server) listTools(ctx context.Context, p operator.Principal) (any, error) {
	out := struct {
		Tools []toolDef `json:"tools"`
	}{Tools: []toolDef{}}
	if !p.MayStart() {
		return out, nil
	}
	c := s.cfg.As(p)
	regs, err := c.Workflows(ctx)
	if err != nil {
		return nil, err
	}
	for _, reg := range regs {
		bs, err := c.Bundles(ctx, reg)
		if err != nil {
			return nil, err
		}
		def := bs.All[bs.Root].Definition
		schema := def.InputSchema
		if len(schema) == 0 {
			schema = openObject
		}
		out.Tools = append(out.Tools, toolDef{Name: reg.Name, Description: def.Description, InputSchema: schema,
			Execution: toolExecution{TaskSupport: "optional"}})
	}
	return out, nil
}
