package template

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/reins-run/reins/internal/jsonscan"
)

// JSON over raw bytes: a document is validated once (internal/jsonscan), then keys and indexes
// are found by skipping values, without decoding anything that is not returned. Values are
// sub-slices of the document, so numbers keep their exact text.

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

var null = []byte("null")

// document validates d as one JSON value with optional surrounding whitespace and returns the
// value without the whitespace. Empty data is null. On failure it returns the offset of the
// problem.
func document(d []byte) ([]byte, int, bool) {
	i := jsonscan.Space(d, 0)
	if i == len(d) {
		if len(d) == 0 {
			return null, 0, true
		}
		return nil, i, false
	}
	end, ok := jsonscan.Value(d, i, maxDepth, false)
	if !ok {
		return nil, end, false
	}
	if j := jsonscan.Space(d, end); j != len(d) {
		return nil, j, false
	}
	return d[i:end], 0, true
}

// The functions below take values already validated by document.

// member returns the value of key in the object v; like encoding/json, the last of duplicate
// keys wins.
func member(v []byte, key string) ([]byte, bool) {
	var found []byte
	ok := false
	i := jsonscan.Space(v, 1)
	for i < len(v) && v[i] == '"' {
		ke, _, _ := jsonscan.String(v, i, false)
		match := keyEquals(v[i:ke], key)
		i = jsonscan.Space(v, jsonscan.Space(v, ke)+1) // past ':'
		ve, _ := jsonscan.Value(v, i, maxDepth, false)
		if match {
			found, ok = v[i:ve], true
		}
		i = jsonscan.Space(v, ve)
		if i < len(v) && v[i] == ',' {
			i = jsonscan.Space(v, i+1)
		}
	}
	return found, ok
}

// keyEquals reports whether the JSON string raw (with its quotes) decodes to key.
func keyEquals(raw []byte, key string) bool {
	inner := raw[1 : len(raw)-1]
	if !hasByte(inner, '\\') && utf8.Valid(inner) { // encoding/json decodes invalid UTF-8 as U+FFFD
		return string(inner) == key
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == key
}

func hasByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// element returns item idx of the array v, or, when there is none, false and the length.
func element(v []byte, idx int) ([]byte, int, bool) {
	n := 0
	i := jsonscan.Space(v, 1)
	for i < len(v) && v[i] != ']' {
		e, _ := jsonscan.Value(v, i, maxDepth, false)
		if n == idx {
			return v[i:e], 0, true
		}
		n++
		i = jsonscan.Space(v, e)
		if i < len(v) && v[i] == ',' {
			i = jsonscan.Space(v, i+1)
		}
	}
	return nil, n, false
}

// elements returns up to max items of the array v, and its length.
func elements(v []byte, max int) ([]json.RawMessage, int) {
	items := make([]json.RawMessage, 0, min(max, 16))
	n := 0
	i := jsonscan.Space(v, 1)
	for i < len(v) && v[i] != ']' {
		e, _ := jsonscan.Value(v, i, maxDepth, false)
		if n < max {
			items = append(items, v[i:e:e])
		}
		n++
		i = jsonscan.Space(v, e)
		if i < len(v) && v[i] == ',' {
			i = jsonscan.Space(v, i+1)
		}
	}
	return items, n
}

// index parses an array index: decimal digits without leading zeros. huge says it is well
// written but does not fit in an int (so it is out of range of any array).
func index(seg string) (idx int, ok, huge bool) {
	if seg == "" || seg[0] == '0' && len(seg) > 1 {
		return 0, false, false
	}
	for i := 0; i < len(seg); i++ {
		if !jsonscan.IsDigit(seg[i]) {
			return 0, false, false
		}
	}
	n, err := strconv.Atoi(seg)
	if err != nil {
		return 0, true, true
	}
	return n, true, false
}

// kind names the type of the value v, for messages.
func kind(v []byte) string {
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// appendString writes the JSON string v decoded.
func appendString(b *strings.Builder, v []byte) {
	inner := v[1 : len(v)-1]
	if !hasByte(inner, '\\') && utf8.Valid(inner) {
		b.Write(inner)
		return
	}
	var s string
	_ = json.Unmarshal(v, &s) // v is valid: this cannot fail
	b.WriteString(s)
}

// appendCompact writes the JSON value v without insignificant whitespace.
func appendCompact(b *strings.Builder, v []byte) {
	if !hasWS(v) {
		b.Write(v)
		return
	}
	inString := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case inString:
			if c == '\\' {
				b.WriteByte(c)
				i++
				c = v[i]
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case jsonscan.IsSpace(c):
			continue
		}
		b.WriteByte(c)
	}
}

func hasWS(v []byte) bool {
	for _, c := range v {
		if jsonscan.IsSpace(c) {
			return true
		}
	}
	return false
}
