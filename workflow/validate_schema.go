package workflow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/reins-run/reins/template"
)

// A branch path, and a switch's expr reading a step's output, must name something the step can
// produce, else the run fails there after paying for the step. The validator knows the shape of
// two outputs: an llm step's with an output_schema (its reply must validate against it), and an
// agent step's ({stop_reason, detail, answer}). A path that leaves them is E_BAD_BRANCH_PATH.
// Other outputs are not checked: a task's is its handler's to choose, and an llm step without a
// schema may be answered by another handler than the built-in one in tests and embeddings.
//
// A schema is followed through "properties" (and "additionalProperties" when it is a schema)
// and, for an index, "prefixItems" and "items". A property it does not declare is refused where
// "additionalProperties" is false, and also where the schema declares properties and says
// nothing of others: JSON Schema would allow any other key there, but a model that is told the
// schema does not invent keys, so a path naming an undeclared one is a typo, not a plan.
// "additionalProperties": true, or a schema for them, allows other keys. Where the schema does
// not tell (no properties, or allOf, anyOf, oneOf, $ref, patternProperties and the like, which
// are not followed), any path below is accepted.

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
			if msg := outputPathProblem(s, s.Branch); msg != "" {
				v.add(EBadBranchPath, valStepKey(i, "branch"), "step %s has branch %q, but its output %s", v.stepName(i), s.Branch, msg)
			}
		}
		if s.Type == Switch && s.Expr != "" {
			v.checkExprPath(i)
		}
	}
}

// checkExprPath reports a switch's expr that reads a path the output of its step cannot have.
func (v *validator) checkExprPath(i int) {
	s := &v.d.Steps[i]
	ref, err := template.PathRef(s.Expr)
	if err != nil {
		return // E_TEMPLATE
	}
	root, _ := template.Root(ref.Path)
	j, ok := v.ids[root]
	if !ok {
		return // input, or E_TEMPLATE
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(ref.Path, root+".output"), ".")
	if msg := outputPathProblem(&v.d.Steps[j], rel); msg != "" {
		v.add(EBadBranchPath, valStepKey(i, "expr"), "step %s has expr %q, but the output of step %s %s", v.stepName(i), strings.TrimSpace(s.Expr), root, msg)
	}
}

// outputPathProblem says why the output of step s cannot have the dotted path rel ("" when it
// can, or when the validator cannot tell), as the end of a sentence.
func outputPathProblem(s *Step, rel string) string {
	schema := outputSchema(s)
	if schema == nil || rel == "" {
		return ""
	}
	return schemaPathProblem(schema, rel)
}

// schemaPathProblem says why a value valid against schema cannot have dotted path rel ("" when
// it can, or when the schema does not tell), as the end of a sentence.
func schemaPathProblem(schema json.RawMessage, rel string) string {
	var node any
	if json.Unmarshal(schema, &node) != nil {
		return "" // the schema's own check reports it
	}
	at := ""
	for _, seg := range strings.Split(rel, ".") {
		m, ok := node.(map[string]any)
		if !ok || schemaOpaque(m) {
			return ""
		}
		next, msg := schemaStep(m, seg, at)
		if next == nil {
			return msg
		}
		node, at = next, valJoin(at, seg)
	}
	return ""
}

// schemaStep follows one segment of a path from schema m (at names where m is, "" at the top):
// the schema of the value there, or nil and why there can be none ("" when anything goes).
func schemaStep(m map[string]any, seg, at string) (any, string) {
	where := ""
	if at != "" {
		where = "at " + at + " "
	}
	props, _ := m["properties"].(map[string]any)
	if sub, ok := props[seg]; ok {
		return sub, ""
	}
	types := schemaTypes(m)
	if isIndex(seg) && (types == nil || slices.Contains(types, "array")) {
		n, _ := strconv.Atoi(seg)
		if pre, ok := m["prefixItems"].([]any); ok && n < len(pre) {
			return pre[n], ""
		}
		if items, ok := m["items"]; ok {
			return items, ""
		}
		return nil, ""
	}
	if types != nil && !slices.Contains(types, "object") {
		if slices.Contains(types, "array") {
			return nil, fmt.Sprintf("%sis an array, which has indexes (0, 1, ...), not %q", where, seg)
		}
		return nil, fmt.Sprintf("%sis of type %s, which has no %q in it", where, strings.Join(types, " or "), seg)
	}
	switch ap, hasAP := m["additionalProperties"]; {
	case hasAP && ap == false:
		return nil, fmt.Sprintf("%shas no property %q: its schema allows only %s", where, seg, propertyList(props))
	case hasAP:
		if sub, ok := ap.(map[string]any); ok {
			return sub, ""
		}
		return nil, ""
	case len(props) > 0:
		return nil, fmt.Sprintf("%shas no property %q: its schema declares only %s (set additionalProperties to allow others)", where, seg, propertyList(props))
	}
	return nil, ""
}

// schemaOpaque reports a schema whose shape the validator does not follow: composed from others,
// referring to another, or constraining keys by pattern. Any path below it is accepted.
func schemaOpaque(m map[string]any) bool {
	for _, k := range []string{"allOf", "anyOf", "oneOf", "not", "$ref", "$dynamicRef", "if", "patternProperties", "dependentSchemas", "unevaluatedProperties"} {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// schemaTypes lists the types a schema allows, nil when it does not say.
func schemaTypes(m map[string]any) []string {
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var types []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				types = append(types, s)
			}
		}
		return types
	}
	return nil
}

// valJoin appends a segment to a dotted path.
func valJoin(at, seg string) string {
	if at == "" {
		return seg
	}
	return at + "." + seg
}

func isIndex(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && strconv.Itoa(n) == s
}

// propertyList names the properties a schema declares, for messages.
func propertyList(props map[string]any) string {
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
