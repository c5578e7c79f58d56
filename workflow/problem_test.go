package workflow_test

import (
	"testing"

	"github.com/reins-run/reins/workflow"
)

// TestProblemString holds both forms of a problem to the text users read: a workflow's, with
// its code, and an operator's configuration's, without one (the same type serves both).
func TestProblemString(t *testing.T) {
	for _, tc := range []struct {
		p    workflow.Problem
		want string
	}{
		{workflow.Problem{Code: workflow.EType, File: "wf.toml", Line: 3, Key: "steps[0].id", Message: "expected a string"}, "wf.toml:3: E_TYPE steps[0].id: expected a string"},
		{workflow.Problem{Code: workflow.EParse, File: "wf.toml", Message: "invalid TOML"}, "wf.toml: E_PARSE: invalid TOML"},
		{workflow.Problem{Code: workflow.EType, Line: 3, Key: "input_schema", Message: "is not valid JSON"}, "E_TYPE input_schema: is not valid JSON"},
		{workflow.Problem{Code: workflow.ENoStart, Message: "no start"}, "E_NO_START: no start"},
		{workflow.Problem{File: "reins.toml", Line: 7, Key: "providers.x.kind", Message: "unknown kind"}, "reins.toml:7: key providers.x.kind: unknown kind"},
		{workflow.Problem{File: "reins.toml", Line: 2, Message: "not valid TOML"}, "reins.toml:2: not valid TOML"},
		{workflow.Problem{File: "reins.toml", Message: "cannot read it"}, "reins.toml: cannot read it"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%+v renders %q, want %q", tc.p, got, tc.want)
		}
	}
	ps := workflow.Problems{{Code: workflow.EType, Key: "a", Message: "one"}, {File: "f", Key: "b", Message: "two"}}
	if got, want := ps.Error(), "E_TYPE a: one\nf: key b: two"; got != want {
		t.Errorf("Problems.Error() = %q, want %q", got, want)
	}
}
