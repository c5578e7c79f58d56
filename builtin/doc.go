// Package builtin holds the handlers of the built-in step types, llm and agent, that workers
// serve under engine.HandlerLLM and engine.HandlerAgent: one task in, one answer out (complete,
// continue, fail), with the usage it spent.
//
// It owns turning a step of a workflow bundle into a model call or one iteration of the bounded
// loop: opening the step's model (scripted, replay, openai, anthropic, or Config.Model for all),
// building its tools (mocked, or Go tools registered by handler name), the request layout of llm
// steps, output schemas and their repairs, and the agent's checkpointed loop.State. It never
// decides workflow edges or retries (package engine does), never talks to NATS (package worker
// does), and implements no loop behaviour of its own (package loop does).
//
// # llm steps
//
// One model call per task. The request has the task's rendered instructions and one user message:
//
//	<the rendered prompt>
//
//	Input:
//	<the step's input, compact JSON>
//
//	Reply with only a JSON value that validates against this JSON Schema:
//	<the output_schema, compact JSON>
//
// The input part is left out when the input is null or absent, the schema part when the step has
// no output_schema (and the blank lines with them). Without output_schema the output is the reply
// text, a JSON string. With one, the reply (trimmed, a surrounding ``` fence removed) must be JSON
// that validates; if it does not, the same conversation gets the reply and one user message,
// "reins: your reply was not accepted: PROBLEM; reply again with only the JSON value.", up to
// output_repairs times, and then the task fails for good naming the last problem. A retryable
// model error fails the attempt (the engine's retry policy retries it); any other error, and a
// reply that is not an answer (tool calls, an escalation, a refusal), fails it for good.
//
// A scripted model answers by position: call i (0-based, repairs counted) of attempt k of
// activation a reads turn (a−1) + (k−1) + i. A script written for one call per activation, the
// usual case (draft_refiner.toml), is read in order across the activations of a loop edge, and
// a retried attempt reads the next turn; activations that repair or retry share turns with the
// following ones.
//
// # agent steps
//
// Each task is one iteration of the loop (loop.Controller with the step's tools, policy and
// budget). Iteration 1 finds no checkpoint and starts a run with id RUN/STEP (RUN/STEP#ITEM for
// a child of a parallel or map step, with "/ACTIVATION" appended after the first activation) and
// goal:
//
//	<the rendered goal>
//
//	Input:
//	<the step's input, compact JSON>
//
// (the input part only when the input is not null, as for llm steps). Every iteration loads the
// checkpointed loop.State, runs exactly one Step, stops the run at once if that spent a budget
// (so the step ends with the loop's own max_iterations or timeout, agreeing with the engine's
// bounds, which have the same defaults), checkpoints the State and answers: Continue(null)
// while the run goes on, CompleteWith({"stop_reason", "detail", "answer"}) with the stop reason
// once it stopped (answer is null without one; needs_human completes the step too). A
// checkpoint already past this iteration (an attempt that checkpointed and then died) is
// answered from, without running the iteration again. The scripted model, mocked tools and
// idempotency keys read their positions from the State, so a redelivered iteration gives the
// same result; each activation runs a fresh loop, so a scripted model starts at turn 0 again.
// The usage of the iteration (model calls, executed tool calls, tokens, cost) is reported with
// AddUsage. If the task's context ends during the iteration, nothing is checkpointed and the
// attempt fails, to run again.
//
// # Tools and models
//
// A workflow tool with mock is a mocked tool (results by tool.Info.Seq, as in eval fixtures;
// mock wins over handler when both are set); one with handler is Config.Tools[handler] under the
// workflow's name, description and input_schema (the Go tool's own when the workflow gives
// none), a side effect when either side_effect or the Go tool says so, and the Go tool's
// approval flag. A missing handler fails the task for good, unless the step's policy forbids the
// tool: a forbidden tool never runs, so it needs no handler.
//
// Scripted models and real providers are opened once per (workflow hash, model name) and kept;
// replay models are opened per task, so that every task replays its cassette from the start.
//
// Every failure is one sentence that names the step.
package builtin
