package api_test

import (
	"net/http"
	"testing"
)

// keyedWorkflow calls an openai model; its run input names the run.
const keyedWorkflow = `name = "keyed"

[models.writer]
provider = "openai"
model = "gpt-4.1-mini"

[[steps]]
id = "write"
type = "llm"
model = "writer"
prompt = "Write one line."
`

// A start whose model the server's built-in workers have no key for is answered 422 before the
// run exists, naming the model, the step and the variable to set; with the key the run starts,
// and a server whose steps run on other workers checks nothing.
func TestStartChecksKeys(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		builtin bool
		want    int
	}{
		{"no key", map[string]string{}, true, http.StatusUnprocessableEntity},
		{"the key", map[string]string{"OPENAI_API_KEY": "sk-test"}, true, http.StatusCreated},
		{"other workers", map[string]string{}, false, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStackWith(t, stackOptions{ProviderEnv: tc.env, NoBuiltinWorkers: !tc.builtin})
			s.as("sam", "PUT", "/v1/workflows/keyed", keyedWorkflow).want(t, http.StatusCreated, "the registration")
			a := s.as("sam", "POST", "/v1/runs", `{"workflow": "keyed", "run_id": "keyed-1"}`).want(t, tc.want, "the start")
			if tc.want != http.StatusUnprocessableEntity {
				return
			}
			want := "workflow keyed: model writer of step write cannot be called on this server: provider openai has no key: set OPENAI_API_KEY (in the environment of reins serve, which it reads at start); the run did not start"
			if p := a.problem(t); p.Detail != want {
				t.Errorf("the problem says %q, want %q", p.Detail, want)
			}
			s.as("sam", "GET", "/v1/runs/keyed-1", "").want(t, http.StatusNotFound, "the run that did not start")
		})
	}
}
