package api_test

import (
	"net/http"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
)

// serialTOML waits for a decision, one run per customer at a time.
const serialTOML = `name = "serial"
concurrency = { key = "{{input.customer}}", limit = 1 }

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship it?"
`

// TestConcurrencyQueuedRun: a run over its concurrency key's limit is listed and shown as
// queued, with its key, and a submitter cancels it through the API; a run of another key runs.
// A workflow with a key registers like any other. Every answer is checked against the OpenAPI
// document.
func TestConcurrencyQueuedRun(t *testing.T) {
	s := newStack(t)
	s.as("sam", "PUT", "/v1/workflows/serial", serialTOML).want(t, http.StatusCreated, "register a workflow with a concurrency key")
	first := s.start(serialTOML, `{"customer": "c1"}`)
	s.waiting(first)
	second := s.startAs("sam", serialTOML, `{"customer": "c1"}`)
	s.waitFor(second, func(r *client.Record) bool { return r.Run.Status == protocol.RunQueued })
	other := s.start(serialTOML, `{"customer": "c2"}`)
	s.waiting(other)

	var list struct {
		Runs []struct {
			RunID  string `json:"run_id"`
			Status string `json:"status"`
		} `json:"runs"`
	}
	s.as("vera", "GET", "/v1/runs?status=queued", "").want(t, http.StatusOK, "list the queued runs").JSON(t, &list)
	if len(list.Runs) != 1 || list.Runs[0].RunID != second || list.Runs[0].Status != "queued" {
		t.Fatalf("queued runs %+v, want %s alone", list.Runs, second)
	}
	var detail struct {
		Status      string                      `json:"status"`
		Concurrency *protocol.ConcurrencyResult `json:"concurrency"`
		Steps       []protocol.StepResult       `json:"steps"`
	}
	s.as("vera", "GET", "/v1/runs/"+second, "").want(t, http.StatusOK, "show the queued run").JSON(t, &detail)
	if c := detail.Concurrency; detail.Status != "queued" || c == nil || c.Key != "c1" || c.Limit != 1 || c.Granted != nil {
		t.Fatalf("queued run: status %s, concurrency %+v", detail.Status, c)
	}
	if len(detail.Steps) != 1 || detail.Steps[0].Status != protocol.StepPending {
		t.Fatalf("steps of the queued run %+v, want ask pending", detail.Steps)
	}
	s.as("vera", "GET", "/v1/runs/"+first, "").want(t, http.StatusOK, "show the run holding the slot").JSON(t, &detail)
	if c := detail.Concurrency; detail.Status != "waiting" || c == nil || c.Granted == nil {
		t.Fatalf("run holding the slot: status %s, concurrency %+v", detail.Status, c)
	}
	s.as("sam", "POST", "/v1/runs/"+second+"/cancel", `{"reason": "no longer needed"}`).want(t, http.StatusAccepted, "cancel the queued run")
	if rec := s.wait(second); rec.Run.Status != protocol.RunCancelled || rec.Run.Error.Message != "no longer needed" {
		t.Fatalf("cancelled queued run: %s %+v", rec.Run.Status, rec.Run.Error)
	}
	s.as("vera", "GET", "/v1/runs?status=bogus", "").want(t, http.StatusBadRequest, "a status that is none")
}
