package workflow

import (
	"strings"
)

// Templates are {{path}} inside text (input, prompt, instructions, goal, message); expr and items
// are bare dotted paths. A path is "input", "input.x...", "<step_id>.output" or
// "<step_id>.output.x...", every segment made of A-Z, a-z, 0-9, _ and -.

// checkTemplates reports every malformed template in text, and every template whose path does
// not name the run input or the output of a step of this workflow. name is the step's name for
// messages, key the key holding text.
func (v *validator) checkTemplates(key, name, text string) {
	rest := text
	for rest != "" {
		open := strings.Index(rest, "{{")
		if c := strings.Index(rest, "}}"); c >= 0 && (open < 0 || c < open) {
			v.add(ETemplate, key, "step %s has \"}}\" without a matching \"{{\" in %s", name, valLastPart(key))
			return
		}
		if open < 0 {
			return
		}
		rest = rest[open+2:]
		end := strings.Index(rest, "}}")
		if end < 0 {
			v.add(ETemplate, key, "step %s has a template \"{{\" that is not closed by \"}}\" in %s", name, valLastPart(key))
			return
		}
		inner := rest[:end]
		rest = rest[end+2:]
		if strings.Contains(inner, "{") || strings.Contains(inner, "}") {
			v.add(ETemplate, key, "step %s has unbalanced braces in the template {{%s}} in %s", name, inner, valLastPart(key))
			continue
		}
		path := strings.TrimSpace(inner)
		if path == "" {
			v.add(ETemplate, key, "step %s has an empty template {{}} in %s: write {{input.x}} or {{step_id.output.x}}", name, valLastPart(key))
			continue
		}
		if msg := v.pathProblem(path); msg != "" {
			v.add(ETemplate, key, "step %s has the template {{%s}} in %s, which %s", name, inner, valLastPart(key), msg)
		}
	}
}

// checkPath reports a dotted path (expr, items, or an input that is a bare path) that does not
// name the run input or a step's output.
func (v *validator) checkPath(key, name, what, path string) {
	if msg := v.pathProblem(path); msg != "" {
		v.add(ETemplate, key, "step %s has %s %q, which %s", name, what, path, msg)
	}
}

// checkPathOrTemplate checks a dotted path, also accepted written as one whole template
// ("{{s1.output.label}}").
func (v *validator) checkPathOrTemplate(key, name, what, s string) {
	t := strings.TrimSpace(s)
	if inner, ok := strings.CutPrefix(t, "{{"); ok {
		if inner, ok := strings.CutSuffix(inner, "}}"); ok && !strings.ContainsAny(inner, "{}") {
			t = strings.TrimSpace(inner)
		}
	}
	v.checkPath(key, name, what, t)
}

// pathProblem says what is wrong with a dotted path ("" when nothing is), as the end of a
// sentence.
func (v *validator) pathProblem(path string) string {
	segs := strings.Split(path, ".")
	for _, seg := range segs {
		if !valIDOK(seg) {
			return "is not a dotted path (segments of A-Z, a-z, 0-9, _ and -, such as input.x or step_id.output.x)"
		}
	}
	if segs[0] == "input" {
		return ""
	}
	if _, ok := v.ids[segs[0]]; !ok {
		return "names \"" + segs[0] + "\", which is neither input nor a step of this workflow"
	}
	if len(segs) < 2 || segs[1] != "output" {
		return "must read the step's output: write " + segs[0] + ".output or " + segs[0] + ".output.x"
	}
	return ""
}

// valLooksLikePath reports whether an input with no template is meant as a dotted path: one or
// more segments of id characters separated by dots, nothing else.
func valLooksLikePath(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !valIDChar(s[i]) && s[i] != '.' {
			return false
		}
	}
	return true
}

// valLastPart is the last part of a key, for messages: "steps[2].prompt" → "prompt".
func valLastPart(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[i+1:]
	}
	return key
}
