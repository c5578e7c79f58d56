package workflow

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/reins-run/reins/loop"
)

// Load reads the workflow file at path and parses it (see Parse). It does not apply Normalize
// and does not validate: the definition is exactly what the file says. An unreadable file is
// one E_PARSE problem naming it.
func Load(path string) (*Definition, Problems) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *os.PathError
		if errors.As(err, &pe) {
			msg = pe.Err.Error()
		}
		return nil, Problems{{
			Code:    EParse,
			File:    path,
			Message: "cannot read the workflow file: " + msg,
		}}
	}
	return Parse(path, data)
}

// Parse decodes a workflow file (docs/reference/workflow-file.md) named file from data. It reports,
// in one pass, every syntax error (E_PARSE), key the format does not define at that place or
// for that step type (E_UNKNOWN_KEY), value of the wrong type (E_TYPE), unknown step type
// (E_UNKNOWN_TYPE) and duration that does not parse (E_BAD_DURATION), each with the file, the
// line and the key ("steps[2].handler"), in the order of the file.
//
// When the TOML itself parsed, Parse returns a non-nil Definition even if it reported problems:
// what could be decoded is filled in, a value with a problem is left at its zero value (array
// items keep their place, so that indexes still match the file), and Source holds the line of
// every key so that the validator can cite positions. On E_PARSE it returns nil. Parse neither
// applies Normalize nor checks meaning (duplicate ids, dangling edges, cycles, ...): that is
// Validate's job.
func Parse(file string, data []byte) (def *Definition, problems Problems) {
	defer func() {
		// Parse must never panic. A panic here is a bug; report it rather than crash the caller.
		if r := recover(); r != nil {
			def = nil
			problems = Problems{{Code: EParse, File: file, Message: fmt.Sprintf("internal error while reading the file: %v", r)}}
		}
	}()

	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return nil, Problems{parseProblem(file, err)}
	}

	lines, offsets := keyPositions(data)
	d := &decoder{src: &Source{File: file, Lines: lines}, offsets: offsets}
	def = d.definition(doc)
	def.Source = d.src
	sort.SliceStable(d.problems, func(i, j int) bool { return d.problems[i].Line < d.problems[j].Line })
	return def, d.problems
}

// parseProblem turns a go-toml error into an E_PARSE problem.
func parseProblem(file string, err error) Problem {
	p := Problem{Code: EParse, File: file}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		p.Line = line
		p.Message = fmt.Sprintf("invalid TOML at column %d: %s", col, strings.TrimPrefix(de.Error(), "toml: "))
		return p
	}
	p.Message = "invalid TOML: " + strings.TrimPrefix(err.Error(), "toml: ")
	return p
}

// topKeys are the keys of the top level of a workflow file, in the reference's order.
var topKeys = []string{"name", "description", "deadline", "max_steps", "start", "concurrency", "input_schema", "models", "tools", "mcp", "steps", "edges", "triggers"}

// definition decodes the whole document.
func (d *decoder) definition(doc map[string]any) *Definition {
	def := &Definition{}
	for _, name := range d.keys("", doc) {
		k, v := joinKey("", name), doc[name]
		switch name {
		case "name":
			def.Name, _ = d.str(k, v)
		case "description":
			def.Description, _ = d.str(k, v)
		case "deadline":
			def.Deadline, _ = d.duration(k, v)
		case "max_steps":
			def.MaxSteps, _ = d.integer(k, v)
		case "start":
			def.Start, _ = d.str(k, v)
		case "concurrency":
			def.Concurrency = d.concurrency(k, v)
		case "input_schema":
			def.InputSchema, _ = d.tableJSON(k, v)
		case "models":
			def.Models = d.models(k, v)
		case "tools":
			def.Tools = d.tools(k, v)
		case "mcp":
			def.MCP = d.mcp(k, v)
		case "steps":
			def.Steps = d.steps(k, v)
		case "edges":
			def.Edges = d.edges(k, v)
		case "triggers":
			def.Triggers = d.triggers(k, v)
		default:
			d.unknownKey(k, name, "at the top level", topKeys)
		}
	}
	return def
}

// concurrencyKeys are the keys of the concurrency table.
var concurrencyKeys = []string{"key", "limit"}

func (d *decoder) concurrency(key string, v any) *Concurrency {
	return subTable(d, key, v, "concurrency", concurrencyKeys, func(c *Concurrency, fkey, k string, fv any) bool {
		switch k {
		case "key":
			c.Key, _ = d.str(fkey, fv)
		case "limit":
			c.Limit, _ = d.integer(fkey, fv)
		default:
			return false
		}
		return true
	})
}

// modelKeys are the keys of a [models.NAME] table.
var modelKeys = []string{"provider", "model", "base_url", "api_key_env", "script", "cassette"}

func (d *decoder) models(key string, v any) map[string]ModelDef {
	return namedTables(d, key, v, "models", modelKeys, func(md *ModelDef, fkey, k string, fv any) bool {
		switch k {
		case "provider":
			md.Provider, _ = d.str(fkey, fv)
		case "model":
			md.Model, _ = d.str(fkey, fv)
		case "base_url":
			md.BaseURL, _ = d.str(fkey, fv)
		case "api_key_env":
			md.APIKeyEnv, _ = d.str(fkey, fv)
		case "script":
			md.Script, _ = d.tablesJSON(fkey, fv)
		case "cassette":
			md.Cassette, _ = d.str(fkey, fv)
		default:
			return false
		}
		return true
	})
}

// toolKeys are the keys of a [tools.NAME] table.
var toolKeys = []string{"description", "input_schema", "side_effect", "handler", "mock", "mcp", "agent", "workflow", "timeout"}

// mcpKeys are the keys of an [mcp.NAME] table.
var mcpKeys = []string{"command", "url"}

func (d *decoder) mcp(key string, v any) map[string]MCPDef {
	return namedTables(d, key, v, "mcp", mcpKeys, func(md *MCPDef, fkey, k string, fv any) bool {
		switch k {
		case "command":
			md.Command, _ = d.strs(fkey, fv)
		case "url":
			md.URL, _ = d.str(fkey, fv)
		default:
			return false
		}
		return true
	})
}

func (d *decoder) tools(key string, v any) map[string]ToolDef {
	return namedTables(d, key, v, "tools", toolKeys, func(td *ToolDef, fkey, k string, fv any) bool {
		switch k {
		case "description":
			td.Description, _ = d.str(fkey, fv)
		case "input_schema":
			td.InputSchema, _ = d.tableJSON(fkey, fv)
		case "side_effect":
			td.SideEffect, _ = d.boolean(fkey, fv)
		case "handler":
			td.Handler, _ = d.str(fkey, fv)
		case "mock":
			td.Mock, _ = d.tablesJSON(fkey, fv)
		case "mcp":
			td.MCP, _ = d.str(fkey, fv)
		case "agent":
			td.Agent, _ = d.str(fkey, fv)
		case "workflow":
			td.Workflow, _ = d.str(fkey, fv)
		case "timeout":
			td.Timeout, _ = d.duration(fkey, fv)
		default:
			return false
		}
		return true
	})
}

// namedTables decodes a table of named tables ([models.NAME], [tools.NAME], [mcp.NAME]): set
// decodes one key of one of them into its value and reports false for a key it does not know,
// which is reported with the known keys. A NAME that is not a table decodes as the zero value.
func namedTables[T any](d *decoder, key string, v any, kind string, known []string, set func(t *T, fkey, k string, fv any) bool) map[string]T {
	m, ok := d.table(key, v, "a table of ["+kind+".NAME] tables")
	if !ok {
		return nil
	}
	out := make(map[string]T, len(m))
	for _, name := range d.keys(key, m) {
		nkey := joinKey(key, name)
		t, ok := d.table(nkey, m[name], "a table (["+kind+"."+keyName(name)+"])")
		if !ok {
			out[name] = *new(T)
			continue
		}
		out[name] = fields(d, nkey, t, nkey, known, set)
	}
	return out
}

// subTable decodes a step's table (retry, policy, budget, context), named name in problems:
// set decodes one key into the value, as for namedTables. A value that is not a table is nil.
func subTable[T any](d *decoder, key string, v any, name string, known []string, set func(t *T, fkey, k string, fv any) bool) *T {
	t, ok := d.table(key, v, "a table { "+strings.Join(known, ", ")+" }")
	if !ok {
		return nil
	}
	val := fields(d, key, t, name, known, set)
	return &val
}

// tableItems decodes an array of tables ([[edges]], [[triggers]]), header its form in
// problems: each item as fields does, its unknown keys reported "in where".
func tableItems[T any](d *decoder, key string, v any, header, where string, known []string, set func(t *T, fkey, k string, fv any) bool) []T {
	return eachTable(d, key, v, header, func(ikey string, t map[string]any, val *T) {
		*val = fields(d, ikey, t, where, known, set)
	})
}

// eachTable decodes an array of tables with decode, one item at a time. An item that is not a
// table stays the zero value in its place, so that indexes still match the file.
func eachTable[T any](d *decoder, key string, v any, header string, decode func(ikey string, t map[string]any, val *T)) []T {
	items, ok := d.tableArray(key, v, header)
	if !ok {
		return nil
	}
	out := make([]T, len(items))
	for i, item := range items {
		ikey := indexKey(key, i)
		if t, ok := d.table(ikey, item, "a table"); ok {
			decode(ikey, t, &out[i])
		}
	}
	return out
}

// fields decodes the keys of table t at key: set decodes one key and reports false for a key it
// does not know, which is reported as unknown "in where" with the known keys.
func fields[T any](d *decoder, key string, t map[string]any, where string, known []string, set func(t *T, fkey, k string, fv any) bool) T {
	var val T
	for _, k := range d.keys(key, t) {
		if fkey := joinKey(key, k); !set(&val, fkey, k, t[k]) {
			d.unknownKey(fkey, k, "in "+where, known)
		}
	}
	return val
}

// edgeKeys are the keys of an [[edges]] table.
var edgeKeys = []string{"from", "to", "when", "max_iterations"}

func (d *decoder) edges(key string, v any) []Edge {
	return tableItems(d, key, v, "[[edges]]", "an edge", edgeKeys, func(e *Edge, fkey, k string, fv any) bool {
		switch k {
		case "from":
			e.From, _ = d.str(fkey, fv)
		case "to":
			e.To, _ = d.str(fkey, fv)
		case "when":
			e.When, _ = d.str(fkey, fv)
		case "max_iterations":
			e.MaxIterations, _ = d.integer(fkey, fv)
		default:
			return false
		}
		return true
	})
}

// triggerKeys are the keys of a [[triggers]] table.
var triggerKeys = []string{"name", "schedule", "timezone", "overlap", "catch_up", "subject", "webhook"}

func (d *decoder) triggers(key string, v any) []Trigger {
	return tableItems(d, key, v, "[[triggers]]", "a trigger", triggerKeys, func(tr *Trigger, fkey, k string, fv any) bool {
		switch k {
		case "name":
			tr.Name, _ = d.str(fkey, fv)
		case "schedule":
			tr.Schedule, _ = d.str(fkey, fv)
		case "timezone":
			tr.Timezone, _ = d.str(fkey, fv)
		case "overlap":
			tr.Overlap, _ = d.str(fkey, fv)
		case "catch_up":
			if n, ok := d.integer(fkey, fv); ok {
				tr.CatchUp = &n
			}
		case "subject":
			tr.Subject, _ = d.str(fkey, fv)
		case "webhook":
			tr.Webhook, _ = d.str(fkey, fv)
		default:
			return false
		}
		return true
	})
}

func (d *decoder) steps(key string, v any) []Step {
	return eachTable(d, key, v, "[[steps]]", d.step)
}

// step decodes one step table. Its type decides which keys it may have: a key of another type
// is reported and left out of the step.
func (d *decoder) step(key string, t map[string]any, s *Step) {
	known := false // whether the type is known, so that its keys can be checked
	if tv, ok := t["type"]; ok {
		tkey := joinKey(key, "type")
		if name, ok := d.str(tkey, tv); ok {
			s.Type = StepType(name)
			if _, known = KeysOf[s.Type]; !known {
				d.add(EUnknownType, tkey, "unknown step type %q (the types are: %s)", name, joinStepTypes())
			}
		}
	}
	for _, k := range d.keys(key, t) {
		fkey := joinKey(key, k)
		set, ok := stepFields[k]
		switch {
		case !ok:
			if known {
				d.unknownKey(fkey, k, "in this "+string(s.Type)+" step", stepKeys(s.Type))
			} else {
				d.unknownKey(fkey, k, "in a step", allStepKeys())
			}
		case known && !contains(stepKeys(s.Type), k):
			d.add(EUnknownKey, fkey, "key %s is not a key of %s steps (it takes: %s)", k, s.Type, strings.Join(stepKeys(s.Type), ", "))
		case k == "type":
			// decoded above
		default:
			set(d, fkey, t[k], s)
		}
	}
}

// stepFields decodes each step key into its field. The keys are exactly CommonKeys and the
// union of KeysOf (a test checks it).
var stepFields = map[string]func(d *decoder, key string, v any, s *Step){
	"id":      func(d *decoder, key string, v any, s *Step) { s.ID, _ = d.str(key, v) },
	"type":    func(d *decoder, key string, v any, s *Step) {},
	"timeout": func(d *decoder, key string, v any, s *Step) { s.Timeout, _ = d.duration(key, v) },
	"retry":   func(d *decoder, key string, v any, s *Step) { s.Retry = d.retry(key, v) },
	"input":   func(d *decoder, key string, v any, s *Step) { s.Input, _ = d.str(key, v) },
	"branch":  func(d *decoder, key string, v any, s *Step) { s.Branch, _ = d.str(key, v) },

	"handler":        func(d *decoder, key string, v any, s *Step) { s.Handler, _ = d.str(key, v) },
	"max_iterations": func(d *decoder, key string, v any, s *Step) { s.MaxIterations, _ = d.integer(key, v) },
	"max_duration":   func(d *decoder, key string, v any, s *Step) { s.MaxDuration, _ = d.duration(key, v) },
	"loop_delay":     func(d *decoder, key string, v any, s *Step) { s.LoopDelay, _ = d.duration(key, v) },
	"model":          func(d *decoder, key string, v any, s *Step) { s.Model, _ = d.str(key, v) },
	"prompt":         func(d *decoder, key string, v any, s *Step) { s.Prompt, _ = d.str(key, v) },
	"instructions":   func(d *decoder, key string, v any, s *Step) { s.Instructions, _ = d.str(key, v) },
	"output_schema":  func(d *decoder, key string, v any, s *Step) { s.OutputSchema, _ = d.tableJSON(key, v) },
	"output_repairs": func(d *decoder, key string, v any, s *Step) {
		if n, ok := d.integer(key, v); ok {
			s.OutputRepairs = &n
		}
	},
	"goal":           func(d *decoder, key string, v any, s *Step) { s.Goal, _ = d.str(key, v) },
	"tools":          func(d *decoder, key string, v any, s *Step) { s.Tools, _ = d.strs(key, v) },
	"policy":         func(d *decoder, key string, v any, s *Step) { s.Policy = d.policy(key, v) },
	"budget":         func(d *decoder, key string, v any, s *Step) { s.Budget = d.budget(key, v) },
	"context":        func(d *decoder, key string, v any, s *Step) { s.Context = d.context(key, v) },
	"expr":           func(d *decoder, key string, v any, s *Step) { s.Expr, _ = d.str(key, v) },
	"branches":       func(d *decoder, key string, v any, s *Step) { s.Branches = d.branches(key, v) },
	"max_concurrent": func(d *decoder, key string, v any, s *Step) { s.MaxConcurrent, _ = d.integer(key, v) },
	"items":          func(d *decoder, key string, v any, s *Step) { s.Items, _ = d.str(key, v) },
	"step":           func(d *decoder, key string, v any, s *Step) { s.Step, _ = d.str(key, v) },
	"workflow":       func(d *decoder, key string, v any, s *Step) { s.Workflow, _ = d.str(key, v) },
	"max_items":      func(d *decoder, key string, v any, s *Step) { s.MaxItems, _ = d.integer(key, v) },
	"on_timeout":     func(d *decoder, key string, v any, s *Step) { s.OnTimeout, _ = d.str(key, v) },
	"on_needs_human": func(d *decoder, key string, v any, s *Step) { s.OnNeedsHuman, _ = d.str(key, v) },
	"stream":         func(d *decoder, key string, v any, s *Step) { s.Stream, _ = d.boolean(key, v) },
	"approval_timeout": func(d *decoder, key string, v any, s *Step) {
		s.ApprovalTimeout, _ = d.duration(key, v)
	},
	"session":     func(d *decoder, key string, v any, s *Step) { s.Session, _ = d.str(key, v) },
	"session_ttl": func(d *decoder, key string, v any, s *Step) { s.SessionTTL, _ = d.duration(key, v) },
	"event":       func(d *decoder, key string, v any, s *Step) { s.Event, _ = d.str(key, v) },
	"duration":    func(d *decoder, key string, v any, s *Step) { s.Duration, _ = d.duration(key, v) },
	"message":     func(d *decoder, key string, v any, s *Step) { s.Message, _ = d.str(key, v) },
	"approvers":   func(d *decoder, key string, v any, s *Step) { s.Approvers, _ = d.strs(key, v) },
}

// stepKeys lists the keys a step of type t takes: its own, then the common ones.
func stepKeys(t StepType) []string {
	own := KeysOf[t]
	keys := make([]string, 0, len(own)+len(CommonKeys))
	keys = append(keys, own...)
	return append(keys, CommonKeys...)
}

// allStepKeys lists every step key: the common ones, then each type's in the reference's order.
func allStepKeys() []string {
	keys := append([]string(nil), CommonKeys...)
	for _, t := range StepTypes {
		for _, k := range KeysOf[t] {
			if !contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

func joinStepTypes() string {
	names := make([]string, len(StepTypes))
	for i, t := range StepTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// retryKeys are the keys of a step's retry table.
var retryKeys = []string{"max_attempts", "backoff", "initial_delay", "max_delay"}

func (d *decoder) retry(key string, v any) *Retry {
	return subTable(d, key, v, "retry", retryKeys, func(r *Retry, fkey, k string, fv any) bool {
		switch k {
		case "max_attempts":
			r.MaxAttempts, _ = d.integer(fkey, fv)
		case "backoff":
			r.Backoff, _ = d.str(fkey, fv)
		case "initial_delay":
			r.InitialDelay, _ = d.duration(fkey, fv)
		case "max_delay":
			r.MaxDelay, _ = d.duration(fkey, fv)
		default:
			return false
		}
		return true
	})
}

// policyKeys are the keys of an agent step's policy table.
var policyKeys = []string{"allow", "forbid", "require_approval", "required_evidence", "approvers"}

func (d *decoder) policy(key string, v any) *Policy {
	return subTable(d, key, v, "policy", policyKeys, func(p *Policy, fkey, k string, fv any) bool {
		switch k {
		case "allow":
			p.Allow, _ = d.strs(fkey, fv)
		case "forbid":
			p.Forbid, _ = d.strs(fkey, fv)
		case "require_approval":
			p.RequireApproval, _ = d.strs(fkey, fv)
		case "required_evidence":
			p.RequiredEvidence, _ = d.strs(fkey, fv)
		case "approvers":
			p.Approvers, _ = d.strs(fkey, fv)
		default:
			return false
		}
		return true
	})
}

// budgetKeys are the keys of an agent step's budget table.
var budgetKeys = []string{"max_iterations", "max_tool_calls", "max_duration", "max_tokens", "max_cost_usd", "max_tool_failures", "max_repeated_calls", "max_invalid_actions"}

func (d *decoder) budget(key string, v any) *Budget {
	return subTable(d, key, v, "budget", budgetKeys, func(b *Budget, fkey, k string, fv any) bool {
		switch k {
		case "max_iterations":
			b.MaxIterations, _ = d.integer(fkey, fv)
		case "max_tool_calls":
			b.MaxToolCalls, _ = d.integer(fkey, fv)
		case "max_duration":
			b.MaxDuration, _ = d.duration(fkey, fv)
		case "max_tokens":
			b.MaxTokens, _ = d.int64(fkey, fv)
		case "max_cost_usd":
			b.MaxCostUSD, _ = d.number(fkey, fv)
		case "max_tool_failures":
			b.MaxToolFailures, _ = d.integer(fkey, fv)
		case "max_repeated_calls":
			b.MaxRepeatedCalls, _ = d.integer(fkey, fv)
		case "max_invalid_actions":
			b.MaxInvalidActions, _ = d.integer(fkey, fv)
		default:
			return false
		}
		return true
	})
}

// contextKeys are the keys of an agent step's context table.
var contextKeys = []string{"max_tokens", "strategy", "keep_last", "summarizer"}

func (d *decoder) context(key string, v any) *Context {
	return subTable(d, key, v, "context", contextKeys, func(c *Context, fkey, k string, fv any) bool {
		switch k {
		case "max_tokens":
			c.MaxTokens, _ = d.int64(fkey, fv)
		case "strategy":
			s, _ := d.str(fkey, fv)
			c.Strategy = loop.ContextStrategy(s)
		case "keep_last":
			c.KeepLast, _ = d.integer(fkey, fv)
		case "summarizer":
			c.Summarizer, _ = d.str(fkey, fv)
		default:
			return false
		}
		return true
	})
}

// branchKeys are the keys of a branches item written as a table.
var branchKeys = []string{"workflow"}

// branchShape describes what a branches item may be.
const branchShape = `a step id or a table { workflow = "file.toml" }`

// branches decodes a parallel step's branches: step ids, or { workflow = "file.toml" } tables.
// An item with a problem stays in place as an empty Branch.
func (d *decoder) branches(key string, v any) []Branch {
	items, ok := v.([]any)
	if !ok {
		d.add(EType, key, "expected an array of branches (%s), got %s", branchShape, kindOf(v))
		return nil
	}
	branches := make([]Branch, len(items))
	for i, item := range items {
		bkey := indexKey(key, i)
		switch x := item.(type) {
		case string:
			branches[i].Step = x
		case map[string]any:
			unknown := false
			for _, k := range d.keys(bkey, x) {
				if !contains(branchKeys, k) {
					d.unknownKey(joinKey(bkey, k), k, "in a branch", branchKeys)
					unknown = true
				}
			}
			if w, ok := x["workflow"]; ok {
				branches[i].Workflow, _ = d.str(joinKey(bkey, "workflow"), w)
			} else if !unknown {
				d.add(EType, bkey, "expected %s, got a table without workflow", branchShape)
			}
		default:
			d.add(EType, bkey, "expected %s, got %s", branchShape, kindOf(item))
		}
	}
	return branches
}
