package api_test

import (
	"testing"
	"time"

	"github.com/reins-run/reins/client"
)

// TestWorkflowsFromRuns: GET /v1/workflows names the workflows of the kept runs beside the
// registered ones, those of files nobody registered included, with their number of runs and
// the newest; [] of both on a server without either.
func TestWorkflowsFromRuns(t *testing.T) {
	s := newStack(t)
	a := s.as("vera", "GET", "/v1/workflows", "").want(t, 200, "the list of an empty server")
	if wfs, ok := a.Obj["workflows"].([]any); !ok || len(wfs) != 0 {
		t.Errorf("an empty server's list: %s", a.Body)
	}
	if fr, ok := a.Obj["from_runs"].([]any); !ok || len(fr) != 0 {
		t.Errorf("an empty server's list: %s", a.Body)
	}
	const file = `name = "ran_only"

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship it?"
`
	var last *client.Record
	for range 2 {
		last = s.waiting(s.start(file, ""))
	}
	a = s.as("vera", "GET", "/v1/workflows", "").want(t, 200, "the list")
	var got struct {
		Workflows []any `json:"workflows"`
		FromRuns  []struct {
			Name          string    `json:"name"`
			Runs          int       `json:"runs"`
			LastRunID     string    `json:"last_run_id"`
			LastStartedAt time.Time `json:"last_started_at"`
		} `json:"from_runs"`
	}
	a.JSON(t, &got)
	if len(got.Workflows) != 0 || len(got.FromRuns) != 1 {
		t.Fatalf("the list: %s, want no registered workflow and one from runs", a.Body)
	}
	fr := got.FromRuns[0]
	if fr.Name != "ran_only" || fr.Runs != 2 || fr.LastRunID != last.Run.ID || !fr.LastStartedAt.Equal(last.Run.StartedAt) {
		t.Errorf("from runs: %+v, want ran_only with 2 runs, the newest %s started at %s", fr, last.Run.ID, last.Run.StartedAt)
	}
}
