package protocol_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reins-run/reins/protocol"
)

func TestClipText(t *testing.T) {
	for _, tc := range []struct {
		s    string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456789… [3 more bytes]"},
		{"ééééé", 3, "é… [8 more bytes]"}, // é is 2 bytes: the cut falls back to a rune start
		{"abc", 0, "… [3 more bytes]"},
	} {
		if got := protocol.ClipText(tc.s, tc.max); got != tc.want {
			t.Errorf("ClipText(%q, %d) = %q, want %q", tc.s, tc.max, got, tc.want)
		}
	}
}

// Clip keeps every long text whole before it cuts it, and names where in the text's Ref.
func TestIterationClip(t *testing.T) {
	long := strings.Repeat("x", 100)
	it := protocol.Iteration{
		Proposal: &protocol.ProposalRecord{Kind: "tool_calls", Text: long},
		Calls: []protocol.CallRecord{
			{ID: "c1", Tool: "read", Arguments: `{"id":1}`, Output: long, OutputBytes: 100},
			{ID: "c2", Tool: "read", Arguments: long, Output: "ok"},
		},
	}
	kept := map[string]string{}
	keep := func(text string) (string, error) {
		ref := "ref" + string(rune('0'+len(kept)))
		kept[ref] = text
		return ref, nil
	}
	clipped, err := it.Clip(10, keep)
	if err != nil || !clipped {
		t.Fatalf("Clip = %v, %v; want clipped", clipped, err)
	}
	for _, c := range []struct{ text, ref string }{
		{it.Proposal.Text, it.Proposal.TextRef},
		{it.Calls[0].Output, it.Calls[0].OutputRef},
		{it.Calls[1].Arguments, it.Calls[1].ArgumentsRef},
	} {
		if !strings.HasPrefix(c.text, "xxxxxxxxxx… [90 more bytes]") || kept[c.ref] != long {
			t.Errorf("text %q with ref %q (kept %d bytes), want clipped and kept whole", c.text, c.ref, len(kept[c.ref]))
		}
	}
	if it.Calls[0].Arguments != `{"id":1}` || it.Calls[0].ArgumentsRef != "" || it.Calls[1].Output != "ok" {
		t.Errorf("short texts changed: %+v", it.Calls)
	}
	if clipped, err := it.Clip(1000, keep); clipped || err != nil {
		t.Errorf("a second Clip with a larger bound = %v, %v; want nothing to do", clipped, err)
	}

	broken := errors.New("store down")
	it2 := protocol.Iteration{Calls: []protocol.CallRecord{{ID: "c", Output: long}}}
	if _, err := it2.Clip(10, func(string) (string, error) { return "", broken }); !errors.Is(err, broken) {
		t.Errorf("Clip with a failing keep = %v, want its error", err)
	}
	if it2.Calls[0].Output != long {
		t.Errorf("a text whose keep failed was cut: %q", it2.Calls[0].Output)
	}
}

// FuzzClipText: a clipped text is a prefix of the text, valid UTF-8 when the text is, within
// max bytes before the marker.
func FuzzClipText(f *testing.F) {
	f.Add("hello world", 5)
	f.Add("ééé", 1)
	f.Add("", 0)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 1<<16 {
			return
		}
		got := protocol.ClipText(s, max)
		if len(s) <= max {
			if got != s {
				t.Fatalf("ClipText(%q, %d) = %q, want it unchanged", s, max, got)
			}
			return
		}
		head, _, ok := strings.Cut(got, "… [")
		if !ok || !strings.HasPrefix(s, head) || len(head) > max {
			t.Fatalf("ClipText(%q, %d) = %q: not a prefix of at most %d bytes and a marker", s, max, got, max)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("ClipText(%q, %d) = %q: not valid UTF-8", s, max, got)
		}
	})
}
