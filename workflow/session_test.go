package workflow_test

import (
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/workflow"
)

const sessionSrc = `name = "support"
start = "reply"
[models.m]
provider = "scripted"
script = [{ text = "ok" }]
[[steps]]
id = "reply"
type = "agent"
model = "m"
goal = "{{input.question}}"
session = "{{input.customer_id}}"
session_ttl = "24h"
`

// TestSession: session and session_ttl are keys of agent steps, read with their lines, checked
// with stable codes, defaulted by Normalize, and part of the canonical form (so of the hash).
func TestSession(t *testing.T) {
	def, problems := workflow.Parse("s.toml", []byte(sessionSrc))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	s := def.Steps[0]
	if s.Session != "{{input.customer_id}}" || s.SessionTTL.Std() != 24*time.Hour {
		t.Errorf("session %q ttl %s", s.Session, s.SessionTTL)
	}
	if def.Source.Lines["steps[0].session"] != 11 || def.Source.Lines["steps[0].session_ttl"] != 12 {
		t.Errorf("lines %d, %d, want 11, 12", def.Source.Lines["steps[0].session"], def.Source.Lines["steps[0].session_ttl"])
	}
	vSame(t, workflow.Validate(def, workflow.Options{}))

	tests := []struct {
		name, from, to string
		want           string // code and key
		mentions       string
	}{
		{"malformed template", `session = "{{input.customer_id}}"`, `session = "{{input.customer_id"`, "E_TEMPLATE steps[0].session", "malformed"},
		{"unknown step", `session = "{{input.customer_id}}"`, `session = "{{ghost.output}}"`, "E_TEMPLATE steps[0].session", "ghost"},
		{"blank", `session = "{{input.customer_id}}"`, `session = "  "`, "E_BAD_VALUE steps[0].session", "blank"},
		{"ttl without session", `session = "{{input.customer_id}}"`, ``, "E_MISSING_KEY steps[0].session", "session_ttl"},
		{"negative ttl", `session_ttl = "24h"`, `session_ttl = "-1h"`, "E_BAD_DURATION steps[0].session_ttl", "negative"},
		{"ttl over the bound", `session_ttl = "24h"`, `session_ttl = "2200h"`, "E_BAD_BOUND steps[0].session_ttl", "2160h"},
		{"bad duration", `session_ttl = "24h"`, `session_ttl = "soon"`, "E_BAD_DURATION steps[0].session_ttl", "soon"},
		{"wrong type", `session = "{{input.customer_id}}"`, `session = 7`, "E_TYPE steps[0].session", "string"},
		{"not on llm steps", "goal = \"{{input.question}}\"\n", "prompt = \"hi\"\n", "E_UNKNOWN_KEY steps[0].session", "session"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(sessionSrc, tt.from, tt.to, 1)
			if tt.name == "not on llm steps" {
				src = strings.Replace(src, `type = "agent"`, `type = "llm"`, 1)
			}
			def, ps := workflow.Parse("s.toml", []byte(src))
			if len(ps) == 0 {
				ps = workflow.Validate(def, workflow.Options{})
			}
			if len(ps) == 0 || string(ps[0].Code)+" "+ps[0].Key != tt.want {
				t.Fatalf("problems %v, want first %s", ps, tt.want)
			}
			if !strings.Contains(ps[0].Message, tt.mentions) || strings.Contains(ps[0].Message, "\n") {
				t.Errorf("message %q: want one sentence mentioning %q", ps[0].Message, tt.mentions)
			}
		})
	}
}

// TestSessionNormalizeAndHash: a session without session_ttl gets the default, which is then
// the same definition (and hash) as writing it out; the session changes the hash.
func TestSessionNormalizeAndHash(t *testing.T) {
	build := func(session string, ttl time.Duration) *workflow.Definition {
		b := workflow.New("s").Start("act").Model("m", workflow.ModelDef{Provider: "scripted", Script: []byte(`[{"text":"ok"}]`)})
		a := b.Agent("act", "m").WithGoal("go")
		if session != "" {
			a.WithSession(session, ttl)
		}
		def, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return def
	}
	def := build("{{input.id}}", 0)
	if def.Steps[0].SessionTTL != workflow.DefaultSessionTTL {
		t.Errorf("session_ttl %s, want the default %s", def.Steps[0].SessionTTL, workflow.DefaultSessionTTL)
	}
	h := func(d *workflow.Definition) string {
		s, err := d.Hash()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if h(def) != h(build("{{input.id}}", workflow.DefaultSessionTTL.Std())) {
		t.Error("the default session_ttl written out changed the hash")
	}
	if h(def) == h(build("", 0)) || h(def) == h(build("{{input.other}}", 0)) {
		t.Error("the session does not change the hash")
	}
	canon, err := def.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(canon), `"session":"{{input.id}}"`) {
		t.Errorf("canonical JSON %s has no session", canon)
	}
}
