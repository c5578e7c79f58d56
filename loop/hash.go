package loop

import (
	"encoding/json"
	"slices"
	"strconv"
)

// argsHash identifies a call by its tool and its arguments in canonical form: object keys sorted,
// whitespace ignored. Two proposals with the same hash are the same call for the repeated-call
// budget, whatever order the model wrote the keys in.
func argsHash(name string, parsed any) uint64 {
	h := fnv64a(offset64)
	h.WriteString(name)
	h.WriteString("\x00")
	hashValue(&h, parsed)
	return uint64(h)
}

// fnv64a is FNV-1a over strings, written out so that hashing allocates nothing.
type fnv64a uint64

const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

func (h *fnv64a) WriteString(s string) {
	for i := 0; i < len(s); i++ {
		*h ^= fnv64a(s[i])
		*h *= prime64
	}
}

func hashValue(h *fnv64a, v any) {
	switch v := v.(type) {
	case nil:
		h.WriteString("n")
	case bool:
		if v {
			h.WriteString("t")
		} else {
			h.WriteString("f")
		}
	case json.Number:
		h.WriteString("#")
		h.WriteString(normalizeNumber(v))
	case float64:
		h.WriteString("#")
		h.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	case string:
		hashString(h, v)
	case []any:
		h.WriteString("[")
		for _, e := range v {
			hashValue(h, e)
			h.WriteString(",")
		}
		h.WriteString("]")
	case map[string]any:
		h.WriteString("{")
		if len(v) == 1 { // the common case needs no sorting
			for k, e := range v {
				hashString(h, k)
				hashValue(h, e)
			}
			h.WriteString("}")
			return
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			hashString(h, k)
			hashValue(h, v[k])
		}
		h.WriteString("}")
	}
}

// hashString writes a length-prefixed string, so that no two different sequences of strings hash
// the same input. It takes a string, not an any, to avoid boxing the value.
func hashString(h *fnv64a, s string) {
	var buf [20]byte
	h.WriteString("s")
	h.WriteString(string(strconv.AppendInt(buf[:0], int64(len(s)), 10)))
	h.WriteString(":")
	h.WriteString(s)
}

// normalizeNumber makes 1, 1.0 and 1e0 the same number.
func normalizeNumber(n json.Number) string {
	if f, err := n.Float64(); err == nil {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return n.String()
}
