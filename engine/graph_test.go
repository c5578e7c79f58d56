package engine

import (
	"reflect"
	"slices"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// graphOf gives the graph newGraph builds, once per definition, and a definition changed in
// place (another start, steps or edges in new arrays) gets the graph of what it is now.
func TestGraphOf(t *testing.T) {
	def := &workflow.Definition{Start: "a",
		Steps: []workflow.Step{{ID: "a", Type: workflow.Task}, {ID: "b", Type: workflow.Task}, {ID: "c", Type: workflow.Task}},
		Edges: []workflow.Edge{{From: "a", To: "b"}, {From: "b", To: "c"}, {From: "c", To: "a", MaxIterations: 2}}}
	same := func(what string) {
		t.Helper()
		got, want := graphOf(def), newGraph(def)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: graphOf differs from newGraph", what)
		}
		if again := graphOf(def); again != got {
			t.Errorf("%s: a second graphOf built the graph again", what)
		}
	}
	same("as loaded")
	def.Start = def.Steps[len(def.Steps)-1].ID
	same("another start")
	def.Edges = slices.Clone(def.Edges[:len(def.Edges)-1])
	same("an edge fewer")
	def.Steps = append(slices.Clone(def.Steps), workflow.Step{ID: "extra"})
	same("a step more")
	other := *def
	other.Steps = slices.Clone(def.Steps)
	if g := graphOf(&other); g.def != &other {
		t.Error("a copy of a definition got the graph of the original")
	}
}
