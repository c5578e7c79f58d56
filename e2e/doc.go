// Package e2e holds the tests that run reins as separate OS processes: a NATS server, the engine
// (reins serve) and workers, killed with SIGKILL at the moments that matter, and checked for
// the right result with nothing lost and nothing done twice; clusters losing a node, engines
// failing over, the web console in Chromium, the Python worker, the npm MCP server and the
// container image's binary.
//
// They are the heavy tests: every file has the build tag e2e, so go test ./... leaves them out
// and go test -race -tags e2e ./... (what .ci/run runs) runs them (docs/testing.md).
package e2e
