package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/protocol"
)

// TestBearerToken: the scheme of Authorization is matched in any case (RFC 9110, 11.1), the
// token follows one or more spaces, and a header that is not a bearer token is none.
func TestBearerToken(t *testing.T) {
	for _, c := range []struct {
		header, token string
		ok            bool
	}{
		{"Bearer tok-1", "tok-1", true},
		{"bearer tok-1", "tok-1", true},
		{"BEARER tok-1", "tok-1", true},
		{"bEaReR   tok-1", "tok-1", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearer tok 1", "", false},
		{"Bearer tok\t1", "", false},
		{"Basic tok-1", "", false},
		{"Bearertok-1", "", false},
		{"Bearer\ttok-1", "", false},
		{"", "", false},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		if c.header != "" {
			r.Header.Set("Authorization", c.header)
		}
		if token, ok := api.BearerToken(r); token != c.token || ok != c.ok {
			t.Errorf("Authorization %q: %q, %v; want %q, %v", c.header, token, ok, c.token, c.ok)
		}
	}
}

// rawConn dials the stack's API.
func (s *stack) rawConn() net.Conn {
	s.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	return c
}

// send writes head and body on c in the background (a server that does not read it must not
// hold the test).
func send(c net.Conn, head, body string) {
	go func() {
		if _, err := io.WriteString(c, head); err == nil {
			_, _ = io.WriteString(c, body)
		}
	}()
}

// answerOn reads the answer the server writes on c within d.
func answerOn(t *testing.T, c net.Conn, d time.Duration) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", d, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const anySignature = "sha256=0000000000000000000000000000000000000000000000000000000000000000"

// TestWebhookBounds: a delivery whose Content-Length is over the limit is answered 413 before
// its body is sent; deliveries stalled in flight hold the slots of Config.MaxUnauthenticated,
// and another is answered 503 with Retry-After at once while a principal with a token is still
// served; a stalled delivery is answered 408 at the read deadline and its slot is free again.
func TestWebhookBounds(t *testing.T) {
	// The stalled deliveries hold their slots for the read timeout: long enough that a loaded
	// machine still sees them held (the check below), short enough that the test ends soon.
	s := newStackWith(t, stackOptions{Hooks: map[string]string{"refunds": "k"}, MaxUnauthenticated: 2, ReadTimeout: 3 * time.Second})
	c := s.rawConn()
	send(c, fmt.Sprintf("POST /v1/hooks/refunds HTTP/1.1\r\nHost: api\r\nContent-Length: %d\r\nX-Reins-Signature: %s\r\n\r\n", testMaxWebhook+1, anySignature), "")
	if resp := answerOn(t, c, 5*time.Second); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a delivery over the limit, its body unsent: %d, want 413", resp.StatusCode)
	}

	var stalled []net.Conn
	for range 2 {
		c := s.rawConn()
		send(c, "POST /v1/hooks/refunds HTTP/1.1\r\nHost: api\r\nTransfer-Encoding: chunked\r\nX-Reins-Signature: "+anySignature+"\r\n\r\n", "1\r\n{\r\n")
		stalled = append(stalled, c)
	}
	start := time.Now()
	for {
		a := s.doWith("POST", "/v1/hooks/refunds", "", `{"x": 1}`, nil)
		if a.Status == http.StatusServiceUnavailable {
			if n, err := strconv.Atoi(a.Header.Get("Retry-After")); err != nil || n < 1 {
				t.Errorf("503 with Retry-After %q, want seconds", a.Header.Get("Retry-After"))
			}
			if p := a.problem(t); !strings.Contains(p.Detail, "2 webhook deliveries") {
				t.Errorf("503 %q does not say the cap", p.Detail)
			}
			break
		}
		if a.Status != http.StatusUnauthorized || time.Since(start) > 30*time.Second {
			t.Fatalf("a delivery while 2 stall: %d %s, want 503 once they hold the slots", a.Status, a.Body)
		}
	}
	s.as("vera", "GET", "/v1/me", "").want(t, http.StatusOK, "a principal while deliveries fill the cap")
	for i, c := range stalled {
		if resp := answerOn(t, c, 30*time.Second); resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("stalled delivery %d: %d, want 408", i, resp.StatusCode)
		}
	}
	// The connections kept alive meanwhile were idle past the read timeout (the server's idle
	// timeout when it has none) and closed: a POST is not sent again on a new one by itself.
	http.DefaultClient.CloseIdleConnections()
	s.doWith("POST", "/v1/hooks/refunds", "", `{"x": 1}`, nil).want(t, http.StatusUnauthorized, "a delivery once the stalled ones are cut")
}

// TestAuthenticatedBodyDeadline: an authenticated body that keeps coming is read whole however
// long it takes; one that stalls for the read timeout is answered 408; a stream lives past the
// read deadline of its request (the deadline is lifted once the request has arrived).
func TestAuthenticatedBodyDeadline(t *testing.T) {
	const timeout = 400 * time.Millisecond
	ticks := make(chan time.Time)
	s := newStackWith(t, stackOptions{ReadTimeout: timeout, WriteTimeout: timeout, Ticks: ticks})
	id := s.start(holdTOML, "")
	s.waiting(id)

	// 8 pieces, one every 150 ms: 1.2 s in all, three read timeouts, none between two pieces.
	pr, pw := io.Pipe()
	go func() {
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		_, _ = io.WriteString(pw, `{"data": "`)
		for range 8 {
			<-tick.C
			_, _ = io.WriteString(pw, strings.Repeat("x", 1000))
		}
		_, _ = io.WriteString(pw, `"}`)
		pw.Close()
	}()
	req, err := http.NewRequestWithContext(s.Ctx, "POST", s.URL+"/v1/runs/"+id+"/signals/other", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Tokens["admin"]) // who may signal the run: its submitter, the admin
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || time.Since(start) < 3*timeout {
		t.Fatalf("a steady body over %s: %d, want 202 after all of it", time.Since(start), resp.StatusCode)
	}

	c := s.rawConn()
	send(c, "POST /v1/runs/"+id+"/signals/go HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer "+s.Tokens["admin"]+"\r\nContent-Length: 100\r\n\r\n", `{"data": `)
	if resp := answerOn(t, c, 5*time.Second); resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a stalled body: %d, want 408", resp.StatusCode)
	}
	assertWaiting(t, s, id)

	st := s.open(id, "")
	st.until(func(m msg) bool { return m.Event == "status" })
	deadline := time.Now().Add(3 * timeout)
	for n := 0; time.Now().Before(deadline); n++ {
		select {
		case ticks <- time.Now():
		case <-time.After(10 * time.Second):
			t.Fatalf("the stream took no keep-alive tick after %d, %s after it opened", n, time.Since(deadline.Add(-3*timeout)))
		}
		if m, ok := st.next(); !ok || m.Comment != "keep-alive" {
			t.Fatalf("keep-alive %d: %+v, %v: the stream ended before its run", n, m, ok)
		}
	}
	http.DefaultClient.CloseIdleConnections() // idle past the read timeout: closed by the server
	s.as("admin", "POST", "/v1/runs/"+id+"/signals/go", `{"data": 1}`).want(t, http.StatusAccepted, "signal")
	if rest := st.rest(); len(rest) == 0 || rest[len(rest)-1].Event != "end" || !strings.Contains(rest[len(rest)-1].Data, string(protocol.RunCompleted)) {
		t.Fatalf("the stream's last messages %+v: want end, completed", rest)
	}
}

// openAs opens the events of runID as the principal name; it returns the status, the answer's
// headers and what closes the stream.
func (s *stack) openAs(name, runID string) (int, http.Header, string, func()) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(s.Ctx)
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/runs/"+runID+"/events", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Tokens[name])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		s.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, resp.Header, string(body), func() {}
	}
	closeIt := func() { cancel(); resp.Body.Close() }
	s.t.Cleanup(closeIt)
	return resp.StatusCode, resp.Header, "", closeIt
}

// TestEventStreamCap: a principal at Config.MaxEventStreams gets 429 with Retry-After naming
// it; another principal still opens its streams; a stream closed frees its place.
func TestEventStreamCap(t *testing.T) {
	s := newStackWith(t, stackOptions{MaxEventStreams: 2})
	id := s.start(holdTOML, "")
	s.waiting(id)
	var closers []func()
	for i := range 2 {
		status, _, body, closeIt := s.openAs("vera", id)
		if status != http.StatusOK {
			t.Fatalf("vera's stream %d: %d %s", i+1, status, body)
		}
		closers = append(closers, closeIt)
	}
	status, hdr, body, _ := s.openAs("vera", id)
	if status != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !strings.Contains(body, "principal vera") {
		t.Fatalf("vera's third stream: %d, Retry-After %q, %s: want 429 naming vera", status, hdr.Get("Retry-After"), body)
	}
	api.CheckAnswer(t, "GET", "/v1/runs/"+id+"/events", status, hdr.Get("Content-Type"), []byte(body))
	if status, _, body, _ := s.openAs("alice", id); status != http.StatusOK {
		t.Fatalf("alice's stream while vera is at her cap: %d %s", status, body)
	}
	closers[0]()
	start := time.Now()
	for {
		status, _, body, _ := s.openAs("vera", id)
		if status == http.StatusOK {
			break
		}
		if status != http.StatusTooManyRequests || time.Since(start) > 10*time.Second {
			t.Fatalf("vera's stream after she closed one: %d %s", status, body)
		}
	}
}
