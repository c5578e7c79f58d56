package cassette_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/cassette"
)

const secret = "sk-test-0123456789abcdef"

// server answers JSON to /v1/json and an event stream to /v1/stream; both echo the secret in
// their bodies so that redaction has something to remove.
func server(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Set-Cookie", "session=abc")
		w.Header().Set("X-Request-Id", "req-1")
		switch r.URL.Path {
		case "/v1/json":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "3")
			io.WriteString(w, `{"echo":`+string(body)+`,"note":"key `+secret+`"}`)
		case "/v1/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"delta\":\"Hel\"}\n\n")
			w.(http.Flusher).Flush()
			io.WriteString(w, "data: {\"delta\":\"lo\"}\n\ndata: [DONE]\n\n")
		case "/v1/hang":
			io.WriteString(w, "data: {\"delta\":\"Hel\"}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the rest never comes
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, c *http.Client, url, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestRecordThenReplay(t *testing.T) {
	srv := server(t)
	path := filepath.Join(t.TempDir(), "c.json")
	rec := cassette.NewRecorder(path, cassette.Cassette{Provider: "openai", Model: "gpt-test", BasePath: "/v1"}, nil, secret)
	live := rec.Client()
	_, _, liveJSON := post(t, live, srv.URL+"/v1/json", `{"b":2,"a":1}`)
	_, _, liveStream := post(t, live, srv.URL+"/v1/stream", `{"stream":true}`)
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	// What the live caller read is exactly what the server sent: recording does not alter it.
	if !strings.Contains(liveJSON, secret) || !strings.Contains(liveStream, "[DONE]") {
		t.Fatalf("live bodies altered: %s / %s", liveJSON, liveStream)
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), secret) {
		t.Fatal("the cassette contains the API key")
	}
	for _, leaked := range []string{"Authorization", "Set-Cookie", "session=abc", "X-Request-Id"} {
		if strings.Contains(string(raw), leaked) {
			t.Errorf("the cassette stores %s", leaked)
		}
	}
	c, err := cassette.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != cassette.Version || c.Provider != "openai" || c.Model != "gpt-test" || c.BasePath != "/v1" || len(c.Interactions) != 2 {
		t.Fatalf("cassette %+v", c)
	}

	// Replay with no server at all, the request body's keys in another order.
	srv.Close()
	rp := cassette.NewReplayer(c, path).Client()
	status, header, body := post(t, rp, "http://elsewhere.invalid/v1/json", `{"a":1, "b":2}`)
	if status != 200 || header.Get("Retry-After") != "3" || header.Get("Content-Type") != "application/json" {
		t.Fatalf("replayed status %d, header %v", status, header)
	}
	if want := strings.ReplaceAll(liveJSON, secret, "[REDACTED]"); body != want {
		t.Fatalf("replayed body %s, want %s", body, want)
	}
	_, header, body = post(t, rp, "http://elsewhere.invalid/v1/stream", `{"stream":true}`)
	if body != liveStream || header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("replayed stream %q, want %q", body, liveStream)
	}
	// The same request again (a retry) gets the same recorded reply.
	if _, _, again := post(t, rp, "http://elsewhere.invalid/v1/stream", `{"stream":true}`); again != liveStream {
		t.Fatalf("repeated request got %q", again)
	}
}

func TestReplayInOrderForIdenticalRequests(t *testing.T) {
	c := &cassette.Cassette{Version: 1, Provider: "openai", Interactions: []cassette.Interaction{
		{Request: cassette.Request{Method: "POST", Path: "/v1/x", Body: json.RawMessage(`{"q":1}`)}, Response: cassette.Response{Status: 200, Body: "first"}},
		{Request: cassette.Request{Method: "POST", Path: "/v1/x", Body: json.RawMessage(`{"q":1}`)}, Response: cassette.Response{Status: 200, Body: "second"}},
	}}
	rp := cassette.NewReplayer(c, "mem.json").Client()
	for _, want := range []string{"first", "second", "second"} {
		if _, _, got := post(t, rp, "http://x/v1/x", `{"q":1}`); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

func TestReplayMissIsAClearNonRetryableError(t *testing.T) {
	c := &cassette.Cassette{Version: 1, Provider: "openai", Interactions: []cassette.Interaction{
		{Request: cassette.Request{Method: "POST", Path: "/v1/chat/completions",
			Body: json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`)},
			Response: cassette.Response{Status: 200, Body: "{}"}},
	}}
	rp := cassette.NewReplayer(c, "testdata/c.json")
	req, _ := http.NewRequest(http.MethodPost, "http://x/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"goodbye"}]}`))
	_, err := rp.RoundTrip(req)
	var miss *cassette.MissError
	if !errors.As(err, &miss) {
		t.Fatalf("err %v, want *cassette.MissError", err)
	}
	for _, part := range []string{"testdata/c.json", "request 1", "POST /v1/chat/completions", "messages[0].content"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%q does not mention %q", err, part)
		}
	}
	var nr provider.NotRetryable
	if !errors.As(err, &nr) {
		t.Error("a cassette miss must not be retryable")
	}
}

func TestLoadRejectsBadCassettes(t *testing.T) {
	for name, body := range map[string]string{
		"not json":         `{`,
		"unknown key":      `{"version":1,"provider":"openai","interactions":[],"extra":1}`,
		"wrong version":    `{"version":7,"provider":"openai","interactions":[]}`,
		"no provider":      `{"version":1,"interactions":[]}`,
		"incomplete entry": `{"version":1,"provider":"openai","interactions":[{"request":{"method":"POST"},"response":{"status":200,"body":""}}]}`,
	} {
		path := filepath.Join(t.TempDir(), "bad.json")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := cassette.Load(path)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err %v, want an error naming the file", name, err)
		}
	}
	if _, err := cassette.Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("a missing cassette loaded")
	}
}

// A body its reader closes before its end (an SDK stops at a stream's last event) is read to
// its end at Close and recorded whole; one whose request was cancelled is not recorded at all:
// a cassette only holds complete exchanges, so replay never serves a truncated reply as if it
// were whole.
func TestPartlyReadBodies(t *testing.T) {
	srv := server(t)
	t.Run("closed early", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "c.json")
		rec := cassette.NewRecorder(path, cassette.Cassette{Provider: "openai"}, nil)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/stream", strings.NewReader(`{}`))
		resp, err := rec.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c, err := cassette.Load(path)
		if err != nil {
			t.Fatalf("the exchange closed early was not recorded: %v", err)
		}
		const whole = "data: {\"delta\":\"Hel\"}\n\ndata: {\"delta\":\"lo\"}\n\ndata: [DONE]\n\n"
		if len(c.Interactions) != 1 || c.Interactions[0].Response.Body != whole {
			t.Errorf("recorded %+v, want the whole body %q", c.Interactions, whole)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "c.json")
		rec := cassette.NewRecorder(path, cassette.Cassette{Provider: "openai"}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/hang", strings.NewReader(`{}`))
		resp, err := rec.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		cancel()
		resp.Body.Close()
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a cancelled, partly read exchange was written to the cassette (stat: %v)", err)
		}
	})
}

// TestParseNeverQuotesTheFile: whatever file a cassette path names, the error names the path and
// what is wrong, and quotes none of its bytes.
func TestParseNeverQuotesTheFile(t *testing.T) {
	for _, data := range []string{
		"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon",
		`{"AKIAIOSFODNN7EXAMPLE": "wJalrXUtnFEMI/K7MDENG"}`,
		`{"version": "secret-value-here"}`,
		`{"version": 1, "provider": "openai", "interactions": [{"request": {"method": "topsecretmethod"}}]`,
		"\x00\x01\x02binary",
	} {
		_, err := cassette.Parse("/etc/somefile", []byte(data))
		if err == nil {
			t.Fatalf("Parse(%q) succeeded", data)
		}
		msg := err.Error()
		if !strings.Contains(msg, "/etc/somefile") {
			t.Errorf("the error %q does not name the file", msg)
		}
		for _, piece := range []string{"root", "daemon", "AKIA", "wJalr", "secret", "topsecret", "binary"} {
			if strings.Contains(data, piece) && strings.Contains(msg, piece) {
				t.Errorf("the error %q quotes %q from the file", msg, piece)
			}
		}
	}
}
