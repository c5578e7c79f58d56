// Package template renders workflow templates and evaluates dotted paths against a run's data at
// run time: the `{{path}}` templates of prompts, goals, messages and inputs, the dotted paths of
// switch `expr`, map `items` and step `input`, and the `branch` path into a step's output.
//
// It owns rendering and evaluation only. It must not know about steps' execution, NATS or models,
// and it imports no other reins package: the engine hands it a Scope (the run input and the
// outputs of the steps that ran, as JSON) and gets back JSON values, strings, labels and errors.
//
// # Paths
//
// A path is "input", "input.a.b", "<step_id>.output" or "<step_id>.output.a.b", every segment made
// of A-Z, a-z, 0-9, _ and - (the syntax workflow's validator accepts). The first segment "input"
// always means the run input. Walking a value, a segment is a key of an object, or, on an array,
// an index written in decimal without leading zeros (0, 1, 2, …). Everything else is an error
// that names the whole path and exactly what is missing:
//
//	input.order.id: input has no key "order"
//	review.output.score: step review has no output yet
//	x.output.items.3: index 3 out of range (length 2)
//
// Values stay JSON from end to end: a path's value is a sub-slice of the scope's JSON (numbers keep
// their exact text, so no precision is lost), and it aliases the scope's data, which callers must
// not modify.
//
// # Templates
//
// A template is text with `{{ path }}` in it (whitespace inside the braces is allowed). It is
// scanned exactly as workflow's validator scans it: a "}}" before any "{{", a "{{" without its
// "}}", a brace inside "{{…}}" and an empty "{{ }}" are errors naming their position; single
// braces outside a template are plain text. Rendering inserts strings as they are and any other
// JSON value as compact JSON, in one pass: a value that itself contains "{{" is not rendered
// again. A value that is missing is an error, never an empty string, unless the template gives
// a default after "??" ({{ review.output.notes ?? "none" }}: one JSON scalar, in UTF-8, that
// encoding/json decodes), which stands for the value when the step has no output yet or the
// path is missing from it (ErrNoOutput, ErrNotFound); any other error stays one (Refs, Ref).
// A switch expr written as one whole template may give a default too (Path, PathRef); map items
// take none, since a default is never the array they must be. The syntax is documented for
// users in docs/reference/workflow-file.md ("Templates and paths").
//
// One syntax serves reins: the agent package renders an LLM agent's goal with Render too, with
// Scope.Vars (a session's state) in place of the run's data, so that the paths are the state's
// keys ({{topic}}, {{review.score}}, {{feedback ?? ""}}).
//
// Errors are *Error (a path or value problem) or *TemplateError (a problem at a position of a
// template, wrapping an *Error); both match the sentinels ErrSyntax, ErrInvalidJSON,
// ErrNoOutput, ErrNotFound, ErrType and ErrTooMany with errors.Is.
package template
