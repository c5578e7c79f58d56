package main

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reins-run/reins/internal/testkit/mdtest"
	"github.com/reins-run/reins/internal/testkit/reftest"
)

// referenceFile is the reference of every command and flag, which TestCLIReference holds to
// the command tree.
const referenceFile = "../../docs/reference/cli.md"

// docFlag is one row of a flag table of docs/reference/cli.md.
type docFlag struct {
	name, short, typ, def, example string
}

// cliReference is what docs/reference/cli.md documents: the flags of each command by its path
// ("reins runs list"), and the flag sets that sections include by their anchor.
type cliReference struct {
	commands map[string]map[string]docFlag
	sets     map[string]map[string]docFlag
	// includes are the flag sets each command's section names ("Flag sets: [...](#anchor)").
	includes map[string][]string
}

var (
	setHeading = regexp.MustCompile(`^(.+ flags)$`)
	setLink    = regexp.MustCompile(`\]\(#([a-z0-9-]+)\)`)
	flagCell   = regexp.MustCompile("^`--([a-z0-9-]+)`(?:, `-([a-zA-Z])`)?$")
)

// parseCLIReference reads the convention of docs/reference/cli.md through [reftest.Parse]: a
// "### `reins ...`" heading per command, a "### NAME flags" heading per flag set, in each a
// table headed "| flag |" whose rows give the flag ("`--flag`" or "`--flag`, `-f`"), the type,
// the default and, last, an example; and, in a command's section, a line
// "Flag sets: [...](#anchor), ..." naming the sets it takes.
func parseCLIReference(t *testing.T, text string) cliReference {
	t.Helper()
	page, err := reftest.Parse(referenceFile, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	ref := cliReference{commands: map[string]map[string]docFlag{}, sets: map[string]map[string]docFlag{}, includes: map[string][]string{}}
	for _, s := range page.Sections {
		command := s.Names[0]
		switch set := setHeading.FindStringSubmatch(s.Heading); {
		case s.Level != 3:
			continue
		case s.Heading == "`"+command+"`" && (command == "reins" || strings.HasPrefix(command, "reins ")):
			if ref.commands[command] != nil {
				t.Errorf("%s:%d: command %q has a second section", referenceFile, s.Line, command)
			}
			ref.commands[command] = flagRows(t, s)
			if l, ok := s.Starting("Flag sets:"); ok {
				for _, m := range setLink.FindAllStringSubmatch(l.Text, -1) {
					ref.includes[command] = append(ref.includes[command], m[1])
				}
			}
		case set != nil && command == "":
			ref.sets[mdtest.Anchor(set[1])] = flagRows(t, s)
		}
	}
	return ref
}

// flagRows reads the rows of the flag tables of a section.
func flagRows(t *testing.T, s reftest.Section) map[string]docFlag {
	t.Helper()
	flags := map[string]docFlag{}
	for _, table := range s.Tables {
		if table.Header[0] != "flag" {
			continue
		}
		for _, row := range table.Rows {
			fm := flagCell.FindStringSubmatch(row.Cells[0])
			if fm == nil || len(row.Cells) != 5 {
				t.Errorf("%s:%d: a flag row is | `--flag` | type | default | what it does | example |, got %q", referenceFile, row.Line, row.Cells)
				continue
			}
			if _, dup := flags[fm[1]]; dup {
				t.Errorf("%s:%d: --%s is documented twice in its section", referenceFile, row.Line, fm[1])
			}
			flags[fm[1]] = docFlag{name: fm[1], short: fm[2], typ: row.Cells[1], def: row.Cells[2], example: row.Cells[4]}
		}
	}
	return flags
}

// flagsOf returns the documented flags of command: its own rows and those of the sets it names.
func (r cliReference) flagsOf(t *testing.T, command string) map[string]docFlag {
	out := map[string]docFlag{}
	for name, f := range r.commands[command] {
		out[name] = f
	}
	for _, set := range r.includes[command] {
		flags, ok := r.sets[set]
		if !ok {
			t.Errorf("%s: %s names the flag set #%s, which has no section", referenceFile, command, set)
		}
		for name, f := range flags {
			if _, dup := out[name]; dup {
				t.Errorf("%s: %s documents --%s twice (its own row and the set #%s)", referenceFile, command, name, set)
			}
			out[name] = f
		}
	}
	return out
}

// docTypes are the words of the type column for pflag's value types.
var docTypes = map[string]string{
	"string": "string", "bool": "bool", "int": "int", "int64": "int", "float64": "number",
	"duration": "duration", "stringSlice": "list", "stringArray": "repeated",
}

// checkDefault reports whether a documented default (— for the zero value, else `VALUE`)
// is the flag's.
func checkDefault(fl *pflag.Flag, doc string) bool {
	zero := map[string]bool{"": true, "false": true, "0": true, "[]": true, "0s": true}
	if doc == "—" {
		return zero[fl.DefValue]
	}
	v, ok := strings.CutPrefix(doc, "`")
	if !ok {
		return false
	}
	v, _, ok = strings.Cut(v, "`")
	if !ok {
		return false
	}
	switch fl.Value.Type() {
	case "duration":
		d, err := time.ParseDuration(v)
		return err == nil && d.String() == fl.DefValue
	case "stringSlice", "stringArray":
		return "["+v+"]" == fl.DefValue
	}
	return v == fl.DefValue
}

// commandTree is newRoot with what cobra adds when it runs: help, completion, --version.
func commandTree() *cobra.Command {
	root := newRoot()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	return root
}

// TestCLIReference: docs/reference/cli.md documents every command and every flag that is not
// hidden, with the flag's type and default, and nothing that does not exist.
func TestCLIReference(t *testing.T) {
	text, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	ref := parseCLIReference(t, string(text))
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		path := c.CommandPath()
		seen[path] = true
		checkCommand(t, ref, c)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(commandTree())
	for path := range ref.commands {
		if !seen[path] {
			t.Errorf("%s documents %q, which is not a command", referenceFile, path)
		}
	}
	if len(ref.sets) == 0 {
		t.Errorf("%s has no flag sets: has its convention changed?", referenceFile)
	}
}

// checkCommand holds c's section to c: the section exists, every visible flag of c's own is
// documented with its type and default, and every documented flag is one of c's own.
func checkCommand(t *testing.T, ref cliReference, c *cobra.Command) {
	path := c.CommandPath()
	if _, ok := ref.commands[path]; !ok {
		t.Errorf("%s has no section ### `%s`", referenceFile, path)
		return
	}
	docs := ref.flagsOf(t, path)
	c.LocalFlags().VisitAll(func(fl *pflag.Flag) {
		key := path + " --" + fl.Name
		d, ok := docs[fl.Name]
		switch {
		case fl.Name == "help":
			// Every command takes -h, --help: the reference says so once.
		case fl.Hidden:
			if ok {
				t.Errorf("%s documents %s, a hidden flag", referenceFile, key)
			}
		case !ok:
			t.Errorf("%s: ### `%s` does not document --%s (%s)", referenceFile, path, fl.Name, fl.Usage)
		case docTypes[fl.Value.Type()] != d.typ:
			t.Errorf("%s: %s: type %q, want %q (a %s)", referenceFile, key, d.typ, docTypes[fl.Value.Type()], fl.Value.Type())
		case !checkDefault(fl, d.def):
			t.Errorf("%s: %s: default %s, want %q (— for none)", referenceFile, key, d.def, fl.DefValue)
		case d.short != fl.Shorthand:
			t.Errorf("%s: %s: short form %q, want %q", referenceFile, key, d.short, fl.Shorthand)
		case d.example == "":
			t.Errorf("%s: %s has no example", referenceFile, key)
		}
	})
	for name := range docs {
		key := path + " --" + name
		if c.LocalFlags().Lookup(name) == nil {
			t.Errorf("%s documents %s, which is not a flag of %s", referenceFile, key, path)
		}
	}
}

// TestCLIReferenceConvention: the parser of the reference reads what it is meant to, so that
// TestCLIReference cannot pass on a section it skipped.
func TestCLIReferenceConvention(t *testing.T) {
	doc := "## Commands\n\n### `reins runs list`\n\nFlag sets: [connection flags](#connection-flags).\n\n" +
		"| flag | type | default | what it does | example |\n|---|---|---|---|---|\n" +
		"| `--limit` | int | — | at most N | `--limit 5` |\n" +
		"| `--format`, `-f` | string | `mermaid` | mermaid \\| dot | `-f dot` |\n\n" +
		"## Flag sets\n\n### Connection flags\n\n| flag | type | default | what it does | example |\n|---|---|---|---|---|\n" +
		"| `--nats` | string | — | URL | `--nats nats://h:4222` |\n\n## Exit statuses\n\n| flag | x | x | x | x |\n|---|---|---|---|---|\n| `--nope` | x | x | x | x |\n"
	ref := parseCLIReference(t, doc)
	got := ref.flagsOf(t, "reins runs list")
	want := []string{"format", "limit", "nats"}
	if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, want) {
		t.Fatalf("flags %v, want %v", names, want)
	}
	if f := got["format"]; f.short != "f" || f.def != "`mermaid`" || f.example != "`-f dot`" {
		t.Errorf("--format read as %+v", f)
	}
	fl := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fl.Duration("older-than", 168*time.Hour, "")
	fl.StringSlice("handlers", []string{"a", "b"}, "")
	fl.Bool("json", false, "")
	for _, c := range []struct {
		flag, doc string
		ok        bool
	}{
		{"older-than", "`168h`", true}, {"older-than", "`7h`", false}, {"older-than", "—", false},
		{"handlers", "`a,b`", true}, {"handlers", "—", false},
		{"json", "—", true}, {"json", "`true`", false},
	} {
		if got := checkDefault(fl.Lookup(c.flag), c.doc); got != c.ok {
			t.Errorf("checkDefault(--%s, %s) = %v, want %v", c.flag, c.doc, got, c.ok)
		}
	}
}
