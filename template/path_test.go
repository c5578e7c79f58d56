package template_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/reins-run/reins/template"
)

// scope is the data most tests read.
var scope = template.Scope{
	Input: json.RawMessage(` {"order": {"id": "A1", "total": 12.50, "big": 123456789012345678901234567890,
		"lines": [ {"sku": "x", "qty": 2}, {"sku": "y", "qty": 1} ], "note": null, "paid": true},
		"s": "hi \"there\"", "n": 1e400, "m": {"0": "zero"}, "xs": [1, {"a": 2}, "three"], "none": [],
		"obj": {}, "html": "<b>&amp;</b>", "esc": "caf\u00e9 \ud83d\ude00", "tmpl": "{{input.s}}",
		"spaced": {"a b": " x  y ", "q": "say \"hi\" }"}} `),
	Outputs: map[string]json.RawMessage{
		"review": json.RawMessage(`{"score": 0.93, "verdict": "accept"}`),
		"x":      json.RawMessage(`{"items": [1, 2]}`),
		"gen":    json.RawMessage(`"a draft"`),
		"empty":  nil,
		"bad":    json.RawMessage(`{"a":`),
		"dup":    json.RawMessage(`{"k": 1, "k": 2}`),
		"esc":    json.RawMessage(`{"\u006b": "v", "k\"": "quote"}`),
		"deep":   json.RawMessage(`{"a": [[{"b": [null, {"c": -0.5e-3}]}]]}`),
	},
}

// errCase is an expected error: its whole message and its kind.
type errCase struct {
	msg  string
	kind error
}

func checkErr(t *testing.T, what string, err error, want errCase) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %q", what, want.msg)
	}
	if err.Error() != want.msg {
		t.Errorf("%s: error\n got %q\nwant %q", what, err.Error(), want.msg)
	}
	if want.kind != nil && !errors.Is(err, want.kind) {
		t.Errorf("%s: error %q is not %v", what, err, want.kind)
	}
}

func TestPath(t *testing.T) {
	for _, tc := range []struct {
		path, want string
	}{
		{"input.order.id", `"A1"`},
		{"input.order.total", `12.50`},                        // the number as written
		{"input.order.big", `123456789012345678901234567890`}, // no float64 rounding
		{"input.n", `1e400`},                                  // beyond float64
		{"input.order.lines.1.sku", `"y"`},                    // numeric segments index arrays
		{"input.order.lines.0", `{"sku": "x", "qty": 2}`},     // the value as it is in the scope
		{"input.order.note", `null`},                          // null is a value
		{"input.order.paid", `true`},
		{"input.m.0", `"zero"`}, // on an object, "0" is a key
		{"input.none", `[]`},
		{"review.output", `{"score": 0.93, "verdict": "accept"}`},
		{"review.output.score", `0.93`},
		{"x.output.items.0", `1`},
		{"gen.output", `"a draft"`},
		{"empty.output", `null`}, // a nil output is null
		{"dup.output.k", `2`},    // the last duplicate, as encoding/json
		{"esc.output.k", `"v"`},  // keys are compared decoded
		{"deep.output.a.0.0.b.1.c", `-0.5e-3`},
		{"  {{ review.output.verdict }}  ", `"accept"`}, // the whole-template form of expr/items
		{"{{input.order.id}}", `"A1"`},
		{"\tinput.order.id\n", `"A1"`},
	} {
		got, err := template.Path(scope, tc.path)
		if err != nil {
			t.Errorf("Path(%q): %v", tc.path, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("Path(%q) = %s, want %s", tc.path, got, tc.want)
		}
	}
	got, err := template.Path(scope, "input")
	if err != nil || !json.Valid(got) || got[0] != '{' || got[len(got)-1] != '}' {
		t.Errorf("Path(input) = %q, %v: want the whole input without surrounding whitespace", got, err)
	}
	if got, err := template.Path(template.Scope{}, "input"); err != nil || string(got) != "null" {
		t.Errorf("Path(input) with no input = %s, %v; want null", got, err)
	}
}

func TestPathErrors(t *testing.T) {
	const hint = `(segments of A-Z, a-z, 0-9, _ and -, such as input.x or step_id.output.x)`
	for _, tc := range []struct {
		path string
		want errCase
	}{
		{"input.customer.id", errCase{`input.customer.id: input has no key "customer"`, template.ErrNotFound}},
		{"input.order.zip", errCase{`input.order.zip: input.order has no key "zip"`, template.ErrNotFound}},
		{"later.output.score", errCase{`later.output.score: step later has no output yet`, template.ErrNoOutput}},
		{"later.output", errCase{`later.output: step later has no output yet`, template.ErrNoOutput}},
		{"x.output.items.3", errCase{`x.output.items.3: index 3 out of range (length 2)`, template.ErrNotFound}},
		{"x.output.items.2", errCase{`x.output.items.2: index 2 out of range (length 2)`, template.ErrNotFound}},
		{"input.none.0", errCase{`input.none.0: index 0 out of range (length 0)`, template.ErrNotFound}},
		{"x.output.items.99999999999999999999999", errCase{`x.output.items.99999999999999999999999: index 99999999999999999999999 out of range (length 2)`, template.ErrNotFound}},
		{"x.output.items.01", errCase{`x.output.items.01: x.output.items is an array and "01" is not an index (0, 1, 2, … without leading zeros)`, template.ErrType}},
		{"x.output.items.-1", errCase{`x.output.items.-1: x.output.items is an array and "-1" is not an index (0, 1, 2, … without leading zeros)`, template.ErrType}},
		{"x.output.items.first", errCase{`x.output.items.first: x.output.items is an array and "first" is not an index (0, 1, 2, … without leading zeros)`, template.ErrType}},
		{"input.order.id.x", errCase{`input.order.id.x: input.order.id is a string, so it has no key "x"`, template.ErrType}},
		{"input.order.total.x", errCase{`input.order.total.x: input.order.total is a number, so it has no key "x"`, template.ErrType}},
		{"input.order.paid.x", errCase{`input.order.paid.x: input.order.paid is a boolean, so it has no key "x"`, template.ErrType}},
		{"input.order.note.x", errCase{`input.order.note.x: input.order.note is null, so it has no key "x"`, template.ErrType}},
		{"empty.output.x", errCase{`empty.output.x: empty.output is null, so it has no key "x"`, template.ErrType}},
		{"gen.output.text", errCase{`gen.output.text: gen.output is a string, so it has no key "text"`, template.ErrType}},
		{"bad.output", errCase{`bad.output: the output of step bad is not valid JSON (at byte 5)`, template.ErrInvalidJSON}},
		{"", errCase{`empty path: write input.x or step_id.output.x`, template.ErrSyntax}},
		{"   ", errCase{`empty path: write input.x or step_id.output.x`, template.ErrSyntax}},
		{"{{ }}", errCase{`empty path: write input.x or step_id.output.x`, template.ErrSyntax}},
		{"input..x", errCase{`"input..x" is not a dotted path ` + hint, template.ErrSyntax}},
		{"input.", errCase{`"input." is not a dotted path ` + hint, template.ErrSyntax}},
		{".input", errCase{`".input" is not a dotted path ` + hint, template.ErrSyntax}},
		{"input.a b", errCase{`"input.a b" is not a dotted path ` + hint, template.ErrSyntax}},
		{"input.é", errCase{`"input.é" is not a dotted path ` + hint, template.ErrSyntax}},
		{"{{input.x}}x", errCase{`"{{input.x}}x" is not a dotted path ` + hint, template.ErrSyntax}},
		{"{{ {input} }}", errCase{`"{{ {input} }}" is not a dotted path ` + hint, template.ErrSyntax}},
		{"{{input.x", errCase{`"{{input.x" is not a dotted path ` + hint, template.ErrSyntax}},
		{"review", errCase{`"review" must read the step's output: write review.output or review.output.x`, template.ErrSyntax}},
		{"review.score", errCase{`"review.score" must read the step's output: write review.output or review.output.x`, template.ErrSyntax}},
	} {
		_, err := template.Path(scope, tc.path)
		checkErr(t, "Path("+tc.path+")", err, tc.want)
		var e *template.Error
		if !errors.As(err, &e) {
			t.Errorf("Path(%q): %T is not *template.Error", tc.path, err)
		}
	}

	bad := template.Scope{Input: json.RawMessage(`{"a": 1} x`)}
	_, err := template.Path(bad, "input.a")
	checkErr(t, "invalid input", err, errCase{`input.a: the run input is not valid JSON (at byte 9)`, template.ErrInvalidJSON})
	_, err = template.Path(template.Scope{Input: json.RawMessage("  ")}, "input")
	checkErr(t, "blank input", err, errCase{`input: the run input is not valid JSON (at byte 2)`, template.ErrInvalidJSON})
}

func TestRelative(t *testing.T) {
	out := json.RawMessage(`{"verdict": "retry", "result": {"label": "ok", "list": ["a", 7]}}`)
	for _, tc := range []struct{ path, want string }{
		{"verdict", `"retry"`},
		{"result.label", `"ok"`},
		{"result.list.1", `7`},
		{"result", `{"label": "ok", "list": ["a", 7]}`},
	} {
		got, err := template.Relative(out, tc.path)
		if err != nil || string(got) != tc.want {
			t.Errorf("Relative(%q) = %s, %v; want %s", tc.path, got, err, tc.want)
		}
	}
	if got, err := template.Relative(json.RawMessage(`["a", "b"]`), "1"); err != nil || string(got) != `"b"` {
		t.Errorf("Relative into an array = %s, %v", got, err)
	}

	const hint = `(segments of A-Z, a-z, 0-9, _ and -, such as verdict or result.label)`
	for _, tc := range []struct {
		out  json.RawMessage
		path string
		want errCase
	}{
		{out, "missing", errCase{`missing: output has no key "missing"`, template.ErrNotFound}},
		{out, "result.nope", errCase{`result.nope: output.result has no key "nope"`, template.ErrNotFound}},
		{out, "result.list.2", errCase{`result.list.2: index 2 out of range (length 2)`, template.ErrNotFound}},
		{out, "verdict.x", errCase{`verdict.x: output.verdict is a string, so it has no key "x"`, template.ErrType}},
		{nil, "verdict", errCase{`verdict: output is null, so it has no key "verdict"`, template.ErrType}},
		{json.RawMessage(`"accept"`), "verdict", errCase{`verdict: output is a string, so it has no key "verdict"`, template.ErrType}},
		{json.RawMessage(`{"verdict": }`), "verdict", errCase{`verdict: the output is not valid JSON (at byte 12)`, template.ErrInvalidJSON}},
		{out, "", errCase{`empty path: write the key of the output that holds the label, such as verdict or result.label`, template.ErrSyntax}},
		{out, "result..label", errCase{`"result..label" is not a dotted path ` + hint, template.ErrSyntax}},
		{out, "{{verdict}}", errCase{`"{{verdict}}" is not a dotted path ` + hint, template.ErrSyntax}},
		{out, " verdict", errCase{`" verdict" is not a dotted path ` + hint, template.ErrSyntax}},
	} {
		_, err := template.Relative(tc.out, tc.path)
		checkErr(t, "Relative("+string(tc.out)+", "+tc.path+")", err, tc.want)
	}
}

func TestLabel(t *testing.T) {
	for _, tc := range []struct{ v, want string }{
		{`"accept"`, "accept"},
		{` "retry" `, "retry"},
		{`"caf\u00e9 \"x\""`, `café "x"`},
		{`""`, ""},
		{`true`, "true"},
		{`false`, "false"},
		{`12.50`, "12.50"},
		{`-1e3`, "-1e3"},
		{`123456789012345678901234567890`, "123456789012345678901234567890"},
		{`0`, "0"},
	} {
		got, err := template.Label(json.RawMessage(tc.v))
		if err != nil || got != tc.want {
			t.Errorf("Label(%s) = %q, %v; want %q", tc.v, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		v    string
		want errCase
	}{
		{`null`, errCase{"a label must be a string, number or boolean, got null", template.ErrType}},
		{``, errCase{"a label must be a string, number or boolean, got nothing", template.ErrType}},
		{`{"a": 1}`, errCase{"a label must be a string, number or boolean, got an object", template.ErrType}},
		{`[1]`, errCase{"a label must be a string, number or boolean, got an array", template.ErrType}},
		{`{"a":`, errCase{"a label must be a string, number or boolean, got invalid JSON (at byte 5)", template.ErrInvalidJSON}},
		{`"a" "b"`, errCase{"a label must be a string, number or boolean, got invalid JSON (at byte 4)", template.ErrInvalidJSON}},
		{`accept`, errCase{"a label must be a string, number or boolean, got invalid JSON (at byte 0)", template.ErrInvalidJSON}},
		{`01`, errCase{"a label must be a string, number or boolean, got invalid JSON (at byte 1)", template.ErrInvalidJSON}},
	} {
		_, err := template.Label(json.RawMessage(tc.v))
		checkErr(t, "Label("+tc.v+")", err, tc.want)
	}
}

// A label read through a path, as the engine does for branch and switch.
func TestLabelOfPath(t *testing.T) {
	v, err := template.Relative(scope.Outputs["review"], "verdict")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := template.Label(v); err != nil || l != "accept" {
		t.Fatalf("label = %q, %v", l, err)
	}
	v, err = template.Path(scope, "input.order.paid")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := template.Label(v); err != nil || l != "true" {
		t.Fatalf("label = %q, %v", l, err)
	}
}

func TestItems(t *testing.T) {
	for _, tc := range []struct {
		path string
		max  int
		want []string
	}{
		{"input.xs", 3, []string{`1`, `{"a": 2}`, `"three"`}},
		{" {{ input.xs }} ", 100, []string{`1`, `{"a": 2}`, `"three"`}},
		{"x.output.items", 2, []string{`1`, `2`}},
		{"input.none", 1, []string{}},
	} {
		got, err := template.Items(scope, tc.path, tc.max)
		if err != nil {
			t.Errorf("Items(%q, %d): %v", tc.path, tc.max, err)
			continue
		}
		if got == nil || len(got) != len(tc.want) {
			t.Errorf("Items(%q, %d) = %q, want %q", tc.path, tc.max, got, tc.want)
			continue
		}
		for i := range got {
			if string(got[i]) != tc.want[i] {
				t.Errorf("Items(%q, %d)[%d] = %s, want %s", tc.path, tc.max, i, got[i], tc.want[i])
			}
		}
	}
	for _, tc := range []struct {
		path string
		max  int
		want errCase
	}{
		{"input.xs", 2, errCase{"input.xs: 3 items, more than the bound of 2", template.ErrTooMany}},
		{"{{input.xs}}", 1, errCase{"input.xs: 3 items, more than the bound of 1", template.ErrTooMany}},
		{"input.obj", 1, errCase{"input.obj: the items must be an array, got an object", template.ErrType}},
		{"input.order.note", 1, errCase{"input.order.note: the items must be an array, got null", template.ErrType}},
		{"input.s", 1, errCase{"input.s: the items must be an array, got a string", template.ErrType}},
		{"input.missing", 1, errCase{`input.missing: input has no key "missing"`, template.ErrNotFound}},
		{"later.output.list", 1, errCase{`later.output.list: step later has no output yet`, template.ErrNoOutput}},
		{"input.xs", 0, errCase{"input.xs: the bound on the items must be positive, got 0", nil}},
		{"input.xs", -1, errCase{"input.xs: the bound on the items must be positive, got -1", nil}},
	} {
		got, err := template.Items(scope, tc.path, tc.max)
		if got != nil {
			t.Errorf("Items(%q, %d) = %q with an error", tc.path, tc.max, got)
		}
		checkErr(t, "Items("+tc.path+")", err, tc.want)
	}
}

// Callers tell errors apart by their fields and kinds, not by their text.
func TestErrorFields(t *testing.T) {
	for _, tc := range []struct {
		path, errPath, reason string
		kind                  error
	}{
		{" {{ later.output.x }} ", "later.output.x", "step later has no output yet", template.ErrNoOutput},
		{"input.a b", "input.a b", `"input.a b" is not a dotted path (segments of A-Z, a-z, 0-9, _ and -, such as input.x or step_id.output.x)`, template.ErrSyntax},
		{"input.order.zip", "input.order.zip", `input.order has no key "zip"`, template.ErrNotFound},
	} {
		_, err := template.Path(scope, tc.path)
		var e *template.Error
		if !errors.As(err, &e) {
			t.Fatalf("Path(%q): %T", tc.path, err)
		}
		if e.Path != tc.errPath || e.Reason != tc.reason || e.Kind != tc.kind {
			t.Errorf("Path(%q): %+v, want {%s %s %v}", tc.path, *e, tc.errPath, tc.reason, tc.kind)
		}
	}
	_, err := template.Render(scope, "ab\ncd {{later.output}}")
	var te *template.TemplateError
	if !errors.As(err, &te) || te.Offset != 6 || te.Line != 2 || te.Column != 4 || !errors.Is(err, template.ErrNoOutput) {
		t.Errorf("Render: %#v", err)
	}
	// A TemplateError built by hand reads as one built here.
	hand := &template.TemplateError{Offset: 9, Line: 2, Column: 4, Err: te.Err}
	if hand.Error() != err.Error() {
		t.Errorf("hand-built %q, want %q", hand.Error(), err.Error())
	}
}
