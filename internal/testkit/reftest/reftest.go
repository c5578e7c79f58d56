// Package reftest reads the reference pages of docs/reference for the tests that hold them to
// the decoders: which keys each section documents, its other tables, its prose lines and the
// examples written under it.
//
// A page follows one convention, so that a test can read it. Every heading starts a section,
// named by the code spans of its heading ("### An agent step (`type = "agent"`)" is the section
// `type = "agent"`; a heading with several code spans names several sections that share one
// table; a heading without any is the top level, ""). A key table is a Markdown table whose
// header row begins "| key |"; each of its rows documents the key in the first code span of
// its first cell. Every table, key table or not, is also kept whole, its cells split at bars
// ("\\|" is a bar inside a cell). Fenced code blocks belong to the section they are written in;
// the other lines of text are its prose.
//
// It owns that reading only: what a page must document is the test's, which knows the decoder.
package reftest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Key is one documented key: its name, the line of its row and the row's cells (the first one
// included).
type Key struct {
	Name  string
	Line  int
	Cells []string
}

// Table is one Markdown table: the cells of its header row, its rows, and the line of its header.
type Table struct {
	Header []string
	Rows   []Row
	Line   int
}

// Row is one row of a table below its header: its cells, trimmed, and its line.
type Row struct {
	Cells []string
	Line  int
}

// Name is the first code span of the row's first cell ("--limit" of "`--limit`, `-l`"), or "".
func (r Row) Name() string {
	if len(r.Cells) == 0 {
		return ""
	}
	if m := codeSpan.FindStringSubmatch(r.Cells[0]); m != nil {
		return m[1]
	}
	return ""
}

// Line is one line of a section's prose: its text and its number.
type Line struct {
	Text string
	N    int
}

// Block is one fenced code block: its language ("toml", "json"), its text and the line of its
// opening fence.
type Block struct {
	Lang string
	Text string
	Line int
}

// Section is the text under one heading, up to the next heading.
type Section struct {
	// Names are the code spans of the heading; [""] for a heading without one.
	Names []string
	// Level is the heading's level (2 for "##").
	Level   int
	Heading string
	Line    int
	Keys    []Key
	Tables  []Table
	Blocks  []Block
	// Prose are the lines that are neither a heading, a table nor in a code block, blank ones
	// left out.
	Prose []Line
	// Parent is the index of the nearest section of a lower level above it, or -1.
	Parent int
}

// Page is a reference page, its sections in order.
type Page struct {
	File     string
	Sections []Section
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// Read reads the page at path.
func Read(path string) (*Page, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the reference page: %w", err)
	}
	return Parse(path, data)
}

// Load is [Read] for a test: a page that cannot be read fails t.
func Load(t testing.TB, path string) *Page {
	t.Helper()
	page, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return page
}

// Parse reads a page from data; file names it in errors.
func Parse(file string, data []byte) (*Page, error) {
	p := &Page{File: file}
	p.Sections = append(p.Sections, Section{Names: []string{""}, Parent: -1})
	var (
		block *Block
		body  strings.Builder
		table *Table // the table the previous line was in, or nil
		n     int
	)
	cur := func() *Section { return &p.Sections[len(p.Sections)-1] }
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "|") || block != nil {
			table = endTable(cur(), table)
		}
		switch {
		case block != nil:
			if strings.HasPrefix(trimmed, "```") {
				block.Text = body.String()
				cur().Blocks = append(cur().Blocks, *block)
				block = nil
				continue
			}
			body.WriteString(line)
			body.WriteByte('\n')
		case strings.HasPrefix(trimmed, "```"):
			block = &Block{Lang: strings.TrimPrefix(trimmed, "```"), Line: n}
			body.Reset()
		case strings.HasPrefix(line, "#"):
			p.Sections = append(p.Sections, heading(line, n, p.Sections))
		case table == nil && strings.HasPrefix(trimmed, "|"):
			table = &Table{Header: Cells(trimmed), Line: n}
		case table != nil:
			if separator(trimmed) {
				continue
			}
			row := Row{Cells: Cells(trimmed), Line: n}
			table.Rows = append(table.Rows, row)
			if table.Header[0] != "key" {
				continue
			}
			name := row.Name()
			if name == "" {
				return nil, fmt.Errorf("%s:%d: a row of a key table whose first cell names no key in `backquotes`", file, n)
			}
			cur().Keys = append(cur().Keys, Key{Name: name, Line: n, Cells: row.Cells})
		case trimmed != "":
			cur().Prose = append(cur().Prose, Line{Text: line, N: n})
		}
	}
	endTable(cur(), table)
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: the page cannot be read past this line: %w", file, n+1, err)
	}
	if block != nil {
		return nil, fmt.Errorf("%s:%d: a code block that is never closed", file, block.Line)
	}
	return p, nil
}

// endTable adds t, when there is one, to s's tables; it returns nil, the table the next line is
// in.
func endTable(s *Section, t *Table) *Table {
	if t != nil {
		s.Tables = append(s.Tables, *t)
	}
	return nil
}

// separator reports whether a table's line is the one under its header: |---|:--:|.
func separator(line string) bool {
	return strings.Trim(line, "|-: ") == "" && strings.Contains(line, "-")
}

// Cells splits a table's line into its trimmed cells; "\\|" is a bar inside a cell.
func Cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	parts := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")
	for i, part := range parts {
		parts[i] = strings.ReplaceAll(strings.TrimSpace(part), "\x00", "|")
	}
	return parts
}

// Starting returns the first line of s's prose that starts with prefix.
func (s *Section) Starting(prefix string) (Line, bool) {
	for _, l := range s.Prose {
		if strings.HasPrefix(l.Text, prefix) {
			return l, true
		}
	}
	return Line{}, false
}

// heading makes the section a heading line starts; before are the sections above it.
func heading(line string, n int, before []Section) Section {
	level := len(line) - len(strings.TrimLeft(line, "#"))
	text := strings.TrimSpace(line[level:])
	s := Section{Level: level, Heading: text, Line: n, Parent: -1}
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		s.Names = append(s.Names, m[1])
	}
	if len(s.Names) == 0 {
		s.Names = []string{""}
	}
	for i := len(before) - 1; i >= 0; i-- {
		if before[i].Level < level {
			s.Parent = i
			break
		}
	}
	return s
}

// Keys returns the keys each section name documents, in page order, with the sections that hold
// them (for their headings and lines).
func (p *Page) Keys() map[string][]Key {
	out := map[string][]Key{}
	for _, s := range p.Sections {
		if len(s.Keys) == 0 {
			continue
		}
		for _, name := range s.Names {
			out[name] = append(out[name], s.Keys...)
		}
	}
	return out
}

// Examples returns the code blocks in lang that show the keys of the section named name: the
// blocks under its heading and under the headings that enclose it.
func (p *Page) Examples(name, lang string) []Block {
	var out []Block
	seen := map[int]bool{}
	for i, s := range p.Sections {
		if len(s.Keys) == 0 || !contains(s.Names, name) {
			continue
		}
		for j := i; j >= 0; j = p.Sections[j].Parent {
			if seen[j] {
				break
			}
			seen[j] = true
			for _, b := range p.Sections[j].Blocks {
				if b.Lang == lang {
					out = append(out, b)
				}
			}
		}
	}
	return out
}

// Blocks returns every code block of the page in lang.
func (p *Page) Blocks(lang string) []Block {
	var out []Block
	for _, s := range p.Sections {
		for _, b := range s.Blocks {
			if b.Lang == lang {
				out = append(out, b)
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
