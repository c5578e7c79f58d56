//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trigger"
)

// The attacks on the HTTP listener (docs/security.md, "The HTTP listener"): what a sender
// without a token can hold (bodies, connections, slots), how long anything may stall, event
// streams per principal, and bodies that mean two things.

const (
	// attackHookSecret is the secret of the webhook inbox the attacks deliver to: the
	// attacker does not know it.
	attackHookSecret = "hook-secret-attack-9c0d1e2f3a4b5c6d"
	// attackAprilToken is the token of april, an approver and nothing else.
	attackAprilToken = "tok-april-attack-0d1e2f3a4b5c6d7e8f"
)

// hookTOML opens the webhook inbox; hookWorkflow listens on it.
const (
	hookTOML = `
[webhooks.inbox]
secret_env = "HOOK_SECRET"
`
	hookWorkflow = `name = "inbox"
[[steps]]
id = "done"
type = "terminate"
[[triggers]]
name = "on-inbox"
webhook = "inbox"
`
	holdWorkflow = `name = "hold"
[[steps]]
id = "ask"
type = "approval"
prompt = "Ship it?"
`
)

// hookServer is hostileServer with the webhook inbox open, limits (TOML lines of [limits]),
// and the workflow inbox registered by bob.
func hookServer(t *testing.T, limits string) *hostile {
	t.Helper()
	h := hostileServer(t, hookTOML+"\n[limits]\n"+limits, "HOOK_SECRET="+attackHookSecret)
	h.register(attackBobToken, "inbox", hookWorkflow)
	return h
}

// rss is the resident memory of the server's process, in bytes (VmRSS of /proc/PID/status).
func (h *hostile) rss() int64 {
	h.t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.proc.cmd.Process.Pid))
	if err != nil {
		h.t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				h.t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	h.t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// peakRSS samples the server's memory until stop is called, and returns the largest sample.
func (h *hostile) peakRSS() (stop func() int64) {
	done, out := make(chan struct{}), make(chan int64)
	go func() {
		peak := int64(0)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.proc.cmd.Process.Pid))
			if err == nil {
				for line := range strings.Lines(string(data)) {
					if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
						peak = max(peak, kb<<10)
					}
				}
			}
			select {
			case <-done:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 { close(done); return <-out }
}

// dial opens a raw TCP connection to the API: what an attacker's own program writes on.
func (h *hostile) dial() net.Conn {
	h.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// stall writes head (a request's line and header, CRLF-separated, ending in an empty line) and
// body on a new connection, in the background (the server may not read it), and returns the
// connection, left open: the sender stalls.
func (h *hostile) stall(head string, body []byte) net.Conn {
	h.t.Helper()
	c := h.dial()
	go func() {
		if _, err := io.WriteString(c, head); err == nil {
			_, _ = c.Write(body)
		}
	}()
	return c
}

// cut is what a stalled connection got: the status line the server answered (if any), and how
// long after start the server closed it; open when it still was at the deadline.
type cut struct {
	status string
	after  time.Duration
	open   bool
}

// awaitCut reads c until the server closes it or deadline passes.
func awaitCut(c net.Conn, start, deadline time.Time) cut {
	_ = c.SetReadDeadline(deadline)
	rd := bufio.NewReader(c)
	status, _ := rd.ReadString('\n')
	_, err := io.Copy(io.Discard, rd)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return cut{status: strings.TrimSpace(status), open: true}
	}
	return cut{status: strings.TrimSpace(status), after: time.Since(start)}
}

// awaitCuts waits for every connection of cs, in parallel, until deadline.
func awaitCuts(cs []net.Conn, start, deadline time.Time) []cut {
	out := make([]cut, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { out[i] = awaitCut(c, start, deadline) })
	}
	wg.Wait()
	return out
}

// hookRuns is how many runs of the workflow inbox exist, as the operator sees them.
func (h *hostile) hookRuns() int {
	h.t.Helper()
	status, _, body := h.do(h.admin, "GET", "/v1/runs?workflow=inbox", "")
	if status != http.StatusOK {
		h.t.Fatalf("list the runs of inbox: %d %s", status, body)
	}
	return strings.Count(body, `"run_id"`)
}

// oneSentence fails the test unless detail is one sentence: no line break, no second sentence.
func oneSentence(t *testing.T, what, detail string) {
	t.Helper()
	if detail == "" || strings.ContainsAny(detail, "\r\n") || strings.Contains(detail, ". ") {
		t.Errorf("%s: the detail is not one sentence: %q", what, detail)
	}
}

// problemDetail is the detail of a problem document.
func problemDetail(t *testing.T, body string) string {
	t.Helper()
	var p struct {
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("not a problem document: %s", body)
	}
	return p.Detail
}

const fakeSignature = "sha256=0000000000000000000000000000000000000000000000000000000000000000"

// TestAttackStalledWebhookBodies: 16 senders without a token claim 60 MiB bodies for the
// webhook, send some, and stall; then 16 more send chunked bodies without a length, and stall.
// The first are refused at once (413, nothing read), the second cut at the read deadline (2 s
// here); the server's memory stays where it was and /healthz answers throughout.
func TestAttackStalledWebhookBodies(t *testing.T) {
	h := hookServer(t, `http_read_timeout = "2s"`)
	h.healthy()
	before := h.rss()
	peak := h.peakRSS()

	// Content-Length says 60 MiB: 8 MiB of it sent, then nothing.
	start := time.Now()
	var conns []net.Conn
	chunk := []byte(strings.Repeat("a", 8<<20))
	for range 16 {
		conns = append(conns, h.stall("POST /v1/hooks/inbox HTTP/1.1\r\nHost: reins\r\nContent-Type: application/json\r\nContent-Length: 62914560\r\n"+
			"X-Reins-Signature: "+fakeSignature+"\r\n\r\n", chunk))
	}
	h.healthy()
	for i, c := range awaitCuts(conns, start, start.Add(8*time.Second)) {
		if c.open || !strings.Contains(c.status, " 413 ") || c.after > 3*time.Second {
			t.Errorf("sender %d claiming 60 MiB: answered %q, still open %v after %s: want 413 at once and the connection closed", i, c.status, c.open, time.Since(start).Round(time.Millisecond))
		}
	}
	h.healthy()

	// Chunked, no length: 64 KiB of a body, then nothing. Each is cut at the read deadline.
	start = time.Now()
	conns = nil
	piece := fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat("b", 64<<10))
	for range 16 {
		conns = append(conns, h.stall("POST /v1/hooks/inbox HTTP/1.1\r\nHost: reins\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"+
			"X-Reins-Signature: "+fakeSignature+"\r\n\r\n", []byte(piece)))
	}
	h.healthy()
	var slowest time.Duration
	for i, c := range awaitCuts(conns, start, start.Add(10*time.Second)) {
		if c.open {
			t.Errorf("stalled chunked sender %d: still open after 10 s: want it cut at the read deadline (2 s)", i)
			continue
		}
		slowest = max(slowest, c.after)
	}
	h.healthy()
	top := peak()
	after := h.rss()
	t.Logf("server RSS: %d MiB before, %d MiB at most during 32 stalled senders (16 claiming 60 MiB), %d MiB after; the chunked ones cut after %s at most",
		before>>20, top>>20, after>>20, slowest.Round(10*time.Millisecond))
	if grew := top - before; grew > 48<<20 {
		t.Errorf("the server's memory grew by %d MiB under stalled webhook bodies: want it bounded (under 48 MiB)", grew>>20)
	}
	if slowest > 6*time.Second {
		t.Errorf("a stalled body was cut after %s: want about the read deadline, 2 s", slowest)
	}
	if n := h.hookRuns(); n != 0 {
		t.Errorf("%d runs of inbox started by deliveries nobody signed", n)
	}
	h.scan(strings.Repeat("b", 256))
}

// TestAttackWebhookBodyRefused: a delivery whose Content-Length is over max_webhook_bytes is
// answered 413 before a byte of its body is sent; one without a signature 401; one whose header
// cannot be a signature 401 without its body read; nothing starts.
func TestAttackWebhookBodyRefused(t *testing.T) {
	h := hookServer(t, `max_webhook_bytes = "64KiB"`)
	// The header only: the server answers without waiting for the body.
	c := h.dial()
	start := time.Now()
	if _, err := io.WriteString(c, "POST /v1/hooks/inbox HTTP/1.1\r\nHost: reins\r\nContent-Length: 2097152\r\nX-Reins-Signature: "+fakeSignature+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a 2 MiB delivery's header alone got no answer in %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 2 MiB delivery: %d %s, want 413", resp.StatusCode, data)
	}
	oneSentence(t, "413", problemDetail(t, string(data)))

	for _, c := range []struct {
		name, body string
		header     []string
		status     int
	}{
		{"unsigned", `{"order": 1}`, nil, http.StatusUnauthorized},
		{"signed with a guess", `{"order": 1}`, []string{trigger.SignatureHeader, trigger.Sign([]byte("guess"), []byte(`{"order": 1}`))}, http.StatusUnauthorized},
		{"not a signature", `{"order": 1}`, []string{trigger.SignatureHeader, "sha256=zz"}, http.StatusUnauthorized},
		{"a bearer token is no signature", `{"order": 1}`, []string{"Authorization", "Bearer " + attackBobToken}, http.StatusUnauthorized},
		{"too large, no length", strings.Repeat(" ", 70<<10) + "{}", []string{trigger.SignatureHeader, fakeSignature, "Transfer-Encoding", "chunked"}, http.StatusRequestEntityTooLarge},
	} {
		status, hdr, body := h.do("", "POST", "/v1/hooks/inbox", c.body, c.header...)
		if status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, status, body, c.status)
			continue
		}
		oneSentence(t, c.name, problemDetail(t, body))
		if status == http.StatusUnauthorized && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "HMAC-SHA256") {
			t.Errorf("%s: 401 with WWW-Authenticate %q", c.name, hdr.Get("WWW-Authenticate"))
		}
	}
	if n := h.hookRuns(); n != 0 {
		t.Errorf("%d runs of inbox started by refused deliveries", n)
	}
	h.healthy()
}

// TestAttackIdleConnections: 300 kept-alive connections that ask once and then say nothing are
// closed after the idle timeout (2 s here); a header sent a byte at a time is cut after the
// read-header timeout (1 s); a header over max_header_bytes is answered 431.
func TestAttackIdleConnections(t *testing.T) {
	h := hostileServer(t, "[limits]\nhttp_idle_timeout = \"2s\"\nhttp_read_header_timeout = \"1s\"\nmax_header_bytes = \"16KiB\"\n")
	var conns []net.Conn
	for i := range 300 {
		c := h.dial()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: reins\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(c)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("connection %d: %d, closed %v: want 200 kept alive", i, resp.StatusCode, resp.Close)
		}
		conns = append(conns, c)
	}
	start := time.Now()
	h.healthy()
	open, last := 0, time.Duration(0)
	for _, c := range awaitCuts(conns, start, start.Add(10*time.Second)) {
		if c.open {
			open++
		}
		last = max(last, c.after)
	}
	t.Logf("%d of 300 idle kept-alive connections still open 10 s after their last answer (idle timeout 2 s); the last closed after %s", open, last.Round(10*time.Millisecond))
	if open > 0 {
		t.Errorf("%d of 300 idle connections stayed open past the idle timeout", open)
	}

	// Slowloris: a header that never ends.
	start = time.Now()
	var slow []net.Conn
	for range 20 {
		slow = append(slow, h.stall("GET /healthz HTTP/1.1\r\nHost: reins\r\nX-Slow: ", []byte("a")))
	}
	h.healthy()
	for i, c := range awaitCuts(slow, start, start.Add(8*time.Second)) {
		if c.open || c.after > 5*time.Second {
			t.Errorf("slow header %d: still open %v after %s: want it cut after the read-header timeout (1 s)", i, c.open, c.after)
		}
	}
	status, _, _ := h.do(attackBobToken, "GET", "/v1/me", "", "X-Big", strings.Repeat("x", 32<<10))
	if status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 32 KiB header: %d, want 431", status)
	}
	h.healthy()
}

// TestAttackUnauthenticatedInFlight: with 4 deliveries stalled (max_unauthenticated_requests
// = 4), a fifth is answered 503 with Retry-After at once, never held; principals with tokens
// are served meanwhile; once the stalled ones are cut, deliveries are served again.
func TestAttackUnauthenticatedInFlight(t *testing.T) {
	h := hookServer(t, "max_unauthenticated_requests = 4\nhttp_read_timeout = \"3s\"\n")
	var conns []net.Conn
	for range 4 {
		conns = append(conns, h.stall("POST /v1/hooks/inbox HTTP/1.1\r\nHost: reins\r\nTransfer-Encoding: chunked\r\nX-Reins-Signature: "+fakeSignature+"\r\n\r\n", []byte("1\r\n{\r\n")))
	}
	// The stalled ones hold every slot once the server read their headers: a delivery (which
	// a free slot would answer 401 at once) is then refused 503.
	deadline := time.Now().Add(3 * time.Second)
	for {
		start := time.Now()
		status, hdr, body := h.do("", "POST", "/v1/hooks/inbox", `{"order": 1}`)
		took := time.Since(start)
		if took > time.Second {
			t.Fatalf("a delivery over the cap took %s to answer: want at once", took)
		}
		if status == http.StatusServiceUnavailable {
			if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("503 with Retry-After %q, want seconds", hdr.Get("Retry-After"))
			}
			oneSentence(t, "503", problemDetail(t, body))
			break
		}
		if status != http.StatusUnauthorized || time.Now().After(deadline) {
			t.Fatalf("a delivery with 4 stalled: %d %s, want 503 once they hold the slots", status, body)
		}
	}
	if status, _, body := h.do(attackBobToken, "GET", "/v1/me", ""); status != http.StatusOK {
		t.Errorf("bob while deliveries fill the cap: %d %s", status, body)
	}
	h.healthy()
	// Cut at the read deadline, the stalled ones give their slots back.
	for i, c := range awaitCuts(conns, time.Now(), time.Now().Add(10*time.Second)) {
		if c.open {
			t.Errorf("stalled delivery %d: still open 10 s later", i)
		}
	}
	if status, _, body := h.do("", "POST", "/v1/hooks/inbox", `{"order": 1}`); status != http.StatusUnauthorized {
		t.Errorf("a delivery after the stalled ones were cut: %d %s, want 401 (served)", status, body)
	}
}

// stream opens GET /v1/runs/{id}/events as the principal of token and returns its status,
// headers and, when 200, what closes it.
func (h *hostile) stream(token, id string) (int, http.Header, func()) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", h.base+"/v1/runs/"+id+"/events", nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		h.t.Fatalf("open the events of %s: %v", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, resp.Header, func() {}
	}
	closed := sync.OnceFunc(func() { cancel(); resp.Body.Close() })
	h.t.Cleanup(closed)
	return resp.StatusCode, resp.Header, closed
}

// startHold registers the workflow hold as bob and starts a run of it, which waits.
func (h *hostile) startHold() string {
	h.t.Helper()
	h.register(attackBobToken, "hold", holdWorkflow)
	return h.startAs(attackBobToken, "hold")
}

// TestAttackEventStreams: bob may hold max_event_streams_per_principal streams (2 here); his
// third is answered 429 with Retry-After, while mallory still opens hers; once bob closes one,
// he may open another.
func TestAttackEventStreams(t *testing.T) {
	h := hostileServer(t, "[limits]\nmax_event_streams_per_principal = 2\n")
	id := h.startHold()
	var closers []func()
	for i := range 2 {
		status, _, closeIt := h.stream(attackBobToken, id)
		if status != http.StatusOK {
			t.Fatalf("bob's stream %d: %d", i+1, status)
		}
		closers = append(closers, closeIt)
	}
	status, hdr, _ := h.stream(attackBobToken, id)
	if status != http.StatusTooManyRequests {
		t.Fatalf("bob's third stream: %d, want 429", status)
	}
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("429 with Retry-After %q, want seconds", hdr.Get("Retry-After"))
	}
	_, _, body := h.do(attackBobToken, "GET", "/v1/runs/"+id+"/events", "")
	oneSentence(t, "429", problemDetail(t, body))
	if !strings.Contains(body, "bob") {
		t.Errorf("the 429 does not name bob: %s", body)
	}
	for _, token := range []string{attackMalloryToken, attackViewerToken} {
		if status, _, _ := h.stream(token, id); status != http.StatusOK {
			t.Errorf("another principal's stream while bob is at his cap: %d", status)
		}
	}
	closers[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, _, _ := h.stream(attackBobToken, id)
		if status == http.StatusOK {
			break
		}
		if status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("bob's stream after he closed one: %d", status)
		}
	}
	h.healthy()
}

// TestAttackStrictBodies: a body that means one thing to one reader and another to the next
// is refused: a member name in another case, a member twice, a lone surrogate, and a 100k-deep
// input are each refused with the status docs/api.md gives, in one sentence naming the member
// or the byte; nothing starts, nothing is decided.
func TestAttackStrictBodies(t *testing.T) {
	h := hostileServer(t, "")
	h.register(attackBobToken, "hold", holdWorkflow)
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	for _, c := range []struct {
		name, body string
		status     int
		says       string
	}{
		{"a member in another case", `{"Workflow": "hold"}`, http.StatusBadRequest, `"Workflow"`},
		{"a member twice", `{"workflow": "hold", "workflow": "other"}`, http.StatusBadRequest, `"workflow" twice`},
		{"a member twice in the input", `{"workflow": "hold", "input": {"a": 1, "a": 2}}`, http.StatusBadRequest, `"a" twice`},
		{"a lone surrogate", `{"workflow": "hold", "input": "\ud800"}`, http.StatusBadRequest, "byte"},
		{"invalid UTF-8", "{\"workflow\": \"hold\", \"input\": \"\xff\"}", http.StatusBadRequest, "byte"},
		{"100k deep", `{"workflow": "hold", "input": ` + deep + `}`, http.StatusUnprocessableEntity, "256"},
		{"two values", `{"workflow": "hold"} {"workflow": "hold"}`, http.StatusBadRequest, "byte"},
	} {
		status, _, body := h.do(attackMalloryToken, "POST", "/v1/runs", c.body)
		if status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, status, body, c.status)
			continue
		}
		d := problemDetail(t, body)
		oneSentence(t, c.name, d)
		if !strings.Contains(d, c.says) {
			t.Errorf("%s: %q does not say %s", c.name, d, c.says)
		}
	}
	if status, _, body := h.do(h.admin, "GET", "/v1/runs?workflow=hold", ""); status != http.StatusOK || strings.Contains(body, `"run_id"`) {
		t.Errorf("runs of hold after refused starts: %d %s", status, body)
	}
	// A decision that says deny and approve: refused, and the run keeps waiting.
	id := h.startHold()
	status, _, body := h.do(attackMalloryToken, "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision": "deny", "decision": "approve"}`)
	if status != http.StatusBadRequest || !strings.Contains(problemDetail(t, body), `"decision" twice`) {
		t.Errorf("a decision with two decisions: %d %s, want 400 naming the member", status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, cl := h.client(ctx, h.admin)
	rec, err := cl.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunWaiting || len(rec.Run.Acts) != 0 {
		t.Errorf("after a refused decision the run is %s with acts %+v: want waiting, none", rec.Run.Status, rec.Run.Acts)
	}
	h.healthy()
}

// TestAttackAuthorizationScheme: the scheme of Authorization is matched without regard to
// case (RFC 9110): "bearer TOKEN" is bob; another scheme, or a token nobody has, is 401.
func TestAttackAuthorizationScheme(t *testing.T) {
	h := hostileServer(t, "")
	for _, c := range []struct {
		header string
		status int
	}{
		{"bearer " + attackBobToken, http.StatusOK},
		{"BEARER " + attackBobToken, http.StatusOK},
		{"Bearer  " + attackBobToken, http.StatusOK},
		{"Basic " + attackBobToken, http.StatusUnauthorized},
		{"bearer " + attackBobToken + "x", http.StatusUnauthorized},
		{"bearer", http.StatusUnauthorized},
		{"Bearertok " + attackBobToken, http.StatusUnauthorized},
	} {
		status, _, body := h.do("", "GET", "/v1/me", "", "Authorization", c.header)
		if status != c.status {
			t.Errorf("Authorization %.12q…: %d %s, want %d", c.header, status, body, c.status)
		}
		if status == http.StatusOK && !strings.Contains(body, `"bob"`) {
			t.Errorf("Authorization %.12q…: %s, want bob", c.header, body)
		}
	}
}

// aprilGate waits for april's decision: april is the approver its workflow names.
const aprilGate = `name = "april-gate"

[[steps]]
id = "ask"
type = "approval"
prompt = "Go?"
approvers = ["april"]
`

// TestAttackApproverCancels: who may cancel a run is its submitter, the approvers its
// workflow names and admins (docs/security.md's roles). vera (a viewer) gets 403; mallory, a
// submitter and approver whom bob's run does not name, gets 403 through the API and is
// recorded refused when she publishes the cancel herself, and the run keeps waiting; april,
// the approver it names, cancels it, as herself.
func TestAttackApproverCancels(t *testing.T) {
	h := hostileServer(t, "[principals.april]\ntoken_env = \"REINS_TOKEN_APRIL\"\nroles = [\"approver\"]\n", "REINS_TOKEN_APRIL="+attackAprilToken)
	h.register(attackBobToken, "april-gate", aprilGate)
	id := h.startAs(attackBobToken, "april-gate")
	if status, _, body := h.do(attackViewerToken, "POST", "/v1/runs/"+id+"/cancel", ""); status != http.StatusForbidden {
		t.Errorf("vera cancels: %d %s, want 403", status, body)
	}
	status, _, body := h.do(attackMalloryToken, "POST", "/v1/runs/"+id+"/cancel", `{"reason": "mine now"}`)
	if status != http.StatusForbidden || !strings.Contains(body, "principal mallory may not cancel this run: only its submitter (bob), the approvers its workflow names (april) and admins may") {
		t.Errorf("mallory cancels bob's run: %d %s, want 403 naming who may", status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, cl := h.client(ctx, h.admin)
	// Past the API: mallory publishes the cancel on her own subject.
	subj, err := natsbox.PrincipalSubject(id, natsbox.HumanKind, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	ev := fmt.Sprintf(`{"run_id":%q,"type":"cancel","at":%q,"item":-1,"reason":"mine now","nonce":"m-1"}`, id, time.Now().UTC().Format(time.RFC3339Nano))
	if err := h.conn(attackMalloryToken).Publish(subj, []byte(ev)); err != nil {
		t.Fatal(err)
	}
	for u, err := range cl.Watch(ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Run.Acts) > 0 {
			if a := rec.Run.Acts[0]; a.By != "mallory" || a.Refused == "" || rec.Run.Status != protocol.RunWaiting {
				t.Fatalf("after mallory's own cancel: run %s, act %+v; want waiting, her cancel refused", rec.Run.Status, a)
			}
			break
		}
	}
	if status, _, body := h.do(attackAprilToken, "POST", "/v1/runs/"+id+"/cancel", `{"reason": "not today"}`); status != http.StatusAccepted {
		t.Fatalf("april cancels: %d %s, want 202", status, body)
	}
	rec, err := cl.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCancelled {
		t.Fatalf("the run is %s after april's cancel, want cancelled", rec.Run.Status)
	}
	if n := len(rec.Run.Acts); n != 2 || rec.Run.Acts[1].By != "april" || rec.Run.Acts[1].Type != protocol.EvCancel || rec.Run.Acts[1].Refused != "" {
		t.Errorf("acts %+v: want mallory's refused, then april's cancel", rec.Run.Acts)
	}
}
