// Package worker is the Go SDK that serves the tasks of reins workflows: a user registers a
// Handler under a name with Handle, Run consumes the tasks the engine sends to that name, and
// the handler answers each one through its TaskContext (Continue, Complete, Fail...). A worker
// program dials the deployment's NATS server with [conn.Dial] (its URL and the worker
// principal's token), builds the worker on that connection with [New], and closes the
// connection once [Worker.Run] returned; it links no NATS server. A program that runs
// everything in one process uses package reins. The
// built-in llm and agent steps are served the same way (package builtin registers
// protocol.HandlerLLM and protocol.HandlerAgent here).
//
// It owns the worker side of the protocol of package wire: consuming REINS_TASKS (one durable
// pull consumer per handler, "reins-worker-NAME"), publishing answers to REINS_EVENTS,
// acknowledging tasks, heartbeats, per-task timeouts, cancellation on reins.cancel.>, and the
// checkpoints of reins_checkpoints. It decides nothing about the workflow: it answers tasks.
// Retries, backoff, iteration bounds and routing are the engine's (package engine), and this
// package must not read or write run state (reins_runs), publish tasks, or import the engine's
// shell (package runner).
//
// # Receiving a task
//
// A message that is not a task (wire.DecodeTask fails) is terminated (it would never decode)
// and logged in one line; the worker carries on. A task of a protocol version the worker does not
// speak (protocol.CheckVersion: only protocol.Version, a task without one being version 1) is
// failed permanently without running, with one sentence naming both versions
// (docs/protocol.md). A task whose NotBefore is in the future is
// handed back with a delay until then (loop_delay and retry backoff travel with the task). A
// task of a run the worker knows has ended (its id, or the id of a parent run, was announced
// on natsbox.CancelSubject; the worker remembers the last 10,000) is acknowledged without
// running. So is a task delivered again (its acknowledgement was lost) that this worker answered
// (it remembers the last 10,000 it answered): its answer is stored. A task that comes while a
// delivery of the same task runs here (its handler has not returned, even if it has answered)
// is handed back for AckWait, and so comes back as delivered again: acknowledged without running
// if the first answered. Only a copy of a task published again, not delivered again, that comes
// once the first delivery's handler returned runs again here; a worker that did not answer
// the task runs any copy. Every other task runs its handler in a goroutine of its own, at most
// [Options.Concurrency] at once per handler, with a context that is cancelled when the task's
// Timeout passes (counted from the handler's start), when its run ends, or when the worker
// stops. While the handler has not
// answered, the worker tells JetStream every AckWait/3 that the task is in progress.
//
// # Answers
//
// The first of Continue, Complete, CompleteWith, Wait, Fail and FailPermanent counts: it
// publishes the answer (wire.Answer, with the output, label, stop reason, pending calls, error
// and the usage reported with AddUsage) with Nats-Msg-Id wire.EventMsgID, waits for JetStream's
// acknowledgement, then acknowledges the task. Wait answers waiting: the iteration stopped on
// tool calls that need a human decision, and the engine dispatches it again, as a resumed task
// (Task.Resume > 0, with Task.Decisions), once every call is decided. Every answer carries its
// task's Resume, and the answers of a resumed task have message ids of their own. Every later answer returns an error that wraps [ErrAnswered] and changes
// nothing. A continued event carries a fresh nonce, so that a handler that runs an iteration
// again (its worker crashed after continuing but before acknowledging the task) is not dropped
// as a duplicate; the engine ignores the answer to an iteration it has left.
//
// When the handler returns without answering, a non-nil error fails the attempt (Fail: the
// step's retry policy applies) and nil completes it with a null output (Complete(nil)). A
// handler that panics fails the attempt (retryable) with "handler NAME panicked: VALUE"; the
// worker lives on. An output that cannot be encoded as JSON, or an answer whose texts alone are
// larger than the server's max payload, fails the attempt permanently with one sentence saying
// so (retrying could not help), and the answering call returns that sentence as an error.
// Values larger than 64 KiB (the task's input, an output, a pending call's arguments, a
// checkpoint write, an effect's result) travel by reference through the values' store
// (wire.Values): handlers see them whole. An answer that
// cannot be published (NATS unreachable) returns the error and hands the task back to
// JetStream (it runs again, same attempt).
//
// # Timeouts, cancellation, stopping and crashes
//
// When a task's Timeout passes before an answer, the worker publishes timed_out itself (with the
// error "the handler did not answer within T") and acknowledges the task without waiting for the
// handler: a handler that never returns is abandoned, and what it answers later is discarded
// (the call returns an error wrapping ErrAnswered and context.DeadlineExceeded).
//
// When a run ends, the engine announces its id on natsbox.CancelSubject: the worker cancels the
// contexts of the handlers running for that run and for its sub-runs (ids starting with
// "RUN/"), discards their answers and acknowledges their tasks; tasks of that run it receives
// later are acknowledged without running.
//
// When the worker stops (the context of Run is done), it stops receiving and drains its
// subscriptions; then the contexts of running handlers are cancelled, their answers discarded,
// and their tasks, with those received but not started, handed back to JetStream at once, so
// that another worker runs them (same attempt). Handlers that answer before their context is
// cancelled are answered normally. A worker that crashes answers nothing: JetStream delivers
// its tasks again after AckWait.
//
// # Checkpoints
//
// A handler keeps state across the iterations of an agent_loop (or agent) step with Checkpoint,
// AppendCheckpoint and LoadCheckpoint. The state of one activation of one step (or child) lives
// in natsbox.CheckpointsBucket under the scope wire.CheckpointScope(run, step, item,
// activation); every write is a new key wire.CheckpointKey(scope, iteration, n), n counting the
// writes of the attempt from 0, whose value is {"set": V} (Checkpoint) or {"append": [ITEMS]}
// (AppendCheckpoint). An append therefore writes bytes in proportion to its items, not to the
// history.
//
// LoadCheckpoint folds, in order, the writes of the earlier iterations and those this attempt
// has made: a set replaces the value, an append extends the array (nothing, or null, counts as
// an empty array; appending to another value is an error). It returns nil when nothing was
// written. Since a set replaces all before it, a fold read back from the bucket starts at the
// last set: the writes before it are neither read back (those by reference) nor decoded, so a
// handler that sets a compact value now and then bounds what a new worker reads. The writes of an attempt that failed, timed out or crashed do not count: before the
// first checkpoint call of an attempt that may follow another attempt of the same iteration
// (Attempt > 1, or a task delivered more than once), the keys of the current iteration are
// purged.
//
// A resumed task (Resume R > 0) goes on with its iteration instead of starting it again: it
// reads the earlier iterations, the writes its iteration made before the human (by the task
// that answered waiting) and those earlier deliveries and attempts of its own resume made, and
// writes keys of its own, wire.CheckpointWrite{Resume: R}.Key() (SCOPE.ITERATION.rR.N), numbered
// after them. Nothing is purged for a resumed task: it acts on a human's decisions, which must
// not be acted on twice, so its handler reads what an interrupted delivery did and goes on
// from there. The writes of resumed tasks fold after those of their iteration's first task,
// in the order of their resumes, for every later iteration.
//
// A worker keeps the value a scope had at the end of an iteration it continued, so that when it
// also runs the next iteration it reads nothing back from the bucket: the cost of an iteration
// does not grow with the history. Any other answer, failure or timeout drops the kept value;
// a worker that has none reads the scope's keys once. Checkpoint writes after the task was
// answered are refused.
//
// # Side effects
//
// Effects is the record of side effects (natsbox.EffectsBucket), by an id naming the call: a
// claim while an attempt makes it, then its result. [Effects.Once] is the protocol (claim with a
// lease, renewed while the call runs; wait for a live claim; take over one whose lease ran out;
// record on the claim's revision, so that a holder that lost its claim cannot record), and
// [TaskContext.Effect] the way for a handler; package builtin runs every side-effecting tool
// through it. docs/engine.md says what is exactly-once and what is at-least-once with a key.
// A claim, a takeover or a renewal is asked again while the bucket has no leader (a NATS node
// died), and one that then finds the key taken reads it back: the value it wrote, landed by a
// try whose answer was lost, is its own claim; any other is another attempt's.
// Records are not tied to a task and may be written after its answer.
package worker
