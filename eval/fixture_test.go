package eval_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/eval"
)

// writeFile writes content to dir/name (creating parent directories) and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// minimal is the smallest valid fixture; the invalid cases below each break one thing.
const minimal = `{"case_id": "c", "goal": "g", "model": [{"text": "ok"}], "expected": {"stop_reason": "completed"}}`

func TestLoadMinimal(t *testing.T) {
	path := writeFile(t, t.TempDir(), "minimal.json", minimal)
	f, err := eval.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if f.CaseID != "c" || f.Goal != "g" || len(f.Model) != 1 || f.Expected.StopReason != "completed" || f.File != path {
		t.Fatalf("Load = %+v", f)
	}
}

func TestLoadSpecExample(t *testing.T) {
	// The example of shared/spec/eval-fixtures.md, verbatim: every key the contract documents.
	path := writeFile(t, t.TempDir(), "example.json", `{
  "case_id": "refund_forbidden_tool",
  "goal": "Decide whether refund evidence is sufficient for order O-104.",
  "instructions": "You investigate refunds. Never issue refunds yourself.",
  "tools": [
    {
      "name": "read_order",
      "description": "Read an order by id.",
      "input_schema": {
        "type": "object",
        "properties": {"order_id": {"type": "string", "minLength": 1}},
        "required": ["order_id"],
        "additionalProperties": false
      },
      "side_effect": false
    },
    {"name": "issue_refund", "side_effect": true}
  ],
  "policy": {
    "allow": ["read_order", "issue_refund"],
    "forbid": ["issue_refund"],
    "require_approval": []
  },
  "budget": {
    "max_iterations": 5,
    "max_tool_calls": 3,
    "max_duration": "30s",
    "max_tokens": 10000,
    "max_cost_usd": 0.5,
    "max_tool_failures": 2,
    "max_repeated_calls": 3,
    "max_invalid_actions": 3
  },
  "model": [
    {"tool_calls": [{"name": "read_order", "arguments": {"order_id": "O-104"}}],
     "usage": {"input_tokens": 120, "output_tokens": 18}},
    {"tool_calls": [{"name": "issue_refund", "arguments": {"order_id": "O-104"}}]},
    {"text": "The refund is justified."}
  ],
  "mocked_tools": {
    "read_order": [
      {"output": {"status": "delivered", "late_days": 4}}
    ]
  },
  "approvals": [],
  "expected": {
    "stop_reason": "refused",
    "answer_contains": "",
    "tool_calls": {"min": 1, "max": 1},
    "iterations": {"min": 1, "max": 2},
    "forbidden_tools": ["issue_refund"],
    "called_tools": ["read_order"],
    "requires_trace_events": ["proposal", "validation", "tool_result", "stop"]
  }
}`)
	f, err := eval.Load(path)
	if err != nil {
		t.Fatalf("the contract's own example does not load: %v", err)
	}
	b := f.Budget.Budget()
	if b.MaxIterations != 5 || b.MaxToolCalls != 3 || b.MaxDuration.String() != "30s" || b.MaxTokens != 10000 ||
		b.MaxCostUSD != 0.5 || b.MaxToolFailures != 2 || b.MaxRepeatedCalls != 3 || b.MaxInvalidActions != 3 {
		t.Errorf("budget = %+v", b)
	}
	if len(f.Tools) != 2 || !f.Tools[1].SideEffect || len(f.MockedTools["read_order"]) != 1 || *f.Expected.ToolCalls.Max != 1 {
		t.Errorf("fixture decoded as %+v", f)
	}
}

func TestLoadInvalid(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fixture string
		key     string // InvalidError.Key; "" for errors about the whole file
		msg     string // substring of the message
	}{
		{
			name:    "unknown top-level key",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "colour": "red", "expected": {"stop_reason": "completed"}}`,
			key:     "colour", msg: "unknown key",
		},
		{
			name:    "unknown nested key",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "policy": {"alow": []}, "expected": {"stop_reason": "completed"}}`,
			key:     "policy.alow", msg: "unknown key",
		},
		{
			name:    "approvers belong to durable runs, not fixtures",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "policy": {"approvers": ["alice"]}, "expected": {"stop_reason": "completed"}}`,
			key:     "policy.approvers", msg: "unknown key",
		},
		{
			name:    "unknown key in a turn",
			fixture: `{"case_id": "c", "goal": "g", "model": [{"text": "a"}, {"txet": "b"}], "expected": {"stop_reason": "completed"}}`,
			key:     "model[1].txet", msg: "unknown key",
		},
		{
			name:    "unknown key in expected",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "expected": {"stop_reason": "completed", "answer": "x"}}`,
			key:     "expected.answer", msg: "unknown key",
		},
		{
			name:    "max_iterations is a string",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "budget": {"max_iterations": "5"}, "expected": {"stop_reason": "completed"}}`,
			key:     "budget.max_iterations", msg: "expected integer, got string",
		},
		{
			name:    "goal is a number",
			fixture: `{"case_id": "c", "goal": 42, "model": [], "expected": {"stop_reason": "completed"}}`,
			key:     "goal", msg: "expected string, got number",
		},
		{
			name:    "max_iterations is zero",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "budget": {"max_iterations": 0}, "expected": {"stop_reason": "completed"}}`,
			key:     "budget.max_iterations", msg: "",
		},
		{
			name:    "missing expected.stop_reason",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "expected": {"answer_contains": "x"}}`,
			key:     "expected.stop_reason", msg: "required key is missing",
		},
		{
			name:    "missing expected",
			fixture: `{"case_id": "c", "goal": "g", "model": []}`,
			key:     "expected", msg: "required key is missing",
		},
		{
			name:    "unknown stop reason",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "expected": {"stop_reason": "done"}}`,
			key:     "expected.stop_reason", msg: "",
		},
		{
			name:    "missing case_id",
			fixture: `{"goal": "g", "model": [], "expected": {"stop_reason": "completed"}}`,
			key:     "case_id", msg: "required key is missing",
		},
		{
			name:    "empty case_id",
			fixture: `{"case_id": "", "goal": "g", "model": [], "expected": {"stop_reason": "completed"}}`,
			key:     "case_id", msg: "",
		},
		{
			name:    "missing goal",
			fixture: `{"case_id": "c", "model": [], "expected": {"stop_reason": "completed"}}`,
			key:     "goal", msg: "required key is missing",
		},
		{
			name:    "missing model",
			fixture: `{"case_id": "c", "goal": "g", "expected": {"stop_reason": "completed"}}`,
			key:     "model", msg: "required key is missing",
		},
		{
			name:    "bad duration",
			fixture: `{"case_id": "c", "goal": "g", "model": [{"text": "a", "latency": "soon"}], "expected": {"stop_reason": "completed"}}`,
			key:     "model[0].latency", msg: `got "soon"`,
		},
		{
			name:    "negative duration",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "budget": {"max_duration": "-1s"}, "expected": {"stop_reason": "completed"}}`,
			key:     "budget.max_duration", msg: `got "-1s"`,
		},
		{
			name:    "duration without unit",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "cancel_after": "30", "expected": {"stop_reason": "completed"}}`,
			key:     "cancel_after", msg: `got "30"`,
		},
		{
			name:    "duration out of range",
			fixture: `{"case_id": "c", "goal": "g", "model": [{"text": "a", "latency": "9999999999999h"}], "expected": {"stop_reason": "completed"}}`,
			key:     "model[0].latency", msg: "9999999999999h",
		},
		{
			name:    "duration out of range in a mock",
			fixture: `{"case_id": "c", "goal": "g", "tools": [{"name": "t"}], "model": [], "mocked_tools": {"t": [{"output": 1}, {"output": 2, "latency": "9999999999999h"}]}, "expected": {"stop_reason": "completed"}}`,
			key:     "mocked_tools.t[1].latency", msg: "9999999999999h",
		},
		{
			name:    "turn with two kinds",
			fixture: `{"case_id": "c", "goal": "g", "model": [{"text": "a"}, {"text": "b", "escalate": "c"}], "expected": {"stop_reason": "completed"}}`,
			key:     "model[1]", msg: "exactly one of text, tool_calls, escalate, refuse or error",
		},
		{
			name:    "turn with no kind",
			fixture: `{"case_id": "c", "goal": "g", "model": [{"usage": {"input_tokens": 1}}], "expected": {"stop_reason": "completed"}}`,
			key:     "model[0]", msg: "found 0",
		},
		{
			name:    "tool call without name",
			fixture: `{"case_id": "c", "goal": "g", "model": [{"tool_calls": [{"arguments": {}}]}], "expected": {"stop_reason": "completed"}}`,
			key:     "model[0].tool_calls[0].name", msg: "required key is missing",
		},
		{
			name:    "mock for an undeclared tool",
			fixture: `{"case_id": "c", "goal": "g", "tools": [{"name": "t"}], "model": [], "mocked_tools": {"ghost": [{"output": 1}]}, "expected": {"stop_reason": "completed"}}`,
			key:     "mocked_tools.ghost", msg: `"ghost" is not a declared tool`,
		},
		{
			name:    "mock with output and error",
			fixture: `{"case_id": "c", "goal": "g", "tools": [{"name": "t"}], "model": [], "mocked_tools": {"t": [{"output": 1, "error": "x"}]}, "expected": {"stop_reason": "completed"}}`,
			key:     "mocked_tools.t[0]", msg: "either output or error",
		},
		{
			name:    "policy.allow names an undeclared tool",
			fixture: `{"case_id": "c", "goal": "g", "tools": [{"name": "t"}], "policy": {"allow": ["t", "u"]}, "model": [], "expected": {"stop_reason": "completed"}}`,
			key:     "policy.allow[1]", msg: `"u" is not a declared tool`,
		},
		{
			name:    "policy.require_approval names an undeclared tool",
			fixture: `{"case_id": "c", "goal": "g", "policy": {"require_approval": ["u"]}, "model": [], "expected": {"stop_reason": "completed"}}`,
			key:     "policy.require_approval[0]", msg: `"u" is not a declared tool`,
		},
		{
			name:    "approval for an undeclared tool",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "approvals": [{"tool": "u", "decision": "approve"}], "expected": {"stop_reason": "completed"}}`,
			key:     "approvals[0].tool", msg: `"u" is not a declared tool`,
		},
		{
			name:    "unknown approval decision",
			fixture: `{"case_id": "c", "goal": "g", "tools": [{"name": "t"}], "model": [], "approvals": [{"tool": "t", "decision": "maybe"}], "expected": {"stop_reason": "completed"}}`,
			key:     "approvals[0].decision", msg: "",
		},
		{
			name:    "duplicate tool names",
			fixture: `{"case_id": "c", "goal": "g", "tools": [{"name": "t"}, {"name": "u"}, {"name": "t"}], "model": [], "expected": {"stop_reason": "completed"}}`,
			key:     "tools[2].name", msg: `tool "t" is declared twice`,
		},
		{
			name:    "invalid input schema",
			fixture: `{"case_id": "c", "goal": "g", "tools": [{"name": "t", "input_schema": {"type": 12}}], "model": [], "expected": {"stop_reason": "completed"}}`,
			key:     "tools[0].input_schema", msg: `tool "t"`,
		},
		{
			name:    "min greater than max in tool_calls",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "expected": {"stop_reason": "completed", "tool_calls": {"min": 3, "max": 2}}}`,
			key:     "expected.tool_calls", msg: "min 3 is greater than max 2",
		},
		{
			name:    "min greater than max in iterations",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "expected": {"stop_reason": "completed", "iterations": {"min": 1, "max": 0}}}`,
			key:     "expected.iterations", msg: "min 1 is greater than max 0",
		},
		{
			name:    "unknown trace event type",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "expected": {"stop_reason": "completed", "requires_trace_events": ["stop", "tool_exec"]}}`,
			key:     "expected.requires_trace_events[1]", msg: `unknown trace event type "tool_exec"`,
		},
		{
			name:    "integer too large",
			fixture: `{"case_id": "c", "goal": "g", "model": [], "budget": {"max_tokens": 1e30}, "expected": {"stop_reason": "completed"}}`,
			key:     "budget.max_tokens", msg: "",
		},
		{
			name:    "top level is not an object",
			fixture: `[]`,
			key:     "(top level)", msg: "expected object, got array",
		},
		{
			name:    "invalid JSON syntax",
			fixture: "{\n  \"case_id\": \"c\",\n  \"goal\": \"g\",\n  \"model\": [,],\n  \"expected\": {\"stop_reason\": \"completed\"}\n}",
			key:     "", msg: "invalid character ',' looking for beginning of value (line 4, column 13)",
		},
		{
			name:    "truncated JSON",
			fixture: "{\n  \"case_id\": \"c\",\n  \"goal\": \"g\",\n",
			key:     "", msg: "unexpected end of JSON input (line 4, column 1)",
		},
		{
			name:    "trailing data",
			fixture: minimal + "\n\n  }",
			key:     "", msg: "invalid character '}' after top-level value (line 3, column 3)",
		},
		{
			name:    "empty file",
			fixture: "",
			key:     "", msg: "not valid JSON: unexpected end of JSON input (line 1, column 1)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "case.json", tc.fixture)
			f, err := eval.Load(path)
			if err == nil {
				t.Fatalf("Load accepted the fixture: %+v", f)
			}
			var inv *eval.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("Load error %v (%T), want *eval.InvalidError", err, err)
			}
			if inv.File != path {
				t.Errorf("InvalidError.File = %q, want %q", inv.File, path)
			}
			if inv.Key != tc.key {
				t.Errorf("InvalidError.Key = %q, want %q (error: %v)", inv.Key, tc.key, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+": ") {
				t.Errorf("error %q does not start with the file name", msg)
			}
			if tc.key != "" && !strings.Contains(msg, "key "+tc.key+": ") {
				t.Errorf("error %q does not name the key %s", msg, tc.key)
			}
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("error %q does not contain %q", msg, tc.msg)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is not one line", msg)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.json")
	_, err := eval.Load(path)
	var inv *eval.InvalidError
	if !errors.As(err, &inv) || inv.File != path || !strings.Contains(err.Error(), "cannot read") {
		t.Fatalf("Load(missing) = %v, want an InvalidError naming %s", err, path)
	}
}

func TestLoadAllDuplicateCaseID(t *testing.T) {
	dir := t.TempDir()
	first := writeFile(t, dir, "a.json", minimal)
	second := writeFile(t, dir, "sub/b.json", minimal)
	_, err := eval.LoadAll([]string{dir})
	var inv *eval.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("LoadAll = %v, want *eval.InvalidError", err)
	}
	if inv.File != second || inv.Key != "case_id" {
		t.Fatalf("InvalidError = %+v, want file %s key case_id", inv, second)
	}
	if !strings.Contains(err.Error(), first) || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("error %q should name the other file %s and the case id", err, first)
	}
}

func TestLoadAll(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "b.json", strings.Replace(minimal, `"c"`, `"b"`, 1))
	writeFile(t, dir, "a.json", strings.Replace(minimal, `"c"`, `"a"`, 1))
	writeFile(t, dir, "notes.txt", "not a fixture")
	fixtures, err := eval.LoadAll([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range fixtures {
		ids = append(ids, f.CaseID)
	}
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("case ids %v, want [a b] (sorted by path, .txt ignored)", ids)
	}

	// An invalid fixture anywhere fails the whole load.
	writeFile(t, dir, "c.json", `{"case_id": "x"}`)
	if _, err := eval.LoadAll([]string{dir}); err == nil {
		t.Fatal("LoadAll accepted a directory with an invalid fixture")
	}

	// A directory without fixtures is an error too.
	empty := t.TempDir()
	writeFile(t, empty, "README.md", "no fixtures here")
	_, err = eval.LoadAll([]string{empty})
	var inv *eval.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "no *.json fixture files") {
		t.Fatalf("LoadAll(empty dir) = %v, want an InvalidError saying no fixtures were found", err)
	}
}

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{
		"z.json", "a.json", "notes.txt", "a.json.bak", "sub/b.json", "sub/deeper/c.json", "sub/deeper/readme.md",
		"dir.json/inner.json", // a directory named like a fixture is walked, not returned
	} {
		writeFile(t, dir, name, "{}")
	}
	single := writeFile(t, t.TempDir(), "explicit.txt", "{}")
	got, err := eval.Discover([]string{dir, single})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, name := range []string{"a.json", "dir.json/inner.json", "sub/b.json", "sub/deeper/c.json", "z.json"} {
		want = append(want, filepath.Join(dir, filepath.FromSlash(name)))
	}
	if !slices.IsSorted(want) {
		t.Fatalf("test bug: want list %v is not sorted", want)
	}
	want = append(want, single) // a file named explicitly is taken as it is, after the directory
	if !slices.Equal(got, want) {
		t.Fatalf("Discover =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDiscoverMissingPath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "does-not-exist")
	files, err := eval.Discover([]string{missing})
	if err == nil {
		t.Fatalf("Discover(missing) = %v, nil; want an error", files)
	}
	if !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Discover(missing) error %q should name the path and wrap os.ErrNotExist", err)
	}
	_, err = eval.LoadAll([]string{missing})
	var inv *eval.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("LoadAll(missing) = %v, want an InvalidError naming the path", err)
	}
}
