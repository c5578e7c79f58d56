package workflow_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// exUpdate rewrites the goldens of the example workflows: go test ./workflow -run Examples -update
var exUpdate = flag.Bool("update", false, "rewrite examples/workflows/testdata/*.json and *.mmd from the example workflows")

// exDir holds the example workflows; exGolden their goldens.
const (
	exDir    = "../examples/workflows"
	exGolden = "../examples/workflows/testdata"
)

// exNames lists the example workflows, without .toml. A test checks that it lists them all.
var exNames = []string{"code_review", "draft_refiner", "refund_investigation", "research_fanout"}

func TestExampleListIsComplete(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(exDir, "*.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".toml"))
	}
	if strings.Join(names, " ") != strings.Join(exNames, " ") {
		t.Fatalf("examples/workflows holds %q, the tests know %q: add the new example to exNames and to the equivalence tests", names, exNames)
	}
}

// exLoad loads and validates an example, failing on any problem.
func exLoad(t *testing.T, name string) *workflow.Definition {
	t.Helper()
	def, ps := workflow.LoadAndValidate(filepath.Join(exDir, name+".toml"), workflow.Options{})
	if len(ps) > 0 {
		t.Fatalf("%s.toml has problems:\n%v", name, ps)
	}
	return def
}

// exCompare compares got with the golden file, or rewrites it with -update.
func exCompare(t *testing.T, file string, got []byte) {
	t.Helper()
	path := filepath.Join(exGolden, file)
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
			exCompare(t, name+".json", indented.Bytes())
			exCompare(t, name+".mmd", []byte(workflow.Mermaid(def)))

			// The golden, compacted, is the canonical JSON byte for byte.
			if !*exUpdate {
				golden, err := os.ReadFile(filepath.Join(exGolden, name+".json"))
				if err != nil {
					t.Fatal(err)
				}
				var compact bytes.Buffer
				if err := json.Compact(&compact, golden); err != nil {
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
