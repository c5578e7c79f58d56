// Package builtin holds the handlers of the built-in step types, llm and agent, that workers
// serve under protocol.HandlerLLM and protocol.HandlerAgent: one task in, one answer out (complete,
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
// usual case (examples/evaluator/workflow.toml), is read in order across the activations of a
// loop edge, and a retried attempt reads the next turn; activations that repair or retry share
// turns with the following ones.
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
// while the run goes on, Wait(the pending calls) when calls wait for approval, and
// CompleteWith({"stop_reason", "detail", "answer"}) with the stop reason once it stopped
// (answer is null without one; needs_human without pending calls completes the step too, and
// the engine pauses it when on_needs_human = "pause"). A checkpoint already past this iteration
// (an attempt that checkpointed and then died) is answered from, without running the iteration
// again.
//
// The loop has no Approver: every call that needs approval (the policy's require_approval, or
// the Go tool's own flag) stops the iteration with the whole turn waiting, and the step waits
// for humans. Once each pending call is decided, the engine dispatches the same iteration again
// (Task.Resume > 0, Task.Decisions by call id): the task acts on the waiting turn with
// loop.Run.ActOnDecisions, without calling the model (approved calls run, denied ones are
// answered with the decision's message), checkpoints and answers as above. A resumed task whose
// checkpoint shows the decisions acted on (no turn waiting, this iteration done: a delivery
// that checkpointed and died, whose writes the worker keeps for resumed tasks) answers again
// from it without acting twice. The task of the iteration after a pause on needs_human carries
// the human's answer (Task.HumanInput, JSON): the checkpointed run goes on with it as a user
// message (loop.Run.ResumeWithMessage: a string is the message, any other value its compact
// JSON, null or a blank string "A human read your request and asks you to go on.") and runs
// the iteration. The scripted model, mocked tools and
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
// A tool with agent or workflow runs each call as a sub-run (loop.Config.ChildTools: the loop
// never calls it): an iteration whose turn has such a call answers Wait with those calls marked
// protocol.PendingCall.Child (the agent or workflow), the engine runs them, and the task of the
// iteration dispatched again carries Task.ChildResults. It acts on the waiting turn with
// loop.Run.ActOnChildren: a sub-run that completed (for an agent tool, whose agent stopped
// completed) gives its output as its call's result; any other gives an error naming the agent or
// workflow, the sub-run and its stop reason or failure. What the sub-runs spent (tokens, cost)
// is added to the loop's usage, and so to the task's. A delivery of that task whose checkpoint
// shows the results acted on answers again from it; a task dispatched again with decisions
// whose turn then waits for sub-runs answers Wait again.
//
// A tool with mcp is the tool of the same name on that MCP server (its description and input
// schema the server's unless the workflow gives them): Config.Operator's MCP server on a shared
// server, else the workflow's own [mcp.NAME] (a command started in the bundle's BaseDir). One
// connection per server per Handlers (a workflow's own servers per workflow hash), made at the
// first task that needs it; a failed connection fails the attempt and is tried again by the
// next; Close (called when the worker stops, through worker.OnStop) ends them all. A server
// without the tool fails the task for good, naming the tools it has.
//
// Scripted models and real providers are opened once per (workflow hash, model name) and kept;
// replay models are opened per task, so that every task replays its cassette from the start.
//
// # Shared servers
//
// With Config.Operator set (reins serve, reins worker), the person who submitted the workflow
// is not the operator: a model's provider names an operator provider, opened with that
// provider's base URL and key and nothing read from the environment (registry.Options.NoEnv),
// so a key goes only to the endpoint the operator paired it with; a model not in the
// provider's allow-list, an unknown provider, a base_url, api_key_env, cassette or replay model
// fails the task for good (E_OPERATOR_ONLY for the keys); scripted models stay allowed. The
// submission check refuses all of these before a run starts; this is the worker's own guard.
//
// Every model and tool is also wrapped (scrub.go) so that what it returns has the operator's
// credentials (Operator.Secrets) hidden, with every piece of 8 bytes or more of each, by
// provider.Scrubber: a reply's text and calls, a tool's result, an error, and the pieces a
// streaming step sends, a piece that could begin a key held back until what follows shows it
// does not. The loop never sees a key, so nothing it records, checkpoints or answers holds one.
//
// # The checkpoint
//
// The loop's State is checkpointed by what each iteration added: one AppendCheckpoint item per
// iteration, the messages appended since the last write (from their index), the proposed-call
// counts that changed, and the rest of the state, so the bytes written per iteration do not grow
// with the conversation and no write nears the message limit (DecodeAgentState folds them). A
// context policy never changes the conversation (its view is in State.Context), and its summary
// is written only by the iteration that made it (same_summary after). A message text over 8 KiB
// (a large tool result) is written as a reference to the text, kept with the run's values
// (TaskContext.KeepText), and read back when the step loads its state: the goal and the messages
// of the context policy's window only, through a cache of 32 MiB per worker, so that what an
// iteration reads does not grow with the run either. A state set whole, as earlier versions
// wrote it, is read as it is, and the next write sets an array in its place.
//
// A step with a context policy compacts its checkpoint now and then: instead of its delta, an
// iteration sets the checkpoint to one compaction (the goal, the messages of the policy's
// window, every proposed-call count, the summary) when that is at most a sixth of what was
// written since the previous one. Compactions add at most a fifth to the bytes written, and a
// worker that did not run the previous iteration reads back only the last compaction and what
// followed it (the worker's fold starts at the last set), however long the run. The folded
// state holds the messages before the window as empty placeholders: no model call is sent them
// again. Under truncate_tool_results the window keeps the whole conversation (the shortened
// results too), so no compaction is ever small enough to be written. Nothing is purged: the
// earlier writes stay under their keys, and a fork from an earlier iteration folds those. A
// human's resume (Resume > 0) only appends.
//
// # Sessions
//
// A step with a session (Task.Session, rendered by the engine, with Task.StartedBy) keeps its
// conversation across runs in Config.Sessions (docs/agents.md, Sessions), under the scope of
// the run's principal, the workflow's name, the step (Task.Body) and the value. Its first
// iteration, finding no checkpoint, starts the loop from the session's messages (none when
// there is none or it expired on the handlers' clock) with the first message above appended,
// under the view the session was saved with (its summary, its shortened tool results), and
// every write of the checkpoint carries what it took (session.Mark: the revision read, the
// messages before the run's own). The iteration after which the step completes (stopped, no
// calls waiting for approval or sub-runs) saves the conversation after its checkpoint and
// before its answer (session.Store.Save: the context policy's view, or the turn appended when
// another run saved meanwhile); a save that fails fails the attempt, and the next delivery,
// finding the iteration done, saves then. The session remembers the turns it saved, so no
// delivery saves one twice. A session over session.MaxBytes fails the step for good; handlers
// without Config.Sessions fail a step with a session for good.
//
// # Side effects
//
// A tool with side effects (side_effect = true in the workflow, or a Go tool made with
// tool.Writes()) runs once per call even when its iteration runs again (a crash, a timeout and
// retry, a redelivery): with Config.Effects (Register uses the worker's, worker.Effects), each
// call, named by its idempotency key (run, iteration, call index), its tool and its canonical
// arguments, goes through Once: a recorded result is returned without calling the tool; a call
// another attempt is making is waited for; else the tool is called and its result (a success,
// or a permanent failure, a panic included) recorded before the call returns to the loop, so
// before the iteration is checkpointed and its task answered and acknowledged. Retryable
// failures are not recorded. A claim that cannot be made, a record that cannot be read or
// written, and a claim lost while the tool ran all fail the attempt (the iteration runs again)
// without checkpointing.
//
// A step with stream = true sets model.Request.OnDelta (the loop's OnDelta for an agent) and
// hands each piece of the reply to Config.Deltas as a protocol.Delta (its run, STEP or
// STEP#ITEM, iteration, turn: the model call of the iteration from 1, text and call pieces);
// Register passes the worker's PublishDelta, which publishes on the run's core NATS subject
// (natsbox.Names.DeltaSubject) without waiting. Nothing of it is checkpointed or recorded: the
// iteration's answer, checkpoint and record are those of the same step without stream.
//
// Every failure is one sentence that names the step.
package builtin
