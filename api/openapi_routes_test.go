package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
)

// oaAnswer sends method path as the principal (or role) name ("": no token) with body of
// content type ctype, holds the answer to the OpenAPI document (api.CheckAnswer), and checks
// its status against want (0: any).
func (s *stack) oaAnswer(t *testing.T, name, method, path, ctype, body string, want int) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(s.Ctx, method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if name != "" {
		req.Header.Set("Authorization", "Bearer "+s.Tokens[name])
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	api.CheckAnswer(t, method, req.URL.Path, resp.StatusCode, resp.Header.Get("Content-Type"), data)
	if want != 0 && resp.StatusCode != want {
		t.Errorf("%s %s as %s: %d, want %d\n%s", method, path, name, resp.StatusCode, want, data)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: bytes.TrimSpace(data)}
}

const (
	oaGate = `name = "gate"

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
	oaHold = `name = "hold"

[[steps]]
id = "hold"
type = "wait_event"
event = "go"
`
)

// oaDrafter is the refund example whose agent drafts a recommendation that waits for a
// person's approval.
func oaDrafter(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../examples/refund/workflow.toml")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(string(data), `model = "investigator"`, `model = "drafter"`, 1)
}

// TestOpenAPIAnswers: every route of the table, on a real server, answers what the OpenAPI
// document says (api/openapi.json): successes and problems alike, each event stream's messages
// included. The other tests of the routes hold their answers to it too (stack.do).
func TestOpenAPIAnswers(t *testing.T) {
	s := newStack(t)
	const j = "application/json"

	// Workflows, and runs started by name.
	s.oaAnswer(t, "submitter", "PUT", "/v1/workflows/gate", "application/toml", oaGate, http.StatusCreated)
	s.oaAnswer(t, "submitter", "PUT", "/v1/workflows/gate", "application/toml", oaGate, http.StatusOK)
	s.oaAnswer(t, "submitter", "PUT", "/v1/workflows/broken", "application/toml", "name = \"broken\"\n[[steps]]\nid = \"x\"\ntype = \"nothing\"\n", http.StatusUnprocessableEntity)
	s.oaAnswer(t, "submitter", "PUT", "/v1/workflows/Bad%20Name", "application/toml", oaGate, 0)
	s.oaAnswer(t, "viewer", "PUT", "/v1/workflows/gate", "application/toml", oaGate, http.StatusForbidden)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows", "", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows/gate", "", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows/gate?version=1", "", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows/gate?version=9", "", "", http.StatusNotFound)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows/none", "", "", http.StatusNotFound)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs", j, `{"workflow": "gate", "input": {"order_id": "O-7"}, "run_id": "gate-byname"}`, http.StatusCreated)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs", j, `{"workflow": "gate", "input": {"order_id": "O-7"}, "run_id": "gate-byname"}`, http.StatusOK)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs", j, `{"workflow": "none"}`, http.StatusNotFound)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs", j, `{"workflow": 1}`, http.StatusBadRequest)
	s.oaAnswer(t, "approver", "POST", "/v1/runs", j, `{"workflow": "gate"}`, http.StatusForbidden)

	// Runs.
	gate := s.start(oaGate, `{"order_id": "O-7"}`)
	hold1, hold2 := s.start(oaHold, ""), s.start(oaHold, "")
	refund := s.start(oaDrafter(t), `{"order_id": "O-104"}`)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs", "", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs?limit=1", "", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs?status=waiting&workflow=gate", "", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs?status=bogus", "", "", http.StatusBadRequest)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs?cursor=bogus", "", "", http.StatusBadRequest)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/none", "", "", http.StatusNotFound)
	s.waiting(gate)
	s.waiting(hold1)
	s.waiting(hold2)
	rec := s.waiting(refund)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund, "", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund+"/iterations/investigate/1", "", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund+"/iterations/investigate/1?full=true", "", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund+"/iterations/investigate/99", "", "", http.StatusNotFound)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund+"/iterations/investigate/x", "", "", http.StatusBadRequest)

	res := client.NewResult(nil, rec)
	if len(res.Waiting) != 1 || len(res.Waiting[0].Pending) != 1 {
		t.Fatalf("run %s waits for %+v, want one pending call", refund, res.Waiting)
	}
	call := res.Waiting[0].Pending[0].CallID
	s.oaAnswer(t, "viewer", "POST", "/v1/runs/"+refund+"/approvals/"+call, j, `{"decision": "approve"}`, http.StatusForbidden)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+refund+"/approvals/nothing", j, `{"decision": "approve"}`, http.StatusNotFound)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+refund+"/approvals/"+call, j, `{"decision": "maybe"}`, http.StatusBadRequest)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+refund+"/approvals/"+call, j, `{"decision": "approve", "message": "ok"}`, http.StatusOK)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+gate+"/approvals/ask", j, `{"decision": "approve"}`, http.StatusOK)
	s.wait(refund)
	s.wait(gate)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+gate+"/approvals/ask", j, `{"decision": "approve"}`, http.StatusConflict)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+hold1+"/signals/go", j, `{"data": {"n": 1}}`, http.StatusAccepted)
	s.wait(hold1)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+hold2+"/resume", j, `{"input": "hi"}`, http.StatusNotFound)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+gate+"/resume", j, `{"input": "hi"}`, http.StatusConflict)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+hold2+"/resume", j, `{}`, http.StatusBadRequest)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs/"+hold2+"/signals/go", j, `{}`, http.StatusForbidden)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs/"+hold2+"/cancel", j, `{"reason": "enough"}`, http.StatusAccepted)
	if r := s.wait(hold2); r.Run.Status != protocol.RunCancelled {
		t.Errorf("run %s ended %s, want cancelled", hold2, r.Run.Status)
	}
	s.oaAnswer(t, "submitter", "POST", "/v1/runs/"+hold2+"/cancel", "", "", http.StatusConflict)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs/none/cancel", "", "", http.StatusNotFound)

	// Each finished run: the run, and its events to the end.
	for _, id := range []string{gate, hold1, hold2, refund} {
		var view api.RunDetail
		s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+id, "", "", http.StatusOK).JSON(t, &view)
		if len(view.Trace) == 0 || view.Graph == nil || len(view.Graph.Nodes) == 0 {
			t.Errorf("run %s: no trace or graph: %+v", id, view)
		}
		a := s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+id+"/events", "", "", http.StatusOK)
		events, data := api.ParseSSE(a.Body)
		if len(events) == 0 || events[len(events)-1] != "end" {
			t.Errorf("the events of %s do not end with end: %s", id, a.Body)
			continue
		}
		var end struct{ Status string }
		if err := json.Unmarshal(data[len(data)-1], &end); err != nil || end.Status != string(view.Status) {
			t.Errorf("the end of %s's events is %s, want status %s", id, data[len(data)-1], view.Status)
		}
	}
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/none/events", "", "", http.StatusNotFound)
}
