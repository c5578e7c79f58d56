package reftest

import (
	"reflect"
	"strings"
	"testing"
)

const page = "# Title\n" +
	"\n" +
	"## Top level\n" +
	"\n" +
	"```toml\n" +
	"name = \"x\"\n" +
	"```\n" +
	"\n" +
	"| key | type | default | meaning |\n" +
	"|---|---|---|---|\n" +
	"| `name` | string | required | The name. |\n" +
	"| `steps` | array | required | The steps. |\n" +
	"\n" +
	"| code | when |\n" +
	"|---|---|\n" +
	"| `E_PARSE` | not a key |\n" +
	"\n" +
	"## Steps (`[[steps]]`)\n" +
	"\n" +
	"```toml\n" +
	"[[steps]]\n" +
	"# a comment, not a heading\n" +
	"id = \"a\"\n" +
	"```\n" +
	"\n" +
	"| key | type | default | meaning |\n" +
	"|---|---|---|---|\n" +
	"| `id` | string | required | The id. |\n" +
	"\n" +
	"### A turn (`model[]`, `context.summarizer[]`)\n" +
	"\n" +
	"```json\n" +
	"{\"text\": \"hi\"}\n" +
	"```\n" +
	"\n" +
	"| key | type | default | meaning |\n" +
	"|---|---|---|---|\n" +
	"| `text` | string | none | An answer. |\n"

func TestParse(t *testing.T) {
	p, err := Parse("page.md", []byte(page))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for section, ks := range p.Keys() {
		for _, k := range ks {
			keys[section] = append(keys[section], k.Name)
		}
	}
	want := map[string][]string{
		"":                     {"name", "steps"},
		"[[steps]]":            {"id"},
		"model[]":              {"text"},
		"context.summarizer[]": {"text"},
	}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("Keys() = %v, want %v", keys, want)
	}
	if k := p.Keys()["[[steps]]"][0]; k.Line != 28 {
		t.Errorf("key id is on line %d, want 28", k.Line)
	}
	// A section's examples are its own and those of the headings that enclose it.
	var texts []string
	for _, b := range p.Examples("model[]", "json") {
		texts = append(texts, strings.TrimSpace(b.Text))
	}
	if got := strings.Join(texts, "|"); got != `{"text": "hi"}` {
		t.Errorf("Examples(model[], json) = %q", got)
	}
	texts = nil
	for _, b := range p.Examples("[[steps]]", "toml") {
		texts = append(texts, strings.TrimSpace(b.Text))
	}
	if got := strings.Join(texts, "|"); got != "[[steps]]\n# a comment, not a heading\nid = \"a\"" {
		t.Errorf("Examples([[steps]], toml) = %q", got)
	}
	if n := len(p.Blocks("toml")); n != 2 {
		t.Errorf("Blocks(toml) has %d blocks, want 2", n)
	}
}

// TestParseTables: every table of a section is kept with its header, its rows' cells and their
// lines, and the lines around them are its prose.
func TestParseTables(t *testing.T) {
	const text = "### `reins runs list`\n" +
		"\n" +
		"Flag sets: [connection flags](#connection-flags).\n" +
		"| flag | type | example |\n" +
		"|:---|---|---|\n" +
		"| `--format`, `-f` | string | mermaid \\| dot |\n" +
		"| plain | x | `y` |\n" +
		"after the table\n" +
		"```\n" +
		"| not | a table |\n" +
		"```\n" +
		"| status |\n" +
		"## Next\n"
	p, err := Parse("page.md", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	s := p.Sections[1]
	want := []Table{
		{Header: []string{"flag", "type", "example"}, Line: 4, Rows: []Row{
			{Cells: []string{"`--format`, `-f`", "string", "mermaid | dot"}, Line: 6},
			{Cells: []string{"plain", "x", "`y`"}, Line: 7},
		}},
		{Header: []string{"status"}, Line: 12},
	}
	if !reflect.DeepEqual(s.Tables, want) {
		t.Errorf("Tables = %+v, want %+v", s.Tables, want)
	}
	if got := []string{s.Tables[0].Rows[0].Name(), s.Tables[0].Rows[1].Name()}; !reflect.DeepEqual(got, []string{"--format", ""}) {
		t.Errorf("row names %q", got)
	}
	wantProse := []Line{{"Flag sets: [connection flags](#connection-flags).", 3}, {"after the table", 8}}
	if !reflect.DeepEqual(s.Prose, wantProse) {
		t.Errorf("Prose = %+v, want %+v", s.Prose, wantProse)
	}
	if l, ok := s.Starting("after"); !ok || l.N != 8 {
		t.Errorf("Starting(after) = %+v, %v", l, ok)
	}
	if _, ok := s.Starting("Roles:"); ok {
		t.Errorf("Starting(Roles:) found a line the section does not have")
	}
	if len(p.Sections[2].Tables) != 0 {
		t.Errorf("the next section has tables %+v", p.Sections[2].Tables)
	}
}

func TestCells(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"| a | b |", []string{"a", "b"}},
		{"|a|b", []string{"a", "b"}},
		{"| `x \\| y` | z |", []string{"`x | y`", "z"}},
		{"| ends in a bar \\|", []string{"ends in a bar |"}},
		{"|", []string{""}},
	} {
		if got := Cells(tc.line); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Cells(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ name, page, want string }{
		{"a row without a key", "| key | type |\n|---|---|\n| name | string |\n", "page.md:3: a row of a key table whose first cell names no key"},
		{"an unclosed block", "## A\n\n```toml\nname = 1\n", "page.md:3: a code block that is never closed"},
		{"a line too long", "## A\n" + strings.Repeat("x", 70000) + "\n", "page.md:2: the page cannot be read past this line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("page.md", []byte(tc.page))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzParse: any page parses or is refused with an error; a parsed page's keys have names and
// lines within it, and each section's examples are blocks of the page.
func FuzzParse(f *testing.F) {
	f.Add(page)
	f.Add("| key |\n| `a` |\n## x `y` `z`\n```\n")
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse("page.md", []byte(text))
		if err != nil {
			return
		}
		lines := strings.Count(text, "\n") + 1
		for _, s := range p.Sections {
			for _, tb := range s.Tables {
				for _, r := range tb.Rows {
					if len(tb.Header) == 0 || len(r.Cells) == 0 || r.Line <= tb.Line || r.Line > lines {
						t.Fatalf("table on line %d has row %+v on a page of %d lines", tb.Line, r, lines)
					}
				}
			}
			for _, l := range s.Prose {
				if strings.TrimSpace(l.Text) == "" || l.N < 1 || l.N > lines {
					t.Fatalf("prose line %+v on a page of %d lines", l, lines)
				}
			}
		}
		for section, keys := range p.Keys() {
			for _, k := range keys {
				if k.Name == "" || k.Line < 1 || k.Line > lines {
					t.Fatalf("section %q has key %+v on a page of %d lines", section, k, lines)
				}
			}
			if n := len(p.Examples(section, "")); n > len(p.Blocks("")) {
				t.Fatalf("section %q has %d examples of %d blocks", section, n, len(p.Blocks("")))
			}
		}
	})
}
