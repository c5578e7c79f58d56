package workflow

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/internal/suggest"
)

// decoder turns the generic decoding of a TOML document (map[string]any, as go-toml produces it)
// into a Definition, collecting every problem it meets with the line of its key.
type decoder struct {
	src      *Source
	offsets  map[string]int // byte offset of each key, to order the keys of a table
	problems Problems
}

// add records a problem about key.
func (d *decoder) add(code Code, key, format string, args ...any) {
	d.problems = append(d.problems, Problem{
		Code:    code,
		File:    d.src.File,
		Line:    d.src.Line(key),
		Key:     key,
		Message: fmt.Sprintf(format, args...),
	})
}

// unknownKey reports key (named name, found where) that is none of known.
func (d *decoder) unknownKey(key, name, where string, known []string) {
	msg := fmt.Sprintf("unknown key %s %s (it takes: %s)", keyName(name), where, strings.Join(known, ", "))
	if s := suggest.Closest(name, known); s != "" {
		msg += "; did you mean " + s + "?"
	}
	d.add(EUnknownKey, key, "%s", msg)
}

// keys returns the keys of the table at path in the order of the file (a key without a known
// position, then by name), so that problems come out in a stable, readable order.
func (d *decoder) keys(path string, m map[string]any) []string {
	keys := make([]string, 0, len(m))
	at := make(map[string]int, len(m))
	for k := range m {
		keys = append(keys, k)
		if o, ok := d.offsets[joinKey(path, k)]; ok {
			at[k] = o
		} else {
			at[k] = -1
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if at[keys[i]] != at[keys[j]] {
			return at[keys[i]] < at[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// kindOf names the TOML type of a decoded value, with its article.
func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time, toml.LocalDateTime:
		return "a date-time"
	case toml.LocalDate:
		return "a date"
	case toml.LocalTime:
		return "a time"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

func (d *decoder) str(key string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		d.add(EType, key, "expected a string, got %s", kindOf(v))
	}
	return s, ok
}

func (d *decoder) boolean(key string, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		d.add(EType, key, "expected a boolean, got %s", kindOf(v))
	}
	return b, ok
}

func (d *decoder) int64(key string, v any) (int64, bool) {
	n, ok := v.(int64)
	if !ok {
		d.add(EType, key, "expected an integer, got %s", kindOf(v))
	}
	return n, ok
}

func (d *decoder) integer(key string, v any) (int, bool) {
	n, ok := d.int64(key, v)
	if !ok {
		return 0, false
	}
	if int64(int(n)) != n {
		d.add(EType, key, "expected an integer, got %d, which is out of range", n)
		return 0, false
	}
	return int(n), true
}

// number accepts a float or an integer.
func (d *decoder) number(key string, v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			d.add(EType, key, "expected a number, got %v", x)
			return 0, false
		}
		return x, true
	case int64:
		return float64(x), true
	}
	d.add(EType, key, "expected a number, got %s", kindOf(v))
	return 0, false
}

// duration decodes a Go duration string ("30s", "5m", "1h30m"); negative durations are
// rejected.
func (d *decoder) duration(key string, v any) (clock.Duration, bool) {
	s, ok := v.(string)
	if !ok {
		d.add(EType, key, `expected a duration string such as "30s", got %s`, kindOf(v))
		return 0, false
	}
	var dur clock.Duration
	if err := dur.UnmarshalText([]byte(s)); err != nil {
		d.add(EBadDuration, key, "%s", err.Error())
		return 0, false
	}
	return dur, true
}

// table expects a table; what describes the expected shape in the message.
func (d *decoder) table(key string, v any, what string) (map[string]any, bool) {
	t, ok := v.(map[string]any)
	if !ok {
		d.add(EType, key, "expected %s, got %s", what, kindOf(v))
	}
	return t, ok
}

// tableArray expects an array (of tables, checked item by item by the caller); header is how
// the file writes one item ("[[steps]]").
func (d *decoder) tableArray(key string, v any, header string) ([]any, bool) {
	items, ok := v.([]any)
	if !ok {
		d.add(EType, key, "expected an array of tables (%s), got %s", header, kindOf(v))
	}
	return items, ok
}

// strs expects an array of strings; an item of another type is reported and left empty.
func (d *decoder) strs(key string, v any) ([]string, bool) {
	items, ok := v.([]any)
	if !ok {
		d.add(EType, key, "expected an array of strings, got %s", kindOf(v))
		return nil, false
	}
	out := make([]string, len(items))
	all := true
	for i, item := range items {
		s, ok := d.str(indexKey(key, i), item)
		out[i] = s
		all = all && ok
	}
	return out, all
}

// tableJSON expects a table (a JSON Schema, say) and returns it as JSON.
func (d *decoder) tableJSON(key string, v any) (json.RawMessage, bool) {
	if _, ok := d.table(key, v, "a table"); !ok {
		return nil, false
	}
	return d.rawJSON(key, v)
}

// tablesJSON expects an array of tables (mocked results, scripted turns) and returns it as JSON.
func (d *decoder) tablesJSON(key string, v any) (json.RawMessage, bool) {
	items, ok := d.tableArray(key, v, "[ { ... }, ... ]")
	if !ok {
		return nil, false
	}
	all := true
	for i, item := range items {
		if _, ok := d.table(indexKey(key, i), item, "a table"); !ok {
			all = false
		}
	}
	if !all {
		return nil, false
	}
	return d.rawJSON(key, v)
}

// rawJSON marshals a decoded TOML value as JSON. Dates and times become RFC 3339 strings; nan
// and inf, which JSON cannot hold, are reported.
func (d *decoder) rawJSON(key string, v any) (json.RawMessage, bool) {
	j, ok := d.jsonValue(key, v)
	if !ok {
		return nil, false
	}
	b, err := json.Marshal(j)
	if err != nil {
		d.add(EType, key, "cannot be written as JSON: %v", err)
		return nil, false
	}
	return b, true
}

// jsonValue converts a decoded TOML value into one encoding/json marshals faithfully.
func (d *decoder) jsonValue(key string, v any) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		all := true
		for _, k := range d.keys(key, x) {
			j, ok := d.jsonValue(joinKey(key, k), x[k])
			out[k] = j
			all = all && ok
		}
		return out, all
	case []any:
		out := make([]any, len(x))
		all := true
		for i, item := range x {
			j, ok := d.jsonValue(indexKey(key, i), item)
			out[i] = j
			all = all && ok
		}
		return out, all
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			d.add(EType, key, "expected a JSON number, got %v (JSON has no nan or inf)", x)
			return nil, false
		}
		return x, true
	case string, int64, bool:
		return x, true
	case time.Time:
		return x.Format(time.RFC3339Nano), true
	case toml.LocalDate:
		return x.String(), true
	case toml.LocalTime:
		return x.String(), true
	case toml.LocalDateTime:
		return x.String(), true
	}
	d.add(EType, key, "expected a JSON value, got %s", kindOf(v))
	return nil, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
