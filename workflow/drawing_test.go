package workflow_test

import (
	"encoding/json"
	"slices"
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

// TestDrawBranches: each child edge of a parallel step carries its branch's number, from 1 in
// the order of the branches (step or file alike), which is how the console finds the node of a
// run's step PARENT#(N-1); a map's body and every other edge carry none.
func TestDrawBranches(t *testing.T) {
	wf := workflow.New("fan")
	wf.Parallel("fan", "b", "a")
	wf.Task("a", "h")
	wf.Task("b", "h")
	wf.Map("each", "input.xs").WithStep("a").WithMaxItems(3)
	wf.Edge("fan", "each")
	wf.Start("fan")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	// A branch running a file (not read here: the drawing needs none).
	def.Steps[0].Branches = append(def.Steps[0].Branches, workflow.Branch{Workflow: "sub.toml"})
	dr := workflow.Draw(def)
	step := map[string]string{}
	for _, n := range dr.Nodes {
		step[n.ID] = n.Step
		if n.Step == "" {
			step[n.ID] = n.Lines[0]
		}
	}
	type edge struct {
		from, to, kind string
		branch         int
	}
	var got []edge
	for _, e := range dr.Edges {
		got = append(got, edge{step[e.From], step[e.To], e.Kind, e.Branch})
	}
	want := []edge{
		{"fan", "b", "child", 1},
		{"fan", "a", "child", 2},
		{"fan", "workflow: sub.toml", "child", 3},
		{"each", "a", "child", 0},
		{"fan", "each", "edge", 0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("edges:\n%v\nwant:\n%v", got, want)
	}
	raw, _ := json.Marshal(dr.Edges[0])
	if want := `{"from":"s0","to":"s2","label":"branch 1","kind":"child","branch":1}`; string(raw) != want {
		t.Errorf("a branch's edge as JSON: %s, want %s", raw, want)
	}
}
