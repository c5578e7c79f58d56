package workflow_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

const inputSchemaFile = `name = "orders"
input_schema = { type = "object", properties = { order_id = { type = "string", pattern = "^O-[0-9]+$" }, note = { type = "string" } }, required = ["order_id"], additionalProperties = false }

[[steps]]
id = "done"
type = "terminate"
`

// TestCheckInput: the input_schema of a workflow file is decoded, kept in the canonical form,
// and every run input is checked against it, the error naming the first offending place.
func TestCheckInput(t *testing.T) {
	def, ps := workflow.Parse("orders.toml", []byte(inputSchemaFile))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if ps := workflow.Validate(def, workflow.Options{}); len(ps) > 0 {
		t.Fatal(ps)
	}
	canon, err := def.CanonicalJSON()
	if err != nil || !strings.Contains(string(canon), `"input_schema":{"additionalProperties":false,`) {
		t.Fatalf("canonical JSON %s (%v) has no input_schema", canon, err)
	}
	for _, tc := range []struct {
		input, want string
	}{
		{`{"order_id":"O-1"}`, ""},
		{`{"order_id":"O-1","note":"late"}`, ""},
		{`{"orderid":"O-1"}`, "the run input does not match the input_schema of workflow orders: at /: missing property 'order_id' (the input has orderid: did you mean order_id?)"},
		{`{"order_id":7}`, "the run input does not match the input_schema of workflow orders: at /order_id: got number, want string"},
		{`{"order_id":"X-1"}`, "the run input does not match the input_schema of workflow orders: at /order_id: 'X-1' does not match pattern '^O-[0-9]+$'"},
		{`null`, "the run input does not match the input_schema of workflow orders: at /: got null, want object"},
		{``, "the run input does not match the input_schema of workflow orders: at /: got null, want object"},
	} {
		err := def.CheckInput(json.RawMessage(tc.input))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("input %s: %v, want none", tc.input, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want || !errors.Is(err, workflow.ErrInput)):
			t.Errorf("input %s: %v, want %q", tc.input, err, tc.want)
		}
	}
	// No input_schema: any input.
	none, _ := workflow.Parse("none.toml", []byte("name = \"none\"\n[[steps]]\nid = \"done\"\ntype = \"terminate\"\n"))
	if err := none.CheckInput(json.RawMessage(`[1, "two"]`)); err != nil {
		t.Errorf("a workflow without input_schema refuses an input: %v", err)
	}
}

// TestInputSchemaProblems: an input_schema that is not a table, or not a JSON Schema, is a
// problem of the file at its line.
func TestInputSchemaProblems(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		code       workflow.Code
		want       string
	}{
		{"not a table", `input_schema = "object"`, workflow.EType, "expected a table, got a string"},
		{"not a schema", `input_schema = { type = "thing" }`, workflow.EBadValue, "the input_schema is not a valid JSON Schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ps := workflow.LoadAndValidate(writeTemp(t, "name = \"x\"\n"+tc.line+"\n[[steps]]\nid = \"done\"\ntype = \"terminate\"\n"), workflow.Options{})
			if len(ps) != 1 || ps[0].Code != tc.code || ps[0].Key != "input_schema" || ps[0].Line != 2 || !strings.Contains(ps[0].Message, tc.want) {
				t.Errorf("problems %v, want one %s at line 2 key input_schema saying %q", ps, tc.code, tc.want)
			}
		})
	}
}

func writeTemp(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wf.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
