package workflow

import (
	"strings"

	"github.com/reins-run/reins/template"
)

// Templates are {{path}} inside text (input, prompt, instructions, goal, message), and may give a
// default ({{path ?? "none"}}); expr and items are dotted paths, bare or written as one whole
// template, and only expr takes a default. A path is "input", "input.x...", "<step_id>.output"
// or "<step_id>.output.x...", every segment made of A-Z, a-z, 0-9, _ and -. The syntax is the
// template package's (template.Refs, template.PathRef, template.Root), the same code that
// renders and evaluates them at run time; the validator adds what only the definition knows:
// that a step named in a path exists, and (checkBound) that it surely ran before, unless a
// default stands in for it.

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
		v.read(stepRead{key: key, name: name, what: "template", path: ref.Path, hasDefault: ref.Default != nil})
	}
}

// checkPath reports a dotted path (expr, items, or an input that is a bare path) that does not
// name the run input or a step's output; hasDefault says that it gives a default.
func (v *validator) checkPath(key, name, what, path string, hasDefault bool) {
	if msg := v.pathProblem(path); msg != "" {
		v.add(ETemplate, key, "step %s has %s %q, which %s", name, what, path, msg)
		return
	}
	v.read(stepRead{key: key, name: name, what: what, path: path, hasDefault: hasDefault})
}

// stepRead is a template or path of step `step` that reads the output of step `of`: key holds
// it, name is the step's name for messages, what the kind of text ("template", "expr", "items",
// "input").
type stepRead struct {
	step, of        int
	key, name, what string
	path            string
	hasDefault      bool
}

// read records r for the step being checked when its path names a step's output.
func (v *validator) read(r stepRead) {
	root, err := template.Root(r.path)
	if err != nil || root == "input" {
		return
	}
	if of, ok := v.ids[root]; ok {
		r.step, r.of = v.cur, of
		v.reads = append(v.reads, r)
	}
}

// checkPathOrTemplate checks a dotted path, also accepted written as one whole template
// ("{{s1.output.label}}"), which may then give a default, as template.PathRef reads it. Items
// take none: a default is a scalar, never the array a map needs.
func (v *validator) checkPathOrTemplate(key, name, what, s string) {
	ref, err := template.PathRef(s)
	if err != nil {
		v.add(ETemplate, key, "step %s has %s %q, which is not a valid path: %v", name, what, strings.TrimSpace(s), err)
		return
	}
	if ref.Default != nil && what == "items" {
		v.add(ETemplate, key, "step %s gives its items %q a default, which items cannot take: a default is a scalar and a map needs an array", name, strings.TrimSpace(s))
		return
	}
	v.checkPath(key, name, what, ref.Path, ref.Default != nil)
}

// inputIsTemplate reports whether a step's input is a template; else, when it looks like a
// dotted path, it is one, and otherwise literal text.
func inputIsTemplate(input string) bool {
	return strings.Contains(input, "{{") || strings.Contains(input, "}}")
}

// ReadsInput reports the first template or dotted path of d's steps, in step order, that reads
// the run input ("input" or "input.x..."): the step's id, the key of the step holding it
// ("goal") and the path; or, before them, the concurrency key's first template with a path
// that reads the input without a default (step "", key "concurrency.key"). A run started with
// no input cannot render it. Malformed templates are the validator's to report and are passed
// over here.
func (d *Definition) ReadsInput() (step, key, path string, ok bool) {
	if c := d.Concurrency; c != nil {
		refs, _ := template.Refs(c.Key)
		for _, ref := range refs {
			if root, err := template.Root(ref.Path); err == nil && root == "input" && ref.Default == nil {
				return "", "concurrency.key", ref.Path, true
			}
		}
	}
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
			if ref, err := template.PathRef(text); err == nil {
				paths = append(paths, struct{ key, path string }{k, ref.Path})
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
		addTemplate("session", s.Session)
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
