package template_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/template"
)

func TestRender(t *testing.T) {
	for _, tc := range []struct{ tmpl, want string }{
		{"", ""},
		{"no templates, {single} braces } {", "no templates, {single} braces } {"},
		{"Order {{input.order.id}} total {{ input.order.total }}", "Order A1 total 12.50"},
		{"{{input.order.id}}", "A1"},
		{"{{\tinput.order.id\n}}", "A1"},
		{"big {{input.order.big}}", "big 123456789012345678901234567890"},
		{"{{input.order.lines.0}}", `{"sku":"x","qty":2}`},                     // compact JSON
		{"{{input.order.lines}}", `[{"sku":"x","qty":2},{"sku":"y","qty":1}]`}, // compact JSON
		{"{{input.spaced}}", `{"a b":" x  y ","q":"say \"hi\" }"}`},            // strings inside keep their spaces
		{"{{input.s}}", `hi "there"`},                                          // strings as they are
		{"{{input.esc}}", "café 😀"},
		{"{{input.html}}", "<b>&amp;</b>"},
		{"{{input.order.paid}}/{{input.order.note}}/{{input.n}}", "true/null/1e400"},
		{"{{input.tmpl}}", "{{input.s}}"},    // values are not rendered again
		{"{{input.order.id}}}", "A1}"},       // a single "}" after a template is text
		{"{ {{input.order.id}} }", "{ A1 }"}, // so is a single "{" before one
		{"{{input.order.id}}{{input.order.id}}", "A1A1"},
		{"Judge {{gen.output}}: {{review.output.score}}", "Judge a draft: 0.93"},
		{"{{empty.output}}", "null"},
		{"{{input.none}} {{input.obj}}", "[] {}"},
		{"line 1\n{{input.order.id}}\n", "line 1\nA1\n"},
	} {
		got, err := template.Render(scope, tc.tmpl)
		if err != nil {
			t.Errorf("Render(%q): %v", tc.tmpl, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Render(%q) = %q, want %q", tc.tmpl, got, tc.want)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	const hint = `(segments of A-Z, a-z, 0-9, _ and -, such as input.x or step_id.output.x)`
	for _, tc := range []struct {
		tmpl         string
		want         errCase
		offset, line int
		column       int
	}{
		{"a }} b", errCase{`column 3: "}}" without a matching "{{"`, template.ErrSyntax}, 2, 1, 3},
		{"{{input.s}} }} b", errCase{`column 13: "}}" without a matching "{{"`, template.ErrSyntax}, 12, 1, 13},
		{"x}}{{input.s}}", errCase{`column 2: "}}" without a matching "{{"`, template.ErrSyntax}, 1, 1, 2},
		{"{{input.s}}}}", errCase{`column 12: "}}" without a matching "{{"`, template.ErrSyntax}, 11, 1, 12},
		{"Hi {{input.x", errCase{`column 4: "{{" is not closed by "}}"`, template.ErrSyntax}, 3, 1, 4},
		{"{{{", errCase{`column 1: "{{" is not closed by "}}"`, template.ErrSyntax}, 0, 1, 1},
		{"{{ {a} }}", errCase{`column 1: unbalanced braces in the template {{ {a} }}`, template.ErrSyntax}, 0, 1, 1},
		{"{{{input.s}}", errCase{`column 1: unbalanced braces in the template {{{input.s}}`, template.ErrSyntax}, 0, 1, 1},
		{"{{a {{input.s}}", errCase{`column 1: unbalanced braces in the template {{a {{input.s}}`, template.ErrSyntax}, 0, 1, 1},
		{"x {{  }}", errCase{`column 3: empty template {{  }}: write {{input.x}} or {{step_id.output.x}}`, template.ErrSyntax}, 2, 1, 3},
		{"{{}}", errCase{`column 1: empty template {{}}: write {{input.x}} or {{step_id.output.x}}`, template.ErrSyntax}, 0, 1, 1},
		{"{{a b}}", errCase{`column 1: "a b" is not a dotted path ` + hint, template.ErrSyntax}, 0, 1, 1},
		{"ok {{ review }}", errCase{`column 4: "review" must read the step's output: write review.output or review.output.x`, template.ErrSyntax}, 3, 1, 4},
		{"{{input.customer}}", errCase{`column 1: input.customer: input has no key "customer"`, template.ErrNotFound}, 0, 1, 1},
		{"é {{later.output}}", errCase{`column 3: later.output: step later has no output yet`, template.ErrNoOutput}, 3, 1, 3},
		{"line one\n  {{later.output}}", errCase{`line 2, column 3: later.output: step later has no output yet`, template.ErrNoOutput}, 11, 2, 3},
		{"{{later.output}}\nline two", errCase{`line 1, column 1: later.output: step later has no output yet`, template.ErrNoOutput}, 0, 1, 1},
		{"{{input.order.id}} {{x.output.items.3}}", errCase{`column 20: x.output.items.3: index 3 out of range (length 2)`, template.ErrNotFound}, 19, 1, 20},
		{"{{bad.output}}", errCase{`column 1: bad.output: the output of step bad is not valid JSON (at byte 5)`, template.ErrInvalidJSON}, 0, 1, 1},
		// The first problem in the text is the one reported.
		{"{{later.output}} }}", errCase{`column 1: later.output: step later has no output yet`, template.ErrNoOutput}, 0, 1, 1},
	} {
		got, err := template.Render(scope, tc.tmpl)
		if got != "" {
			t.Errorf("Render(%q) = %q with an error", tc.tmpl, got)
		}
		checkErr(t, "Render("+tc.tmpl+")", err, tc.want)
		var te *template.TemplateError
		if !errors.As(err, &te) {
			t.Errorf("Render(%q): %T is not a *TemplateError", tc.tmpl, err)
			continue
		}
		if te.Offset != tc.offset || te.Line != tc.line || te.Column != tc.column {
			t.Errorf("Render(%q): offset %d line %d column %d, want %d %d %d", tc.tmpl, te.Offset, te.Line, te.Column, tc.offset, tc.line, tc.column)
		}
		var e *template.Error
		if !errors.As(err, &e) {
			t.Errorf("Render(%q): no *Error inside %v", tc.tmpl, err)
		}
	}
}

func TestValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{{input.order.lines.1}}", `{"sku": "y", "qty": 1}`}, // an object stays an object
		{"  {{ input.none }}\n", `[]`},                        // whitespace around one template
		{"{{input.order.total}}", `12.50`},
		{"{{input.s}}", `"hi \"there\""`},
		{"input.order.total", `12.50`}, // a bare path
		{"review.output", `{"score": 0.93, "verdict": "accept"}`},
		{"input.m.0", `"zero"`},
		{"Order {{input.order.id}}", `"Order A1"`}, // text around a template: a string
		{"{{input.order.id}}{{input.order.id}}", `"A1A1"`},
		{"{{input.order.lines.1}}!", `"{\"sku\":\"y\",\"qty\":1}!"`},
		{"{{input.order.id}}}", `"A1}"`},
		{"hello world", `"hello world"`}, // plain text: a string
		{"<b>&", `"<b>&"`},               // no HTML escaping
		{"say \"hi\"\n\t", `"say \"hi\"\n\t"`},
		{" input.order.id", `" input.order.id"`}, // not a bare path: the validator does not read it as one
		{"input.order.id ", `"input.order.id "`},
		{"{ input.order.id }", `"{ input.order.id }"`},
		{"{{input.html}} and more", `"<b>&amp;</b> and more"`},
	} {
		got, err := template.Value(scope, tc.in)
		if err != nil {
			t.Errorf("Value(%q): %v", tc.in, err)
			continue
		}
		if string(got) != tc.want || !json.Valid(got) {
			t.Errorf("Value(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	const hint = `(segments of A-Z, a-z, 0-9, _ and -, such as input.x or step_id.output.x)`
	for _, tc := range []struct {
		in   string
		want errCase
	}{
		{"", errCase{"empty input: nothing to evaluate", template.ErrSyntax}},
		{"a..b", errCase{`"a..b" is not a dotted path ` + hint, template.ErrSyntax}},
		{"review", errCase{`"review" must read the step's output: write review.output or review.output.x`, template.ErrSyntax}},
		{"later.output", errCase{"later.output: step later has no output yet", template.ErrNoOutput}},
		{"input.customer", errCase{`input.customer: input has no key "customer"`, template.ErrNotFound}},
		{" {{later.output}} ", errCase{"column 2: later.output: step later has no output yet", template.ErrNoOutput}},
		{"{{input.x", errCase{`column 1: "{{" is not closed by "}}"`, template.ErrSyntax}},
		{"x {{input.customer}}", errCase{`column 3: input.customer: input has no key "customer"`, template.ErrNotFound}},
		{"{{input.s}} }}", errCase{`column 13: "}}" without a matching "{{"`, template.ErrSyntax}},
		{"}}", errCase{`column 1: "}}" without a matching "{{"`, template.ErrSyntax}},
		{"{{ }}", errCase{`column 1: empty template {{ }}: write {{input.x}} or {{step_id.output.x}}`, template.ErrSyntax}},
		{"{{a b}}", errCase{`column 1: "a b" is not a dotted path ` + hint, template.ErrSyntax}},
	} {
		got, err := template.Value(scope, tc.in)
		if got != nil {
			t.Errorf("Value(%q) = %s with an error", tc.in, got)
		}
		checkErr(t, "Value("+tc.in+")", err, tc.want)
	}
}

func TestPaths(t *testing.T) {
	got, err := template.Paths("a {{input.x}} {{ s.output.y }} {{input.x}} }{")
	if want := []string{"input.x", "s.output.y", "input.x"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Paths = %q, %v; want %q", got, err, want)
	}
	if got, err := template.Paths("plain {text}"); got != nil || err != nil {
		t.Errorf("Paths(plain) = %q, %v", got, err)
	}
	const hint = `(segments of A-Z, a-z, 0-9, _ and -, such as input.x or step_id.output.x)`
	for _, tc := range []struct {
		tmpl string
		want errCase
	}{
		{"{{a b}}", errCase{`column 1: "a b" is not a dotted path ` + hint, template.ErrSyntax}},
		{"x {{review}}", errCase{`column 3: "review" must read the step's output: write review.output or review.output.x`, template.ErrSyntax}},
		{"}}", errCase{`column 1: "}}" without a matching "{{"`, template.ErrSyntax}},
		{"{{input.x}} {{", errCase{`column 13: "{{" is not closed by "}}"`, template.ErrSyntax}},
	} {
		got, err := template.Paths(tc.tmpl)
		if got != nil {
			t.Errorf("Paths(%q) = %q with an error", tc.tmpl, got)
		}
		checkErr(t, "Paths("+tc.tmpl+")", err, tc.want)
	}
}

// A template without braces is returned as it is, without a copy.
func TestRenderPlainAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = template.Render(scope, "plain text, {one} brace") }); n != 0 {
		t.Errorf("Render of plain text: %v allocations, want 0", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 200 {
				if got, err := template.Render(scope, "{{input.order.id}} {{review.output.score}}"); err != nil || got != "A1 0.93" {
					t.Errorf("Render = %q, %v", got, err)
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
}

// A template may give a default, a JSON scalar after "??": it stands for the value when the
// step has no output yet (the first pass of a loop) or the path is missing from it; any other
// error stays an error.
func TestDefaults(t *testing.T) {
	scope := template.Scope{Input: json.RawMessage(`{"n":1}`), Outputs: map[string]json.RawMessage{"review": json.RawMessage(`{"notes":"shorter","score":3}`)}}
	for _, tc := range []struct{ tmpl, want, err string }{
		{`Feedback: {{evaluate.output.feedback ?? "none yet"}}`, "Feedback: none yet", ""},
		{`{{review.output.notes ?? "none"}}`, "shorter", ""},
		{`{{ review.output.missing ?? 0 }}`, "0", ""},
		{`{{review.output.score??null}}`, "3", ""},
		{`{{review.output.notes.x ?? "n"}}`, "", "is a string, so it has no key"},
		{`{{evaluate.output ?? none}}`, "", "is not a JSON value"},
		{`{{evaluate.output ?? [1]}}`, "", "is an array"},
		{`{{evaluate.output ??}}`, "", "is not a JSON value"},
		{`{{ ?? "x"}}`, "", "path"},
	} {
		got, err := template.Render(scope, tc.tmpl)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Render(%s) = %q, %v; want %q", tc.tmpl, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Render(%s) error %v, want one saying %q", tc.tmpl, err, tc.err)
		}
	}
	v, err := template.Value(scope, `{{ evaluate.output ?? {"x":1} }}`)
	if err == nil {
		t.Errorf("Value with an object default = %s, want an error (braces)", v)
	}
	v, err = template.Value(scope, ` {{ evaluate.output ?? 42 }} `)
	if err != nil || string(v) != "42" {
		t.Errorf("Value = %s, %v; want the default 42 as JSON", v, err)
	}
	refs, err := template.Refs(`{{a.output ?? "x"}} and {{input.n}}`)
	if err != nil || len(refs) != 2 || refs[0].Path != "a.output" || string(refs[0].Default) != `"x"` || refs[1].Default != nil {
		t.Errorf("Refs = %+v, %v", refs, err)
	}
	if paths, err := template.Paths(`{{a.output ?? "x"}}`); err != nil || len(paths) != 1 || paths[0] != "a.output" {
		t.Errorf("Paths = %v, %v; want the path without its default", paths, err)
	}
	for _, bad := range []string{"{{a.output ?? \"\xff\"}}", `{{a.output ?? 1e400}}`, `{{a.output ?? 'x'}}`, `{{a.output ?? "x" "y"}}`} {
		if _, err := template.Refs(bad); !errors.Is(err, template.ErrSyntax) {
			t.Errorf("Refs(%q) = %v, want a syntax error (the default must be one JSON scalar, in UTF-8, that decodes)", bad, err)
		}
	}
}

// A switch expr written as one whole template may give a default too; a bare path may not,
// and map items take none (a default is a scalar, never the array they need).
func TestPathDefaults(t *testing.T) {
	scope := template.Scope{Input: json.RawMessage(`{}`), Outputs: map[string]json.RawMessage{"judge": json.RawMessage(`{"verdict":"accept"}`)}}
	for _, tc := range []struct{ path, want, err string }{
		{`{{ judge.output.verdict ?? "retry" }}`, `"accept"`, ""},
		{`{{ judge.output.score ?? 0 }}`, `0`, ""},
		{`{{ critic.output.verdict ?? "none" }}`, `"none"`, ""},
		{`judge.output.verdict ?? "retry"`, "", "is not a dotted path"},
		{`{{ judge.output.verdict ?? }}`, "", "is not a JSON value"},
	} {
		got, err := template.Path(scope, tc.path)
		switch {
		case tc.err == "" && (err != nil || string(got) != tc.want):
			t.Errorf("Path(%s) = %s, %v; want %s", tc.path, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Path(%s) error %v, want one saying %q", tc.path, err, tc.err)
		}
	}
	if ref, err := template.PathRef(` {{judge.output.v ?? "x"}} `); err != nil || ref.Path != "judge.output.v" || string(ref.Default) != `"x"` {
		t.Errorf("PathRef = %+v, %v", ref, err)
	}
	if _, err := template.Items(scope, `{{ judge.output.list ?? null }}`, 3); !errors.Is(err, template.ErrSyntax) || !strings.Contains(err.Error(), "which items cannot take") {
		t.Errorf("Items with a default: %v, want a syntax error", err)
	}
}

// With Vars, names are read by themselves or into, a name with a dot is tried whole first, and
// a default stands for a name that is not set.
func TestRenderVars(t *testing.T) {
	vars := map[string]json.RawMessage{
		"topic":        json.RawMessage(`"bounded loops"`),
		"review":       json.RawMessage(`{"score": 7, "notes": ["short"]}`),
		"review.score": json.RawMessage(`9`),
	}
	for _, tc := range []struct{ tmpl, want, err string }{
		{`About {{topic}}.`, `About bounded loops.`, ""},
		{`{{review.notes.0}} {{review}}`, `short {"score":7,"notes":["short"]}`, ""},
		{`{{review.score}}`, `9`, ""}, // the whole name first
		{`[{{feedback ?? ""}}]`, `[]`, ""},
		{`{{review.missing ?? "none"}}`, `none`, ""},
		{`{{feedback}}`, "", "column 1: feedback: not set"},
		{`{{topic.x}}`, "", "topic.x"},
		{`{{a..b}}`, "", "not a name or a dotted path"},
		{`{{input.x}}`, "", "input.x: not set"}, // no run input here
	} {
		got, err := template.Render(template.Scope{Vars: vars}, tc.tmpl)
		if tc.err == "" && (err != nil || got != tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %q, %v; want %q, error with %q", tc.tmpl, got, err, tc.want, tc.err)
		}
	}
}
