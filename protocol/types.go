package protocol

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Version is the version of the task and result protocol (docs/protocol.md, its JSON Schemas in
// docs/protocol) that this module speaks: the engine puts it on every task, and a worker on
// every answer. It changes only when a task or an answer changes in a way a process of the
// previous version would misread; members added that older processes may ignore do not change
// it. A message without the member (0) is of version 1.
const Version = 1

// VersionOf returns the protocol version a task or an answer carries in its member "protocol":
// v itself, or 1 for 0 (a message without the member).
func VersionOf(v int) int {
	if v == 0 {
		return 1
	}
	return v
}

// CheckVersion refuses the task t when its protocol version is not one this module speaks
// (only Version), with one sentence naming both versions.
func CheckVersion(t *Task) error {
	if v := VersionOf(t.Protocol); v != Version {
		return fmt.Errorf("task %s speaks reins protocol version %d, and this worker speaks version %d: %s", t.MsgID, v, Version, upgrade(v))
	}
	return nil
}

func upgrade(v int) string {
	if v > Version {
		return "upgrade the worker (workers are upgraded before engines)"
	}
	return "the engine is older than any version this worker speaks: upgrade the engine"
}

// RunStatus is the status of a run. The strings are those of run results
// (docs/reference/workflow-file.md, "Run results").
type RunStatus string

// Run statuses. A run is queued, running or waiting from Start until exactly one finish
// command.
const (
	// RunQueued: not started yet: its workflow's concurrency key has as many runs active as its
	// limit allows, and the run waits in that key's queue (first started, first served) for one
	// of them to end. No step has run. A cancel or the deadline ends it like any run.
	RunQueued  RunStatus = "queued"
	RunRunning RunStatus = "running"
	// RunWaiting: not finished, and at least one step waits for a human or a signal (an
	// approval step, an agent step with calls pending approval or paused on needs_human, a
	// wait_event step). The run is running again once no step waits.
	RunWaiting   RunStatus = "waiting"
	RunCompleted RunStatus = "completed"
	RunFailed    RunStatus = "failed"
	RunCancelled RunStatus = "cancelled"
	RunTimedOut  RunStatus = "timed_out"
)

// StepStatus is the status of one step (or one child of a parallel or map step).
type StepStatus string

// Step statuses.
const (
	StepPending   StepStatus = "pending"   // not started in this pass (never, or reset by a loop edge)
	StepRunning   StepStatus = "running"   // started: a task, a child run or children in flight, or a sleep
	StepCompleted StepStatus = "completed" // ended with an output
	StepFailed    StepStatus = "failed"    // ended with an error (label "error")
	StepSkipped   StepStatus = "skipped"   // will not run: every incoming edge is dead, its parent gave up, or the run ended first
	StepCancelled StepStatus = "cancelled" // was running when the run ended (cancelled, timed out, or failed elsewhere)
	StepWaiting   StepStatus = "waiting"   // waits for a human decision, human input or a signal (see engine.StepRun.Wait)
)

// Error codes of a run's error. E_STEP_FAILED also names the step; the others name it when
// one step is to blame.
const (
	CodeMaxSteps   = "E_MAX_STEPS"   // more step activations than the definition's max_steps
	CodeMaxEvents  = "E_MAX_EVENTS"  // the run took as many events as its server's max_events_per_run
	CodeNoRoute    = "E_NO_ROUTE"    // a step with outgoing edges, none of which matches its label
	CodeStepFailed = "E_STEP_FAILED" // a step failed for good and has no "error" edge to take
	CodeFail       = "E_FAIL"        // a fail step ran
	CodeDeadline   = "E_DEADLINE"    // the run passed its deadline
	CodeCancelled  = "E_CANCELLED"   // the run was cancelled
	// CodeStateTooLarge: the run's state cannot be saved (larger than the server's message
	// limit); the run ends failed instead of retrying the save forever (EvStateTooLarge).
	CodeStateTooLarge = "E_STATE_TOO_LARGE"
	// CodeInputTooLarge: the run's input passes the server's max_input_bytes, or makes its
	// state too large to save; the run is refused before any step runs.
	CodeInputTooLarge = "E_INPUT_TOO_LARGE"
	// CodeValueUnreadable: the run's input, stored by reference (a value too large for a
	// message), cannot be read back: deleted, changed, or larger than the server reads.
	CodeValueUnreadable = "E_VALUE_UNREADABLE"
	// CodeConcurrencyKey: the workflow's concurrency key cannot be rendered from the run's input
	// (a path the input does not have, without a default); the run fails before any step.
	CodeConcurrencyKey = "E_CONCURRENCY_KEY"
	// CodeQueueFull: the queue of the run's concurrency key holds as many runs as it may (the
	// engine's bound, 1024); the run is refused before any step instead of waiting.
	CodeQueueFull = "E_QUEUE_FULL"
)

// Handlers of the built-in step types: the engine sends llm and agent tasks to these names, and
// the built-in workers serve them. Handlers of task and agent_loop steps must not start with
// "reins-".
const (
	HandlerLLM   = "reins-llm"
	HandlerAgent = "reins-agent"
)

// Labels the engine itself gives a step.
const (
	LabelError         = "error"          // the step failed
	LabelCompleted     = "completed"      // an agent or agent_loop step that completed without saying why
	LabelMaxIterations = "max_iterations" // an agent or agent_loop step stopped at its iteration bound
	LabelMaxDuration   = "max_duration"   // an agent_loop step stopped at its max_duration
	LabelTimeout       = "timeout"        // an agent step stopped at its budget's max_duration (the loop's stop reason), or a step running at the run's deadline
	LabelCancelled     = "cancelled"      // the stop reason of a step running when its run ended
	LabelApproved      = "approved"       // an approval step a human approved
	LabelDenied        = "denied"         // an approval step a human denied, or that timed out with on_timeout = "deny"
)

// RunError is why a run failed, was cancelled or timed out.
type RunError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Step    string `json:"step,omitempty"`
}

func (e *RunError) Error() string {
	if e.Step != "" {
		return e.Code + " (step " + e.Step + "): " + e.Message
	}
	return e.Code + ": " + e.Message
}

// Usage is what a task spent, as its worker reports it: the engine only adds it up, for the run
// result and progress.
type Usage struct {
	ModelCalls   int     `json:"model_calls,omitempty"`
	ToolCalls    int     `json:"tool_calls,omitempty"`
	InputTokens  int     `json:"input_tokens,omitempty"`
	OutputTokens int     `json:"output_tokens,omitempty"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.ModelCalls += o.ModelCalls
	u.ToolCalls += o.ToolCalls
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CostUSD = AddCost(u.CostUSD, o.CostUSD)
}

// AddCost adds two costs in US dollars, rounded to a billionth of a cent: sums of float prices
// otherwise print with binary noise (0.046000000000000006). Every sum of costs in reins goes
// through it, so that a run's total is the same whichever process adds it up.
func AddCost(a, b float64) float64 { return math.Round((a+b)*1e11) / 1e11 }

// StepType is the type of a step, as workflow files write it and tasks carry it; package
// workflow names its values.
type StepType string

// EventType is the type of an event.
type EventType string

// Event types.
const (
	EvStart         EventType = "start"          // start the run (engine.Start does it)
	EvCompleted     EventType = "completed"      // a task ended: Complete(output[, label])
	EvContinued     EventType = "continued"      // an agent or agent_loop iteration asks for another
	EvFailed        EventType = "failed"         // a task failed: Fail(err) or, Permanent, FailPermanent(err)
	EvTimedOut      EventType = "timed_out"      // a task's attempt exceeded its Timeout
	EvTick          EventType = "tick"           // a timer the engine scheduled fired
	EvCancel        EventType = "cancel"         // cancel the run
	EvChildFinished EventType = "child_finished" // a sub-run the engine started ended (with CallID: an agent step's call's)
	// EvStateTooLarge: the shell cannot save the state an event led to (Error says why): the
	// run fails with E_STATE_TOO_LARGE. Only the shell makes it; it never comes from a message.
	EvStateTooLarge EventType = "state_too_large"
	// EvWaiting: an agent iteration stopped on calls that need approval (Pending); the step
	// waits for a decision on each, by call id. Calls with Child run as sub-runs instead.
	EvWaiting EventType = "waiting"
	// EvDecision: a human decided (Step, Item; CallID for one pending call of an agent step, ""
	// for an approval step or every pending call): Approve, and Message (a denied call's result,
	// an approval step's output). Activation, Iteration and Attempt may be left zero; each one
	// given must be the waiting step's, and with an Iteration, Resume must be too.
	EvDecision EventType = "decision"
	// EvResume: a human answered a step paused on needs_human (Output: the human's input),
	// addressed like a decision.
	EvResume EventType = "resume"
	// EvSignal: a named event sent to the run (Name, Output: its data, ID: the sender's unique
	// id of this signal), for wait_event steps.
	EvSignal EventType = "signal"
	// EvGranted: the run, queued for a slot of its workflow's concurrency key, holds one now.
	// Only the engine's shell sends it, once the bucket of concurrency keys records the grant.
	EvGranted EventType = "granted"
)

// Event is an input to engine.Decide. At is the time of the event: the engine reads no clock.
// A task event addresses its task exactly as the task said (Step, Item, Activation, Iteration,
// Attempt); a child_finished event as the engine's ChildRun said (Step, Item, Activation); a tick as the
// schedule command said.
type Event struct {
	// RunID is the run the event is for: the shell routes the event by it, and Decide does
	// not read it.
	RunID string    `json:"run_id"`
	Type  EventType `json:"type"`
	At    time.Time `json:"at"`
	// Input is the run input (start).
	Input json.RawMessage `json:"input,omitempty"`

	Step       string `json:"step,omitempty"`
	Item       int    `json:"item"` // the child's index; -1 for a step that is not a child
	Activation int    `json:"activation,omitempty"`
	Iteration  int    `json:"iteration,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`

	Output     json.RawMessage `json:"output,omitempty"`
	Label      string          `json:"label,omitempty"`
	StopReason string          `json:"stop_reason,omitempty"`
	// StopDetail says in one sentence why an agent or agent_loop step stopped (completed).
	StopDetail string `json:"stop_detail,omitempty"`
	Error      string `json:"error,omitempty"`
	// Usage is what the attempt spent (model calls, tool calls, tokens, cost), added to the
	// step's Usage when the event counts; on child_finished, what the sub-run's steps spent.
	Usage *Usage `json:"usage,omitempty"`
	// Permanent marks a failure that retrying cannot fix (FailPermanent).
	Permanent bool `json:"permanent,omitempty"`
	// Record is what the answered iteration did, when its handler recorded it (the built-in
	// agent does: its proposal, validation decisions, tool results, usage and stop), texts
	// clipped with the whole kept by reference. The engine does not read it: it is the run's
	// history, which reins runs show --iteration and reins run's progress print.
	Record *Iteration `json:"record,omitempty"`
	// Reason is why the run is cancelled.
	Reason string `json:"reason,omitempty"`
	// Status is the final status of a sub-run (child_finished); anything but completed, or an
	// Error, fails the step.
	Status RunStatus `json:"status,omitempty"`

	// Resume addresses a task dispatched again after a human decision or input (see
	// [Task.Resume]); answers carry their task's Resume.
	Resume int `json:"resume,omitempty"`
	// Pending lists the calls waiting for approval, or with Child for their sub-runs (waiting).
	Pending []PendingCall `json:"pending,omitempty"`
	// CallID, Approve and Message are a human decision (decision); By names who decided.
	CallID  string `json:"call_id,omitempty"`
	Approve bool   `json:"approve,omitempty"`
	Message string `json:"message,omitempty"`
	By      string `json:"by,omitempty"`
	// OnBehalfOf names the principal an admin decides for (By stays the admin): the approvers
	// of the step are checked against it. The shell refuses it from anyone but an admin. On
	// the start of a trigger's run, which only the engine's subject carries, it names the
	// principal the run is started as (the one that registered the workflow).
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	// Roles are the roles of the principal the approvers are checked against; the shell sets
	// them from the operator's configuration, never from the message.
	Roles []string `json:"-"`
	// Refused, on a start event, makes the run end failed at once with this error: the shell
	// refused to admit it (a workflow the server's operator does not allow, an input too
	// large); no step runs.
	Refused *RunError `json:"-"`
	// Name is the signal's name (signal).
	Name string `json:"name,omitempty"`
	// ID identifies an event a person sent (a signal, a decision, a resume, a cancel): the
	// shell gives each one a unique id, the same in every delivery of it, so that it is
	// recorded once in engine.Run.Acts. A signal whose id the run already took changes nothing; a signal without
	// one is a programming error.
	ID string `json:"id,omitempty"`
	// Workflow is the hash of the definition to run (start only): its bundle is in the
	// workflows bucket.
	Workflow string `json:"workflow,omitempty"`
	// Parent is the run and step that started this run as a sub-run (start only): the engine
	// sends it a child_finished event when this run ends.
	Parent *Parent `json:"parent,omitempty"`
	// Registered is the registered workflow and version the run runs (start only, a start
	// of a workflow registered by name): what the run is shown as. The engine does not read
	// it; a reader believes it only when that version's definition is the run's (its hash).
	Registered *Registration `json:"registered,omitempty"`
	// Child is the run id of the sub-run a child_finished event reports on: the parent takes
	// the event only when that is the id of a sub-run its state has in flight at the step,
	// item, activation, iteration and call the event names.
	Child string `json:"child,omitempty"`
	// Nonce makes a continued event's message id unique, so that a handler that runs again
	// after a crash (it continued, then died before acknowledging its task) is not swallowed by
	// JetStream's duplicate window.
	Nonce string `json:"nonce,omitempty"`
	// Protocol is the version of the task and result protocol (docs/protocol.md) an answer
	// speaks: a worker answers in its task's version, and sets it (Version). 0, absent, is
	// version 1, which answers written before the member existed speak.
	Protocol int `json:"protocol,omitempty"`
}

// PendingCall is a tool call of an agent iteration waiting for a human decision, or, with
// Child, for the sub-run that runs it.
type PendingCall struct {
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Child marks a call of a tool that runs as a sub-run (an agent or workflow tool): the
	// engine starts it, with the arguments as its input, and no human decides it.
	Child *ChildCall `json:"child,omitempty"`
}

// ChildCall is what runs a pending call as a sub-run: the workflow's tool says it, and the
// engine checks the two agree.
type ChildCall struct {
	Agent    string `json:"agent,omitempty"`    // an agent step of the run's workflow
	Workflow string `json:"workflow,omitempty"` // a sub-workflow file
}

// ChildResult is how the sub-run of a pending call ended, as the task of the iteration
// dispatched again carries it: the sub-run's status, output and error, the stop reason and
// detail of the step that ended it (an agent tool's agent), and what it spent.
type ChildResult struct {
	CallID     string          `json:"call_id"`
	RunID      string          `json:"run_id"`
	Status     RunStatus       `json:"status"`
	Output     json.RawMessage `json:"output,omitempty"`
	StopReason string          `json:"stop_reason,omitempty"`
	StopDetail string          `json:"stop_detail,omitempty"`
	Error      string          `json:"error,omitempty"`
	Usage      *Usage          `json:"usage,omitempty"`
}

// Decision is a human decision on one pending call, as the resumed task carries it.
type Decision struct {
	CallID     string `json:"call_id"`
	Approve    bool   `json:"approve"`
	Message    string `json:"message,omitempty"`
	By         string `json:"by,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
}

// WaitKind says what a waiting step waits for.
type WaitKind string

// Wait kinds.
const (
	WaitApproval WaitKind = "approval" // an approval step, or an agent's calls pending approval
	WaitInput    WaitKind = "input"    // an agent paused on needs_human: reins resume
	WaitEvent    WaitKind = "event"    // a wait_event step: reins signal
	WaitSleep    WaitKind = "sleep"    // a sleep step (the step is running, not waiting, meanwhile)
	// WaitChildren: an agent step whose calls run as sub-runs (agent and workflow tools); the
	// step is running, not waiting, meanwhile: nobody but the sub-runs can end the wait.
	WaitChildren WaitKind = "children"
)

// Task is one unit of work for a worker: one attempt of one iteration of one activation of a
// task, llm, agent or agent_loop step.
type Task struct {
	RunID string `json:"run_id"`
	// Step and Item address the task: the step, or for a child its parent and index.
	Step string `json:"step"`
	Item int    `json:"item"`
	// Body is the step of the definition to run: Step itself, or a child's branch or map body.
	Body string   `json:"body"`
	Type StepType `json:"type"`
	// Handler names the worker handler that serves the task: the step's handler, or
	// HandlerLLM / HandlerAgent for the built-in step types.
	Handler string `json:"handler"`
	// Workflow is the hash of the run's definition, so that a worker can read the step's
	// definition (a built-in handler needs its model, tools and budget).
	Workflow     string `json:"workflow,omitempty"`
	Model        string `json:"model,omitempty"`
	Prompt       string `json:"prompt,omitempty"`       // llm: rendered
	Instructions string `json:"instructions,omitempty"` // llm, agent: rendered
	Goal         string `json:"goal,omitempty"`         // agent: rendered
	// Session is an agent step's rendered session (workflow.Step.Session): the conversation the
	// step continues; empty without one. StartedBy, the principal who started the run, is the
	// scope of its sessions (docs/agents.md, Sessions).
	Session    string          `json:"session,omitempty"`
	StartedBy  string          `json:"started_by,omitempty"`
	Activation int             `json:"activation"`
	Iteration  int             `json:"iteration"`
	Attempt    int             `json:"attempt"`
	Input      json.RawMessage `json:"input"`
	// MsgID is run/step[#item]/activation/iteration/attempt: the same task always gets the same
	// id, so a redelivery is stored once by JetStream.
	MsgID string `json:"msg_id"`
	// NotBefore is when the task may start (loop_delay, retry backoff); zero means now.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Timeout bounds the attempt; past it, the shell sends timed_out.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Resume > 0 marks a task of an iteration dispatched again once every call it left pending
	// was decided (or, for a call with Child, its sub-run ended): Decisions lists them in the
	// order of the pending calls (act on the pending turn without calling the model). MsgID then ends in "/r" + Resume, so that the resumed
	// task is not taken for a redelivery of the one that paused; a retry of a resumed task
	// keeps its Resume and Decisions.
	Resume    int        `json:"resume,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
	// HumanInput is set on the tasks (every attempt, Resume 0) of the iteration that follows a
	// pause on needs_human: the human's answer (reins resume), to go on with. A resumed task of
	// that iteration has Decisions instead: its checkpoint already holds the answer.
	HumanInput json.RawMessage `json:"human_input,omitempty"`
	// ChildResults is set on a resumed task whose iteration waited for the sub-runs of its
	// calls ([PendingCall.Child]): how each ended, in the order of the pending calls.
	ChildResults []ChildResult `json:"child_results,omitempty"`
	// Protocol is the version of the task and result protocol (docs/protocol.md) the task
	// speaks: the engine sets Version. 0, absent, is version 1, which tasks written before the
	// member existed speak. A worker that does not speak it refuses the task ([CheckVersion]).
	Protocol int `json:"protocol,omitempty"`
}

// Parent addresses the step of a parent run that waits for a sub-run: with CallID, the call
// of iteration Iteration of an agent step that the sub-run runs (an agent or workflow tool).
// Registration names one version of a workflow registered by name.
type Registration struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
}

type Parent struct {
	RunID      string `json:"run_id"`
	Step       string `json:"step"`
	Item       int    `json:"item"`
	Activation int    `json:"activation"`
	Iteration  int    `json:"iteration,omitempty"`
	CallID     string `json:"call_id,omitempty"`
}

// Result is the run result (docs/reference/workflow-file.md, "Run
// results"), as `reins run --json` prints it.
type Result struct {
	RunID  string    `json:"run_id"`
	Status RunStatus `json:"status"`
	// Output is null when the run has none.
	Output json.RawMessage `json:"output"`
	// Error is null when the run did not fail.
	Error *RunError `json:"error"`
	// Steps lists the steps in definition order, the children of a parallel or map step
	// ("step#i") after it.
	Steps []StepResult `json:"steps"`
	// Path lists the steps in the order they ended.
	Path []string `json:"path"`
	// Waiting lists what a waiting run waits for (absent otherwise).
	Waiting []WaitResult `json:"waiting,omitempty"`
	// Concurrency is the run's concurrency key, when its workflow has one (absent otherwise):
	// a queued run waits for a slot of it.
	Concurrency *ConcurrencyResult `json:"concurrency,omitempty"`
}

// ConcurrencyResult is the concurrency key of a run of a Result: the key rendered from its
// input, the limit of its workflow, and when it got its slot (absent while it is queued).
type ConcurrencyResult struct {
	Key     string     `json:"key"`
	Limit   int        `json:"limit"`
	Granted *time.Time `json:"granted,omitempty"`
}

// WaitResult is one step of a Result that waits for a human or a signal.
type WaitResult struct {
	Step string   `json:"step"`
	Wait WaitKind `json:"wait"`
	// Prompt is an approval step's question; Event the signal a wait_event step waits for;
	// Pending an agent step's calls waiting for a decision.
	Prompt  string        `json:"prompt,omitempty"`
	Event   string        `json:"event,omitempty"`
	Pending []PendingCall `json:"pending,omitempty"`
	// Until is when the wait times out (absent: at the run's deadline).
	Until *time.Time `json:"until,omitempty"`
}

// StepResult is one step of a Result.
type StepResult struct {
	ID         string     `json:"id"`
	Status     StepStatus `json:"status"`
	StopReason string     `json:"stop_reason"`
	// StopDetail is the stop reason's sentence, when the step gave one.
	StopDetail string `json:"stop_detail,omitempty"`
	Iterations int    `json:"iterations"`
	Label      string `json:"label"`
	Attempts   int    `json:"attempts"`
	Error      string `json:"error,omitempty"`
	Usage      *Usage `json:"usage,omitempty"`
}

// StepKey names a step as a run's state keys it: STEP, or PARENT#ITEM for a child of a
// parallel or map step (item ≥ 0; -1 is a step that is not a child).
func StepKey(step string, item int) string {
	if item >= 0 {
		return step + "#" + strconv.Itoa(item)
	}
	return step
}

// Delta is a piece of a model's reply, live: what a built-in handler publishes for an llm or
// agent step with stream = true, on the run's delta subject (core NATS, not stored), and what
// GET /v1/runs/{id}/events relays as `event: delta`. It is never recorded: the run's record is
// the same with and without streaming.
type Delta struct {
	RunID string `json:"run_id"`
	// Step is the step: STEP, or STEP#ITEM for a child of a parallel or map step.
	Step      string `json:"step"`
	Iteration int    `json:"iteration"`
	// Turn numbers the model calls whose replies the step streams, from 1: an llm step's
	// repairs, an agent loop's iterations. A new turn begins a new reply.
	Turn int    `json:"turn,omitempty"`
	Text string `json:"text,omitempty"`
	// CallIndex, CallID, CallName and Arguments are a piece of a proposed tool call (model.Delta).
	CallIndex int    `json:"call_index,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	CallName  string `json:"call_name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}
