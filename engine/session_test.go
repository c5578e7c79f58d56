package engine_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// sessionDef is one agent step whose session is the input's customer.
func sessionDef(t *testing.T, tmpl string) *workflow.Definition {
	t.Helper()
	wf := workflow.New("support").Start("reply")
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	wf.Agent("reply", "m").WithGoal("Answer {{input.q}}").WithSession(tmpl, 0)
	return build(t, wf)
}

// An agent step's session is rendered once per activation and sent with every task, with the
// principal who started the run (the scope of sessions).
func TestSessionRendered(t *testing.T) {
	def := sessionDef(t, "{{input.customer}}")
	run, cmds, err := engine.Decide(def, &engine.Run{ID: "run1"}, protocol.Event{Type: protocol.EvStart, At: t0, Item: -1,
		Input: json.RawMessage(`{"customer":"c-7","q":"where is my order"}`), By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	var task *protocol.Task
	for _, c := range cmds {
		if c.Type == engine.CmdDispatch {
			task = c.Task
		}
	}
	if task == nil || task.Session != "c-7" || task.StartedBy != "alice" || run.Steps["reply"].Session != "c-7" {
		t.Fatalf("task %+v, want session c-7 started by alice", task)
	}
}

// A session that renders empty, or a session in a sub-run (which does not carry the principal
// of its root run), fails the step before anything is dispatched.
func TestSessionRefused(t *testing.T) {
	tests := []struct {
		name, tmpl, runID, input, want string
	}{
		{"empty", `{{input.customer ?? ""}}`, "run1", `{"q":"x"}`, "rendered an empty value"},
		{"sub-run", "{{input.customer}}", "parent/step/1", `{"customer":"c-7","q":"x"}`, "sub-run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, cmds, err := engine.Start(sessionDef(t, tt.tmpl), tt.runID, json.RawMessage(tt.input), t0)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cmds {
				if c.Type == engine.CmdDispatch {
					t.Fatalf("dispatched %+v", c.Task)
				}
			}
			if sr := run.Steps["reply"]; sr.Status != protocol.StepFailed || !strings.Contains(sr.Error, tt.want) {
				t.Fatalf("step %s: %q, want failed with %q", sr.Status, sr.Error, tt.want)
			}
		})
	}
}
