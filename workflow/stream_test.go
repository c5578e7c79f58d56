package workflow_test

import (
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// TestStream: stream is a key of llm and agent steps only, read from a file with its line,
// set by WithStream, and absent from the canonical form (so from the hash) when false.
func TestStream(t *testing.T) {
	src := `name = "s"
start = "gen"
[models.m]
provider = "scripted"
script = [{ text = "ok" }]
[[steps]]
id = "gen"
type = "llm"
model = "m"
prompt = "hi"
stream = true
`
	def, problems := workflow.Parse("s.toml", []byte(src))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	if !def.Steps[0].Stream || def.Source.Lines["steps[0].stream"] != 11 {
		t.Errorf("stream = %v at line %d, want true at line 11", def.Steps[0].Stream, def.Source.Lines["steps[0].stream"])
	}
	vSame(t, workflow.Validate(def, workflow.Options{}))

	// Not a key of other steps.
	d := vBase()
	d.Steps[1].Stream = true // check, a switch step
	vSame(t, workflow.Validate(d, workflow.Options{}), "E_UNKNOWN_KEY steps[1].stream")
	_, problems = workflow.Parse("s.toml", []byte(strings.Replace(src, `type = "llm"`, `type = "sleep"`+"\nduration = \"1s\"", 1)))
	if len(problems) == 0 || problems[0].Code != workflow.EUnknownKey {
		t.Errorf("stream on a sleep step: problems %v, want E_UNKNOWN_KEY", problems)
	}

	// The builder, and the hash: false is absent from the canonical form.
	build := func(stream bool) *workflow.Definition {
		b := workflow.New("s").Start("gen").Model("m", workflow.ModelDef{Provider: "scripted", Script: []byte(`[{"text":"ok"}]`)})
		l := b.LLM("gen", "m").WithPrompt("hi")
		a := b.Agent("act", "m").WithGoal("go")
		if stream {
			l.WithStream()
			a.WithStream()
		}
		b.Edge("gen", "act")
		def, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return def
	}
	on, off := build(true), build(false)
	if !on.Steps[0].Stream || !on.Steps[1].Stream || off.Steps[0].Stream {
		t.Errorf("WithStream: steps %+v", on.Steps)
	}
	hOn, _ := on.Hash()
	hOff, _ := off.Hash()
	if hOn == hOff {
		t.Error("stream = true does not change the hash")
	}
	canon, err := off.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(canon), "stream") {
		t.Errorf("the canonical form of a definition without stream names it: %s", canon)
	}
}
