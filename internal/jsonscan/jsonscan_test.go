package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// The wire's fast decoders scan with UTF-8 checked and at most maxScanDepth levels (package
// template's scanning, without the check and 10,000 deep, is held to json.Valid by its FuzzJSON).
const maxScanDepth = 64

// scanWhole reports whether data is one value Value takes with UTF-8 checked, maxScanDepth
// deep, with white space around it.
func scanWhole(data []byte) bool {
	i := Space(data, 0)
	end, ok := Value(data, i, maxScanDepth, true)
	return ok && Space(data, end) == len(data)
}

func TestValue(t *testing.T) {
	deep := strings.Repeat("[", maxScanDepth) + strings.Repeat("]", maxScanDepth)
	for _, c := range []struct {
		json string
		want bool
	}{
		{`0`, true}, {`-0`, true}, {`-12.5e+3`, true}, {`1E9`, true}, {`0.0`, true},
		{`01`, false}, {`+1`, false}, {`1.`, false}, {`.5`, false}, {`1e`, false}, {`-`, false}, {`1e+`, false},
		{`"a"`, true}, {`""`, true}, {`"\n\t\"\\\/\b\f\r"`, true}, {`"\u00e9\uD83D\uDE00"`, true}, {`"é😀"`, true},
		{`"\x"`, false}, {`"\u12"`, false}, {`"\u12g4"`, false}, {"\"a\x01\"", false}, {"\"\xff\"", false}, {`"a`, false},
		{`true`, true}, {`false`, true}, {`null`, true}, {`tru`, false}, {`nul`, false}, {`True`, false},
		{`[]`, true}, {`{}`, true}, {` [ 1 , "a" , { } , [ ] ] `, true}, {`{"a":1,"a":2}`, true},
		{`{"a": {"b": [1, {"c": null}]}, "d": "e"}`, true},
		{`[1,]`, false}, {`[,1]`, false}, {`{"a":1,}`, false}, {`{"a" 1}`, false}, {`{a:1}`, false}, {`{"a":}`, false},
		{`[1 2]`, false}, {`{"a":1 "b":2}`, false}, {`[`, false}, {`{`, false}, {`]`, false}, {`[}`, false}, {`{]`, false},
		{`1 2`, false}, {``, false}, {`   `, false},
		{deep, true}, {"[" + deep + "]", false}, // deeper than the scanner follows: encoding/json's
	} {
		if got := scanWhole([]byte(c.json)); got != c.want {
			t.Errorf("scan %q = %v, want %v", c.json, got, c.want)
		}
	}
}

// FuzzValue: what Value takes with UTF-8 checked is valid JSON (json.Valid), and valid JSON it
// refuses is only invalid UTF-8 or nesting past the depth it was given.
func FuzzValue(f *testing.F) {
	for _, s := range []string{`{"run_id":"r","output":{"a":[1,2.5,"x",true,null]}}`, `[1,{"a":"\u00e9"}]`, `"\ud800"`, `-0.1e-7`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, valid := scanWhole(data), json.Valid(data)
		switch {
		case got && !valid:
			t.Fatalf("the scanner takes %q, which is not JSON", data)
		case !got && valid && utf8.Valid(data) && depth(data) <= maxScanDepth:
			t.Fatalf("the scanner refuses %q, valid JSON", data)
		}
	})
}

// depth is the deepest nesting of containers in data, valid JSON.
func depth(data []byte) int {
	var d, most int
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == '[' || c == '{'):
			d++
			most = max(most, d)
		case !inString && (c == ']' || c == '}'):
			d--
		}
	}
	return most
}
