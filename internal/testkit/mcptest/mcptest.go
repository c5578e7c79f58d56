// Package mcptest holds what the MCP servers of the tests share (mcptool's own test server and
// the e2e helper programs): the tools/list of an MCP 2025-11-25 server whose tools require
// tasks, and the file they record their starts and calls in. It imports no reins package and
// is imported only by tests and their helper programs.
package mcptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// RequireTasks returns server middleware that marks the tools named as requiring MCP tasks
// (execution.taskSupport "required") in every tools/list page: the Go SDK's Tool has no
// execution field, so a page is re-encoded with one.
func RequireTasks(names ...string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			list, ok := res.(*mcp.ListToolsResult)
			if err != nil || method != "tools/list" || !ok {
				return res, err
			}
			out := &listWithExecution{ListToolsResult: list}
			for _, t := range list.Tools {
				b, err := json.Marshal(t)
				if err != nil {
					return nil, err
				}
				var m map[string]any
				if err := json.Unmarshal(b, &m); err != nil {
					return nil, err
				}
				if slices.Contains(names, t.Name) {
					m["execution"] = map[string]any{"taskSupport": "required"}
				}
				out.Tools = append(out.Tools, m)
			}
			return out, nil
		}
	}
}

// listWithExecution is a tools/list result whose tools carry their execution field (the
// embedded result keeps it an mcp.Result; its Tools are shadowed).
type listWithExecution struct {
	*mcp.ListToolsResult
	Tools []map[string]any `json:"tools"`
}

// AppendLine appends line to file (created when missing): how the tests' MCP servers record
// their starts and calls for the test that runs them.
func AppendLine(file, line string) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	return errors.Join(err, f.Close())
}
