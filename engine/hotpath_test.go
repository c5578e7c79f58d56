package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reins-run/reins/internal/testkit/allocs"
)

// FuzzTaskMsgID: the id built in a buffer on the stack equals the plain RUN/KEY/ACTIVATION/
// ITERATION/ATTEMPT, ids longer than the buffer included.
func FuzzTaskMsgID(f *testing.F) {
	f.Add("r-1", "fan#3", 1, 2, 1)
	f.Add(strings.Repeat("r", 120), "ask", -1, 0, 99999)
	f.Fuzz(func(t *testing.T, run, key string, activation, iteration, attempt int) {
		want := fmt.Sprintf("%s/%s/%d/%d/%d", run, key, activation, iteration, attempt)
		if got := taskMsgID(run, key, activation, iteration, attempt); got != want {
			t.Fatalf("taskMsgID = %q, want %q", got, want)
		}
	})
}

// TestTaskMsgIDAllocs: a task's id is one allocation, its string.
func TestTaskMsgIDAllocs(t *testing.T) {
	if n := allocs.PerRun(100, func() { _ = taskMsgID("01JDV3N6Q0R1S2T3U4V5W6X7Y8", "agent", 1, 12, 1) }); n != 1 {
		t.Errorf("taskMsgID allocates %v times, want 1", n)
	}
}

// refCanon is canon as it was, through json.Marshal alone: the reference for its shortcut.
func refCanon(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null"), nil
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("not valid UTF-8")
	}
	if !json.Valid(raw) {
		return nil, errors.New("not valid JSON")
	}
	return json.Marshal(raw)
}

// FuzzCanon: canon's copy of a value already compact equals json.Marshal's bytes, and every
// other value (spaces, HTML characters, U+2028) is still written by json.Marshal; the copy
// shares nothing with its input.
func FuzzCanon(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{ "a" : [1, 2] }`, `"<b>"`, `"a\"b \\ c"`, "\"\u2028\"", `"\u2028"`,
		`[1,"x y",{"k":"v\n"}]`, "\t1\n", `""`, `"&amp;"`, `nul`, "\xff", `{"a":"\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := canon(raw)
		want, werr := refCanon(raw)
		if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("canon(%q) = %q, %v; json.Marshal gives %q, %v", raw, got, err, want, werr)
		}
		if len(got) > 0 && len(raw) > 0 && &got[0] == &raw[0] {
			t.Fatalf("canon(%q) shares its input's bytes", raw)
		}
	})
}

// TestCanonAllocs: an answer's compact output is one allocation, its copy. Under the race
// detector json.Valid's scanner, which comes from a sync.Pool, is dropped at random, and the
// pin is that canon still allocates less than json.Marshal's way.
func TestCanonAllocs(t *testing.T) {
	raw := json.RawMessage(`{"turn":12,"messages":[{"role":"assistant","content":"done, see a.go"}]}`)
	n := allocs.PerRun(100, func() { _, _ = canon(raw) })
	if allocs.Race {
		if ref := allocs.PerRun(100, func() { _, _ = refCanon(raw) }); n >= ref {
			t.Errorf("canon allocates %v times under -race, json.Marshal's way %v: want fewer", n, ref)
		}
		return
	}
	if n != 1 {
		t.Errorf("canon allocates %v times, want 1", n)
	}
}
