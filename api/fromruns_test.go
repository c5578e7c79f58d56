package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
)

// TestWorkflowsFromRuns: GET /v1/workflows names the workflows of the kept runs beside the
// registered ones, those of files nobody registered included, with their number of runs, the
// newest and the names they are registered under; [] of both on a server without either.
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
			RegisteredAs  []string  `json:"registered_as"`
		} `json:"from_runs"`
	}
	a.JSON(t, &got)
	if len(got.Workflows) != 0 || len(got.FromRuns) != 1 {
		t.Fatalf("the list: %s, want no registered workflow and one from runs", a.Body)
	}
	fr := got.FromRuns[0]
	if fr.Name != "ran_only" || fr.Runs != 2 || fr.LastRunID != last.Run.ID || !fr.LastStartedAt.Equal(last.Run.StartedAt) || fr.RegisteredAs == nil || len(fr.RegisteredAs) != 0 {
		t.Errorf("from runs: %+v, want ran_only with 2 runs, the newest %s started at %s, registered as nothing", fr, last.Run.ID, last.Run.StartedAt)
	}

	// Registered under a name of its own, its runs say so.
	s.as("sam", "PUT", "/v1/workflows/shipping", file).want(t, 201, "the registration")
	a = s.as("vera", "GET", "/v1/workflows", "").want(t, 200, "the list")
	a.JSON(t, &got)
	if len(got.Workflows) != 1 || len(got.FromRuns) != 1 || fmt.Sprint(got.FromRuns[0].RegisteredAs) != "[shipping]" {
		t.Errorf("the list: %s, want ran_only registered as shipping", a.Body)
	}
}
