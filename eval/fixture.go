// Package eval runs eval fixtures (shared/spec/eval-fixtures.md): one agent-loop task with a
// scripted model and mocked tools, run through the same loop controller production uses, then
// checked against its expected trajectory.
//
// It owns the fixture format (strict loading with errors that name file and key), the scripted
// approver, expectation checks and the metrics report. It must not implement any loop behaviour
// of its own: every decision comes from package loop.
package eval

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Fixture is one eval case, as written in a fixture file.
type Fixture struct {
	CaseID       string                       `json:"case_id"`
	Goal         string                       `json:"goal"`
	Instructions string                       `json:"instructions,omitempty"`
	Tools        []ToolDecl                   `json:"tools,omitempty"`
	Policy       loop.PolicySpec              `json:"policy"`
	Budget       loop.BudgetSpec              `json:"budget"`
	Model        []model.Turn                 `json:"model"`
	MockedTools  map[string][]tool.MockResult `json:"mocked_tools,omitempty"`
	Approvals    []Approval                   `json:"approvals,omitempty"`
	// CancelAfter is a reins extension of the contract: the caller cancels the run once the
	// loop's clock has advanced this far, which is how a fixture tests stop reason cancelled.
	CancelAfter *clock.Duration `json:"cancel_after,omitempty"`
	Expected    Expected        `json:"expected"`

	// File is the path the fixture was loaded from (not part of the format).
	File string `json:"-"`
}

// ToolDecl declares a tool of the fixture.
type ToolDecl struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	SideEffect  bool            `json:"side_effect,omitempty"`
}

// Approval is one scripted human decision.
type Approval struct {
	Tool     string `json:"tool"`
	Decision string `json:"decision"` // approve | deny
	Message  string `json:"message,omitempty"`
}

// Range bounds a count; a nil end is open.
type Range struct {
	Min *int `json:"min,omitempty"`
	Max *int `json:"max,omitempty"`
}

// Expected is what the run must do.
type Expected struct {
	StopReason          loop.StopReason `json:"stop_reason"`
	AnswerContains      string          `json:"answer_contains,omitempty"`
	ToolCalls           *Range          `json:"tool_calls,omitempty"`
	Iterations          *Range          `json:"iterations,omitempty"`
	ForbiddenTools      []string        `json:"forbidden_tools,omitempty"`
	CalledTools         []string        `json:"called_tools,omitempty"`
	RequiresTraceEvents []trace.Type    `json:"requires_trace_events,omitempty"`
}

// InvalidError is a fixture that does not follow the contract. reins eval exits 2 on it.
type InvalidError struct {
	File string
	Key  string // dotted path of the offending key; empty for the whole file
	Msg  string
}

func (e *InvalidError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s: key %s: %s", e.File, e.Key, e.Msg)
}

var printer = message.NewPrinter(language.English)

//go:embed fixture.schema.json
var fixtureSchemaJSON []byte

// The fixture schema, and the parts of it that describe a scripted model and a mocked tool's
// results, compiled once: a workflow's scripted model (`script`) and mocked tool (`mock`) are
// checked by the same rules as a fixture's `model` and `mocked_tools` entries (script.go).
var fixtureSchema, scriptSchema, mockSchema = func() (fixture, script, mock *jsonschema.Schema) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(fixtureSchemaJSON))
	if err != nil {
		panic(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("reins:eval-fixture.json", doc); err != nil {
		panic(err)
	}
	return c.MustCompile("reins:eval-fixture.json"),
		c.MustCompile("reins:eval-fixture.json#/properties/model"),
		c.MustCompile("reins:eval-fixture.json#/properties/mocked_tools/additionalProperties")
}()

// Load reads and checks one fixture file.
func Load(path string) (*Fixture, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &InvalidError{File: path, Msg: fmt.Sprintf("cannot read the fixture: %v", err)}
	}
	return Parse(path, data)
}

// Parse checks and decodes a fixture; path is only used in errors.
func Parse(path string, data []byte) (*Fixture, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, &InvalidError{File: path, Msg: "not valid JSON: " + jsonErrorAt(data, err)}
	}
	if err := fixtureSchema.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, schemaError(path, ve)
		}
		return nil, &InvalidError{File: path, Msg: err.Error()}
	}
	var f Fixture
	if err := json.Unmarshal(data, &f); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, &InvalidError{File: path, Key: te.Field, Msg: fmt.Sprintf("expected %s, got JSON %s", te.Type, te.Value)}
		}
		if key, derr := badDuration(doc); derr != nil {
			return nil, &InvalidError{File: path, Key: key, Msg: derr.Error()}
		}
		return nil, &InvalidError{File: path, Msg: err.Error()}
	}
	f.File = path
	if err := f.check(); err != nil {
		return nil, err
	}
	return &f, nil
}

// check finds what the schema cannot: cross references and per-entry rules.
func (f *Fixture) check() error {
	bad := func(key, format string, args ...any) error {
		return &InvalidError{File: f.File, Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	if f.Policy.Approvers != nil {
		// The fixture contract has no approvers: decisions in a fixture are scripted, and
		// approvers name the principals of a durable run.
		return bad("policy.approvers", "unknown key")
	}
	declared := map[string]bool{}
	for i, t := range f.Tools {
		if declared[t.Name] {
			return bad(fmt.Sprintf("tools[%d].name", i), "tool %q is declared twice", t.Name)
		}
		declared[t.Name] = true
		if _, err := tool.NewValidator(t.Name, t.InputSchema); err != nil {
			return bad(fmt.Sprintf("tools[%d].input_schema", i), "%v", err)
		}
	}
	for _, list := range []struct {
		key   string
		names []string
	}{{"policy.allow", f.Policy.Allow}, {"policy.require_approval", f.Policy.RequireApproval}, {"policy.required_evidence", f.Policy.RequiredEvidence}} {
		for i, n := range list.names {
			if !declared[n] {
				return bad(fmt.Sprintf("%s[%d]", list.key, i), "%q is not a declared tool", n)
			}
		}
	}
	for i := range f.Model {
		if err := f.Model[i].Validate(); err != nil {
			return bad(fmt.Sprintf("model[%d]", i), "%v", err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.MockedTools)) {
		if !declared[name] {
			return bad("mocked_tools."+name, "%q is not a declared tool", name)
		}
		for i := range f.MockedTools[name] {
			if err := f.MockedTools[name][i].Validate(); err != nil {
				return bad(fmt.Sprintf("mocked_tools.%s[%d]", name, i), "%v", err)
			}
		}
	}
	for i, a := range f.Approvals {
		if !declared[a.Tool] {
			return bad(fmt.Sprintf("approvals[%d].tool", i), "%q is not a declared tool", a.Tool)
		}
	}
	for _, r := range []struct {
		key string
		r   *Range
	}{{"expected.tool_calls", f.Expected.ToolCalls}, {"expected.iterations", f.Expected.Iterations}} {
		if r.r != nil && r.r.Min != nil && r.r.Max != nil && *r.r.Min > *r.r.Max {
			return bad(r.key, "min %d is greater than max %d", *r.r.Min, *r.r.Max)
		}
	}
	known := []trace.Type{trace.IterationStart, trace.ModelCall, trace.Proposal, trace.Validation, trace.Approval, trace.ToolCall, trace.ToolResult, trace.Stop}
	for i, t := range f.Expected.RequiresTraceEvents {
		if !slices.Contains(known, t) {
			return bad(fmt.Sprintf("expected.requires_trace_events[%d]", i), "unknown trace event type %q", t)
		}
	}
	return nil
}

// schemaError turns the first (deepest) schema violation into an InvalidError naming the key.
func schemaError(path string, ve *jsonschema.ValidationError) error {
	leaves := collectLeaves(ve, nil)
	sort.SliceStable(leaves, func(i, j int) bool { return len(leaves[i].InstanceLocation) > len(leaves[j].InstanceLocation) })
	leaf := leaves[0]
	key := dotted(leaf.InstanceLocation)
	var msg string
	switch k := leaf.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		key = joinKey(key, k.Properties[0])
		msg = "unknown key"
		if len(k.Properties) > 1 {
			msg = fmt.Sprintf("unknown key (also unknown: %s)", strings.Join(k.Properties[1:], ", "))
		}
	case *kind.Required:
		key = joinKey(key, k.Missing[0])
		msg = "required key is missing"
	case *kind.Type:
		msg = fmt.Sprintf("expected %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Pattern:
		msg = fmt.Sprintf("expected a duration such as \"500ms\", \"30s\" or \"5m\", got %q", k.Got)
	default:
		msg = leaf.ErrorKind.LocalizedString(printer)
	}
	if key == "" {
		key = "(top level)"
	}
	return &InvalidError{File: path, Key: key, Msg: msg}
}

func collectLeaves(ve *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return append(out, ve)
	}
	for _, c := range ve.Causes {
		out = collectLeaves(c, out)
	}
	return out
}

// dotted renders a JSON pointer's tokens as policy.allow[2].name.
func dotted(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		if _, err := strconv.Atoi(t); err == nil {
			b.WriteString("[" + t + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}

func joinKey(parent, child string) string {
	if parent == "" {
		return child
	}
	return parent + "." + child
}

// badDuration finds a duration that matches the schema's pattern but that time.ParseDuration
// rejects (one out of range, such as "9999999999999h"), so that the error can name its key:
// encoding/json reports errors of a TextUnmarshaler without the key.
func badDuration(doc any) (string, error) {
	check := func(key string, v any) (string, error) {
		s, ok := v.(string)
		if !ok {
			return "", nil
		}
		var d clock.Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			return key, err
		}
		return "", nil
	}
	top, _ := doc.(map[string]any)
	if key, err := check("cancel_after", top["cancel_after"]); err != nil {
		return key, err
	}
	if budget, ok := top["budget"].(map[string]any); ok {
		if key, err := check("budget.max_duration", budget["max_duration"]); err != nil {
			return key, err
		}
	}
	latencies := func(prefix string, list any) (string, error) {
		items, _ := list.([]any)
		for i, item := range items {
			if m, ok := item.(map[string]any); ok {
				if key, err := check(fmt.Sprintf("%s[%d].latency", prefix, i), m["latency"]); err != nil {
					return key, err
				}
			}
		}
		return "", nil
	}
	if key, err := latencies("model", top["model"]); err != nil {
		return key, err
	}
	mocks, _ := top["mocked_tools"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(mocks)) {
		if key, err := latencies("mocked_tools."+name, mocks[name]); err != nil {
			return key, err
		}
	}
	return "", nil
}

// jsonErrorAt adds a line and column to a JSON syntax error.
func jsonErrorAt(data []byte, err error) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		// The streaming decoder reports a truncated file or trailing data without an offset;
		// encoding/json's check of the whole document has one.
		if uerr := json.Unmarshal(data, new(any)); !errors.As(uerr, &se) {
			return err.Error()
		}
	}
	// Offset counts the bytes read, the offending one included; a truncated file is at its end.
	at := min(int(se.Offset), len(data))
	if at > 0 && se.Error() != "unexpected end of JSON input" {
		at--
	}
	line := 1 + bytes.Count(data[:at], []byte("\n"))
	col := at - bytes.LastIndexByte(data[:at], '\n')
	return fmt.Sprintf("%v (line %d, column %d)", se, line, col)
}

// Discover expands files and directories into fixture paths: a directory yields every *.json
// file inside it, recursively, sorted by path.
func Discover(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, errors.Unwrap(err))
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(path, ".json") {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sort.Strings(found)
		files = append(files, found...)
	}
	return files, nil
}
