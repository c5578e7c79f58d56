package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
)

// stack is the API on a real server: an embedded NATS server, the engine and the built-in
// workers, as reins serve runs them.
type stack struct {
	base string
	doc  *openAPIDocument
}

func startStack(t *testing.T) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h, err := host.StartEmbedded(ctx, t.TempDir(), host.Config{Engine: true, SaveWindow: -1,
		Register: func(w *worker.Worker) error {
			return builtin.Register(w, builtin.Config{}, protocol.HandlerLLM, protocol.HandlerAgent)
		}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{Box: h.Box(), Principals: oaPrincipals(), Metrics: http.NotFoundHandler()}))
	t.Cleanup(func() {
		srv.Close()
		cancel()
		h.Stop()
	})
	return &stack{base: srv.URL, doc: loadOpenAPI(t)}
}

// do sends a request as the principal of role ("": none), checks the answer against the
// OpenAPI document and its status against want (0: any), and returns it.
func (s *stack) do(t *testing.T, role, method, path, ctype, body string, want int) (int, []byte) {
	t.Helper()
	var r *strings.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	var req *http.Request
	var err error
	if r != nil {
		req, err = http.NewRequestWithContext(t.Context(), method, s.base+path, r)
	} else {
		req, err = http.NewRequestWithContext(t.Context(), method, s.base+path, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if role != "" {
		req.Header.Set("Authorization", "Bearer "+oaTokens[role])
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	got := checkHTTPResponse(t, s.doc, resp)
	if want != 0 && resp.StatusCode != want {
		t.Errorf("%s %s as %s: %d, want %d\n%s", method, path, role, resp.StatusCode, want, oaClip(got))
	}
	return resp.StatusCode, got
}

func (s *stack) json(t *testing.T, role, method, path, body string, want int) (int, []byte) {
	t.Helper()
	return s.do(t, role, method, path, "application/json", body, want)
}

// await polls the run until its status is one of want.
func (s *stack) await(t *testing.T, id string, want ...protocol.RunStatus) RunDetail {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := s.json(t, "viewer", "GET", "/v1/runs/"+id, "", http.StatusOK)
		var d RunDetail
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatalf("GET /v1/runs/%s: %v", id, err)
		}
		for _, w := range want {
			if d.Status == w {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s after 30s, want %v", id, d.Status, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const (
	stackGate = `name = "gate"

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship order {{input.order_id}}?"

[[steps]]
id = "ship"
type = "terminate"

[[edges]]
from = "ask"
to = "ship"
when = "approved"
`
	stackHold = `name = "hold"

[[steps]]
id = "hold"
type = "wait_event"
event = "go"
`
)

// TestOpenAPIAnswers: every route of the table, on a real server, answers what the OpenAPI
// document says: successes and problems alike, the event stream's messages included.
func TestOpenAPIAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	s := startStack(t)
	refund, err := os.ReadFile("../examples/refund/workflow.toml")
	if err != nil {
		t.Fatal(err)
	}
	drafter := strings.Replace(string(refund), `model = "investigator"`, `model = "drafter"`, 1)

	// Workflows.
	s.do(t, "submitter", "PUT", "/v1/workflows/gate", "application/toml", stackGate, http.StatusCreated)
	s.do(t, "submitter", "PUT", "/v1/workflows/gate", "application/toml", stackGate, http.StatusOK)
	s.do(t, "submitter", "PUT", "/v1/workflows/hold", "application/toml", stackHold, http.StatusCreated)
	s.do(t, "submitter", "PUT", "/v1/workflows/refund", "application/toml", drafter, http.StatusCreated)
	s.do(t, "submitter", "PUT", "/v1/workflows/broken", "application/toml", "name = \"broken\"\n[[steps]]\nid = \"x\"\ntype = \"nothing\"\n", http.StatusUnprocessableEntity)
	s.do(t, "submitter", "PUT", "/v1/workflows/Bad%20Name", "application/toml", stackGate, 0)
	s.do(t, "viewer", "PUT", "/v1/workflows/gate", "application/toml", stackGate, http.StatusForbidden)
	s.json(t, "viewer", "GET", "/v1/workflows", "", http.StatusOK)
	s.json(t, "viewer", "GET", "/v1/workflows/gate", "", http.StatusOK)
	s.json(t, "viewer", "GET", "/v1/workflows/gate?version=1", "", http.StatusOK)
	s.json(t, "viewer", "GET", "/v1/workflows/gate?version=9", "", http.StatusNotFound)
	s.json(t, "viewer", "GET", "/v1/workflows/none", "", http.StatusNotFound)

	// Starting runs.
	s.json(t, "submitter", "POST", "/v1/runs", `{"workflow": "gate", "input": {"order_id": "O-7"}, "run_id": "gate-1"}`, http.StatusCreated)
	s.json(t, "submitter", "POST", "/v1/runs", `{"workflow": "gate", "input": {"order_id": "O-7"}, "run_id": "gate-1"}`, http.StatusOK)
	s.json(t, "submitter", "POST", "/v1/runs", `{"workflow": "hold", "run_id": "hold-1"}`, http.StatusCreated)
	s.json(t, "submitter", "POST", "/v1/runs", `{"workflow": "hold", "run_id": "hold-2"}`, http.StatusCreated)
	s.json(t, "submitter", "POST", "/v1/runs", `{"workflow": "refund", "input": {"order_id": "O-104"}, "run_id": "refund-1"}`, http.StatusCreated)
	s.json(t, "submitter", "POST", "/v1/runs", `{"workflow": "none"}`, http.StatusNotFound)
	s.json(t, "submitter", "POST", "/v1/runs", `{"workflow": 1}`, http.StatusBadRequest)
	s.json(t, "approver", "POST", "/v1/runs", `{"workflow": "gate"}`, http.StatusForbidden)

	// Reading runs.
	s.json(t, "viewer", "GET", "/v1/runs", "", http.StatusOK)
	s.json(t, "viewer", "GET", "/v1/runs?limit=1", "", http.StatusOK)
	s.json(t, "viewer", "GET", "/v1/runs?status=waiting&workflow=gate", "", http.StatusOK)
	s.json(t, "viewer", "GET", "/v1/runs?status=bogus", "", http.StatusBadRequest)
	s.json(t, "viewer", "GET", "/v1/runs?cursor=bogus", "", http.StatusBadRequest)
	s.json(t, "viewer", "GET", "/v1/runs/none", "", http.StatusNotFound)
	s.await(t, "gate-1", protocol.RunWaiting)
	s.await(t, "hold-1", protocol.RunWaiting, protocol.RunRunning)
	refundRun := s.await(t, "refund-1", protocol.RunWaiting)
	s.json(t, "viewer", "GET", "/v1/runs/refund-1/iterations/investigate/1", "", http.StatusOK)
	s.json(t, "viewer", "GET", "/v1/runs/refund-1/iterations/investigate/1?full=true", "", http.StatusOK)
	s.json(t, "viewer", "GET", "/v1/runs/refund-1/iterations/investigate/99", "", http.StatusNotFound)
	s.json(t, "viewer", "GET", "/v1/runs/refund-1/iterations/investigate/x", "", http.StatusBadRequest)

	// Deciding.
	if len(refundRun.Waiting) != 1 || len(refundRun.Waiting[0].Pending) != 1 {
		t.Fatalf("refund-1 waits for %+v, want one pending call", refundRun.Waiting)
	}
	callID := refundRun.Waiting[0].Pending[0].CallID
	s.json(t, "viewer", "POST", "/v1/runs/refund-1/approvals/"+callID, `{"decision": "approve"}`, http.StatusForbidden)
	s.json(t, "approver", "POST", "/v1/runs/refund-1/approvals/nothing", `{"decision": "approve"}`, http.StatusNotFound)
	s.json(t, "approver", "POST", "/v1/runs/refund-1/approvals/"+callID, `{"decision": "maybe"}`, http.StatusBadRequest)
	s.json(t, "approver", "POST", "/v1/runs/refund-1/approvals/"+callID, `{"decision": "approve", "message": "ok"}`, http.StatusOK)
	s.json(t, "approver", "POST", "/v1/runs/gate-1/approvals/ask", `{"decision": "approve"}`, http.StatusOK)
	s.await(t, "refund-1", protocol.RunCompleted)
	s.await(t, "gate-1", protocol.RunCompleted)
	s.json(t, "approver", "POST", "/v1/runs/gate-1/approvals/ask", `{"decision": "approve"}`, http.StatusConflict)
	s.json(t, "approver", "POST", "/v1/runs/hold-1/signals/go", `{"data": {"n": 1}}`, http.StatusAccepted)
	s.await(t, "hold-1", protocol.RunCompleted)
	s.json(t, "approver", "POST", "/v1/runs/hold-2/resume", `{"input": "hi"}`, 0)
	s.json(t, "approver", "POST", "/v1/runs/gate-1/resume", `{"input": "hi"}`, 0)
	s.json(t, "submitter", "POST", "/v1/runs/hold-2/signals/go", `{}`, http.StatusForbidden)

	// Cancelling.
	s.json(t, "submitter", "POST", "/v1/runs/hold-2/cancel", `{"reason": "enough"}`, http.StatusAccepted)
	s.await(t, "hold-2", protocol.RunCancelled)
	s.json(t, "submitter", "POST", "/v1/runs/hold-2/cancel", "", http.StatusConflict)
	s.json(t, "submitter", "POST", "/v1/runs/none/cancel", "", http.StatusNotFound)

	// Each finished run, its events to the end.
	for _, id := range []string{"gate-1", "hold-1", "hold-2", "refund-1"} {
		_, body := s.do(t, "viewer", "GET", "/v1/runs/"+id+"/events", "", "", http.StatusOK)
		msgs := oaParseSSE(body)
		if len(msgs) == 0 || msgs[len(msgs)-1].event != "end" {
			t.Errorf("the events of %s do not end with end: %s", id, oaClip(body))
		}
		s.json(t, "viewer", "GET", "/v1/runs/"+id, "", http.StatusOK)
	}
	s.do(t, "viewer", "GET", "/v1/runs/none/events", "", "", http.StatusNotFound)
	s.json(t, "viewer", "GET", "/v1/runs?status=completed", "", http.StatusOK)
}
