package client

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// Unserved says, one sentence each, what the workflows of bs need that no running worker
// serves ([natsbox.ServedBucket]): handlers of task and agent_loop steps, the built-in handlers
// of llm and agent steps, tools served by a Go handler, models with provider "go". A run of bs
// would wait for those until a worker serves them: a client tells whoever submits it (reins
// run warns). Mocked and MCP tools and models of other providers need no worker of their own.
func (c *Client) Unserved(ctx context.Context, bs *workflow.Bundles) ([]string, error) {
	served, err := c.served(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, hash := range slices.Sorted(maps.Keys(bs.All)) {
		for _, n := range needs(bs.All[hash].Definition) {
			if !served[n.kind+"."+n.name] {
				out = append(out, fmt.Sprintf("no worker serves the %s %q that %s of workflow %s needs: its runs wait until one does", n.kind, n.name, n.what, bs.All[hash].Definition.Name))
			}
		}
	}
	return out, nil
}

// served returns KIND.NAME of what the running workers serve.
func (c *Client) served(ctx context.Context) (map[string]bool, error) {
	kv, err := c.js.KeyValue(ctx, c.names.ServedBucket())
	if err != nil {
		return nil, fmt.Errorf("client: bucket %s: %w", c.names.ServedBucket(), err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: what the workers serve: %w", err)
	}
	served := map[string]bool{}
	for k := range lister.Keys() {
		if i := strings.LastIndexByte(k, '.'); i > 0 {
			served[k[:i]] = true
		}
	}
	_ = lister.Stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return served, nil
}

// need is a name a workflow needs served: its kind, and which step needs it.
type need struct{ kind, name, what string }

// needs lists what def needs served, each name once, in step order.
func needs(def *workflow.Definition) []need {
	var out []need
	seen := map[string]bool{}
	add := func(kind, name, what string) {
		if k := kind + "." + name; name != "" && !seen[k] {
			seen[k] = true
			out = append(out, need{kind, name, what})
		}
	}
	for _, s := range def.Steps {
		what := "step " + s.ID
		switch s.Type {
		case workflow.Task, workflow.AgentLoop:
			add(natsbox.ServedHandler, s.Handler, what)
		case workflow.LLM:
			add(natsbox.ServedHandler, protocol.HandlerLLM, what)
		case workflow.Agent:
			add(natsbox.ServedHandler, protocol.HandlerAgent, what)
			for _, t := range s.Tools {
				if mayNotRun(s.Policy, t) {
					continue // proposing it stops the loop: it never needs a worker
				}
				if td, ok := def.Tools[t]; ok && td.Handler != "" && td.MCP == "" && len(td.Mock) == 0 {
					add(natsbox.ServedTool, td.Handler, what)
				}
			}
		}
		if m, ok := def.Models[s.Model]; ok && m.Provider == "go" {
			add(natsbox.ServedModel, s.Model, what)
		}
	}
	return out
}

// mayNotRun reports whether policy p never lets tool run: forbidden, or left out of an allow
// list.
func mayNotRun(p *workflow.Policy, tool string) bool {
	return p != nil && (slices.Contains(p.Forbid, tool) || len(p.Allow) > 0 && !slices.Contains(p.Allow, tool))
}
