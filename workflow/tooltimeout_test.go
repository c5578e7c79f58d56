package workflow_test

import (
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/workflow"
)

// TestToolTimeout: a tool's timeout loads as a duration; a negative one, or one on a tool that
// runs a sub-run, is one problem naming the key.
func TestToolTimeout(t *testing.T) {
	const head = "name = \"wf\"\nstart = \"a\"\n[models.m]\nprovider = \"scripted\"\nscript = [{ text = \"hi\" }]\n[[steps]]\nid = \"a\"\ntype = \"agent\"\nmodel = \"m\"\ngoal = \"g\"\ntools = [\"t\"]\n[[steps]]\nid = \"helper\"\ntype = \"agent\"\nmodel = \"m\"\ngoal = \"g\"\n"
	for _, tc := range []struct{ name, tool, want string }{
		{"valid", "[tools.t]\nmock = [{ output = 1 }]\ntimeout = \"90s\"\n", ""},
		{"negative", "[tools.t]\nmock = [{ output = 1 }]\ntimeout = \"-1s\"\n", `E_BAD_DURATION tools.t.timeout: duration "-1s" is negative`},
		{"sub-run", "[tools.t]\nagent = \"helper\"\ntimeout = \"1m\"\n", `E_BAD_VALUE tools.t.timeout: tool "t" runs a sub-run, which a timeout does not bound: bound the sub-run's steps instead`},
		{"not a duration", "[tools.t]\nmock = [{ output = 1 }]\ntimeout = \"soon\"\n", "tools.t.timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def, ps := workflow.Parse("wf.toml", []byte(head+tc.tool))
			if len(ps) == 0 {
				ps = nil
				for _, p := range workflow.Validate(def, workflow.Options{}) {
					if p.Key == "tools.t.timeout" { // the rest of the file is beside the point
						ps = append(ps, p)
					}
				}
			}
			switch {
			case tc.want == "" && len(ps) > 0:
				t.Fatal(ps)
			case tc.want == "":
				if d := def.Tools["t"].Timeout.Std(); d != 90*time.Second {
					t.Errorf("timeout %s, want 1m30s", d)
				}
			case len(ps) != 1 || !strings.Contains(ps[0].String(), tc.want):
				t.Fatalf("problems %v, want one with %q", ps, tc.want)
			}
		})
	}
}
