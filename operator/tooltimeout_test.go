package operator_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/workflow"
)

// TestToolTimeouts: tool_timeout and max_tool_timeout load, default to a minute and an hour,
// and each bad value is one problem naming the key; a workflow's tool asking for more than the
// cap is refused at submission (E_OVER_LIMIT), one within it passes.
func TestToolTimeouts(t *testing.T) {
	if l := operator.Default().Limits; l.ToolTimeout != time.Minute || l.MaxToolTimeout != time.Hour {
		t.Fatalf("defaults: %s, %s; want 1m, 1h", l.ToolTimeout, l.MaxToolTimeout)
	}
	cfg, err := operator.Parse("ops.toml", []byte("[limits]\ntool_timeout = \"2m\"\nmax_tool_timeout = \"10m\"\n"))
	if err != nil || cfg.Limits.ToolTimeout != 2*time.Minute || cfg.Limits.MaxToolTimeout != 10*time.Minute {
		t.Fatalf("limits %+v (%v)", cfg.Limits, err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"zero", "[limits]\ntool_timeout = \"0s\"\n", `bad.toml:2: key limits.tool_timeout: want a duration of more than 0 and at most 24h, such as "5m"`},
		{"over a day", "[limits]\nmax_tool_timeout = \"25h\"\n", `bad.toml:2: key limits.max_tool_timeout: want a duration of more than 0 and at most 24h, such as "5m"`},
		{"a number", "[limits]\ntool_timeout = 30\n", `bad.toml:2: key limits.tool_timeout: want a duration: a string such as "5m"`},
		{"over its cap", "[limits]\ntool_timeout = \"2h\"\n", "bad.toml:2: key limits.tool_timeout: 2h0m0s is more than max_tool_timeout (1h0m0s): the default of a tool's timeout must be within its cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := operator.Parse("bad.toml", []byte(tc.file))
			var ps operator.Problems
			if !errors.As(err, &ps) || len(ps) != 1 || ps[0].String() != tc.want {
				t.Fatalf("Parse = %v\nwant one problem: %s", err, tc.want)
			}
		})
	}
	def, ps := workflow.Parse("wf.toml", []byte(`name = "wf"
[models.m]
provider = "scripted"
script = [{ text = "hi" }]
[tools.slow]
mock = [{ output = { ok = true } }]
timeout = "11m"
[tools.quick]
mock = [{ output = { ok = true } }]
timeout = "10m"
[[steps]]
id = "a"
type = "agent"
model = "m"
goal = "g"
tools = ["slow", "quick"]
`))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	got := operator.CheckWorkflow(cfg, def)
	want := "wf.toml:7: E_OVER_LIMIT tools.slow.timeout: tool slow's timeout asks for 11m0s, more than the server's limits.max_tool_timeout of 10m0s: set a lower timeout"
	if len(got) != 1 || !strings.Contains(got[0].String(), want) {
		t.Fatalf("problems %v, want one: %s", got, want)
	}
}
