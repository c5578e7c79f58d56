// Package mcpserver is reins as an MCP server (docs/mcp.md, "reins as an MCP server"): each
// registered workflow a principal may start is a tool of that name, whose input schema is the
// workflow's input_schema; a call starts a run and answers with its output, or its failure as a
// tool error; a call made as an MCP task (2025-11-25) answers at once with a task whose id is the
// run's, which tasks/get, tasks/result, tasks/list and tasks/cancel follow; a run and its
// iterations are resources (reins://runs/ID); a host that can elicit is asked to approve what a
// call's run waits for, as its principal. It serves Streamable HTTP (Handler, mounted at /mcp
// by reins serve, authenticated by the bearer token of a principal of the operator's
// configuration) and any other transport for one principal (Serve: reins mcp over stdio).
//
// The official MCP Go SDK holds the sessions (initialize, ping, notifications, progress); the
// methods it does not know (tasks) or cannot say (a tool's taskSupport, the tasks capability)
// are answered in front of it, on the JSON-RPC messages themselves.
//
// It acts only through package client as the authenticated principal, like package api: it
// must not decide anything about runs (the engine does), name a NATS subject, stream or bucket,
// or log, echo or put in a URL a token.
package mcpserver
