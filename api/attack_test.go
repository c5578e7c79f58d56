package api_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/reins-run/reins/protocol"
)

// TestAttacks tries what a hostile page or user would against a shared server's API, and checks
// that each is refused: a page of another origin cannot read an answer (no CORS), a token
// outside the Authorization header (a query string, a cookie) authenticates nobody, a name the
// caller types is not who acts, a worker's token reads nothing, and a token sent is never
// echoed in an answer or written to the API's log.
func TestAttacks(t *testing.T) {
	var logged bytes.Buffer
	s := newStackWith(t, stackOptions{Log: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	id := s.start(reviewTOML, "")
	s.waiting(id)
	raw := func(method, path string, header http.Header) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(s.Ctx, method, s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range header {
			req.Header[k] = vs
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	viewer := s.Tokens["viewer"]

	t.Run("another origin", func(t *testing.T) {
		for _, method := range []string{"OPTIONS", "GET"} {
			h := http.Header{"Origin": {"https://evil.example"}, "Access-Control-Request-Method": {"POST"},
				"Authorization": {"Bearer " + viewer}}
			resp, _ := raw(method, "/v1/runs/"+id, h)
			for k := range resp.Header {
				if strings.HasPrefix(strings.ToLower(k), "access-control-") {
					t.Errorf("%s with Origin evil.example answered the CORS header %s: %q", method, k, resp.Header.Get(k))
				}
			}
		}
	})

	t.Run("a token outside the header", func(t *testing.T) {
		for _, path := range []string{"/v1/runs?token=" + viewer, "/v1/runs?access_token=" + viewer} {
			if resp, body := raw("GET", path, nil); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, viewer) {
				t.Errorf("GET %s: %d %s, want 401 without the token", strings.Replace(path, viewer, "TOKEN", 1), resp.StatusCode, body)
			}
		}
		for _, cookie := range []string{"token=" + viewer, "Authorization=Bearer " + viewer, "reins_token=" + viewer} {
			if resp, _ := raw("GET", "/v1/runs", http.Header{"Cookie": {cookie}}); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET /v1/runs with a cookie: %d, want 401", resp.StatusCode)
			}
		}
	})

	t.Run("a typed name is not who acts", func(t *testing.T) {
		// bob decides, claiming to be alice: the body takes no such member, and nothing is decided.
		for _, body := range []string{`{"decision":"approve","by":"alice"}`, `{"decision":"approve","principal":"alice"}`} {
			if a := s.as("bob", "POST", "/v1/runs/"+id+"/approvals/ask", body); a.Status != http.StatusBadRequest {
				t.Errorf("approve with %s: %d %s, want 400", body, a.Status, a.Body)
			}
		}
		assertWaiting(t, s, id)
		if a := s.as("bob", "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision":"approve"}`); a.Status != http.StatusOK {
			t.Fatalf("bob approves: %d %s", a.Status, a.Body)
		}
		if rec := s.wait(id); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s", rec.Run.Status)
		}
		if by := decisionBy(t, s, id); by != "bob" {
			t.Errorf("the decision is by %q, want bob", by)
		}
	})

	t.Run("a worker's token", func(t *testing.T) {
		for _, path := range []string{"/v1/runs", "/v1/runs/" + id, "/v1/workflows", "/v1/runs/" + id + "/events"} {
			if a := s.as("worker", "GET", path, ""); a.Status != http.StatusForbidden {
				t.Errorf("a worker GETs %s: %d, want 403", path, a.Status)
			}
		}
	})

	t.Run("tokens are never echoed or logged", func(t *testing.T) {
		forged := "tok-forged-" + strings.Repeat("x", 24)
		for _, path := range []string{"/v1/runs", "/v1/runs/" + id, "/v1/workflows"} {
			resp, body := raw("GET", path, http.Header{"Authorization": {"Bearer " + forged}})
			if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, forged) {
				t.Errorf("GET %s with a forged token: %d %s", path, resp.StatusCode, body)
			}
		}
		for _, tok := range []string{forged, viewer, s.Tokens["approver"]} {
			if strings.Contains(logged.String(), tok) {
				t.Errorf("the API's log holds a token:\n%s", logged.String())
			}
		}
	})
}
