package builtin

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestHumanMessage(t *testing.T) {
	tests := []struct {
		raw, want, err string
	}{
		{raw: `"Refund it."`, want: "Refund it."},
		{raw: " \"tabs\\tand\\nlines\" \n", want: "tabs\tand\nlines"},
		{raw: `{ "order_id" : "O-1", "amount": 1.50 }`, want: `{"order_id":"O-1","amount":1.50}`},
		{raw: `[1, 2]`, want: `[1,2]`},
		{raw: `42`, want: `42`},
		{raw: `true`, want: `true`},
		{raw: `null`, want: goOn},
		{raw: `""`, want: goOn},
		{raw: `"  "`, want: goOn},
		{raw: ``, want: goOn},
		{raw: `{"a":`, err: `the human's input is not valid JSON: "{\"a\":"`},
		{raw: `"unterminated`, err: `the human's input is not valid JSON: "\"unterminated"`},
		{raw: `go on`, err: `the human's input is not valid JSON: "go on"`},
	}
	for _, tt := range tests {
		got, err := humanMessage(json.RawMessage(tt.raw))
		switch {
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("humanMessage(%q) = %q, %v; want the error %q", tt.raw, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("humanMessage(%q) = %q, %v; want %q", tt.raw, got, err, tt.want)
		}
	}
}

// FuzzHumanMessage: any JSON value is a message that is not blank; a string that is not blank is
// the message itself; anything else that is not JSON is an error.
func FuzzHumanMessage(f *testing.F) {
	for _, s := range []string{`"hi"`, `null`, `{"a":[1,{"b":null}]}`, ``, `  `, `"\u00e9\ud800"`, `1e400`, `{"a":`, "\"\xff\"", `"\n"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		msg, err := humanMessage(raw)
		trimmed := bytes.TrimSpace(raw)
		valid := len(trimmed) == 0 || json.Valid(trimmed)
		switch {
		case !valid && err == nil:
			t.Fatalf("humanMessage(%q) = %q, want an error: it is not JSON", raw, msg)
		case !valid:
			if !strings.HasPrefix(err.Error(), "the human's input is not valid JSON") {
				t.Fatalf("humanMessage(%q): error %q does not say what is wrong", raw, err)
			}
			return
		case err != nil:
			t.Fatalf("humanMessage(%q): %v, want a message", raw, err)
		case strings.TrimSpace(msg) == "":
			t.Fatalf("humanMessage(%q) = %q, a blank message", raw, msg)
		}
		var s string
		if json.Unmarshal(trimmed, &s) == nil && strings.TrimSpace(s) != "" && msg != s {
			t.Fatalf("humanMessage(%q) = %q, want the string itself %q", raw, msg, s)
		}
	})
}
