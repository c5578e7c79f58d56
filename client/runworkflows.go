package client

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
)

// RunWorkflow is a workflow that runs were started of, as the index of runs knows it: its
// definition's name, how many runs of it are kept (sub-runs aside) and which is the newest.
type RunWorkflow struct {
	Name      string
	Runs      int
	LastRunID string
	// LastStarted is when the newest run started.
	LastStarted time.Time
}

// RunWorkflows lists the workflows of the kept runs by name, registered or not (a run of
// reins run FILE registers nothing). It reads the index's keys only, never a run's record,
// so it costs what one page of Query does. A name the index cannot hold as a token (one with
// a dot, a space or a wildcard) is left out.
func (c *Client) RunWorkflows(ctx context.Context) ([]RunWorkflow, error) {
	if _, _, err := c.buckets(ctx); err != nil {
		return nil, err
	}
	set, err := natsbox.StoredKeys(ctx, c.js, c.names.StatusBucket(), wire.StatusFilter("", ""))
	if err != nil {
		return nil, fmt.Errorf("client: list the workflows of runs: %w", err)
	}
	type seen struct {
		runs map[string]bool
		last wire.IndexKey
	}
	by := map[string]*seen{}
	for k := range set {
		ik, ok := wire.ParseStatusKey(k)
		if !ok || ik.Workflow == "-" || strings.Contains(ik.RunID, "/") {
			continue
		}
		s := by[ik.Workflow]
		if s == nil {
			s = &seen{runs: map[string]bool{}}
			by[ik.Workflow] = s
		}
		// A run whose status changes has two keys for a moment, with one cursor.
		s.runs[ik.RunID] = true
		if ik.Cursor > s.last.Cursor {
			s.last = ik
		}
	}
	out := make([]RunWorkflow, 0, len(by))
	for name, s := range by {
		out = append(out, RunWorkflow{Name: name, Runs: len(s.runs), LastRunID: s.last.RunID, LastStarted: s.last.Started()})
	}
	slices.SortFunc(out, func(a, b RunWorkflow) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}
