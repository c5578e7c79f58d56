package workflow_test

import (
	"encoding/json"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// cBody is the rest of a small valid workflow file, after its top-level keys.
const cBody = `
[[steps]]
id = "serve"
type = "task"
handler = "serve"
`

// TestConcurrencyFile: the concurrency key of a file, as an inline table and as a table, decodes
// to the definition the builder makes (same canonical JSON and hash), and the hash changes with
// the key and the limit.
func TestConcurrencyFile(t *testing.T) {
	wf := workflow.New("c").Concurrency("{{input.customer_id}}", 1)
	wf.Task("serve", "serve")
	built, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"inline": "name = \"c\"\nconcurrency = { key = \"{{input.customer_id}}\", limit = 1 }\n" + cBody,
		"table":  "name = \"c\"\n[concurrency]\nlimit = 1\nkey = \"{{ input.customer_id }}\"\n" + cBody,
	} {
		t.Run(name, func(t *testing.T) {
			def := eqParse(t, name, src)
			if def.Concurrency == nil || def.Concurrency.Limit != 1 {
				t.Fatalf("concurrency %+v, want limit 1", def.Concurrency)
			}
			if name == "inline" {
				eqSame(t, def, built)
			}
		})
	}
	h0, _ := built.Hash()
	for _, b := range []*workflow.Builder{
		workflow.New("c"),
		workflow.New("c").Concurrency("{{input.customer_id}}", 2),
		workflow.New("c").Concurrency("{{input.tenant}}", 1),
	} {
		b.Task("serve", "serve")
		d, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		if h, _ := d.Hash(); h == h0 {
			t.Fatalf("definition %+v hashes as the one with key {{input.customer_id}} and limit 1", d.Concurrency)
		}
	}
	j, _ := built.CanonicalJSON()
	var back workflow.Definition
	if err := json.Unmarshal(j, &back); err != nil || back.Concurrency == nil || *back.Concurrency != *built.Concurrency {
		t.Fatalf("canonical JSON %s reads back as %+v (%v)", j, back.Concurrency, err)
	}
}

// TestConcurrencyProblems: every mistake in a concurrency key is one problem with its code and
// key, from the file and from the builder alike.
func TestConcurrencyProblems(t *testing.T) {
	for _, tc := range []struct {
		name, top string
		want      []string
	}{
		{"valid", `concurrency = { key = "{{input.customer_id ?? \"anon\"}}/{{input.region}}", limit = 3 }`, nil},
		{"one key for the workflow", `concurrency = { limit = 2 }`, nil},
		{"constant key", `concurrency = { key = "global", limit = 1 }`, nil},
		{"zero limit", `concurrency = { key = "{{input.c}}", limit = 0 }`, []string{"E_BAD_BOUND concurrency.limit"}},
		{"negative limit", `concurrency = { key = "{{input.c}}", limit = -2 }`, []string{"E_BAD_BOUND concurrency.limit"}},
		{"no limit", `concurrency = { key = "{{input.c}}" }`, []string{"E_MISSING_KEY concurrency"}},
		{"malformed template", `concurrency = { key = "{{input.c", limit = 1 }`, []string{"E_TEMPLATE concurrency.key"}},
		{"a step's output", `concurrency = { key = "{{serve.output.c}}", limit = 1 }`, []string{"E_TEMPLATE concurrency.key"}},
		{"neither input nor step", `concurrency = { key = "{{customer}}", limit = 1 }`, []string{"E_TEMPLATE concurrency.key"}},
		{"unknown key", `concurrency = { key = "k", limit = 1, per = "x" }`, []string{"E_UNKNOWN_KEY concurrency.per"}},
		{"wrong type", `concurrency = { key = 1, limit = "1" }`, []string{"E_TYPE concurrency.key", "E_TYPE concurrency.limit"}},
		{"not a table", `concurrency = 1`, []string{"E_TYPE concurrency"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def, ps := workflow.Parse("c.toml", []byte("name = \"c\"\n"+tc.top+"\n"+cBody))
			if def == nil {
				t.Fatalf("no definition: %v", ps)
			}
			if len(ps) == 0 {
				ps = workflow.Validate(def, workflow.Options{})
			}
			vSame(t, ps, tc.want...)
			for _, p := range ps {
				if p.Line != 2 || p.File != "c.toml" || p.Message == "" {
					t.Fatalf("problem %v: want it on line 2 of c.toml, with a message", p)
				}
			}
		})
	}
	wf := workflow.New("c").Concurrency("{{serve.output}}", 0)
	wf.Task("serve", "serve")
	_, err := wf.Build()
	ps, ok := err.(workflow.Problems)
	if !ok {
		t.Fatalf("builder error %v, want problems", err)
	}
	vSame(t, ps, "E_TEMPLATE concurrency.key", "E_BAD_BOUND concurrency.limit")
}
