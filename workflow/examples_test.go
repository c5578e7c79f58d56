package workflow_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// exUpdate rewrites the goldens of the example workflows: go test ./workflow -run Examples -update
var exUpdate = flag.Bool("update", false, "rewrite examples/*/testdata/workflow.json and workflow.mmd from the example workflows")

// exRoot holds one directory per example; an example's workflow is DIR/workflow.toml, its
// goldens DIR/testdata/workflow.json and workflow.mmd, its walkthrough DIR/README.md.
const exRoot = "../examples"

// exExamples maps the name of every example workflow to its directory under examples/, in
// order of name. A test checks that it lists them all.
var exExamples = []struct{ name, dir string }{
	{"code_review", "codereview"},
	{"delegate", "delegate"},
	{"draft_refiner", "evaluator"},
	{"refund_investigation", "refund"},
	{"research_fanout", "research"},
}

// exNames lists the names of the example workflows.
var exNames = func() []string {
	var names []string
	for _, ex := range exExamples {
		names = append(names, ex.name)
	}
	return names
}()

// exDir is the directory of the example workflow name.
func exDir(t *testing.T, name string) string {
	t.Helper()
	for _, ex := range exExamples {
		if ex.name == name {
			return filepath.Join(exRoot, ex.dir)
		}
	}
	t.Fatalf("no example workflow is named %s", name)
	return ""
}

func TestExampleListIsComplete(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(exRoot, "*", "workflow.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs, known []string
	for _, f := range files {
		dirs = append(dirs, filepath.Base(filepath.Dir(f)))
	}
	for _, ex := range exExamples {
		known = append(known, ex.dir)
	}
	slices.Sort(known)
	if !slices.Equal(dirs, known) {
		t.Fatalf("examples/*/workflow.toml are in %q, the tests know %q: add the new example to exExamples and to the equivalence tests", dirs, known)
	}
	for _, ex := range exExamples {
		if def := exLoad(t, ex.name); def.Name != ex.name {
			t.Errorf("examples/%s/workflow.toml is workflow %s, the tests know it as %s", ex.dir, def.Name, ex.name)
		}
	}
}

// exLoad loads and validates an example, failing on any problem.
func exLoad(t *testing.T, name string) *workflow.Definition {
	t.Helper()
	def, ps := workflow.LoadAndValidate(filepath.Join(exDir(t, name), "workflow.toml"), workflow.Options{})
	if len(ps) > 0 {
		t.Fatalf("the example workflow %s has problems:\n%v", name, ps)
	}
	return def
}

// exCompare compares got with the golden file, or rewrites it with -update.
func exCompare(t *testing.T, path string, got []byte) {
	t.Helper()
	if *exUpdate {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./workflow -run Examples -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden (run go test ./workflow -run Examples -update if the change is intended)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestExamples checks every example workflow: no problems, and its canonical JSON (indented in
// the golden, for review; indentation changes no byte order) and Mermaid graph as committed.
func TestExamples(t *testing.T) {
	for _, name := range exNames {
		t.Run(name, func(t *testing.T) {
			def := exLoad(t, name)
			canon, err := def.CanonicalJSON()
			if err != nil {
				t.Fatal(err)
			}
			var indented bytes.Buffer
			if err := json.Indent(&indented, canon, "", "  "); err != nil {
				t.Fatal(err)
			}
			indented.WriteByte('\n')
			golden := filepath.Join(exDir(t, name), "testdata", "workflow")
			exCompare(t, golden+".json", indented.Bytes())
			exCompare(t, golden+".mmd", []byte(workflow.Mermaid(def)))

			// The golden, compacted, is the canonical JSON byte for byte.
			if !*exUpdate {
				saved, err := os.ReadFile(golden + ".json")
				if err != nil {
					t.Fatal(err)
				}
				var compact bytes.Buffer
				if err := json.Compact(&compact, saved); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(compact.Bytes(), canon) {
					t.Errorf("the compacted golden is not the canonical JSON:\n got %s\nwant %s", canon, compact.Bytes())
				}
			}

			// Loading is deterministic: the same file, the same hash and graph.
			again := exLoad(t, name)
			h1, _ := def.Hash()
			h2, _ := again.Hash()
			if h1 != h2 || workflow.Mermaid(def) != workflow.Mermaid(again) || workflow.Dot(def) != workflow.Dot(again) {
				t.Errorf("loading %s twice gave different hashes or graphs", name)
			}
		})
	}
}

// TestExamplesUseScriptedModels: the examples run without an API key.
func TestExamplesUseScriptedModels(t *testing.T) {
	for _, name := range exNames {
		def := exLoad(t, name)
		for m, md := range def.Models {
			if md.Provider != "scripted" || len(md.Script) == 0 {
				t.Errorf("%s: model %s is %q with script %s; the examples use scripted models", name, m, md.Provider, md.Script)
			}
		}
	}
}

// TestExampleReadmesShowTheGraph: the walkthrough of every example draws its workflow as
// reins graph does, and every graph the README and the guide draw is one of them, so that no
// picture can drift from its file.
func TestExampleReadmesShowTheGraph(t *testing.T) {
	graphs := map[string]bool{}
	for _, name := range exNames {
		readme, err := os.ReadFile(filepath.Join(exDir(t, name), "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		graph := workflow.Mermaid(exLoad(t, name))
		graphs[graph] = true
		if block := "```mermaid\n" + graph + "```\n"; !strings.Contains(string(readme), block) {
			t.Errorf("the README.md of %s does not show its graph; it should contain:\n%s", exDir(t, name), block)
		}
	}
	drawn := 0
	for _, file := range []string{"../README.md", "../docs/guide.md"} {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks := strings.Split(string(text), "```mermaid\n")[1:]
		drawn += len(blocks)
		for _, b := range blocks {
			graph, _, _ := strings.Cut(b, "```")
			if !graphs[graph] {
				t.Errorf("%s draws a graph that is not an example's as reins graph draws it:\n%s", file, graph)
			}
		}
	}
	if drawn == 0 {
		t.Fatal("neither README.md nor docs/guide.md draws a graph: the test no longer reads them")
	}
}
