package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
)

// oaAnswer sends method path as the principal (or role) name with body (stack.as: the answer
// is held to the OpenAPI document), and checks its status against want (0: any).
func (s *stack) oaAnswer(t *testing.T, name, method, path, body string, want int) answer {
	t.Helper()
	a := s.as(name, method, path, body)
	if want != 0 && a.Status != want {
		t.Errorf("%s %s as %s: %d, want %d\n%s", method, path, name, a.Status, want, a.Body)
	}
	return a
}

// oaGate waits for a decision on shipping the order of its input.
const oaGate = `name = "gate"

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

	// Workflows, and runs started by name.
	s.oaAnswer(t, "submitter", "PUT", "/v1/workflows/gate", oaGate, http.StatusCreated)
	s.oaAnswer(t, "submitter", "PUT", "/v1/workflows/gate", oaGate, http.StatusOK)
	s.oaAnswer(t, "submitter", "PUT", "/v1/workflows/broken", "name = \"broken\"\n[[steps]]\nid = \"x\"\ntype = \"nothing\"\n", http.StatusUnprocessableEntity)
	s.oaAnswer(t, "submitter", "PUT", "/v1/workflows/Bad%20Name", oaGate, 0)
	s.oaAnswer(t, "viewer", "PUT", "/v1/workflows/gate", oaGate, http.StatusForbidden)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows/gate", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows/gate?version=1", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows/gate?version=9", "", http.StatusNotFound)
	s.oaAnswer(t, "viewer", "GET", "/v1/workflows/none", "", http.StatusNotFound)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs", `{"workflow": "gate", "input": {"order_id": "O-7"}, "run_id": "gate-byname"}`, http.StatusCreated)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs", `{"workflow": "gate", "input": {"order_id": "O-7"}, "run_id": "gate-byname"}`, http.StatusOK)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs", `{"workflow": "none"}`, http.StatusNotFound)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs", `{"workflow": 1}`, http.StatusBadRequest)
	s.oaAnswer(t, "approver", "POST", "/v1/runs", `{"workflow": "gate"}`, http.StatusForbidden)

	// Runs.
	gate := s.start(oaGate, `{"order_id": "O-7"}`)
	hold1, hold2 := s.start(holdTOML, ""), s.startAs("sam", holdTOML, "") // hold2: sam's, whom it may cancel
	refund := s.start(oaDrafter(t), `{"order_id": "O-104"}`)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs?limit=1", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs?status=waiting&workflow=gate", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs?status=bogus", "", http.StatusBadRequest)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs?cursor=bogus", "", http.StatusBadRequest)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/none", "", http.StatusNotFound)
	s.waiting(gate)
	s.waiting(hold1)
	s.waiting(hold2)
	rec := s.waiting(refund)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund, "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund+"/iterations/investigate/1", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund+"/iterations/investigate/1?full=true", "", http.StatusOK)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund+"/iterations/investigate/99", "", http.StatusNotFound)
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+refund+"/iterations/investigate/x", "", http.StatusBadRequest)

	res := client.NewResult(nil, rec)
	if len(res.Waiting) != 1 || len(res.Waiting[0].Pending) != 1 {
		t.Fatalf("run %s waits for %+v, want one pending call", refund, res.Waiting)
	}
	call := res.Waiting[0].Pending[0].CallID
	s.oaAnswer(t, "viewer", "POST", "/v1/runs/"+refund+"/approvals/"+call, `{"decision": "approve"}`, http.StatusForbidden)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+refund+"/approvals/nothing", `{"decision": "approve"}`, http.StatusNotFound)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+refund+"/approvals/"+call, `{"decision": "maybe"}`, http.StatusBadRequest)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+refund+"/approvals/"+call, `{"decision": "approve", "message": "ok"}`, http.StatusOK)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+gate+"/approvals/ask", `{"decision": "approve"}`, http.StatusOK)
	s.wait(refund)
	s.wait(gate)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+gate+"/approvals/ask", `{"decision": "approve"}`, http.StatusConflict)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+hold1+"/signals/go", `{"data": {"n": 1}}`, http.StatusForbidden) // not named by the workflow
	s.oaAnswer(t, "admin", "POST", "/v1/runs/"+hold1+"/signals/go", `{"data": {"n": 1}}`, http.StatusAccepted)
	s.wait(hold1)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+hold2+"/resume", `{"input": "hi"}`, http.StatusNotFound)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+gate+"/resume", `{"input": "hi"}`, http.StatusConflict)
	s.oaAnswer(t, "approver", "POST", "/v1/runs/"+hold2+"/resume", `{}`, http.StatusBadRequest)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs/"+hold2+"/signals/go", `{}`, http.StatusForbidden)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs/"+hold2+"/cancel", `{"reason": "enough"}`, http.StatusAccepted)
	if r := s.wait(hold2); r.Run.Status != protocol.RunCancelled {
		t.Errorf("run %s ended %s, want cancelled", hold2, r.Run.Status)
	}
	s.oaAnswer(t, "submitter", "POST", "/v1/runs/"+hold2+"/cancel", "", http.StatusConflict)
	s.oaAnswer(t, "submitter", "POST", "/v1/runs/none/cancel", "", http.StatusNotFound)

	// Each finished run: the run, and its events to the end.
	for _, id := range []string{gate, hold1, hold2, refund} {
		var view api.RunDetail
		s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+id, "", http.StatusOK).JSON(t, &view)
		if len(view.Trace) == 0 || view.Graph == nil || len(view.Graph.Nodes) == 0 {
			t.Errorf("run %s: no trace or graph: %+v", id, view)
		}
		a := s.oaAnswer(t, "viewer", "GET", "/v1/runs/"+id+"/events", "", http.StatusOK)
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
	s.oaAnswer(t, "viewer", "GET", "/v1/runs/none/events", "", http.StatusNotFound)
}
