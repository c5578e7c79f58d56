package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// next finds the first template of tmpl at or after byte from, scanning exactly as workflow's
// validator does. It returns the offset of its "{{", the offset just past its "}}" and its path
// (trimmed), or open < 0 when there is no template left (and no stray "}}" either).
func next(tmpl string, from int) (open, end int, path string, err error) {
	rest := tmpl[from:]
	o := strings.Index(rest, "{{")
	if c := strings.Index(rest, "}}"); c >= 0 && (o < 0 || c < o) {
		return -1, -1, "", templateErr(tmpl, from+c, syntaxErr(`"}}" without a matching "{{"`))
	}
	if o < 0 {
		return -1, -1, "", nil
	}
	open = from + o
	e := strings.Index(tmpl[open+2:], "}}")
	if e < 0 {
		return -1, -1, "", templateErr(tmpl, open, syntaxErr(`"{{" is not closed by "}}"`))
	}
	inner := tmpl[open+2 : open+2+e]
	if strings.ContainsAny(inner, "{}") {
		return -1, -1, "", templateErr(tmpl, open, syntaxErr("unbalanced braces in the template {{"+inner+"}}"))
	}
	path = strings.TrimSpace(inner)
	if path == "" {
		return -1, -1, "", templateErr(tmpl, open, syntaxErr("empty template {{"+inner+"}}: write {{input.x}} or {{step_id.output.x}}"))
	}
	return open, open + 2 + e + 2, path, nil
}

// hasTemplate reports whether s holds template syntax at all, the test workflow's validator
// uses to tell a templated input from a bare path or plain text.
func hasTemplate(s string) bool {
	return strings.Contains(s, "{{") || strings.Contains(s, "}}")
}

// Render replaces every {{ path }} of tmpl with its value: a string as it is, any other JSON
// value as compact JSON. Text outside templates, single braces included, is kept as it is, and
// values are not rendered again. A malformed template or a value that cannot be found is a
// *TemplateError naming its position; nothing renders as an empty string by default.
func Render(scope Scope, tmpl string) (string, error) {
	if !hasTemplate(tmpl) {
		return tmpl, nil
	}
	var b strings.Builder
	b.Grow(len(tmpl) + 64)
	for at := 0; ; {
		open, end, path, err := next(tmpl, at)
		if err != nil {
			return "", err
		}
		if open < 0 {
			b.WriteString(tmpl[at:])
			return b.String(), nil
		}
		b.WriteString(tmpl[at:open])
		v, err := evalRef(scope, path)
		if err != nil {
			return "", templateErr(tmpl, open, err)
		}
		if v[0] == '"' {
			appendString(&b, v)
		} else {
			appendCompact(&b, v)
		}
		at = end
	}
}

// Paths returns the paths tmpl reads, in order (repeats included), checking its syntax and the
// syntax of every path as Render does, without any data. It returns nil for plain text.
func Paths(tmpl string) ([]string, error) {
	refs, err := Refs(tmpl)
	if err != nil || refs == nil {
		return nil, err
	}
	paths := make([]string, len(refs))
	for i, r := range refs {
		paths[i] = r.Path
	}
	return paths, nil
}

// Ref is what one {{…}} of a template reads: a path, and the default that stands for its value
// when the path's step has no output yet or the path is missing from it.
type Ref struct {
	Path string
	// Default is a JSON scalar (a string in double quotes, a number, true, false or null), or
	// nil when the template gives none.
	Default json.RawMessage
}

// defaultSep separates a template's path from its default: {{ review.output.notes ?? "none" }}.
const defaultSep = "??"

// Refs returns what tmpl reads, in order, checking its syntax as Render does; nil for plain text.
func Refs(tmpl string) ([]Ref, error) {
	if !hasTemplate(tmpl) {
		return nil, nil
	}
	var refs []Ref
	for at := 0; ; {
		open, end, inner, err := next(tmpl, at)
		if err != nil {
			return nil, err
		}
		if open < 0 {
			return refs, nil
		}
		ref, perr := parseRef(inner)
		if perr != nil {
			return nil, templateErr(tmpl, open, perr)
		}
		refs = append(refs, ref)
		at = end
	}
}

// parseRef reads the inside of a {{…}}: a path, or a path, "??" and a JSON scalar. The default
// is held to the strictest reading (valid UTF-8, one JSON value that encoding/json decodes, no
// array) so that what the validator accepts always renders.
func parseRef(inner string) (Ref, *Error) {
	ref, err := splitRef(inner)
	if err != nil {
		return Ref{}, err
	}
	if _, _, err := parsePath(ref.Path); err != nil {
		return Ref{}, err
	}
	return ref, nil
}

// splitRef reads the inside of a {{…}} into its path (not checked) and its default.
func splitRef(inner string) (Ref, *Error) {
	path, def, hasDefault := strings.Cut(inner, defaultSep)
	path = strings.TrimSpace(path)
	if !hasDefault {
		return Ref{Path: path}, nil
	}
	def = strings.TrimSpace(def)
	const scalars = "write a string in double quotes, a number, true, false or null"
	var v any
	if def == "" || !utf8.ValidString(def) || json.Unmarshal([]byte(def), &v) != nil {
		return Ref{}, syntaxErr("the default of {{" + inner + "}} is not a JSON value: " + scalars)
	}
	if _, isArray := v.([]any); isArray { // an object cannot get here: braces end the template
		return Ref{}, syntaxErr("the default of {{" + inner + "}} is an array: " + scalars)
	}
	return Ref{Path: path, Default: json.RawMessage(def)}, nil
}

// evalRef evaluates the inside of a {{…}}.
func evalRef(scope Scope, inner string) (json.RawMessage, error) {
	if scope.Vars != nil {
		return evalVar(scope.Vars, inner)
	}
	ref, perr := parseRef(inner)
	if perr != nil {
		return nil, perr
	}
	return evalDefault(scope, ref)
}

// evalDefault evaluates ref's path, or gives its default when the path's step has no output yet
// or the path is missing from the data. Any other problem (invalid JSON, a key looked up in a
// string) stays an error: a default covers what has not happened yet, not a mistake.
func evalDefault(scope Scope, ref Ref) (json.RawMessage, error) {
	v, err := evalPath(scope, ref.Path)
	if err != nil && ref.Default != nil && (errors.Is(err, ErrNoOutput) || errors.Is(err, ErrNotFound)) {
		return ref.Default, nil
	}
	return v, err
}

// evalVar evaluates the inside of a {{…}} against vars (Scope.Vars): a name, or a name and a
// path into its value, or the default when the name is not set or the path is missing.
func evalVar(vars map[string]json.RawMessage, inner string) (json.RawMessage, error) {
	ref, perr := splitRef(inner)
	if perr != nil {
		return nil, perr
	}
	if !dotted(ref.Path) {
		return nil, syntaxErr(strconv.Quote(ref.Path) + " is not a name or a dotted path (segments of A-Z, a-z, 0-9, _ and -)")
	}
	name, rel := ref.Path, ""
	data, ok := vars[name]
	if !ok {
		name, rel, _ = strings.Cut(ref.Path, ".")
		data, ok = vars[name]
	}
	var v json.RawMessage
	var err error
	switch doc, off, valid := document(data); {
	case !ok:
		err = &Error{Path: ref.Path, Reason: "not set", Kind: ErrNotFound}
	case !valid:
		err = &Error{Path: ref.Path, Reason: name + " is not valid JSON (at byte " + strconv.Itoa(off) + ")", Kind: ErrInvalidJSON}
	default:
		v, err = walk(doc, name, rel, ref.Path)
	}
	if err != nil && ref.Default != nil && errors.Is(err, ErrNotFound) {
		return ref.Default, nil
	}
	return v, err
}

// Value evaluates a step's input, the JSON value the step receives. s is read as workflow's
// validator reads it:
//
//   - with "{{" or "}}" in it, it is a template: when the whole of s, but for whitespace around
//     it, is one {{path}}, the value is the JSON at that path (an object stays an object);
//     otherwise it is the rendered text, as a JSON string;
//   - else, when it looks like a bare dotted path (only A-Z, a-z, 0-9, _, - and dots, not
//     starting or ending with a dot, no whitespace), the value is the JSON at that path ("a..b"
//     is a malformed path, an error, not text);
//   - else it is plain text, and the value is that text as a JSON string.
//
// An empty s is an error: the default input (the output of the step that led here) is the
// engine's to choose.
func Value(scope Scope, s string) (json.RawMessage, error) {
	switch {
	case s == "":
		return nil, syntaxErr("empty input: nothing to evaluate")
	case hasTemplate(s):
		open, end, path, err := next(s, 0)
		if err != nil {
			return nil, err
		}
		if open >= 0 && strings.TrimSpace(s[:open]) == "" && strings.TrimSpace(s[end:]) == "" {
			v, err := evalRef(scope, path)
			if err != nil {
				return nil, templateErr(s, open, err)
			}
			return v, nil
		}
		text, err := Render(scope, s)
		if err != nil {
			return nil, err
		}
		return jsonString(text), nil
	case LooksLikePath(s):
		return evalPath(scope, s)
	default:
		return jsonString(s), nil
	}
}

// jsonString encodes s as a JSON string, without escaping HTML characters.
func jsonString(s string) json.RawMessage {
	var buf bytes.Buffer
	buf.Grow(len(s) + 2)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// LooksLikePath reports whether a step's input without templates is meant as a dotted path: id
// characters and dots only, not starting or ending with a dot. Value and workflow's validator
// both decide with it.
func LooksLikePath(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !idChar(s[i]) && s[i] != '.' {
			return false
		}
	}
	return true
}
