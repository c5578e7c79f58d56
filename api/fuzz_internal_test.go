package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/runstore"
)

// FuzzCursor: a cursor the API gives back reads as the page's Next it was made of, and any
// text a client sends as a cursor either reads as a Next the index can hold or is refused.
func FuzzCursor(f *testing.F) {
	f.Add("20261127T180000.000000000Z-r-1", "")
	f.Add("", "cnVucy1uZXdlc3Q6eA")
	f.Add("x", "!!")
	f.Fuzz(func(t *testing.T, next, sent string) {
		if runstore.CheckCursor(next) && next != "" {
			if got, ok := decodeCursor(encodeCursor(next)); !ok || got != next {
				t.Fatalf("decodeCursor(encodeCursor(%q)) = %q, %v", next, got, ok)
			}
		}
		if after, ok := decodeCursor(sent); ok && !runstore.CheckCursor(after) {
			t.Fatalf("decodeCursor(%q) accepted %q, which is not a cursor of the index", sent, after)
		}
	})
}

// FuzzTraceCursor: a trace cursor the API gives back reads as the stream sequence it was made
// of; any text a client sends as one is refused or reads as a sequence whose cursor is that
// very text (one sequence, one cursor); and trace_limit takes 1 to 1000 only.
func FuzzTraceCursor(f *testing.F) {
	f.Add(uint64(1), "", "")
	f.Add(uint64(18446744073709551615), "dHJhY2UtYWZ0ZXI6MDA", "0")
	f.Add(uint64(5001), "cnVucy1uZXdlc3Q6eA", "1001")
	f.Add(uint64(42), "dHJhY2UtYWZ0ZXI6LTE", "-1")
	f.Fuzz(func(t *testing.T, seq uint64, sent, limit string) {
		if seq > 0 {
			if got, ok := decodeTraceCursor(encodeTraceCursor(seq)); !ok || got != seq {
				t.Fatalf("decodeTraceCursor(encodeTraceCursor(%d)) = %d, %v", seq, got, ok)
			}
		}
		if got, ok := decodeTraceCursor(sent); ok && (got == 0 || encodeTraceCursor(got) != sent) {
			t.Fatalf("decodeTraceCursor(%q) = %d, whose cursor is %q", sent, got, encodeTraceCursor(got))
		}
		r := httptest.NewRequest("GET", "/v1/runs/r-1?"+url.Values{"trace_limit": {limit}, "trace_cursor": {sent}}.Encode(), nil)
		n, after, err := traceParams(r)
		switch {
		case err != nil:
			var p *Problem
			if !errors.As(err, &p) || p.Status != http.StatusBadRequest || strings.ContainsAny(p.Detail, "\n") {
				t.Fatalf("traceParams(%q, %q): %v, want a 400 of one line", limit, sent, err)
			}
		case n < 1 || n > maxTraceLimit, sent != "" && encodeTraceCursor(after) != sent:
			t.Fatalf("traceParams(%q, %q) = %d, %d", limit, sent, n, after)
		}
	})
}

// FuzzStream: what the server writes as Server-Sent Events (sse.message, sse.comment) the
// client reads back as the same messages, in order, whatever the data; and any bytes at all
// read as messages or an error, never a panic.
func FuzzStream(f *testing.F) {
	f.Add(uint64(7), "status", "a\nb", "keep-alive", []byte("id: 1\nevent: x\ndata: {}\n\n"))
	f.Add(uint64(0), "delta", "", "", []byte(": c\n\ndata: a\ndata: b\n\n"))
	f.Add(uint64(1), "end", "\r\n\x00é", "x", []byte("data"))
	f.Fuzz(func(t *testing.T, id uint64, event, text, comment string, junk []byte) {
		switch event {
		case "event", "status", "delta", "end":
		default:
			event = "event"
		}
		text = strings.ToValidUTF8(text, "?") // JSON carries text: invalid bytes become U+FFFD
		var buf bytes.Buffer
		o := &sse{w: &buf, rc: newController()}
		idText := ""
		if id > 0 {
			idText = strconv.FormatUint(id, 10)
		}
		o.message(idText, event, map[string]string{"text": text})
		if !bytes.ContainsAny([]byte(comment), "\r\n") {
			o.comment(comment)
		}
		o.message("", "end", map[string]string{"status": "completed"})
		if o.err != nil {
			t.Fatal(o.err)
		}
		var got []streamMessage
		for m, err := range readStream(&buf) {
			if err != nil {
				t.Fatalf("reading what the server wrote: %v\n%q", err, buf.String())
			}
			got = append(got, m)
		}
		if len(got) != 2 || got[0].id != idText || got[0].event != event || got[1].event != "end" {
			t.Fatalf("read %+v from %q", got, buf.String())
		}
		var v map[string]string
		if err := json.Unmarshal(got[0].data, &v); err != nil || v["text"] != text {
			t.Fatalf("data %q: %v, want text %q", got[0].data, err, text)
		}
		for m, err := range readStream(bytes.NewReader(junk)) {
			if err == nil && m.event == "" {
				t.Fatalf("a message without an event name from %q", junk)
			}
		}
	})
}

func newController() *http.ResponseController {
	return http.NewResponseController(httptest.NewRecorder())
}
