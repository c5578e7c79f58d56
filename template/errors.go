package template

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The kinds of error, matched with errors.Is.
var (
	// ErrSyntax: a malformed template or path.
	ErrSyntax = errors.New("malformed template or path")
	// ErrInvalidJSON: the run input or an output is not valid JSON.
	ErrInvalidJSON = errors.New("invalid JSON")
	// ErrNoOutput: a path reads the output of a step that has none yet.
	ErrNoOutput = errors.New("step has no output yet")
	// ErrNotFound: an object has no such key, or an index is out of range.
	ErrNotFound = errors.New("value not found")
	// ErrType: a value of the wrong type (a key looked up in a string, a label that is an object,
	// items that are not an array).
	ErrType = errors.New("value of the wrong type")
	// ErrTooMany: a list with more items than its bound.
	ErrTooMany = errors.New("too many items")
)

// Error is a problem with a path or a value.
type Error struct {
	// Path is the path as evaluated (trimmed, without the braces of a whole template), or "" when
	// there is none (Label, an empty path).
	Path string
	// Reason says what is wrong, as a sentence without the path.
	Reason string
	// Kind is one of the Err* sentinels.
	Kind error
}

// Error reads "path: reason", or only the reason for syntax errors (which quote the path) and
// errors without a path.
func (e *Error) Error() string {
	if e.Path == "" || e.Kind == ErrSyntax {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// Unwrap returns the kind, for errors.Is.
func (e *Error) Unwrap() error { return e.Kind }

// TemplateError is a problem at a position of a template: malformed text there, or a template
// whose path cannot be evaluated.
type TemplateError struct {
	// Offset is the byte offset of the problem in the template (of the "{{" for a template whose
	// value is missing).
	Offset int
	// Line and Column are 1-based; Column counts characters, not bytes.
	Line, Column int
	// Err is the problem, an *Error.
	Err error

	multiline bool // the template has several lines: say which
}

// Error reads "column C: …" for one-line templates and "line L, column C: …" otherwise.
func (e *TemplateError) Error() string {
	var b strings.Builder
	if e.multiline || e.Line > 1 {
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(", ")
	}
	b.WriteString("column ")
	b.WriteString(strconv.Itoa(e.Column))
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns Err.
func (e *TemplateError) Unwrap() error { return e.Err }

// templateErr builds the error for a problem at byte offset off of tmpl.
func templateErr(tmpl string, off int, err error) *TemplateError {
	before := tmpl[:off]
	line := 1 + strings.Count(before, "\n")
	if i := strings.LastIndexByte(before, '\n'); i >= 0 {
		before = before[i+1:]
	}
	return &TemplateError{Offset: off, Line: line, Column: 1 + utf8.RuneCountInString(before), Err: err,
		multiline: strings.Contains(tmpl, "\n")}
}

func syntaxErr(reason string) *Error { return &Error{Reason: reason, Kind: ErrSyntax} }
