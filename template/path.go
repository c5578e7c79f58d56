package template

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/reins-run/reins/internal/jsonscan"
)

// Scope is the data a run's templates and paths read: the run input and the output of every step
// that has produced one, as JSON. A nil or empty value is null. The functions of this package only
// read a Scope, so one may be shared by concurrent callers as long as nobody modifies it.
type Scope struct {
	// Input is the run input.
	Input json.RawMessage
	// Outputs maps a step id to its output (the latest, for a step that ran several times).
	Outputs map[string]json.RawMessage
	// Vars, when set, replaces Input and Outputs: the paths of templates are then names of Vars,
	// read by themselves ({{topic}}) or into ({{review.score}}); a name that holds a dot is
	// tried whole first. Package agent renders its goals from a session's state so.
	Vars map[string]json.RawMessage
}

// pathHint ends the messages about malformed paths.
const pathHint = "(segments of A-Z, a-z, 0-9, _ and -, such as input.x or step_id.output.x)"

// Path evaluates a dotted path against scope: "input", "input.a.b", "<step>.output",
// "<step>.output.a.0.b". The path may also be written as one whole template, "{{ step.output.x }}",
// with whitespace around it: the forms workflow's validator accepts for switch expr and map items.
// Only the template form may give a default ("{{ step.output.x ?? \"none\" }}"), which is the
// value when the step has no output yet or the path is missing (PathRef). The value is the JSON
// at that path, a sub-slice of the scope's data, or the default.
func Path(scope Scope, path string) (json.RawMessage, error) {
	ref, err := PathRef(path)
	if err != nil {
		return nil, err
	}
	return evalDefault(scope, ref)
}

// PathRef reads a path as Path and Items do, without any data: bare, or as one whole template
// whose inside may give a default. workflow's validator checks expr and items with it.
func PathRef(s string) (Ref, error) {
	inner, wrapped := stripPath(s)
	if !wrapped {
		if _, _, err := parsePath(inner); err != nil {
			err.Path = inner
			return Ref{}, err
		}
		return Ref{Path: inner}, nil
	}
	ref, err := parseRef(inner)
	if err != nil {
		err.Path = inner
		return Ref{}, err
	}
	return ref, nil
}

// stripPath removes the whitespace and one pair of enclosing braces around a path, exactly as
// workflow's validator does for expr and items; wrapped says whether there were braces.
func stripPath(s string) (t string, wrapped bool) {
	t = strings.TrimSpace(s)
	if inner, ok := strings.CutPrefix(t, "{{"); ok {
		if inner, ok := strings.CutSuffix(inner, "}}"); ok && !strings.ContainsAny(inner, "{}") {
			return strings.TrimSpace(inner), true
		}
	}
	return t, false
}

// evalPath evaluates a path as written (no trimming).
func evalPath(scope Scope, path string) (json.RawMessage, error) {
	root, rel, err := parsePath(path)
	if err != nil {
		err.Path = path
		return nil, err
	}
	data := scope.Input
	if root != "input" {
		out, ok := scope.Outputs[root]
		if !ok {
			return nil, &Error{Path: path, Reason: "step " + root + " has no output yet", Kind: ErrNoOutput}
		}
		data = out
	}
	name := path // "input" or "<step>.output", as a part of path (no allocation)
	if rel != "" {
		name = path[:len(path)-len(rel)-1]
	}
	doc, off, ok := document(data)
	if !ok {
		what := "the run input"
		if root != "input" {
			what = "the output of step " + root
		}
		return nil, &Error{Path: path, Reason: what + " is not valid JSON (at byte " + strconv.Itoa(off) + ")", Kind: ErrInvalidJSON}
	}
	return walk(doc, name, rel, path)
}

// Root checks the syntax of a dotted path (input, input.x…, step_id.output, step_id.output.x…)
// without any data, and returns its root: "input" or the step id. workflow's validator uses it,
// so that what it accepts is exactly what Path evaluates.
func Root(path string) (string, error) {
	root, _, err := parsePath(path)
	if err != nil {
		return "", err
	}
	return root, nil
}

// parsePath checks the syntax of a path, as workflow's validator does, and splits it into its
// root ("input" or a step id) and the path below the root value ("" for the value itself).
func parsePath(path string) (root, rel string, err *Error) {
	if path == "" {
		return "", "", syntaxErr("empty path: write input.x or step_id.output.x")
	}
	if !dotted(path) {
		return "", "", syntaxErr(strconv.Quote(path) + " is not a dotted path " + pathHint)
	}
	root, rest, _ := strings.Cut(path, ".")
	if root == "input" {
		return root, rest, nil
	}
	field, rel, _ := strings.Cut(rest, ".")
	if field != "output" {
		return "", "", syntaxErr(fmt.Sprintf("%q must read the step's output: write %s.output or %s.output.x", path, root, root))
	}
	return root, rel, nil
}

// dotted reports whether s is one or more segments of id characters separated by single dots.
func dotted(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			if s[i-1] == '.' {
				return false
			}
		} else if !idChar(c) {
			return false
		}
	}
	return true
}

func idChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || jsonscan.IsDigit(c) || c == '_' || c == '-'
}

// walk follows rel (dotted segments, possibly "") from the value v, which is named name in
// messages; full is the path to report.
func walk(v []byte, name, rel, full string) (json.RawMessage, error) {
	for off := 0; off < len(rel); {
		seg, next := rel[off:], len(rel)
		if k := strings.IndexByte(seg, '.'); k >= 0 {
			seg, next = seg[:k], off+k+1
		}
		at := func() string { // the value being walked, named for messages
			if off == 0 {
				return name
			}
			return name + "." + rel[:off-1]
		}
		switch v[0] {
		case '{':
			m, ok := member(v, seg)
			if !ok {
				return nil, &Error{Path: full, Reason: fmt.Sprintf("%s has no key %q", at(), seg), Kind: ErrNotFound}
			}
			v = m
		case '[':
			idx, ok, huge := index(seg)
			if !ok {
				return nil, &Error{Path: full, Reason: fmt.Sprintf("%s is an array and %q is not an index (0, 1, 2, … without leading zeros)", at(), seg), Kind: ErrType}
			}
			e, n, found := element(v, idx)
			if huge || !found {
				if huge {
					_, n, _ = element(v, -1)
				}
				return nil, &Error{Path: full, Reason: fmt.Sprintf("index %s out of range (length %d)", seg, n), Kind: ErrNotFound}
			}
			v = e
		default:
			return nil, &Error{Path: full, Reason: fmt.Sprintf("%s is %s, so it has no key %q", at(), kind(v), seg), Kind: ErrType}
		}
		off = next
	}
	return v, nil
}

// Relative evaluates a dotted path into one output, for a step's branch: "verdict",
// "result.label", "items.0.kind". The path must not be empty.
func Relative(output json.RawMessage, path string) (json.RawMessage, error) {
	if path == "" {
		return nil, syntaxErr("empty path: write the key of the output that holds the label, such as verdict or result.label")
	}
	if !dotted(path) {
		return nil, syntaxErr(strconv.Quote(path) + " is not a dotted path (segments of A-Z, a-z, 0-9, _ and -, such as verdict or result.label)")
	}
	doc, off, ok := document(output)
	if !ok {
		return nil, &Error{Path: path, Reason: "the output is not valid JSON (at byte " + strconv.Itoa(off) + ")", Kind: ErrInvalidJSON}
	}
	return walk(doc, "output", path, path)
}

// Label returns the branch or switch label a value stands for: a string's value, "true" or
// "false" for a boolean, a number's JSON text as written ("2", "2.50", "1e3"). Null, objects and
// arrays are errors.
func Label(v json.RawMessage) (string, error) {
	doc, off, ok := document(v)
	if !ok {
		return "", &Error{Reason: "a label must be a string, number or boolean, got invalid JSON (at byte " + strconv.Itoa(off) + ")", Kind: ErrInvalidJSON}
	}
	switch doc[0] {
	case '"':
		var b strings.Builder
		appendString(&b, doc)
		return b.String(), nil
	case 't':
		return "true", nil
	case 'f':
		return "false", nil
	case '{', '[', 'n':
		if len(v) == 0 {
			return "", &Error{Reason: "a label must be a string, number or boolean, got nothing", Kind: ErrType}
		}
		return "", &Error{Reason: "a label must be a string, number or boolean, got " + kind(doc), Kind: ErrType}
	default:
		return string(doc), nil
	}
}

// Items evaluates path (as Path does) for a map step: the value must be an array of at most max
// items (max > 0). More items is an error naming the count and the bound, never a truncation.
// The items alias the scope's data.
//
// Items take no default: a default is a scalar, never the array they must be.
func Items(scope Scope, path string, max int) ([]json.RawMessage, error) {
	ref, rerr := PathRef(path)
	if rerr != nil {
		return nil, rerr
	}
	p := ref.Path
	if ref.Default != nil {
		return nil, syntaxErr("items " + strconv.Quote(strings.TrimSpace(path)) + " give a default, which items cannot take: a default is a scalar, the items must be an array")
	}
	if max <= 0 {
		return nil, fmt.Errorf("%s: the bound on the items must be positive, got %d", p, max)
	}
	v, err := evalPath(scope, p)
	if err != nil {
		return nil, err
	}
	if v[0] != '[' {
		return nil, &Error{Path: p, Reason: "the items must be an array, got " + kind(v), Kind: ErrType}
	}
	items, n := elements(v, max)
	if n > max {
		return nil, &Error{Path: p, Reason: fmt.Sprintf("%d items, more than the bound of %d", n, max), Kind: ErrTooMany}
	}
	return items, nil
}
