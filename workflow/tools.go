package workflow

import (
	"fmt"
	"slices"
	"strings"
)

// Agents and workflows as tools: a [tools.NAME] with agent = "STEP" runs an agent step of the
// workflow, one with workflow = "FILE" a sub-workflow, as a durable sub-run per call. The
// engine starts the sub-run of an agent tool on the workflow AgentDefinition derives: the step
// alone, with what it needs, so that its run holds nothing else of the parent's.

// ToolAgents lists the steps that agent tools run, each once, in declaration order of the
// steps.
func (d *Definition) ToolAgents() []string {
	run := map[string]bool{}
	for _, t := range d.Tools {
		if t.Agent != "" {
			run[t.Agent] = true
		}
	}
	var out []string
	for _, s := range d.Steps {
		if run[s.ID] && !slices.Contains(out, s.ID) {
			out = append(out, s.ID)
		}
	}
	return out
}

// AgentDefinition is the workflow the sub-run of an agent tool runs: step, an agent step of d,
// as its start and only step on the first pass, with the agent steps its tools run in turn
// (transitively: they only run as children there too), the models, tools and MCP servers those
// steps use, and d's deadline. It has no edges: the run ends when the step does, with the
// step's output. Its name is d's followed by "-" and the step's id in lower case. d must be
// valid (Validate): a tool that runs an agent that leads back to it is refused there, and here
// only bounds the walk.
func (d *Definition) AgentDefinition(step string) (*Definition, error) {
	s := d.StepByID(step)
	if s == nil || s.Type != Agent {
		return nil, fmt.Errorf("workflow %s: an agent tool runs step %q, which is not an agent step of it", d.Name, step)
	}
	keep := map[string]bool{}
	queue := []string{step}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		if keep[id] {
			continue
		}
		keep[id] = true
		if st := d.StepByID(id); st != nil {
			for _, name := range st.Tools {
				if a := d.Tools[name].Agent; a != "" {
					queue = append(queue, a)
				}
			}
		}
	}
	out := &Definition{
		Name:        d.Name + "-" + strings.ToLower(step),
		Description: fmt.Sprintf("agent step %s of workflow %s, run as a tool", step, d.Name),
		Deadline:    d.Deadline,
		Start:       step,
	}
	for _, st := range d.Steps {
		if keep[st.ID] {
			out.Steps = append(out.Steps, st)
			out.useStep(d, &st)
		}
	}
	out.Normalize()
	return out, nil
}

// useStep copies into d the model and the tools step uses from src, and the MCP servers those
// tools name.
func (d *Definition) useStep(src *Definition, step *Step) {
	if m, ok := src.Models[step.Model]; ok {
		if d.Models == nil {
			d.Models = map[string]ModelDef{}
		}
		d.Models[step.Model] = m
	}
	for _, name := range step.Tools {
		t, ok := src.Tools[name]
		if !ok {
			continue
		}
		if d.Tools == nil {
			d.Tools = map[string]ToolDef{}
		}
		d.Tools[name] = t
		if m, ok := src.MCP[t.MCP]; ok {
			if d.MCP == nil {
				d.MCP = map[string]MCPDef{}
			}
			d.MCP[t.MCP] = m
		}
	}
}
