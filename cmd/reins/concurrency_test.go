package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/protocol"
)

// TestPrintResultConcurrency: a queued run says what it waits for; a run that got its slot
// names its key.
func TestPrintResultConcurrency(t *testing.T) {
	granted := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		res  protocol.Result
		want string
	}{
		{protocol.Result{RunID: "r1", Status: protocol.RunQueued, Concurrency: &protocol.ConcurrencyResult{Key: "cust-1", Limit: 1}},
			`run r1 queued
  queued for a slot of concurrency key "cust-1" (limit 1): it starts when a run of that key ends
`},
		{protocol.Result{RunID: "r2", Status: protocol.RunCompleted, Concurrency: &protocol.ConcurrencyResult{Key: "cust-1", Limit: 2, Granted: &granted}},
			`run r2 completed
  concurrency key "cust-1" (limit 2)
`},
	} {
		var b bytes.Buffer
		if err := printResult(&b, tc.res, false); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(b.String(), tc.want) {
			t.Fatalf("printed:\n%s\nwant it to begin with:\n%s", b.String(), tc.want)
		}
	}
}
