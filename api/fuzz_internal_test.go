package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/wire"
)

// FuzzCursor: a cursor the API gives back reads as the page's Next it was made of, and any
// text a client sends as a cursor either reads as a Next the index can hold or is refused.
func FuzzCursor(f *testing.F) {
	f.Add("20261127T180000.000000000Z-r-1", "")
	f.Add("", "cnVucy1uZXdlc3Q6eA")
	f.Add("x", "!!")
	f.Fuzz(func(t *testing.T, next, sent string) {
		if wire.CheckCursor(next) && next != "" {
			if got, ok := decodeCursor(encodeCursor(next)); !ok || got != next {
				t.Fatalf("decodeCursor(encodeCursor(%q)) = %q, %v", next, got, ok)
			}
		}
		if after, ok := decodeCursor(sent); ok && !wire.CheckCursor(after) {
			t.Fatalf("decodeCursor(%q) accepted %q, which is not a cursor of the index", sent, after)
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
