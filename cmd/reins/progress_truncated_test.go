package main

import (
	"strings"
	"testing"

	"github.com/reins-run/reins/trace"
)

// TestProgressLinesCutOff: the progress of an iteration whose reply was cut off at its output
// limit says so, whatever the reply's kind, so that its text is not read as the answer.
func TestProgressLinesCutOff(t *testing.T) {
	why := `the reply was cut off at its output limit after 4096 output tokens (finish reason "length"): not acted on`
	for _, kind := range []string{"answer", "tool_calls"} {
		lines := progressLines(&trace.Iteration{Proposal: &trace.ProposalRecord{Kind: kind, Text: "The refund is", Decision: trace.DecisionTruncated, Why: why}})
		if got := strings.Join(lines, "\n"); !strings.Contains(got, "cut off: the reply was cut off at its output limit") {
			t.Errorf("%s: progress %q does not say the reply was cut off", kind, got)
		}
	}
}
