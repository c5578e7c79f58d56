package workflow

import (
	"maps"
	"slices"
	"strings"
)

// Tools that run as sub-runs: [tools.NAME] with agent = "STEP" (an agent step of this workflow
// that only runs as a child) or workflow = "FILE" (a sub-workflow, checked with the files of
// call steps: E_WORKFLOW_FILE, E_RECURSION, E_DEPTH, E_PATH_OUTSIDE at tools.NAME.workflow).
// An agent tool is refused (at tools.NAME.agent) when its step does not exist (E_UNKNOWN_STEP),
// is not an agent step, has edges or is the start step (E_BAD_VALUE), or leads back to the tool
// through the tools of the agents it runs (E_RECURSION). Its step runs in a run of its own,
// whose input is the call's arguments: a template there that reads a step's output without a
// default is E_UNBOUND_REF.

// toolRefs lists the sub-workflow files of the workflow tools, by tool name.
func (v *validator) toolRefs() []valRef {
	var refs []valRef
	for _, name := range slices.Sorted(maps.Keys(v.d.Tools)) {
		if f := v.d.Tools[name].Workflow; f != "" {
			refs = append(refs, valRef{"tools." + name + ".workflow", f})
		}
	}
	return refs
}

// checkChildTool checks a tool that runs as a sub-run: one target, and no other way to serve
// it. What an agent tool runs is checkToolAgents's.
func (v *validator) checkChildTool(name string, t ToolDef) {
	key := "tools." + name
	what := "agent " + t.Agent
	if t.Agent == "" {
		what = "workflow " + t.Workflow
	}
	switch {
	case t.Agent != "" && t.Workflow != "":
		v.add(EBadValue, key+".workflow", "tool %q sets both agent and workflow: a tool runs one agent step or one sub-workflow", name)
	case t.Handler != "":
		v.add(EBadValue, key+".handler", "tool %q runs %s as a child and also names handler %q: a tool that runs as a child has no handler, mock or MCP server", name, what, t.Handler)
	case valRawSet(t.Mock):
		v.add(EBadValue, key+".mock", "tool %q runs %s as a child and is also mocked: a tool that runs as a child has no handler, mock or MCP server", name, what)
	case t.MCP != "":
		v.add(EBadValue, key+".mcp", "tool %q runs %s as a child and also names MCP server %q: a tool that runs as a child has no handler, mock or MCP server", name, what, t.MCP)
	}
}

// checkToolAgents checks the steps agent tools run: agent steps of this workflow that only run
// as children, which no chain of agent tools leads back to, and whose templates read no step's
// output without a default (their run has none).
func (v *validator) checkToolAgents() {
	for _, name := range slices.Sorted(maps.Keys(v.d.Tools)) {
		t := v.d.Tools[name]
		if t.Agent == "" {
			continue
		}
		key := "tools." + name + ".agent"
		i, ok := v.ids[t.Agent]
		switch {
		case !ok:
			v.add(EUnknownStep, key, "tool %q runs agent %q, which is not a step of this workflow%s", name, t.Agent, v.nearStep(t.Agent))
		case v.d.Steps[i].Type != Agent:
			v.add(EBadValue, key, "tool %q runs step %q, which is a %s step: an agent tool runs an agent step of this workflow", name, t.Agent, v.d.Steps[i].Type)
		case v.wired(t.Agent) != "":
			v.add(EBadValue, key, "tool %q runs step %q, which %s: the step an agent tool runs only runs as a child (no edge to or from it, not the start step)", name, t.Agent, v.wired(t.Agent))
		default:
			if chain := v.agentChain(t.Agent, name); chain != nil {
				v.add(ERecursion, key, "tool %q runs agent %s, which leads back to it (%s): an agent must not call itself, directly or through other agent tools", name, t.Agent, strings.Join(chain, " → "))
			}
		}
	}
	v.checkToolAgentReads()
}

// wired says how step id takes part in the graph of edges, or "" when it does not.
func (v *validator) wired(id string) string {
	if v.d.Start == id {
		return "is the start step"
	}
	for _, e := range v.d.Edges {
		switch id {
		case e.To:
			return "an edge from " + e.From + " leads to"
		case e.From:
			return "has an edge to " + e.To
		}
	}
	return ""
}

// agentChain returns the chain of agent steps and tools by which agent, run by tool, comes to
// call tool again ("a (tool t) → b (tool u) → a"), or nil when it does not.
func (v *validator) agentChain(agent, tool string) []string {
	type via struct{ from, tool string }
	prev := map[string]via{agent: {}}
	queue := []string{agent}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		i, ok := v.ids[id]
		if !ok {
			continue
		}
		for _, name := range v.d.Steps[i].Tools {
			if name == tool {
				return v.renderChain(id, tool, agent, func(s string) (string, string, bool) {
					p, ok := prev[s]
					return p.from, p.tool, ok && p.from != ""
				})
			}
			next := v.d.Tools[name].Agent
			if _, seen := prev[next]; next == "" || seen {
				continue
			}
			prev[next] = via{from: id, tool: name}
			queue = append(queue, next)
		}
	}
	return nil
}

// renderChain renders the chain that ends at step last, which calls tool, which runs agent:
// back from last through prev to agent, then forward.
func (v *validator) renderChain(last, tool, agent string, prev func(string) (from, tool string, ok bool)) []string {
	chain := []string{last + " (tool " + tool + ")", agent}
	for s := last; ; {
		from, t, ok := prev(s)
		if !ok {
			break
		}
		chain = append([]string{from + " (tool " + t + ")"}, chain...)
		s = from
	}
	return chain
}

// checkToolAgentReads reports the reads of step outputs, without a default, by the steps agent
// tools run: their run starts with them, and no step of it has an output yet.
func (v *validator) checkToolAgentReads() {
	agents := v.d.ToolAgents()
	for _, r := range v.reads {
		if r.hasDefault || !slices.Contains(agents, v.d.Steps[r.step].ID) {
			continue
		}
		what := r.path
		if r.what == "template" {
			what = "{{" + r.path + "}}"
		}
		v.add(EUnboundRef, r.key, "step %s reads %s in %s, but it runs as an agent tool, in a run of its own that starts with it and has no step output: read input (the call's arguments) or give a default", r.name, what, valLastPart(r.key))
	}
}

// toolArcs lists, for each step, the steps the agent tools it lists run: how the reachability
// check reaches the steps that only run as agent tools.
func (v *validator) toolArcs() [][]int {
	arcs := make([][]int, len(v.d.Steps))
	for i := range v.d.Steps {
		for _, name := range v.d.Steps[i].Tools {
			if j, ok := v.ids[v.d.Tools[name].Agent]; ok {
				arcs[i] = append(arcs[i], j)
			}
		}
	}
	return arcs
}
