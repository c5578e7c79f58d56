package workflow_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/reins-run/reins/template"
	"github.com/reins-run/reins/workflow"
)

// The validator of package workflow checks templates and paths statically; this package
// evaluates them at run time. These tests hold the two to one reading: whatever the validator
// accepts, the run-time functions accept as syntax (and read the same steps), and the reverse.

// The steps of the definition the validator checks, each with an output at run time.
var known = map[string]bool{"a": true, "review": true, "f": true}

var scopeAll = template.Scope{
	Input:   json.RawMessage(`{}`),
	Outputs: map[string]json.RawMessage{"a": json.RawMessage(`{}`), "review": json.RawMessage(`{}`), "f": json.RawMessage(`{}`)},
}

// validatorAccepts reports whether workflow.Validate finds no template problem with s as the
// given key of a step f.
func validatorAccepts(key, s string) bool {
	f := workflow.Step{ID: "f", Type: workflow.Fail, Message: "m"}
	switch key {
	case "message":
		f.Message = s
	case "input":
		f.Input = s
	case "expr":
		f = workflow.Step{ID: "f", Type: workflow.Switch, Expr: s}
	case "items":
		f = workflow.Step{ID: "f", Type: workflow.Map, Items: s, MaxItems: 1, Step: "a"}
	}
	def := &workflow.Definition{
		Name: "agree",
		Steps: []workflow.Step{
			{ID: "a", Type: workflow.Task, Handler: "h"},
			{ID: "review", Type: workflow.Task, Handler: "h"},
			f,
		},
		Edges: []workflow.Edge{{From: "a", To: "review"}, {From: "review", To: "f"}},
	}
	return !workflow.Validate(def, workflow.Options{}).Has(workflow.ETemplate)
}

// syntaxOrReference reports whether err is a problem the validator would see: malformed, or
// naming a step that does not exist (every existing step has an output in scopeAll).
func syntaxOrReference(err error) bool {
	return errors.Is(err, template.ErrSyntax) || errors.Is(err, template.ErrNoOutput)
}

// templateAccepts is the run-time reading of a text with templates: well formed (Paths checks
// all of it, where Render stops at the first value it cannot find) and naming existing steps.
func templateAccepts(s string) bool {
	paths, err := template.Paths(s)
	if err != nil {
		return false
	}
	for _, p := range paths {
		root, _, _ := strings.Cut(p, ".")
		if root != "input" && !known[root] {
			return false
		}
	}
	return true
}

// knownRoot reports whether the path s reads (template.PathRef) names the input or an existing
// step: a default would stand in for an unknown step's output at run time.
func knownRoot(s string) bool {
	ref, err := template.PathRef(s)
	if err != nil {
		return false
	}
	root, _, _ := strings.Cut(ref.Path, ".")
	return root == "input" || known[root]
}

// runtimeAccepts is the run-time reading of s as the given key.
func runtimeAccepts(key, s string) bool {
	switch key {
	case "message":
		return templateAccepts(s)
	case "input":
		if s == "" {
			return true // absent: the engine's default
		}
		if strings.Contains(s, "{{") || strings.Contains(s, "}}") {
			return templateAccepts(s)
		}
		_, err := template.Value(scopeAll, s)
		return !syntaxOrReference(err)
	case "expr":
		if s == "" {
			return true // a missing expr is E_MISSING_KEY, not a template problem
		}
		_, err := template.Path(scopeAll, s)
		return knownRoot(s) && !syntaxOrReference(err)
	case "items":
		if s == "" {
			return true
		}
		_, err := template.Items(scopeAll, s, 10)
		return knownRoot(s) && !syntaxOrReference(err)
	}
	panic(key)
}

var agreementSeeds = []string{
	"", "plain text", "{single}", "a } b { c", "{{input}}", "{{ input.x }}", "{{input.x}}}",
	"{ {{input.x}}", "}}", "a }} b", "{{", "{{{", "{{{input.x}}", "{{input.x}", "{{ }}", "{{}}",
	"{{a.output}}", "{{a.output.x.0.y}}", "{{a}}", "{{a.x}}", "{{ghost.output}}", "{{input..x}}",
	"{{input.a b}}", "{{input.é}}", "{{input.x}} {{review.output}}", "{{input.x}} }}",
	"{{ghost.output}} {{input.x}}", "{{input.x}}{{", "x {{ {a} }}", "input", "input.x", "a.output",
	"a.output.items.0", "a", "ghost.output", "a..b", ".a", "a.", "input.", " input.x", "input.x ",
	"hello world", "42", "true", "review.output.verdict", "{{review.output.verdict}}",
	" {{ review.output.verdict }} ", "{{review.output.verdict}}x", "{{ {review} }}", "\t{{a.output}}\n",
	"{{input\n.x}}", "{{\u00a0input.x\u00a0}}", "\u00a0input.x", "{{input.x}}\u2028",
	`{{a.output.x ?? "none"}}`, `{{ review.output ?? 0 }}`, `a.output ?? "x"`, `{{a.output ?? }}`,
	`{{a.output ?? [1]}}`, `{{ghost.output ?? "x"}}`, `{{a.output ?? "x" ?? "y"}}`, `{{input ?? null}} and {{a.output}}`,
}

func TestAgreementWithValidator(t *testing.T) {
	for _, s := range agreementSeeds {
		for _, key := range []string{"message", "input", "expr", "items"} {
			if v, r := validatorAccepts(key, s), runtimeAccepts(key, s); v != r {
				t.Errorf("%s %q: the validator accepts it: %v, the run-time functions: %v", key, s, v, r)
			}
		}
	}
}

func FuzzAgreement(f *testing.F) {
	for _, s := range agreementSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, key := range []string{"message", "input", "expr", "items"} {
			if v, r := validatorAccepts(key, s), runtimeAccepts(key, s); v != r {
				t.Errorf("%s %q: the validator accepts it: %v, the run-time functions: %v", key, s, v, r)
			}
		}
	})
}
