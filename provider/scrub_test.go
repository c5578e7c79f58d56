package provider_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
)

// referenceMask is the plain scrub the Scrubber's word-at-a-time search must agree with: for
// every position of text and of secret, the longest common run, marked when 8 bytes or more
// (a secret shorter than 8 bytes: its whole occurrences). A secret's JSON-escaped form counts
// as a secret of its own.
func referenceMask(text string, secrets ...string) []bool {
	hide := make([]bool, len(text))
	var all []string
	for _, s := range secrets {
		if s == "" {
			continue
		}
		all = append(all, s)
		if q, _ := json.Marshal(s); string(q[1:len(q)-1]) != s {
			all = append(all, string(q[1:len(q)-1]))
		}
	}
	for _, secret := range all {
		if len(secret) < 8 {
			for i := 0; i+len(secret) <= len(text); i++ {
				if text[i:i+len(secret)] == secret {
					for k := i; k < i+len(secret); k++ {
						hide[k] = true
					}
				}
			}
			continue
		}
		for i := range len(text) {
			for j := range len(secret) {
				n := 0
				for i+n < len(text) && j+n < len(secret) && text[i+n] == secret[j+n] {
					n++
				}
				if n >= 8 {
					for k := i; k < i+n; k++ {
						hide[k] = true
					}
				}
			}
		}
	}
	return hide
}

func referenceScrub(text string, secrets ...string) string {
	hide := referenceMask(text, secrets...)
	var b strings.Builder
	for i := 0; i < len(text); {
		if !hide[i] {
			b.WriteByte(text[i])
			i++
			continue
		}
		b.WriteString(provider.Redacted)
		for i < len(text) && hide[i] {
			i++
		}
	}
	return b.String()
}

// FuzzScrubber holds the Scrubber's search to the plain one, for one secret and two.
func FuzzScrubber(f *testing.F) {
	f.Add("Incorrect API key provided: "+key+".", key, "")
	f.Add("key "+key[:12]+"**** and "+key[20:], key, "pin")
	f.Add(`{"echo":"a\"quoted\"secret!"}`, `a"quoted"secret!`, "")
	f.Add("aaaaaaaaaaaaaaaaaaaa", "aaaaaaaaa", "aa")
	f.Fuzz(func(t *testing.T, text, secret, other string) {
		want := referenceScrub(text, secret, other)
		if got := provider.NewScrubber(secret, other).String(text); got != want {
			t.Fatalf("String(%q) with %q, %q = %q, want %q", text, secret, other, got, want)
		}
	})
}

// FuzzStream cuts a text in three pieces: what a Stream emits, each run of [redacted]
// counted once, is what String makes of the whole text, and no piece of the secret shows.
func FuzzStream(f *testing.F) {
	f.Add("the key is "+key+", keep it", key, 15, 20)
	f.Add(key+key, key, 3, 40)
	f.Add("x"+key[:9], key, 5, 9)
	f.Fuzz(func(t *testing.T, text, secret string, a, b int) {
		if a < 0 || b < 0 {
			return
		}
		a, b = min(a, len(text)), min(b, len(text))
		a, b = min(a, b), max(a, b)
		s := provider.NewScrubber(secret)
		var out strings.Builder
		st := s.Stream(func(piece string) { out.WriteString(piece) })
		for _, piece := range []string{text[:a], text[a:b], text[b:]} {
			st.Write(piece)
		}
		st.Flush()
		once := func(s string) string {
			for strings.Contains(s, provider.Redacted+provider.Redacted) {
				s = strings.ReplaceAll(s, provider.Redacted+provider.Redacted, provider.Redacted)
			}
			return s
		}
		if got, want := once(out.String()), once(s.String(text)); got != want {
			t.Fatalf("streamed %q in pieces at %d, %d with secret %q: %q, want %q", text, a, b, secret, got, want)
		}
	})
}

func TestScrubberJSON(t *testing.T) {
	secret := `sk-ant<api>"quoted"-0123456789`
	s := provider.NewScrubber(secret, key)
	for _, tc := range []struct {
		name string
		in   string
	}{
		{"a member's value", `{"echo":"` + key + `","n":1}`},
		{"a member's name", `{"` + key + `":true}`},
		{"escaped as encoding/json escapes", mustJSON(t, map[string]string{"echo": secret})},
		{"a piece cutting an escape", `{"echo":"\u003capi\u003e\"quoted\"-0123456789"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := s.JSON(json.RawMessage(tc.in))
			if !json.Valid(out) {
				t.Fatalf("JSON(%s) = %s: not JSON", tc.in, out)
			}
			var v any
			_ = json.Unmarshal(out, &v)
			flat := mustJSON(t, v) + string(out)
			for _, piece := range []string{key[:10], key[12:22], "quoted\"-0123", `quoted\"-0123`} {
				if strings.Contains(flat, piece) {
					t.Errorf("JSON(%s) = %s: %q shows", tc.in, out, piece)
				}
			}
		})
	}
	if in := json.RawMessage(`{"nothing":"secret"}`); string(s.JSON(in)) != string(in) {
		t.Errorf("a value without secrets changed: %s", s.JSON(in))
	}
}

func TestScrubberResponse(t *testing.T) {
	s := provider.NewScrubber(key)
	r := &model.Response{Proposal: model.Proposal{Kind: model.KindToolCalls, Text: "using " + key,
		Calls: []model.ToolCall{{ID: "c1", Name: "lookup", Arguments: json.RawMessage(`{"q":"` + key + `"}`)}, {ID: "c2", Name: "x", Arguments: json.RawMessage(`{}`)}}}}
	got := s.Response(r)
	data, _ := json.Marshal(got)
	if strings.Contains(string(data), key[4:14]) {
		t.Errorf("the scrubbed response shows the key: %s", data)
	}
	if r.Proposal.Text != "using "+key || !strings.Contains(string(r.Proposal.Calls[0].Arguments), key) {
		t.Error("Response changed the response it was given")
	}
	clean := &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "fine"}}
	if s.Response(clean) != clean {
		t.Error("a response without secrets was copied")
	}
	var nothing *provider.Scrubber
	if nothing.String(key) != key || !nothing.Empty() {
		t.Error("a nil Scrubber hid something")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// BenchmarkScrubber scrubs a megabyte of reply text that holds no secret, with three secrets:
// what a server's workers pay per stored byte.
func BenchmarkScrubber(b *testing.B) {
	s := provider.NewScrubber(key, "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789", "whsec_0123456789abcdef")
	text := strings.Repeat("The refund of order O-104 was approved by the support lead; sk-… keys are never shown. ", 1<<20/88)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if s.String(text) != text {
			b.Fatal("nothing should be hidden")
		}
	}
}
