package workflow

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/reftest"
)

// referencePage is the reference of the workflow file that these tests hold to the decoder.
const referencePage = "../docs/reference/workflow-file.md"

// A place in a workflow file where keys are decoded: the section of the reference that
// documents it (as its heading names it), the decoder's keys there, and a file that puts a
// key there (probe).
type place struct {
	section string
	keys    []string
	probe   func(key string) string
}

// places lists every place of the decoder, with the keys it accepts.
func places() []place {
	table := func(header string) func(string) string {
		return func(k string) string { return header + "\n" + k + " = 1\n" }
	}
	inStep := func(typ, sub string) func(string) string {
		return func(k string) string {
			return fmt.Sprintf("[[steps]]\ntype = %q\n%s = { %s = 1 }\n", typ, sub, k)
		}
	}
	ps := []place{
		{"", topKeys, table("")},
		{"concurrency", concurrencyKeys, func(k string) string { return "concurrency = { " + k + " = 1 }\n" }},
		{"[models.NAME]", modelKeys, table("[models.m]")},
		{"[tools.NAME]", toolKeys, table("[tools.t]")},
		{"[mcp.NAME]", mcpKeys, table("[mcp.s]")},
		{"[[steps]]", CommonKeys, func(k string) string {
			if k == "type" {
				return "[[steps]]\ntype = \"task\"\n"
			}
			return "[[steps]]\ntype = \"task\"\n" + k + " = 1\n"
		}},
		{"retry", retryKeys, inStep("task", "retry")},
		{"policy", policyKeys, inStep("agent", "policy")},
		{"budget", budgetKeys, inStep("agent", "budget")},
		{"context", contextKeys, inStep("agent", "context")},
		{"branches", branchKeys, func(k string) string {
			return "[[steps]]\ntype = \"parallel\"\nbranches = [ { " + k + " = 1 } ]\n"
		}},
		{"[[edges]]", edgeKeys, table("[[edges]]")},
		{"[[triggers]]", triggerKeys, table("[[triggers]]")},
	}
	for _, t := range StepTypes {
		ps = append(ps, place{stepSection(t), KeysOf[t], func(k string) string {
			return fmt.Sprintf("[[steps]]\ntype = %q\n%s = 1\n", t, k)
		}})
	}
	return ps
}

// stepSection is how the reference names the section of a step type's own keys.
func stepSection(t StepType) string { return fmt.Sprintf("type = %q", t) }

// unknownKeys returns the E_UNKNOWN_KEY problems of parsing src.
func unknownKeys(src string) Problems {
	_, ps := Parse("probe.toml", []byte(src))
	var out Problems
	for _, p := range ps {
		if p.Code == EUnknownKey || p.Code == EParse {
			out = append(out, p)
		}
	}
	return out
}

// TestReferenceDocumentsEveryKey: every key the decoder accepts, at every place of a workflow
// file, has its row in the reference, under a heading that names that place; and every row
// names a key that the decoder accepts there (a file with that key at that place has no
// E_UNKNOWN_KEY).
func TestReferenceDocumentsEveryKey(t *testing.T) {
	page := reftest.Load(t, referencePage)
	documented := page.Keys()
	known := map[string]bool{}
	for _, pl := range places() {
		known[pl.section] = true
		name := sectionName(pl.section)
		docKeys := documented[pl.section]
		for _, k := range pl.keys {
			if !slices.ContainsFunc(docKeys, func(d reftest.Key) bool { return d.Name == k }) {
				t.Errorf("the decoder accepts key %s in %s, but workflow-file.md does not document it: add a row \"| `%s` |\" to the key table under the heading naming %s", k, name, k, "`"+pl.section+"`")
			}
		}
		for _, d := range docKeys {
			if ps := unknownKeys(pl.probe(d.Name)); len(ps) > 0 {
				t.Errorf("workflow-file.md:%d documents key %s in %s, but the decoder does not accept it there: %v", d.Line, d.Name, name, ps)
			}
		}
		// The probe must reach the place: a key that is nowhere is refused there.
		if ps := unknownKeys(pl.probe("no_such_key")); len(ps) != 1 {
			t.Errorf("the probe of %s does not reach it: a key no_such_key gives %v, want one E_UNKNOWN_KEY", name, ps)
		}
	}
	for section, keys := range documented {
		if !known[section] {
			t.Errorf("workflow-file.md:%d documents keys under a heading naming `%s`, which is no place of a workflow file", keys[0].Line, section)
		}
	}
}

// sectionName says where a section's keys go, for messages.
func sectionName(section string) string {
	if section == "" {
		return "the top level"
	}
	return "section " + section
}

// TestReferenceExamplesParse: every TOML example of the reference is a workflow file (or the
// part of one) that the loader reads without a problem: its keys exist where they are written
// and their values have the documented types.
func TestReferenceExamplesParse(t *testing.T) {
	page := reftest.Load(t, referencePage)
	blocks := page.Blocks("toml")
	if len(blocks) < 20 {
		t.Fatalf("workflow-file.md has %d TOML examples: the test cannot read them", len(blocks))
	}
	for _, b := range blocks {
		if _, ps := Parse("example.toml", []byte(b.Text)); len(ps) > 0 {
			t.Errorf("the example at workflow-file.md:%d does not load: %v", b.Line, ps)
		}
	}
}

// TestReferenceExamplesShowEveryKey: every documented key appears in an example under its
// heading or one that encloses it, written as TOML writes it (key = ..., or a [table] header).
func TestReferenceExamplesShowEveryKey(t *testing.T) {
	page := reftest.Load(t, referencePage)
	for _, pl := range places() {
		var text strings.Builder
		for _, b := range page.Examples(pl.section, "toml") {
			text.WriteString(stripComments(b.Text))
		}
		for _, k := range pl.keys {
			if !tomlKey(k).MatchString(text.String()) {
				t.Errorf("workflow-file.md shows key %s of %s in no example under its heading", k, sectionName(pl.section))
			}
		}
	}
}

// tomlKey matches key k as TOML writes it: `k = ` at the start of a line or in an inline table,
// or a table header that names it ([k.NAME], [[k]], [steps.k]).
func tomlKey(k string) *regexp.Regexp {
	q := regexp.QuoteMeta(k)
	return regexp.MustCompile(`(?m)(^|[\s{,])` + q + `\s*=|\[\[?([a-z_]+\.)*` + q + `[\].]`)
}

// stripComments removes TOML comments (a # at the start of a line or after a space, outside
// the examples' strings, which hold none).
func stripComments(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines[i] = ""
		} else if j := strings.Index(l, " #"); j >= 0 {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}

// TestReferenceDocumentsEveryProblemCode: every problem code this package reports has its row in
// the reference's table of problems (or, for the server's codes, a mention on the page).
func TestReferenceDocumentsEveryProblemCode(t *testing.T) {
	data, err := os.ReadFile(referencePage)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`Code\s*=\s*"(E_[A-Z_]+)"`)
	var codes []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			codes = append(codes, m[1])
		}
	}
	if len(codes) < 25 {
		t.Fatalf("found %d problem codes in the package's sources: the test cannot read them", len(codes))
	}
	for _, c := range codes {
		if !strings.Contains(string(data), "`"+c+"`") {
			t.Errorf("problem code %s is not documented in workflow-file.md", c)
		}
	}
}
