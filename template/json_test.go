package template

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The scanner must agree with encoding/json on what is valid JSON and on what a key, an index,
// a string and a compact value are.

var jsonSeeds = []string{
	``, ` `, `null`, `true`, `false`, `nul`, `truex`, `0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e`, `1e+`,
	`1E-7`, `-0.5e-3`, `123456789012345678901234567890`, `""`, `"a"`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9"`,
	`"\u00g9"`, `"\x"`, "\"\x01\"", "\"\xff\"", `"unterminated`, `[]`, `[ ]`, `[1,]`, `[,1]`, `[1 2]`,
	`[1,[2,[3]]]`, `{}`, `{"a":1}`, `{"a" 1}`, `{"a":}`, `{a:1}`, `{"a":1,}`, `{"a":1 "b":2}`,
	`{"a":1,"a":2}`, `{"\u0061":1,"a\"":2}`, `{"a":[1,{"b":null}]}`, " {\"a\" : [ 1 , 2 ] } ",
	`{"a":1} x`, `1 2`, `[}`, `{]`, "\t\n\r 1 \r\n",
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat("[", 100) + strings.Repeat("]", 100),
}

func TestDocument(t *testing.T) {
	for _, s := range jsonSeeds {
		checkScanner(t, []byte(s), "a")
	}
}

func FuzzJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s), "a")
	}
	f.Fuzz(checkScanner)
}

func checkScanner(t *testing.T, data []byte, key string) {
	doc, _, ok := document(data)
	valid := len(data) == 0 || json.Valid(data) // json.Valid also stops at depth 10000
	if ok != valid {
		t.Fatalf("document(%q) ok = %v, json.Valid = %v", data, ok, valid)
	}
	if !ok {
		return
	}
	var want bytes.Buffer
	if len(data) > 0 {
		if err := json.Compact(&want, data); err != nil {
			t.Fatal(err)
		}
	} else {
		want.WriteString("null")
	}
	var got strings.Builder
	appendCompact(&got, doc)
	if got.String() != want.String() {
		t.Fatalf("appendCompact(%q) = %q, want %q", doc, got.String(), want.String())
	}
	switch doc[0] {
	case '"':
		var s string
		if err := json.Unmarshal(doc, &s); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		appendString(&b, doc)
		if b.String() != s {
			t.Fatalf("appendString(%q) = %q, want %q", doc, b.String(), s)
		}
	case '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		v, found := member(doc, key)
		w, wfound := m[key]
		if found != wfound || found && !bytes.Equal(bytes.TrimSpace(w), v) {
			t.Fatalf("member(%q, %q) = %q, %v; want %q, %v", doc, key, v, found, w, wfound)
		}
	case '[':
		var a []json.RawMessage
		if err := json.Unmarshal(doc, &a); err != nil {
			t.Fatal(err)
		}
		_, n, _ := element(doc, -1)
		items, n2 := elements(doc, len(a)+1)
		if n != len(a) || n2 != len(a) || len(items) != len(a) {
			t.Fatalf("element/elements(%q) count %d %d %d, want %d", doc, n, n2, len(items), len(a))
		}
		for i := range a {
			e, _, found := element(doc, i)
			if !found || !bytes.Equal(e, bytes.TrimSpace(a[i])) || !bytes.Equal(items[i], e) {
				t.Fatalf("element(%q, %d) = %q, want %q", doc, i, e, a[i])
			}
		}
	}
}

func TestIndex(t *testing.T) {
	for _, tc := range []struct {
		seg      string
		idx      int
		ok, huge bool
	}{
		{"0", 0, true, false},
		{"7", 7, true, false},
		{"10", 10, true, false},
		{"01", 0, false, false},
		{"00", 0, false, false},
		{"-1", 0, false, false},
		{"1a", 0, false, false},
		{"", 0, false, false},
		{"99999999999999999999", 0, true, true},
	} {
		idx, ok, huge := index(tc.seg)
		if idx != tc.idx || ok != tc.ok || huge != tc.huge {
			t.Errorf("index(%q) = %d, %v, %v; want %d, %v, %v", tc.seg, idx, ok, huge, tc.idx, tc.ok, tc.huge)
		}
	}
}
