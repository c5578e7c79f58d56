package workflow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/reins-run/reins/template"
)

// A branch path, and a switch's expr or a template reading a step's output, must name something
// the step can produce. The validator knows the shape of two outputs: an llm step's with an
// output_schema (its reply must validate against it), and an agent step's ({stop_reason, detail,
// answer}). A path that leaves them is E_BAD_BRANCH_PATH.

// agentOutputSchema is the shape of an agent step's output (builtin.AgentOutput).
var agentOutputSchema = json.RawMessage(`{"type":"object","properties":{"stop_reason":{"type":"string"},"detail":{"type":"string"},"answer":{}},"additionalProperties":false}`)

// outputSchema is the schema of step s's output, nil when the validator does not know it.
func outputSchema(s *Step) json.RawMessage {
	switch {
	case s.Type == LLM && len(s.OutputSchema) > 0:
		return s.OutputSchema
	case s.Type == Agent:
		return agentOutputSchema
	}
	return nil
}

// checkBranchPaths reports the branch of every step, and every expr, that its step's known
// output cannot produce.
func (v *validator) checkBranchPaths() {
	for i := range v.d.Steps {
		s := &v.d.Steps[i]
		if s.Branch != "" {
			if schema := outputSchema(s); schema != nil {
				if msg := schemaPathProblem(schema, s.Branch); msg != "" {
					v.add(EBadBranchPath, valStepKey(i, "branch"), "step %s has branch %q, but its output %s", v.stepName(i), s.Branch, msg)
				}
			}
		}
		if s.Type == Switch && s.Expr != "" {
			path := unwrapPath(s.Expr)
			root, err := template.Root(path)
			if err != nil || root == "input" {
				continue
			}
			j, ok := v.ids[root]
			if !ok {
				continue
			}
			rel, ok := strings.CutPrefix(path, root+".output")
			if !ok || (rel != "" && rel[0] != '.') {
				continue
			}
			if schema := outputSchema(&v.d.Steps[j]); schema != nil {
				if msg := schemaPathProblem(schema, strings.TrimPrefix(rel, ".")); msg != "" {
					v.add(EBadBranchPath, valStepKey(i, "expr"), "step %s has expr %q, but the output of step %s %s", v.stepName(i), s.Expr, root, msg)
				}
			}
		}
	}
}

// schemaPathProblem says why a value valid against schema cannot have dotted path rel ("" when
// it can, or when the schema does not tell), as the end of a sentence.
func schemaPathProblem(schema json.RawMessage, rel string) string {
	if rel == "" {
		return ""
	}
	var node any
	if json.Unmarshal(schema, &node) != nil {
		return "" // the schema's own check reports it
	}
	at := "its output"
	for _, seg := range strings.Split(rel, ".") {
		m, ok := node.(map[string]any)
		if !ok {
			return ""
		}
		if props, ok := m["properties"].(map[string]any); ok {
			if sub, ok := props[seg]; ok {
				node, at = sub, at+"."+seg
				continue
			}
		}
		if items, ok := m["items"]; ok && isIndex(seg) {
			node, at = items, at+"."+seg
			continue
		}
		if t, ok := m["type"].(string); ok && t != "object" && t != "array" {
			return fmt.Sprintf("%sis of type %s, which has no %q in it", where(at), t, seg)
		}
		if ap, ok := m["additionalProperties"]; ok {
			if allowed, isBool := ap.(bool); isBool && !allowed {
				return fmt.Sprintf("%shas no property %q: its schema allows only %s", where(at), seg, propertyList(m))
			}
			node, at = ap, at+"."+seg
			continue
		}
		return ""
	}
	return ""
}

// where names the place in an output a message is about: "" at its top.
func where(at string) string {
	if rest, ok := strings.CutPrefix(at, "its output."); ok {
		return "at " + rest + " "
	}
	return ""
}

func isIndex(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && strconv.Itoa(n) == s
}

// propertyList names the properties a schema declares, for messages.
func propertyList(m map[string]any) string {
	props, _ := m["properties"].(map[string]any)
	if len(props) == 0 {
		return "none"
	}
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, strconv.Quote(k))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
