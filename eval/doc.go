// Package eval runs eval fixtures (docs/reference/eval-fixtures.md; the format is package
// fixture's): one agent-loop task with a scripted model and mocked tools, run through the same
// loop controller production uses, then checked against its expected trajectory.
//
// It owns the scripted approver, expectation checks and the metrics report. It must not
// implement any loop behaviour of its own: every decision comes from package loop.
package eval
