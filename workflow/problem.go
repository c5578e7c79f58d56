package workflow

import (
	"fmt"
	"strings"
)

// Code is the stable code of a problem. Users and tools match on it; the strings never change.
type Code string

// Problem codes.
const (
	EParse          Code = "E_PARSE"           // the file is not valid TOML
	EUnknownKey     Code = "E_UNKNOWN_KEY"     // a key the format does not define (or not for this step type)
	EType           Code = "E_TYPE"            // a value of the wrong type
	EUnknownType    Code = "E_UNKNOWN_TYPE"    // an unknown step type
	EMissingKey     Code = "E_MISSING_KEY"     // a required key is absent
	EBadName        Code = "E_BAD_NAME"        // a workflow name or step id that does not match its pattern
	EBadValue       Code = "E_BAD_VALUE"       // a value outside its set (backoff, on_timeout, provider, ...)
	EBadDuration    Code = "E_BAD_DURATION"    // a duration that does not parse
	EBadBound       Code = "E_BAD_BOUND"       // a bound that is not positive (max_iterations <= 0, ...)
	EDuplicateID    Code = "E_DUPLICATE_ID"    // two steps with the same id
	EDanglingEdge   Code = "E_DANGLING_EDGE"   // an edge from or to an unknown step
	EUnknownStep    Code = "E_UNKNOWN_STEP"    // a step reference (start, branches, map step) to an unknown step
	EUnknownModel   Code = "E_UNKNOWN_MODEL"   // a step names a model not declared in [models]
	EUnknownTool    Code = "E_UNKNOWN_TOOL"    // a step names a tool not declared in [tools]
	EUnknownHandler Code = "E_UNKNOWN_HANDLER" // a handler no worker registers (only checked when handlers are known)
	ECycle          Code = "E_CYCLE"           // a cycle that does not pass through a loop edge
	EUnreachable    Code = "E_UNREACHABLE"     // a step no path from start reaches
	ENoStart        Code = "E_NO_START"        // no start step can be determined
	ETemplate       Code = "E_TEMPLATE"        // a template naming an unknown step or a malformed template
	EUnboundRef     Code = "E_UNBOUND_REF"     // a template reading a step that may not have run on some path to here, without a default
	EBadBranchPath  Code = "E_BAD_BRANCH_PATH" // a branch or expr path the step's output_schema cannot produce
	EDepth          Code = "E_DEPTH"           // sub-workflows nested deeper than 8
	ERecursion      Code = "E_RECURSION"       // a workflow that calls itself, directly or not
	EWorkflowFile   Code = "E_WORKFLOW_FILE"   // a sub-workflow file that cannot be read or is invalid
	EBadTrigger     Code = "E_BAD_TRIGGER"     // a trigger with none or several of schedule, subject and webhook, or a key its kind does not take
	EBadSchedule    Code = "E_BAD_SCHEDULE"    // a schedule that is not a cron expression of 5 fields, or is never due
	EBadTimezone    Code = "E_BAD_TIMEZONE"    // a time zone that is not an IANA name
	EBadSubject     Code = "E_BAD_SUBJECT"     // a subject that is not a NATS subject, or is reins's or the server's own
)

// Problem is one thing wrong with a definition: a stable code, where (file, line, key) and one
// plain sentence. It is also the problem type of a server's configuration (package operator),
// whose problems carry no code.
type Problem struct {
	Code    Code   `json:"code"`
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Key     string `json:"key,omitempty"`
	Message string `json:"message"`
}

// String renders a problem as FILE:LINE: CODE key: message, or, without a code, as
// FILE:LINE: key KEY: message; the parts it lacks are left out.
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
	}
	label := string(p.Code)
	switch {
	case p.Code != "" && p.Key != "":
		label += " " + p.Key
	case p.Key != "":
		label = "key " + p.Key
	}
	if label != "" {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(label)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems is a list of problems; as an error it reads as all of them, one per line.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Has reports whether ps holds a problem with code c.
func (ps Problems) Has(c Code) bool {
	for _, p := range ps {
		if p.Code == c {
			return true
		}
	}
	return false
}
