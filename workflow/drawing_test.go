package workflow_test

import (
	"encoding/json"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// TestDraw: the drawing names every step's node by its step, marks the start, and keeps loop
// edges and their bound, as the Mermaid export does.
func TestDraw(t *testing.T) {
	wf := workflow.New("draw")
	wf.Task("a", "h")
	wf.AgentLoop("b", "loopy").WithMaxIterations(3)
	wf.Edge("a", "b")
	wf.Edge("b", "a").MaxIterations(2)
	wf.Start("a")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	dr := workflow.Draw(def)
	got, _ := json.Marshal(dr)
	want := `{"start":"s0","nodes":[{"id":"s0","step":"a","type":"task","lines":["a","task: h"]},{"id":"s1","step":"b","type":"agent_loop","lines":["b","agent_loop: loopy (≤ 3)"]}],"edges":[{"from":"s0","to":"s1","kind":"edge"},{"from":"s1","to":"s0","label":"loop ≤ 2","kind":"loop"}]}`
	if string(got) != want {
		t.Errorf("drawing:\n%s\nwant:\n%s", got, want)
	}
}
