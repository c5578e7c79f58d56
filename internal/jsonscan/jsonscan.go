// Package jsonscan finds where JSON values end in raw bytes, checking their syntax on the way,
// without decoding anything: templates validate a document once and then find keys and
// indexes by skipping values (package template), and the wire's fast decoders read the members
// of a task or an answer in one pass over the message's bytes (internal/wire).
//
// It owns that scanning and nothing else: it imports no package of reins. On a failure each
// function returns the offset of the problem.
package jsonscan

import "unicode/utf8"

// IsSpace reports whether c is JSON white space.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// IsDigit reports whether c is a decimal digit.
func IsDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return IsDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// Space returns the index of the first byte at or after i that is not white space.
func Space(d []byte, i int) int {
	for i < len(d) && IsSpace(d[i]) {
		i++
	}
	return i
}

// Value returns the index just past the value that starts at d[i] (no white space before it),
// nested at most maxDepth deep; with checkUTF8, a string that is not valid UTF-8 fails it
// (encoding/json takes such strings, and json.Valid with it).
func Value(d []byte, i, maxDepth int, checkUTF8 bool) (int, bool) {
	return value(d, i, maxDepth, checkUTF8)
}

// value is Value with depth levels left.
func value(d []byte, i, depth int, checkUTF8 bool) (int, bool) {
	if i >= len(d) {
		return i, false
	}
	switch c := d[i]; c {
	case '"':
		end, _, ok := String(d, i, checkUTF8)
		return end, ok
	case '{', '[':
		if depth <= 0 {
			return i, false
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = Space(d, i+1)
		if i < len(d) && d[i] == closing {
			return i + 1, true
		}
		for {
			var ok bool
			if c == '{' {
				if i >= len(d) || d[i] != '"' {
					return i, false
				}
				if i, _, ok = String(d, i, checkUTF8); !ok {
					return i, false
				}
				i = Space(d, i)
				if i >= len(d) || d[i] != ':' {
					return i, false
				}
				i = Space(d, i+1)
			}
			if i, ok = value(d, i, depth-1, checkUTF8); !ok {
				return i, false
			}
			i = Space(d, i)
			if i >= len(d) {
				return i, false
			}
			if d[i] == closing {
				return i + 1, true
			}
			if d[i] != ',' {
				return i, false
			}
			i = Space(d, i+1)
		}
	case 't':
		return Literal(d, i, "true")
	case 'f':
		return Literal(d, i, "false")
	case 'n':
		return Literal(d, i, "null")
	default:
		return Number(d, i)
	}
}

// Literal returns the index just past lit at d[i].
func Literal(d []byte, i int, lit string) (int, bool) {
	if len(d)-i >= len(lit) && string(d[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return i, false
}

// String returns the index just past the string that starts at d[i] == '"', and whether it
// holds an escape; with checkUTF8, invalid UTF-8 in it fails it.
func String(d []byte, i int, checkUTF8 bool) (end int, escaped, ok bool) {
	for j := i + 1; j < len(d); {
		switch c := d[j]; {
		case c == '"':
			return j + 1, escaped, true
		case c == '\\':
			if j+1 >= len(d) {
				return j, escaped, false
			}
			escaped = true
			switch d[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if len(d)-j < 6 || !isHex(d[j+2]) || !isHex(d[j+3]) || !isHex(d[j+4]) || !isHex(d[j+5]) {
					return j, escaped, false
				}
				j += 6
			default:
				return j, escaped, false
			}
		case c < 0x20:
			return j, escaped, false
		case c >= utf8.RuneSelf && checkUTF8:
			r, n := utf8.DecodeRune(d[j:])
			if r == utf8.RuneError && n <= 1 {
				return j, escaped, false
			}
			j += n
		default:
			j++
		}
	}
	return len(d), escaped, false
}

// Number returns the index just past the number -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// at d[i].
func Number(d []byte, i int) (int, bool) {
	start := i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && IsDigit(d[i]):
		for i < len(d) && IsDigit(d[i]) {
			i++
		}
	default:
		return start, false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !IsDigit(d[i]) {
			return i, false
		}
		for i < len(d) && IsDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !IsDigit(d[i]) {
			return i, false
		}
		for i < len(d) && IsDigit(d[i]) {
			i++
		}
	}
	return i, true
}
