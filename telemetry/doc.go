// Package telemetry owns reins's OpenTelemetry traces: the process's tracer provider, set up
// from the standard OTEL_* environment variables with the OTLP/HTTP exporter and off unless an
// endpoint is configured (Setup); the deterministic ids that let the processes of a durable run
// add to one trace without holding a span open across them ([TraceID], [RunSpan], [StepSpan]); the
// W3C trace context carried in NATS message headers (Inject, Extract); the spans of
// runs and steps emitted once they ended (Emit); and the GenAI spans of model and tool calls
// ([WrapModel], [WrapTool]), named as OpenTelemetry's semconv package names the GenAI semantic
// conventions, with token usage on the chat spans only (Usage gives the other spans their sums
// under reins.* names), and prompts, completions and tool payloads recorded, in the
// conventions' message format, only when OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
//
// When tracing is off, Enabled reports false and callers skip everything: no span, no header,
// no allocation. It must not touch NATS, run state or decisions: the engine's shell (runner)
// and the worker decide what a span says and when it is emitted; this package only shapes and
// exports it. It never records credentials: it is given no configuration but the environment's
// OTEL_* variables, and only the attributes its callers pass.
//
// The provider is process-wide, like otel's own global: a process has one exporter, and the
// packages that emit spans (outbox, runner, worker, builtin) reach it without plumbing. What a
// span's maker needs on the OpenTelemetry API alone (Enabled, Start, Inject, Extract, the
// reins.* attributes) is internal/tracing's, which Setup turns on and this package re-exports:
// a worker imports that package alone and links no SDK, exporter or protobuf.
package telemetry
