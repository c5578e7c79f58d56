package workflow

import (
	"fmt"
	"strings"

	"github.com/reins-run/reins/template"
)

// Templates are {{path}} inside text (input, prompt, instructions, goal, message); expr and items
// are bare dotted paths. A path is "input", "input.x...", "<step_id>.output" or
// "<step_id>.output.x...", every segment made of A-Z, a-z, 0-9, _ and -. The syntax is the
// template package's (template.Paths, template.Root), the same code that renders and evaluates
// them at run time; the validator adds what only the definition knows: that a step named in a
// path exists.

// checkTemplates reports a malformed template in text, and every template whose path does not
// name the run input or the output of a step of this workflow. name is the step's name for
// messages, key the key holding text.
func (v *validator) checkTemplates(key, name, text string) {
	refs, err := template.Refs(text)
	if err != nil {
		v.add(ETemplate, key, "step %s has a malformed template in %s: %v", name, valLastPart(key), err)
		return
	}
	for _, ref := range refs {
		if msg := v.pathProblem(ref.Path); msg != "" {
			v.add(ETemplate, key, "step %s has the template {{%s}} in %s, which %s", name, ref.Path, valLastPart(key), msg)
			continue
		}
		v.read(key, name, "the template {{"+ref.Path+"}}", ref.Path, ref.Default != nil)
	}
}

// checkPath reports a dotted path (expr, items, or an input that is a bare path) that does not
// name the run input or a step's output.
func (v *validator) checkPath(key, name, what, path string) {
	if msg := v.pathProblem(path); msg != "" {
		v.add(ETemplate, key, "step %s has %s %q, which %s", name, what, path, msg)
		return
	}
	v.read(key, name, fmt.Sprintf("%s %q", what, path), path, false)
}

// stepRead is a template or path of step `step` that reads the output of step `of`.
type stepRead struct {
	step, of       int
	key, name, how string
	path           string
	hasDefault     bool
}

// read records that the step being checked reads path (when it names a step's output).
func (v *validator) read(key, name, how, path string, hasDefault bool) {
	root, err := template.Root(path)
	if err != nil || root == "input" {
		return
	}
	if of, ok := v.ids[root]; ok {
		v.reads = append(v.reads, stepRead{step: v.cur, of: of, key: key, name: name, how: how, path: path, hasDefault: hasDefault})
	}
}

// checkPathOrTemplate checks a dotted path, also accepted written as one whole template
// ("{{s1.output.label}}").
func (v *validator) checkPathOrTemplate(key, name, what, s string) {
	v.checkPath(key, name, what, unwrapPath(s))
}

// unwrapPath returns a dotted path written as one whole template ("{{s1.output.label}}") as the
// bare path, and any other text trimmed.
func unwrapPath(s string) string {
	t := strings.TrimSpace(s)
	if inner, ok := strings.CutPrefix(t, "{{"); ok {
		if inner, ok := strings.CutSuffix(inner, "}}"); ok && !strings.ContainsAny(inner, "{}") {
			t = strings.TrimSpace(inner)
		}
	}
	return t
}

// inputIsTemplate reports whether a step's input is a template; else, when it looks like a
// dotted path, it is one, and otherwise literal text.
func inputIsTemplate(input string) bool {
	return strings.Contains(input, "{{") || strings.Contains(input, "}}")
}

// ReadsInput reports the first template or dotted path of d's steps, in step order, that reads
// the run input ("input" or "input.x..."): the step's id, the key of the step holding it
// ("goal") and the path. A run started with no input cannot render it. Malformed templates are
// the validator's to report and are passed over here.
func (d *Definition) ReadsInput() (step, key, path string, ok bool) {
	for i := range d.Steps {
		s := &d.Steps[i]
		var paths []struct{ key, path string }
		addTemplate := func(k, text string) {
			ps, err := template.Paths(text)
			if err != nil {
				return
			}
			for _, p := range ps {
				paths = append(paths, struct{ key, path string }{k, p})
			}
		}
		addPath := func(k, text string) {
			if text != "" {
				paths = append(paths, struct{ key, path string }{k, unwrapPath(text)})
			}
		}
		switch {
		case inputIsTemplate(s.Input):
			addTemplate("input", s.Input)
		case template.LooksLikePath(s.Input):
			addPath("input", s.Input)
		}
		addTemplate("prompt", s.Prompt)
		addTemplate("instructions", s.Instructions)
		addTemplate("goal", s.Goal)
		addTemplate("message", s.Message)
		addPath("expr", s.Expr)
		addPath("items", s.Items)
		for _, p := range paths {
			if root, err := template.Root(p.path); err == nil && root == "input" {
				return s.ID, p.key, p.path, true
			}
		}
	}
	return "", "", "", false
}

// pathProblem says what is wrong with a dotted path ("" when nothing is), as the end of a
// sentence.
func (v *validator) pathProblem(path string) string {
	root, err := template.Root(path)
	if err != nil {
		return "is not a valid path: " + err.Error()
	}
	if root == "input" {
		return ""
	}
	if _, ok := v.ids[root]; !ok {
		return "names \"" + root + "\", which is neither input nor a step of this workflow"
	}
	return ""
}

// valLastPart is the last part of a key, for messages: "steps[2].prompt" → "prompt".
func valLastPart(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[i+1:]
	}
	return key
}
