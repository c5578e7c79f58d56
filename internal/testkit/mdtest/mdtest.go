// Package mdtest holds the project's Markdown to what the code does: it reads the fenced code
// blocks of a file, finds each Go sample in the source it was cut from, and runs the shell
// sessions of a README (the lines after a "$ " prompt) as written, comparing what they print
// with what the README shows.
package mdtest

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"
)

// Block is one fenced code block of a Markdown file.
type Block struct {
	File string // the file, as given to Blocks
	Line int    // the line of the opening fence, from 1
	Lang string // the first word of the fence's info string ("go", "sh", "" for none)
	Text string // the lines between the fences, each ending in "\n"
}

// Where names the block for a test's message: FILE:LINE.
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// Blocks returns the fenced code blocks of src, a Markdown file named file. A fence is three
// or more backticks or tildes at the start of a line (up to three spaces in, as in a list
// item; its lines lose as many spaces); the block ends at a line of the same character, at
// least as long, with nothing else on it. A block that is never closed is an error naming its
// first line.
func Blocks(file string, src []byte) ([]Block, error) {
	var (
		blocks []Block
		open   *Block
		fence  string
		indent int // the opening fence's indentation, taken off the block's lines
		body   strings.Builder
	)
	lines := strings.Split(string(bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))), "\n")
	for i, line := range lines {
		if open == nil {
			if f, info, ok := opening(line); ok {
				lang, _, _ := strings.Cut(strings.TrimSpace(info), " ")
				open, fence = &Block{File: file, Line: i + 1, Lang: lang}, f
				indent = len(line) - len(strings.TrimLeft(line, " "))
				body.Reset()
			}
			continue
		}
		if closes(line, fence) {
			open.Text = body.String()
			blocks = append(blocks, *open)
			open = nil
			continue
		}
		body.WriteString(dedent(line, indent))
		body.WriteByte('\n')
	}
	if open != nil {
		return blocks, fmt.Errorf("%s: the code block opened with %s is never closed", open.Where(), fence)
	}
	return blocks, nil
}

// opening reports whether line opens a fenced block, with its fence and info string.
func opening(line string) (fence, info string, ok bool) {
	rest := strings.TrimLeft(line, " ")
	if len(line)-len(rest) > 3 || rest == "" || (rest[0] != '`' && rest[0] != '~') {
		return "", "", false
	}
	n := len(rest) - len(strings.TrimLeft(rest, rest[:1]))
	if n < 3 {
		return "", "", false
	}
	fence, info = rest[:n], rest[n:]
	if fence[0] == '`' && strings.Contains(info, "`") {
		return "", "", false // an inline code span, not a fence
	}
	return fence, info, true
}

// closes reports whether line closes a block opened with fence.
func closes(line, fence string) bool {
	rest := strings.TrimLeft(line, " ")
	if len(line)-len(rest) > 3 {
		return false
	}
	rest = strings.TrimRight(rest, " \t")
	return len(rest) >= len(fence) && strings.Trim(rest, fence[:1]) == ""
}

// dedent takes up to n leading spaces off line.
func dedent(line string, n int) string {
	for i := 0; i < n && strings.HasPrefix(line, " "); i++ {
		line = line[1:]
	}
	return line
}

// Anchor is the anchor GitHub gives a heading's text: lower case, letters, digits, hyphens
// and underscores kept, spaces as hyphens, everything else dropped (a repeated heading's
// "-1", "-2" suffixes are the caller's).
func Anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
