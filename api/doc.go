// Package api is reins's HTTP API (docs/reference/http-api.md, docs/api.md): the routes under /v1,
// who may call each (the bearer token of a principal of the operator's configuration, and the
// roles a route needs: 401 without a known token, 403 for a role that may not), RFC 9457
// problem documents for every error, pagination, the workflows registered by name (each name
// its owner's, its writers' and admins' to add versions to), the OpenAPI
// 3.1 document of every route, and a run's events live as Server-Sent Events. Client is the
// Go client of the same routes (the reins command's --server).
//
// It owns the bounds of a request around authentication (limits.go): nothing of a body is
// read before its sender is known or its cheap checks passed, webhook deliveries in flight and
// event streams per principal are capped, and an authenticated body's read deadline moves
// while it keeps coming; and strict bodies (body.go: I-JSON, exact member names). The
// http.Server's own timeouts are its caller's (reins serve), which tells it their values.
//
// Every act goes through package client as the authenticated principal, on the principal's
// own subjects, so the engine records who acted exactly as it does for the reins command.
//
// It must not decide anything about runs (the engine does), name a NATS subject, stream or
// bucket of its own (natsbox.Names does), or hold the console's files (package console does;
// the caller mounts it with [Config.Console]). A token is never logged, echoed or put in a URL.
package api
