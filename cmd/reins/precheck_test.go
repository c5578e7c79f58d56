package main

import (
	"testing"

	"github.com/reins-run/reins/provider/registry"
	"github.com/reins-run/reins/workflow"
)

// keyedWorkflow calls a model whose key comes from the environment variable its api_key_env
// names, and takes an input its input_schema describes.
const keyedWorkflow = `name = "keyed"
input_schema = { type = "object", properties = { order_id = { type = "string" } }, required = ["order_id"] }

[models.writer]
provider = "openai"
model = "gpt-4o-mini"
api_key_env = "REINS_TEST_WRITER_KEY"

[[steps]]
id = "write"
type = "llm"
model = "writer"
prompt = "Write about {{input.order_id}}."
`

// TestRunChecksBeforeStart: what would fail a run once it started — a model without its API
// key, an input its workflow's input_schema refuses — is said in one sentence before it starts,
// and leaves no run behind.
func TestRunChecksBeforeStart(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("REINS_TEST_WRITER_KEY", "")
	keyed := writeWorkflow(t, "keyed.toml", keyedWorkflow)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"provider model without a key", []string{"run", refundFile, "--input", refundInput, "--model", "openai:gpt-4o-mini"}, exitFailed,
			"reins: model openai:gpt-4o-mini of step investigate of workflow refund_investigation needs an API key: set OPENAI_API_KEY, or pass --api-key (a local server given with --base-url needs none)"},
		{"api_key_env empty", []string{"run", keyed, "--input", `{"order_id":"O-1"}`}, exitFailed,
			"reins: model writer (openai:gpt-4o-mini) of step write of workflow keyed needs an API key: set REINS_TEST_WRITER_KEY (its api_key_env), or pass --api-key"},
		{"misspelled input key", []string{"run", keyed, "--input", `{"orderid":"O-1"}`}, exitUsage,
			"reins: --input: the run input does not match the input_schema of workflow keyed: at /: missing property 'order_id' (the input has orderid: did you mean order_id?)"},
		{"input of the wrong type", []string{"run", keyed, "--input", `{"order_id":104}`}, exitUsage,
			"reins: --input: the run input does not match the input_schema of workflow keyed: at /order_id: got number, want string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			code, out, errOut := cli(t, append(tc.args, "--data", data)...)
			if code != tc.code || out != "" || errOut != tc.want+"\n" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit %d and stderr:\n%s", code, out, errOut, tc.code, tc.want)
			}
			if runs := listRuns(t, "--data", data); len(runs) != 0 {
				t.Errorf("a refused run was left behind: %+v", runs)
			}
		})
	}
}

// TestCheckCredentials: where a model's key or endpoint may come from, each one is enough.
func TestCheckCredentials(t *testing.T) {
	def, ps := workflow.Parse("keyed.toml", []byte(keyedWorkflow))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	bs, err := workflow.NewBundles(def, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	for _, tc := range []struct {
		name string
		reg  registry.Options
		env  map[string]string
		ok   bool
	}{
		{"nothing", registry.Options{}, nil, false},
		{"the provider's variable is not the model's", registry.Options{}, map[string]string{"OPENAI_API_KEY": "k"}, false},
		{"api_key_env", registry.Options{}, map[string]string{"REINS_TEST_WRITER_KEY": "k"}, true},
		{"--api-key", registry.Options{APIKey: "k"}, nil, true},
		{"--base-url", registry.Options{BaseURL: "http://127.0.0.1:8000/v1"}, nil, true},
		{"nor is its base URL variable", registry.Options{}, map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, false},
	} {
		err := checkCredentials(bs, tc.reg, env(tc.env))
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %t", tc.name, err, tc.ok)
		}
	}
}
