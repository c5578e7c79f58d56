// Package engine is the decision core of the durable workflow engine: a pure function from a
// run's state and one event to the new state and the commands that carry the decision out.
//
//	Start(def, runID, input, at)  → (*Run, []Command, error)
//	Decide(def, run, event)       → (*Run, []Command, error)
//
// It owns the run state (Run, StepRun, EdgeState) and every decision: which step runs next,
// with what input, which edge a label takes, when to retry and how long to wait, when an
// agent_loop iterates or stops at a bound, how parallel and map steps fan out and join, and how
// a run ends. It must not touch NATS, models, tools, files or the clock: no I/O, no time.Now
// (time comes in events: Event.At), no goroutines, no randomness. A shell (a later issue)
// feeds it events, saves the state it returns with compare-and-set, and carries out its
// commands: dispatch a Task, schedule a tick, dead-letter a task, start or cancel a sub-run,
// finish the run.
//
// # Purity and idempotence
//
// Decide never modifies the run it is given; it returns a copy. An event that does not address
// the current activation, iteration and attempt of a running step, an event repeated, or any
// event for a finished run changes nothing and returns no commands, so a redelivered event is
// harmless. The error result is for programming errors only (nil definition or run, unknown
// event type, an event before start, a start input that is not JSON, a run paired with another
// definition than its own); every outcome of the workflow, failures included, is in the state
// and the commands. Every raw JSON value the state holds is kept in the form encoding/json
// writes it, so a Run that goes through JSON and back decides exactly as the original (a
// restarted engine continues where it stopped). Times are kept in UTC. Task.MsgID is
// run/step[#item]/activation/iteration/attempt: the same task always has the same id, and
// InFlight rebuilds the tasks in flight from the state alone.
//
// # Starting and ending
//
// Start sets Deadline = at + deadline, emits a schedule command for it, and activates the start
// step with the run input. Every event first checks its time against the deadline: at or after
// it, the run ends timed_out (E_DEADLINE). A cancel event ends it cancelled (E_CANCELLED, with
// the event's Reason). A run ends with exactly one finish command carrying its status, output
// and error; the shell cancels whatever is still in flight. When a run ends, every step still
// running becomes cancelled (stop reason "cancelled", or "timeout" at the deadline) and every
// step it never reached becomes skipped, so that a finished run has no pending or running step.
//
// # Activating a step
//
// Activating a step counts one execution (Run.Executed; past max_steps the run fails with
// E_MAX_STEPS), increments its Activation, resets its iteration and attempt to 1 and its
// outgoing edges to pending, and computes its input: the step's `input` (template.Value) when
// set, else the output of the step whose fired edge led here; when several incoming edges
// fired (a join), an object {source_id: output} with keys in the declaration order of the
// edges. An edge from a step that failed hands on {"step": id, "error": message}. Then, by type:
//
//   - task, llm, agent, agent_loop: dispatch a Task (iteration 1, attempt 1, Timeout = the
//     step's timeout). llm prompts and instructions and agent goals and instructions are
//     rendered here, once per activation, against the run input and the latest output of every
//     step; a template that cannot be rendered fails the step.
//   - switch: the label is the value at `expr` (template.Path, template.Label); the step
//     completes at once with its input as its output.
//   - terminate: the run completes with the step's input as its output.
//   - fail: the run fails with E_FAIL and the step's rendered message.
//   - parallel: one child per branch ("step#i", input = the parallel step's input, or the
//     branch step's own `input`), at most max_concurrent at a time (0 = all).
//   - map: one child per item of template.Items(items, max_items) (an error fails the step),
//     the item as its input (a body step's own `input` is not used), at most max_concurrent at a
//     time. A parallel or map step completes when all its children did, with the array of
//     their outputs in declaration or item order; a child that fails for good fails it, and its
//     other children are skipped (their sub-runs cancelled).
//   - call, and workflow branches or a map over a workflow: a start_child command, with child
//     run id run/step/activation (a child adds /index); the child_finished event ends the step
//     (Error, or a Status other than completed, fails it).
//   - approval, wait_event, sleep: the step fails with "step type X is not supported yet".
//
// The label of a parallel, map or call step is the value at its `branch` path in its output
// (the array of its children's outputs, the sub-run's output), or the child_finished event's
// Label, or "". Sub-runs are not retried: a call step's retry policy does not apply.
//
// A parallel, map or call step with a timeout asks for a tick at its end; a tick after it fails
// the step. A task's timeout is the shell's to watch (it knows when a worker took the task):
// it sends timed_out.
//
// Children report to their parent: their own outgoing edges are never followed, and a step
// that only runs as a child (no edge leads to it) has no StepRun of its own and its outgoing
// edges are dead from the start. A terminate child completes with its input; a fail child
// fails; a parallel or map step cannot be a child yet. Path lists the steps that are not
// children, in the order they ended (completed or failed).
//
// # Answers from workers
//
// completed: the output is recorded (output that is not JSON is a permanent failure of the
// attempt). The label is the event's Label when given; else the value at the step's `branch`
// path in the output (an error there fails the step); else, for agent and agent_loop, the
// StopReason (default "completed"); else "".
//
// continued (agent, agent_loop): the output becomes the next iteration's input. When the next
// iteration would pass max_iterations the step completes with stop reason and label
// "max_iterations"; when at − FirstIterationAt ≥ max_duration it completes with
// "max_duration" (agent_loop) or "timeout" (agent: the loop's own stop reason, with its
// budget's max_duration, default 5m, and max_iterations, default 10). Else the next iteration
// is dispatched with attempt 1 and NotBefore = at + loop_delay.
//
// failed, timed_out: when the failure is retryable (not Permanent; a timeout always is) and
// the attempt is below retry.max_attempts (no policy: one attempt), the next attempt is
// dispatched with NotBefore = at + Backoff(policy, attempt). Else the task is dead-lettered
// and the step fails with label "error".
//
// # Edges
//
// Routing a step with label L takes, among its edges with when = L or no when, every edge but
// these: a loop edge whose Uses reached its max_iterations (spent), and a plain edge whose
// condition (its when, or none) also has an unspent loop edge among the candidates (the plain
// edges are the way out once the loop is spent). A failed step considers only its edges with
// when = "error"; with none taken, the run fails with E_STEP_FAILED. A step with edges none of
// which is taken fails the run with E_NO_ROUTE, naming the step, the label, the bound that
// ended the step and the spent loop edges. The taken edges fire (Uses+1); the step's other
// edges die. A step with no edges ends its branch.
//
// A fired loop edge into U starts U again at once, with the source's output as input, after
// resetting to pending U and every step reachable from U through non-loop edges, with their
// outgoing edges (the loop region runs again; what it had in flight is abandoned). A step
// whose incoming non-loop edges are all decided is activated when one of them fired, and
// skipped when all are dead, its outgoing edges dying in turn (dead-path elimination), until
// nothing changes; steps are taken in declaration order.
//
// The run completes when nothing is in flight and nothing is ready: its output is the output
// of the step that ended the only branch, or an object {step_id: output} of every step that
// ended a branch (declaration order).
package engine
