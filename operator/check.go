package operator

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/reins-run/reins/workflow"
)

// Codes of the submission check besides [workflow.EOperatorOnly].
const (
	// EUnknownProvider: a model names a provider the operator did not configure.
	EUnknownProvider workflow.Code = "E_UNKNOWN_PROVIDER"
	// EModelNotAllowed: a model the provider's allow-list does not name.
	EModelNotAllowed workflow.Code = "E_MODEL_NOT_ALLOWED"
	// EUnknownMCP: a tool names an MCP server the operator did not configure.
	EUnknownMCP workflow.Code = "E_UNKNOWN_MCP"
	// EUnknownWebhook: a webhook trigger names a hook the operator did not open
	// ([webhooks.NAME]).
	EUnknownWebhook workflow.Code = "E_UNKNOWN_WEBHOOK"
	// ESubjectNotAllowed: a subject trigger on a subject the operator does not allow
	// ([triggers] subjects).
	ESubjectNotAllowed workflow.Code = "E_SUBJECT_NOT_ALLOWED"
)

// CheckWorkflow is the submission check of a shared server (docs/reference/server.md) for a
// workflow and its sub-workflows: what only the operator may set ([workflow.OperatorOnly], and a
// replay model, which reads a file), providers the operator did not configure, models their
// allow-lists do not name, MCP servers the operator does not run, and bounds above the
// operator's growth limits ([workflow.EOverLimit]).
func CheckWorkflow(cfg *Config, defs ...*workflow.Definition) workflow.Problems {
	var ps workflow.Problems
	for _, d := range defs {
		at := func(code workflow.Code, key, format string, args ...any) {
			p := workflow.Problem{Code: code, Key: key, Message: fmt.Sprintf(format, args...)}
			if d.Source != nil {
				p.File, p.Line = d.Source.File, d.Source.Line(key)
			}
			ps = append(ps, p)
		}
		ps = append(ps, workflow.OperatorOnly(d)...)
		bounds := cfg.Limits.Growth.Bounds()
		bounds.ToolTimeout = cfg.Limits.MaxToolTimeout
		ps = append(ps, workflow.CheckBounds(d, bounds)...)
		for _, name := range slices.Sorted(maps.Keys(d.Models)) {
			m := d.Models[name]
			key := "models." + name
			p, ok := cfg.Providers[m.Provider]
			switch {
			case m.Provider == "scripted":
			case m.Provider == "replay":
				if m.Cassette == "" {
					at(workflow.EOperatorOnly, key+".provider", "a replay model reads a file of the server: only the operator may name one")
				}
			case !ok:
				at(EUnknownProvider, key+".provider", "the server has no provider %q (it has: %s)", m.Provider, strings.Join(slices.Sorted(maps.Keys(cfg.Providers)), ", "))
			case len(p.Models) > 0 && !slices.Contains(p.Models, m.Model):
				at(EModelNotAllowed, key+".model", "provider %s does not allow model %q (it allows: %s)", m.Provider, m.Model, strings.Join(p.Models, ", "))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(d.Tools)) {
			t := d.Tools[name]
			if t.MCP == "" {
				continue
			}
			if _, ok := cfg.MCP[t.MCP]; !ok {
				at(EUnknownMCP, "tools."+name+".mcp", "the server runs no MCP server %q (it runs: %s)", t.MCP, orNone(slices.Sorted(maps.Keys(cfg.MCP))))
			}
		}
		// A subject the validator refuses (E_BAD_SUBJECT) is not reported again here.
		for i, t := range d.Triggers {
			key := fmt.Sprintf("triggers[%d]", i)
			switch {
			case t.Webhook != "":
				if _, ok := cfg.Webhooks[t.Webhook]; !ok {
					at(EUnknownWebhook, key+".webhook", "the server has no webhook %q: its operator opens one with a secret ([webhooks.%s] in the operator's configuration; it has: %s)", t.Webhook, t.Webhook, orNone(slices.Sorted(maps.Keys(cfg.Webhooks))))
				}
			case t.Subject != "" && workflow.CheckSubject(t.Subject) == nil && !slices.ContainsFunc(cfg.TriggerSubjects, func(a string) bool { return workflow.SubjectWithin(t.Subject, a) }):
				if len(cfg.TriggerSubjects) == 0 {
					at(ESubjectNotAllowed, key+".subject", "the server's operator allows subject triggers on no subject ([triggers] subjects in the operator's configuration)")
				} else {
					at(ESubjectNotAllowed, key+".subject", "the server's operator does not allow subject triggers on %q (it allows: %s)", t.Subject, strings.Join(cfg.TriggerSubjects, ", "))
				}
			}
		}
	}
	return ps
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
