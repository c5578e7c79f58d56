package template_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reins-run/reins/template"
)

// kinds are the sentinels every *Error matches one of.
var kinds = []error{template.ErrSyntax, template.ErrInvalidJSON, template.ErrNoOutput, template.ErrNotFound, template.ErrType, template.ErrTooMany}

func checkKind(t *testing.T, what string, err error) {
	t.Helper()
	var e *template.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: %T %v is not a *template.Error", what, err, err)
	}
	for _, k := range kinds {
		if errors.Is(err, k) {
			return
		}
	}
	t.Fatalf("%s: %v matches no kind", what, err)
}

// FuzzRender feeds random templates and scopes to every function: none panics, each either
// returns a value or an error of this package, and successful results are consistent.
func FuzzRender(f *testing.F) {
	f.Add("Order {{input.order.id}} costs {{ input.order.total }}", `{"order": {"id": "A1", "total": 12.50}}`, "review", `{"score": 0.9}`)
	f.Add("{{review.output.score}} / {{review.output}}", `null`, "review", `{"score": [1, "two", {"3": null}]}`)
	f.Add("{{review.output.items.3}}", ``, "review", `{"items": [1, 2]}`)
	f.Add("a }} b {{", `{"a": 1`, "x", `"\u00e9\ud83d\ude00"`)
	f.Add("{{ {a} }} {{}} {{input..x}} {{a b}}", `[]`, "", ``)
	f.Add("{{input.0.a}}", `[{"a": "{{input}}"}]`, "s", `true`)
	f.Add("  {{ s.output }}  ", `{}`, "s", ` [ 1 , 2 ] `)
	f.Add("input.xs", `{"xs": [1, 2, 3]}`, "s", `"label"`)
	f.Add("é\n{{s.output.x}}", `1e400`, "s", `{"x": -0.0e+0}`)
	f.Add(`Feedback: {{ s.output.feedback ?? "none yet" }}`, `{}`, "s", `{"feedback": "shorter"}`)
	f.Add(`{{s.output.x??0}} {{input.y ?? null}} {{ghost.output ?? true}}`, `{"y": [1]}`, "s", `"text"`)
	f.Add(`{{s.output ?? [1]}} {{s.output ?? "a"}}`, `{}`, "s", ``)
	f.Add(`{{ s.output.a ?? "x ?? y" }}`, `{}`, "s", `{}`)
	f.Add(`{{input.q ?? "\u00e9\ud800"}}`, `{}`, "s", `{}`)
	f.Add(`{{ s.output ?? 1e400 }}{{s.output ??}}{{?? 1}}`, `{}`, "s", `{}`)
	f.Fuzz(func(t *testing.T, tmpl, input, id, output string) {
		scope := template.Scope{Input: json.RawMessage(input), Outputs: map[string]json.RawMessage{id: json.RawMessage(output)}}

		got, err := template.Render(scope, tmpl)
		if err != nil {
			var te *template.TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("Render(%q): %T %v is not a *TemplateError", tmpl, err, err)
			}
			if te.Offset < 0 || te.Offset >= len(tmpl) || te.Line < 1 || te.Column < 1 {
				t.Fatalf("Render(%q): position %+v outside the template", tmpl, te)
			}
			checkKind(t, "Render", err)
			if got != "" {
				t.Fatalf("Render(%q) = %q with an error", tmpl, got)
			}
		} else {
			if !strings.Contains(tmpl, "{{") && got != tmpl {
				t.Fatalf("Render(%q) = %q: text without templates must come back unchanged", tmpl, got)
			}
			if _, err := template.Paths(tmpl); err != nil {
				t.Fatalf("Render(%q) succeeded but Paths fails: %v", tmpl, err)
			}
		}
		if _, perr := template.Paths(tmpl); perr != nil && err == nil {
			t.Fatalf("Paths(%q) fails but Render succeeds: %v", tmpl, perr)
		}

		checkDefaults(t, tmpl)

		if v, err := template.Value(scope, tmpl); err != nil {
			if v != nil {
				t.Fatalf("Value(%q) = %s with an error", tmpl, v)
			}
		} else if !json.Valid(v) {
			t.Fatalf("Value(%q) = %q: not JSON", tmpl, v)
		}

		if v, err := template.Path(scope, tmpl); err != nil {
			checkKind(t, "Path", err)
		} else {
			if !json.Valid(v) {
				t.Fatalf("Path(%q) = %q: not JSON", tmpl, v)
			}
			if l, err := template.Label(v); err == nil {
				if v[0] == '"' {
					var s string
					if json.Unmarshal(v, &s) != nil || s != l {
						t.Fatalf("Label(%s) = %q, want %q", v, l, s)
					}
				}
			} else {
				checkKind(t, "Label", err)
			}
		}

		if items, err := template.Items(scope, tmpl, 3); err != nil {
			checkKind(t, "Items", err)
		} else {
			if len(items) > 3 {
				t.Fatalf("Items(%q, 3) returned %d items", tmpl, len(items))
			}
			for _, it := range items {
				if !json.Valid(it) {
					t.Fatalf("Items(%q): item %q is not JSON", tmpl, it)
				}
			}
		}

		if v, err := template.Relative(json.RawMessage(output), tmpl); err != nil {
			checkKind(t, "Relative", err)
		} else if !json.Valid(v) {
			t.Fatalf("Relative(%q) = %q: not JSON", tmpl, v)
		}
		if _, err := template.Label(json.RawMessage(output)); err != nil {
			checkKind(t, "Label", err)
		}
	})
}

// missing reports an error that a default stands in for.
func missing(err error) bool {
	return errors.Is(err, template.ErrNoOutput) || errors.Is(err, template.ErrNotFound)
}

// checkDefaults holds what a default promises, whatever the data: Refs agrees with Paths, every
// default is a JSON scalar, and a template (or expr) whose every reference gives a default never
// fails for a value that is missing, here on a scope where nothing is there.
func checkDefaults(t *testing.T, tmpl string) {
	refs, err := template.Refs(tmpl)
	paths, perr := template.Paths(tmpl)
	if (err == nil) != (perr == nil) || len(refs) != len(paths) {
		t.Fatalf("Refs(%q) = %v, %v but Paths = %v, %v", tmpl, refs, err, paths, perr)
	}
	all := len(refs) > 0
	for i, r := range refs {
		if r.Path != paths[i] {
			t.Fatalf("Refs(%q)[%d].Path = %q, Paths has %q", tmpl, i, r.Path, paths[i])
		}
		if r.Default == nil {
			all = false
			continue
		}
		if !json.Valid(r.Default) || r.Default[0] == '[' || r.Default[0] == '{' || !utf8.Valid(r.Default) {
			t.Fatalf("Refs(%q)[%d].Default = %q: not a JSON scalar", tmpl, i, r.Default)
		}
	}
	empty := template.Scope{Input: json.RawMessage(`{}`)}
	if all {
		if _, err := template.Render(empty, tmpl); missing(err) {
			t.Fatalf("Render(%q) with defaults everywhere: %v", tmpl, err)
		}
	}
	if ref, err := template.PathRef(tmpl); err == nil && ref.Default != nil {
		if v, err := template.Path(empty, tmpl); missing(err) || (err == nil && string(v) != string(ref.Default) && !strings.HasPrefix(ref.Path, "input")) {
			t.Fatalf("Path(%q) = %s, %v; want its default %s", tmpl, v, err, ref.Default)
		}
	}
}
