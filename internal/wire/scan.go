package wire

import "unicode/utf8"

// A scanner of JSON for the fast decoders (fast.go): it finds where a value ends and checks its
// syntax on the way, in one pass over the message's own bytes, where the jsontext tokenizer
// copied them into a buffer of its own and kept a state machine for input that comes in
// pieces (a fiftieth of the 64 loops' CPU, BENCHMARKS.md). It accepts only valid JSON with
// valid UTF-8 in its strings, nested at most maxScanDepth deep; anything else is refused, and
// the caller decodes the whole body with encoding/json instead (FuzzScanValue holds it to
// encoding/json's json.Valid).

// maxScanDepth bounds the nesting the scanner follows; deeper values go to encoding/json.
const maxScanDepth = 64

// skipSpace returns the index of the first byte at or after i that is not JSON white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString returns the end of the string that starts with the quote at data[i], and whether
// it holds an escape.
func scanString(data []byte, i int) (end int, escaped, ok bool) {
	for j := i + 1; j < len(data); {
		switch c := data[j]; {
		case c == '"':
			return j + 1, escaped, true
		case c == '\\':
			escaped = true
			n, ok := escapeLen(data[j:])
			if !ok {
				return 0, false, false
			}
			j += n
		case c < 0x20:
			return 0, false, false
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(data[j:])
			if r == utf8.RuneError && size <= 1 {
				return 0, false, false
			}
			j += size
		}
	}
	return 0, false, false
}

// escapeLen returns the length of the escape b starts with (a backslash), and whether it is one.
func escapeLen(b []byte) (int, bool) {
	if len(b) < 2 {
		return 0, false
	}
	switch b[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, true
	case 'u':
		if len(b) < 6 {
			return 0, false
		}
		for _, c := range b[2:6] {
			if !isHex(c) {
				return 0, false
			}
		}
		return 6, true
	}
	return 0, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber returns the end of the number that starts at data[i].
func scanNumber(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && '1' <= data[i] && data[i] <= '9':
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	default:
		return 0, false
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return 0, false
		}
		for ; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return 0, false
		}
		for ; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	return i, true
}

// scanLiteral returns the end of lit at data[i].
func scanLiteral(data []byte, i int, lit string) (int, bool) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// scanName scans an object's member name at data[i] and the colon after it, and returns the
// index of the member's value (white space skipped).
func scanName(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return 0, false
	}
	end, _, ok := scanString(data, i)
	if !ok {
		return 0, false
	}
	i = skipSpace(data, end)
	if i >= len(data) || data[i] != ':' {
		return 0, false
	}
	return skipSpace(data, i+1), true
}

// scanValue returns the end of the JSON value that starts at data[i] (no white space before
// it), and whether it is one the scanner takes.
func scanValue(data []byte, i int) (int, bool) {
	var closers [maxScanDepth]byte // what closes each container open around i
	depth := 0
	for {
		// A value starts at i.
		if i >= len(data) {
			return 0, false
		}
		var ok bool
		switch c := data[i]; {
		case c == '{' || c == '[':
			if depth == maxScanDepth {
				return 0, false
			}
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == closer {
				i++
				ok = true
				break
			}
			closers[depth] = closer
			depth++
			if closer == '}' {
				if i, ok = scanName(data, i); !ok {
					return 0, false
				}
			}
			continue
		case c == '"':
			i, _, ok = scanString(data, i)
		case c == '-' || isDigit(c):
			i, ok = scanNumber(data, i)
		case c == 't':
			i, ok = scanLiteral(data, i, "true")
		case c == 'f':
			i, ok = scanLiteral(data, i, "false")
		case c == 'n':
			i, ok = scanLiteral(data, i, "null")
		}
		if !ok {
			return 0, false
		}
		// A value ended at i: close the containers it ends, or go on to the next member.
		for {
			if depth == 0 {
				return i, true
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return 0, false
			}
			if data[i] == closers[depth-1] {
				depth--
				i++
				continue
			}
			if data[i] != ',' {
				return 0, false
			}
			i = skipSpace(data, i+1)
			if closers[depth-1] == '}' {
				if i, ok = scanName(data, i); !ok {
					return 0, false
				}
			}
			break
		}
	}
}
