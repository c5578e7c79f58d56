package builtin

import (
	"testing"

	"github.com/reins-run/reins/trace"
)

// TestToolOutcome: the outcome label of each kind of call an iteration records; the calls
// that wait are left to the part that ends them.
func TestToolOutcome(t *testing.T) {
	for _, tc := range []struct {
		name string
		call trace.CallRecord
		want string
	}{
		{"ran", trace.CallRecord{Decision: trace.DecisionAccept, Executed: true}, "ok"},
		{"failed", trace.CallRecord{Decision: trace.DecisionAccept, Executed: true, Error: "boom"}, "error"},
		{"denied", trace.CallRecord{Decision: "approval_required", Approval: "denied"}, "denied"},
		{"approved and ran", trace.CallRecord{Decision: "approval_required", Approval: "approved", Executed: true}, "ok"},
		{"invalid", trace.CallRecord{Decision: trace.DecisionInvalid}, "invalid"},
		{"forbidden", trace.CallRecord{Decision: trace.DecisionForbid}, "forbidden"},
		{"stopped before it ran", trace.CallRecord{Decision: trace.DecisionAccept}, "not_run"},
		{"waits for a person", trace.CallRecord{Decision: "approval_required", Approval: "pending"}, ""},
		{"waits for its sub-run", trace.CallRecord{Decision: trace.DecisionAccept, SubRun: true}, ""},
	} {
		if got := toolOutcome(tc.call); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
