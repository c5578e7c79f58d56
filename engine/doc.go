// Package engine is the decision core of the durable workflow engine: a pure function from a
// run's state and one event to the new state and the commands that carry the decision out.
//
//	Start(def, runID, input, at)  → (*Run, []Command, error)
//	Decide(def, run, event)       → (*Run, []Command, error)
//
// It owns the run state ([Run], [StepRun], [EdgeState]) and every decision: which step runs next,
// with what input, which edge a label takes, when to retry and how long to wait, when an
// agent_loop iterates or stops at a bound, how parallel and map steps fan out and join, what a
// step waiting for a human or a signal does with a decision, an answer, a signal or a timeout,
// and how a run ends. It must not touch NATS, models, tools, files or the clock: no I/O, no time.Now
// (time comes in events: Event.At), no goroutines, no randomness. A shell (package runner)
// feeds it events, saves the state it returns with compare-and-set, and carries out its
// commands: dispatch a Task, schedule a tick, dead-letter a task, start or cancel a sub-run,
// acquire or release a slot of a concurrency key, finish the run.
//
// The types that cross process boundaries (protocol.Task, protocol.Event, protocol.Usage, the
// run and step statuses, protocol.RunError) belong to package protocol, which workers and
// clients import without the engine; in this documentation Task, Event and the rest name
// them.
//
// # Purity and idempotence
//
// Decide never modifies the run it is given; it returns a copy, which shares with it what the
// decision left alone (the steps it did not change, raw values, lists it did not add to): a
// caller treats both as read-only, and clones one ([Run.Clone]) to change it. An event that does not address
// the current activation, iteration, attempt and resume of a running step (or what a waiting
// step waits for), an event repeated, or any event for a finished run changes nothing and
// returns no commands, so a redelivered event is harmless; a signal is recognized as repeated
// by its ID. The error result is for programming errors only (nil definition or run, unknown
// event type, an event before start, a start input that is not JSON, a run paired with another
// definition than its own, a signal without an ID); every outcome of the workflow, failures
// included, is in the state and the commands. Every raw JSON value the state holds is kept in the form encoding/json
// writes it, so a Run that goes through JSON and back decides exactly as the original (a
// restarted engine continues where it stopped). Times are kept in UTC. Task.MsgID is
// run/step[#item]/activation/iteration/attempt, followed by /r<Resume> for a task dispatched
// again after decisions: the same task always has the same id, and [InFlight] rebuilds the tasks
// in flight from the state alone (decisions and a human's input included).
//
// # Starting and ending
//
// Start sets Deadline = at + deadline, emits a schedule command for it, and activates the start
// step with the run input (a run of a workflow with a concurrency key first waits queued for a
// slot: "Concurrency keys" below). A run that has not finished is queued until then, waiting
// while at least one of its steps waits (StepWaiting: for a decision, a human's input or a
// signal), and running otherwise; [Run.Finished] tells the three from the ends. Every event first checks its time against
// the deadline: at or after it, the run ends timed_out (E_DEADLINE), waiting or not. A cancel
// event ends it cancelled (E_CANCELLED, with the event's Reason), waiting or not. A run ends
// with exactly one finish command carrying its status, output and error; the shell cancels
// whatever is still in flight. When a run ends, every step still running or waiting becomes
// cancelled (stop reason "cancelled", or "timeout" at the deadline) and every step it never
// reached becomes skipped, so that a finished run has no pending, running or waiting step.
//
// # Concurrency keys
//
// A workflow with a concurrency key (workflow.Concurrency) does not start its start step at
// once: Start renders the key from the run input (template.Render, the input as the only scope),
// sets [Run.Slot] {Key, Limit}, makes the run queued (RunQueued: neither waiting nor finished),
// schedules the deadline as any run, and emits one acquire command with the Slot. A key that
// cannot be rendered (a path the input does not have, with no default) fails the run at once
// with E_CONCURRENCY_KEY: no deadline, no acquire, every step skipped. Which runs hold the
// key's slots and in what order the others wait is not a run's state: the shell keeps it for
// every run of the key, and sends a granted event to a queued run once it holds a slot.
//
// While the run is queued: granted sets [Slot.Granted] to the event's time, makes the run
// running and activates the start step with the run input, at that time (the run's deadline
// still counts from its start: the queue is part of its time); cancel, the deadline (a tick or
// any event at or after it) and state_too_large end it as any run; a signal is kept in
// [Run.Signals] for a wait_event step that starts later; any other event changes nothing. A
// granted event for a run that is not queued changes nothing.
//
// The finish command of a run of a workflow with a concurrency key is followed by one release
// command, whatever ended the run and whether it ever held a slot, queued or neither (a refused
// start, a key that could not be rendered): the shell frees what the run holds or waits for
// under its key, by run id.
//
// A start event whose Refused is set (the shell refused to admit the run: a workflow the
// server's operator does not allow, an input too large) ends the run failed with that error at
// once: no deadline is scheduled, every step is skipped, and the one command is the finish.
// [Run.StartedBy] is the start event's By: for a sub-run, the StartedBy of the [ChildRun] command
// that started it, its parent's (so the root run's submitter signals, resumes and cancels the
// sub-runs of its run as its own).
//
// # Limits
//
// A start event is decided on the Run it is given: a fresh Run{ID}, or one with Limits, the
// bounds a server's operator puts on every run's growth, which the run keeps for its life
// (0 leaves a bound out; nil, none):
//
//   - MaxSteps lowers the definition's max_steps (the smaller of the two counts).
//   - MaxSignals: a signal past the MaxSignals the run took (len(SignalIDs)) is refused (see
//     "Humans and signals").
//   - MaxEvents: [Run.Events] counts the events the run took, its start included: every event
//     that changed the run (it has commands, or a state that differs) but for a refused act,
//     so that nobody refused can end someone else's run and a repeated event counts once. The
//     event that brings the count to MaxEvents ends a run that has not finished failed with
//     E_MAX_EVENTS ("the run took N events, the most its server allows a run
//     (max_events_per_run)"), after whatever else that event decided, as max_steps does.
//
// # Activating a step
//
// Activating a step counts one execution ([Run.Executed]; past max_steps the run fails with
// E_MAX_STEPS), increments its Activation, resets its iteration and attempt to 1 and its
// outgoing edges to pending, and computes its input: the step's `input` (template.Value) when
// set, else the output of the step whose fired edge led here; when several incoming edges
// fired (a join), an object {source_id: output} with keys in the declaration order of the
// edges. An edge from a step that failed hands on {"step": id, "error": message}. Then, by type:
//
//   - task, llm, agent, agent_loop: dispatch a Task (iteration 1, attempt 1, Timeout = the
//     step's timeout). llm prompts and instructions and agent goals and instructions are
//     rendered here, once per activation, against the run input and the latest output of every
//     step; a template that cannot be rendered fails the step. So is an agent's session
//     (Task.Session, sent with Task.StartedBy, the run's principal: the scope of sessions); one
//     that renders empty, or in a sub-run (an id with "/": its conversation would be shared by
//     every run of its root's principal that calls the same workflow), fails the step.
//   - switch: the label is the value at `expr` (template.Path, template.Label), or the default
//     an expr written as a template gives when that value is missing; the step completes at
//     once with its input as its output.
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
//     (Error, or a Status other than completed, fails it), and its Usage (what the sub-run's
//     steps spent) is added to the step's. The event counts only when its Child is that run id:
//     the end of any other run, however it names the step, changes nothing.
//   - approval: its prompt is rendered (once per activation, into [StepRun.Prompt]; a template
//     that cannot be rendered fails the step) and the step waits for a decision (Wait
//     approval), until at + timeout when it has one.
//   - wait_event: when Run.Signals holds a signal named `event`, the step takes the oldest at
//     once and completes with its data; else it waits for one (Wait event), until at + timeout
//     when it has one.
//   - sleep: the step stays running (Wait sleep) until Until = at + duration, and completes
//     with its input at the tick then; a duration of zero completes it at once.
//
// The label of a parallel, map or call step is the value at its `branch` path in its output
// (the array of its children's outputs, the sub-run's output), or the child_finished event's
// Label, or "". Sub-runs are not retried: a call step's retry policy does not apply.
//
// A parallel, map or call step with a timeout asks for a tick at its end; a tick after it fails
// the step. So does a waiting step with a timeout (at Until), and a sleep step. A task's timeout
// is first the worker's to watch (it knows when it took the task): it sends timed_out. The
// engine watches too, whatever workers or stray messages do: dispatching a task of a step with
// a timeout asks for a tick at [TaskWatch] (the attempt's due time, its NotBefore or when it was
// dispatched, plus the timeout, plus a grace of the timeout again and at least MinTaskGrace,
// time in the queue included; the command has Watch set: each replaces the step's previous
// one; its Dispatched is the attempt's, so that a shell that carries the decision out late,
// behind a backlog of events, can give the task its whole span from when it went out). A tick
// at or after the TaskWatch of the step's current attempt, still running and not
// waiting, fails that attempt as a timed_out would (retried by the step's policy). Timers
// lists the ticks a run waits for, at their original times, for a shell that re-arms its timers
// from the saved state: sleeps and waits are durable.
//
// Children report to their parent: their own outgoing edges are never followed, and a step
// that only runs as a child (no edge leads to it: a branch, a map body, or the agent step an
// agent tool runs) has no StepRun of its own and its outgoing edges are dead from the start. A terminate child completes with its input; a fail child
// fails; a parallel or map step cannot be a child yet. A child may wait like any step (a
// decision or resume addresses it by its parent and Item); its parent counts it as running
// meanwhile. Path lists the steps that are not
// children, in the order they ended (completed or failed).
//
// # Answers from workers
//
// An answer counts when it carries the Activation, Iteration, Attempt and Resume of the task the
// step waits for; continued counts for agent and agent_loop steps only, waiting for agent steps
// only.
//
// completed: the output is recorded (output that is not JSON is a permanent failure of the
// attempt). The label is the event's Label when given; else the value at the step's `branch`
// path in the output (an error there fails the step); else, for agent and agent_loop, the
// StopReason (default "completed"); else "". An agent or agent_loop step keeps the event's
// StopReason and StopDetail (the sentence that explains it); a bound the engine enforces
// (max_iterations, max_duration) and the end of the run while the step runs give their own
// StopDetail. An agent step with on_needs_human = "pause" whose
// task completes with StopReason needs_human does not complete: it keeps the output and waits
// for a human's input (Wait input; see below).
//
// continued (agent, agent_loop): the output becomes the next iteration's input. When the next
// iteration would pass max_iterations the step completes with stop reason and label
// "max_iterations"; when at − FirstIterationAt − Waited ≥ max_duration it completes with
// "max_duration" (agent_loop) or "timeout" (agent: the loop's own stop reason, with its
// budget's max_duration, default 5m, and max_iterations, default 10). Waited is the time the
// step waited for humans in this activation: a bound on the agent's work does not count a
// human's thinking. Else the next iteration is dispatched with attempt 1, resume 0 and
// NotBefore = at + loop_delay.
//
// waiting (agent): the iteration stopped on calls that need approval or that run as sub-runs
// (Pending: at least one, each with its own call id and arguments that are JSON; a call of an
// agent or workflow tool has Child, naming the agent step or workflow file the definition's
// tool of that name runs; anything else is a permanent failure of the attempt). The step waits
// for a decision on each call without Child (Wait approval, Decisions empty), until
// at + approval_timeout when the step has one. See "Agent and workflow tools" for the others.
//
// failed, timed_out: when the failure is retryable (not Permanent; a timeout always is) and
// the attempt is below retry.max_attempts (no policy: one attempt), the next attempt is
// dispatched with NotBefore = at + Backoff(policy, attempt), with the same Resume and Decisions
// (or HumanInput). Else the task is dead-lettered and the step fails with label "error"; a
// permanent failure's StopReason (the shell's output_too_large) becomes the step's.
//
// # Agent and workflow tools
//
// Each pending call with Child starts a sub-run when the waiting answer counts: a start_child
// command with Agent (the sub-run runs workflow.Definition.AgentDefinition of that step) or
// Workflow (a file, as a call step's), the call's arguments as input, Iteration and CallID set,
// and child run id run/step/activation[/index]/iteration/CallToken(call id). While a call needs
// a decision the step waits for humans as above, its sub-runs running meanwhile; once none
// does, the step runs with Wait children while a sub-run has not ended: no task is in flight
// (InFlight has none, no TaskWatch, answers to the paused task change nothing) and the run is
// not waiting for a human on its account; that time is added to Waited, as a human's is (the
// sub-runs have their own bounds). Once every call is decided and every sub-run ended, the same
// iteration is dispatched again: same attempt, Resume + 1, Task.Decisions and
// Task.ChildResults in the order of the pending calls.
//
// child_finished with a CallID is the end of such a sub-run: it counts for a call pending with
// Child in the step's current activation and iteration (running or waiting) that has no result
// yet, when its Child is that call's sub-run's id, and records its ChildResult ([StepRun.ChildResults]): the run id, Status (completed when
// the event gives none), the Output when it completed without an Error (output that is not
// JSON makes it failed), the StopReason and StopDetail of the step that ended it (an agent
// tool's agent: the shell sends [Run.Ending]) and its Usage. The step's own Usage does not add
// that usage: the resumed task reports it (its loop counts it against its budgets). Anything
// else changes nothing. It is Ahead when its activation and iteration come after the step's,
// or are the step's while the call is not pending yet (the waiting answer that starts it is
// decided again after a crash).
//
// A decision never decides a call with Child; an approval timeout denies the other calls only,
// and with on_timeout "fail" the step fails. Whenever the engine gives up on a step whose
// sub-runs have not all ended (that failure, a loop edge that starts the step's region again,
// a parent that fails) it cancels them (cancel_child, addressed like start_child); when the run
// ends, [SubRuns] lists them for the shell to cancel.
//
// # Sub-runs a parent awaits
//
// AwaitsChild(def, run, id, parent) reports whether run, still going on, has in flight the
// sub-run id at parent's step, item, activation, iteration and call: one SubRuns lists so. A
// shell starts a sub-run only then, so that no run becomes another's child but by the parent's
// own decision; a start that comes before the parent's state that emitted it was saved finds
// none yet, and the shell waits for the save.
//
// # Humans and signals
//
// A decision or resume event names the step (Step, and Item for a child). It may leave
// Activation, Iteration and Attempt zero, meaning whatever the step waits for now; each one it
// gives must be the waiting step's, and with an Iteration its Resume must be too, so that a
// late decision never decides a later wait. An event for a step that does not wait for its kind
// changes nothing.
//
// Who acts is the event's By, which the shell takes from the subject the event came on (the
// authenticated principal), with the Roles it knows for them; an admin may act OnBehalfOf
// another principal. A decision for a step with approvers (an approval step's approvers, an
// agent policy's) counts only when MayDecide(approvers, OnBehalfOf or By, Roles): a name, or
// "role:NAME" held. Any other decision changes nothing but [Run.Acts], which records it refused
// ("principal P is not one of the approvers (...)"); the step keeps waiting.
//
// A signal, a resume or a cancel that names who sent it (By) counts only from the run's
// submitter (Run.StartedBy; a sub-run's is its root run's), an approver its workflow names anywhere
// (Signallers: every approval step's approvers and agent policy's, by name or "role:NAME"
// held) or an admin (Roles hold "admin"; the shell gives the engine's own events, the cancels
// of sub-runs among them, an admin's roles), judged as OnBehalfOf when an admin acts for
// someone ([ActRefusal]). A cancel refused is recorded refused, and the run goes on. A signal also counts only while the
// run took fewer than its Limits' MaxSignals ([SignalsSpent]). Any other is recorded refused
// with the sentence of ActRefusal or SignalsSpent, without its data, and changes nothing else:
// no signal id, nothing kept, the step keeps waiting.
//
// Every decision, resume, signal and cancel by a person that takes effect is appended to
// Run.Acts (who, on whose behalf, which step and call, when); an event ID already there is not
// recorded again (nor a refused act without an ID identical to one there), and only the last
// MaxRefusedActs refused ones are kept: a flood of refused acts leaves the run's record the
// size it had. A cancel that takes effect is recorded whoever made it, with its Reason, when
// the event names who (By): a person, or the engine (the shell names it on the cancels of
// sub-runs it sends); a cancel without By records nothing.
//
// decision, approval step (CallID ""): the step completes with label "approved" or "denied"
// (Approve), its output the Message as a JSON string (null when empty); the decision is kept in
// Decisions under the call id "". A decision with a CallID changes nothing here. The step's
// branch path is not read: its label is always approved or denied.
//
// decision, agent step: with a CallID, it decides that pending call (an unknown call id, one
// decided before, or one that runs as a sub-run, changes nothing: the first decision stands);
// with CallID "", every pending call not decided yet. Once every pending call is decided (and
// every sub-run of one ended), the step runs again and the same iteration is dispatched again:
// same attempt, Resume + 1, Task.Decisions in the order of the pending calls, MsgID ending in
// /r<Resume>. The paused task's late answers no longer count.
//
// resume (agent step paused on needs_human): the next iteration is dispatched (iteration + 1,
// attempt 1, resume 0) with the paused output as its input and the event's Output (the human's
// answer, JSON; anything else changes nothing) as Task.HumanInput, carried by every attempt of
// that iteration (not by its resumed tasks, which carry Decisions); at its bounds (as for
// continued) the step completes with the paused output instead.
//
// signal (Name, Output, ID): it goes to the first wait_event step waiting for Name, in
// declaration order (a child of a parallel or map step in its parent's place, children by
// index), which completes with the data as its output; else it is appended to
// Run.Signals[Name] for a wait_event step that starts later: nothing is lost. [Run.SignalIDs]
// records every signal taken, so the same ID again changes nothing. A signal without a name, or
// whose data is not JSON, changes nothing.
//
// The label of a wait_event step is the value at its branch path in its output when it has
// one, else the event's name; a sleep step's, the value at its branch path, else "".
//
// Timeouts, at a tick at or after Until: an approval step with on_timeout "deny" (the default)
// completes with label "denied" and output "no decision within <timeout>"; with "fail" it fails
// with that message. A wait_event step fails with "no event <name> within <timeout>". An agent
// step waiting for decisions denies every undecided call with the message "no decision within
// <approval_timeout>" and goes on as above (on_timeout "deny", the default), or fails (on_timeout
// "fail"). An agent waiting for a human's input has no timeout but the run's deadline.
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
