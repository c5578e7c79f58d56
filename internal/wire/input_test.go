package wire_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/wire"
)

func TestCheckJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name, in string
		max      int
		want     string // "" for accepted
	}{
		{"an object", `{"order":"O-104","lines":[1,2]}`, 0, ""},
		{"a string with UTF-8", `"café ☕"`, 0, ""},
		{"null", `null`, 0, ""},
		{"spaces around", " 1 \n", 0, ""},
		{"the deepest allowed", deep(wire.MaxDepth), 0, ""},
		{"too deep", deep(9999), 0, "nests deeper than 256 levels (byte 257)"},
		{"invalid UTF-8", "\"ab\xff\"", 0, "is not valid UTF-8 (byte 3)"},
		{"not JSON", `{"a":}`, 0, "is not JSON: invalid character '}' looking for beginning of value"},
		{"two values", `1 2`, 0, "is not one JSON value: text follows it (byte 2)"},
		{"empty", ``, 0, "is empty"},
		{"cut short", `{"a":[1`, 0, "is not JSON: it ends inside an array or object (byte 7)"},
		{"too large", `"0123456789"`, 8, "is 12 bytes, more than the 8 bytes allowed"},
		{"as large as allowed", `"0123456789"`, 12, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := wire.CheckJSON([]byte(tc.in), tc.max)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, wire.ErrBadInput) || !strings.HasSuffix(err.Error(), tc.want)):
				t.Errorf("error %v, want one ending %q", err, tc.want)
			}
		})
	}
}

// What CheckJSON accepts is one valid JSON value that encoding/json decodes, of valid UTF-8.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":null}]}`, `"x"`, `[[[]]]`, "\"\xff\"", `1 2`, ``, `{"a":}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if wire.CheckJSON(data, 0) != nil {
			return
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", data, err)
		}
		if !json.Valid(data) {
			t.Fatalf("accepted %q, which is not valid JSON", data)
		}
	})
}
