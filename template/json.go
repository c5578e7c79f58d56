package template

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A small JSON scanner over raw bytes: it validates a document once, then finds keys and indexes
// by skipping values, without decoding anything it does not return. Values are sub-slices of the
// document, so numbers keep their exact text.

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

var null = []byte("null")

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(d []byte, i int) int {
	for i < len(d) && isWS(d[i]) {
		i++
	}
	return i
}

// document validates d as one JSON value with optional surrounding whitespace and returns the
// value without the whitespace. Empty data is null. On failure it returns the offset of the
// problem.
func document(d []byte) ([]byte, int, bool) {
	i := skipWS(d, 0)
	if i == len(d) {
		if len(d) == 0 {
			return null, 0, true
		}
		return nil, i, false
	}
	end, ok := skipValue(d, i, 0)
	if !ok {
		return nil, end, false
	}
	if j := skipWS(d, end); j != len(d) {
		return nil, j, false
	}
	return d[i:end], 0, true
}

// skipValue returns the index just past the value that starts at d[i], or the offset of the
// problem and false.
func skipValue(d []byte, i, depth int) (int, bool) {
	if i >= len(d) {
		return i, false
	}
	switch c := d[i]; c {
	case '"':
		return skipString(d, i)
	case '{', '[':
		if depth >= maxDepth {
			return i, false
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = skipWS(d, i+1)
		if i < len(d) && d[i] == closing {
			return i + 1, true
		}
		for {
			var ok bool
			if c == '{' {
				if i >= len(d) || d[i] != '"' {
					return i, false
				}
				if i, ok = skipString(d, i); !ok {
					return i, false
				}
				i = skipWS(d, i)
				if i >= len(d) || d[i] != ':' {
					return i, false
				}
				i = skipWS(d, i+1)
			}
			if i, ok = skipValue(d, i, depth+1); !ok {
				return i, false
			}
			i = skipWS(d, i)
			if i >= len(d) {
				return i, false
			}
			if d[i] == closing {
				return i + 1, true
			}
			if d[i] != ',' {
				return i, false
			}
			i = skipWS(d, i+1)
		}
	case 't':
		return skipLiteral(d, i, "true")
	case 'f':
		return skipLiteral(d, i, "false")
	case 'n':
		return skipLiteral(d, i, "null")
	default:
		return skipNumber(d, i)
	}
}

func skipLiteral(d []byte, i int, lit string) (int, bool) {
	if len(d)-i >= len(lit) && string(d[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return i, false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// skipString skips the string that starts at d[i] == '"'.
func skipString(d []byte, i int) (int, bool) {
	for j := i + 1; j < len(d); {
		switch c := d[j]; {
		case c == '"':
			return j + 1, true
		case c == '\\':
			if j+1 >= len(d) {
				return j, false
			}
			switch d[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if len(d)-j < 6 || !isHex(d[j+2]) || !isHex(d[j+3]) || !isHex(d[j+4]) || !isHex(d[j+5]) {
					return j, false
				}
				j += 6
			default:
				return j, false
			}
		case c < 0x20:
			return j, false
		default:
			j++
		}
	}
	return len(d), false
}

// skipNumber skips -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func skipNumber(d []byte, i int) (int, bool) {
	start := i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && isDigit(d[i]):
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return start, false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return i, false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return i, false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	return i, true
}

// The functions below take values already validated by document.

// member returns the value of key in the object v; like encoding/json, the last of duplicate
// keys wins.
func member(v []byte, key string) ([]byte, bool) {
	var found []byte
	ok := false
	i := skipWS(v, 1)
	for i < len(v) && v[i] == '"' {
		ke, _ := skipString(v, i)
		match := keyEquals(v[i:ke], key)
		i = skipWS(v, skipWS(v, ke)+1) // past ':'
		ve, _ := skipValue(v, i, 0)
		if match {
			found, ok = v[i:ve], true
		}
		i = skipWS(v, ve)
		if i < len(v) && v[i] == ',' {
			i = skipWS(v, i+1)
		}
	}
	return found, ok
}

// keyEquals reports whether the JSON string raw (with its quotes) decodes to key.
func keyEquals(raw []byte, key string) bool {
	inner := raw[1 : len(raw)-1]
	if !hasByte(inner, '\\') {
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
	i := skipWS(v, 1)
	for i < len(v) && v[i] != ']' {
		e, _ := skipValue(v, i, 0)
		if n == idx {
			return v[i:e], 0, true
		}
		n++
		i = skipWS(v, e)
		if i < len(v) && v[i] == ',' {
			i = skipWS(v, i+1)
		}
	}
	return nil, n, false
}

// elements returns up to max items of the array v, and its length.
func elements(v []byte, max int) ([]json.RawMessage, int) {
	items := make([]json.RawMessage, 0, min(max, 16))
	n := 0
	i := skipWS(v, 1)
	for i < len(v) && v[i] != ']' {
		e, _ := skipValue(v, i, 0)
		if n < max {
			items = append(items, v[i:e:e])
		}
		n++
		i = skipWS(v, e)
		if i < len(v) && v[i] == ',' {
			i = skipWS(v, i+1)
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
		if !isDigit(seg[i]) {
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
		case isWS(c):
			continue
		}
		b.WriteByte(c)
	}
}

func hasWS(v []byte) bool {
	for _, c := range v {
		if isWS(c) {
			return true
		}
	}
	return false
}
