package engine

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/workflow"
)

// RunStatus is the status of a run. The strings are the contract's run results.
type RunStatus string

// Run statuses. A run is running or waiting from Start until exactly one finish command.
const (
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
	StepWaiting   StepStatus = "waiting"   // waits for a human decision, human input or a signal (see StepRun.Wait)
)

// EdgeStatus is the state of one edge in the current pass.
type EdgeStatus string

// Edge states.
const (
	EdgePending EdgeStatus = "pending" // its source has not decided yet
	EdgeFired   EdgeStatus = "fired"   // taken
	EdgeDead    EdgeStatus = "dead"    // not taken (or its source was skipped)
)

// Error codes of a run's error. E_STEP_FAILED also names the step; the others name it when
// one step is to blame.
const (
	CodeMaxSteps   = "E_MAX_STEPS"   // more step activations than the definition's max_steps
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

// Run is the whole state of one run: everything Decide needs, and nothing else. It marshals to
// JSON and back without loss, so the shell can save it after every decision (compare-and-set)
// and an engine that restarts continues from the saved copy exactly.
type Run struct {
	ID        string          `json:"id"`
	Workflow  string          `json:"workflow"`
	Hash      string          `json:"hash"`
	Status    RunStatus       `json:"status"`
	Input     json.RawMessage `json:"input"`
	StartedAt time.Time       `json:"started_at"`
	Deadline  time.Time       `json:"deadline"`
	// Executed counts step activations (children included), checked against max_steps.
	Executed int `json:"executed"`
	// Steps holds every step that can run on its own, by id, and the children of parallel and
	// map steps, by "parent#index".
	Steps map[string]*StepRun `json:"steps"`
	// Edges is indexed like the definition's Edges.
	Edges []EdgeState `json:"edges"`
	// Path lists the steps (not children) in the order they ended, completed or failed; a step
	// that runs again through a loop edge appears again.
	Path   []string        `json:"path"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  *RunError       `json:"error,omitempty"`
	// Signals holds signals no wait_event step waited for when they came, by name, oldest
	// first: a wait_event step that starts later takes the oldest one.
	Signals map[string][]json.RawMessage `json:"signals,omitempty"`
	// SignalIDs lists the ids of the signals the run took, in arrival order, so that a signal
	// delivered again (the shell crashed between saving the state and acknowledging the event)
	// is not taken twice.
	SignalIDs []string `json:"signal_ids,omitempty"`
	// StartedBy is the principal who started the run (empty for a sub-run: its parent's).
	StartedBy string `json:"started_by,omitempty"`
	// Acts records what people did to the run, in order: every decision, resume, signal and
	// cancel that took effect, and the last MaxRefusedActs that were refused, each with the
	// authenticated principal (shared/spec/server.md: every decision records it).
	Acts []Act `json:"acts,omitempty"`
}

// Act is one thing a person did to a run, as Run.Acts records it.
type Act struct {
	// ID identifies the act's event (the shell gives every event a person sends one), so that
	// an event delivered again is recorded once.
	ID   string    `json:"id"`
	Type EventType `json:"type"`
	At   time.Time `json:"at"`
	// By is the authenticated principal; OnBehalfOf the one an admin acted for.
	By         string `json:"by"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	Step       string `json:"step,omitempty"`
	CallID     string `json:"call_id,omitempty"`
	// Refused says why the act changed nothing but its record (a principal who is not one of
	// the step's approvers); empty when it took effect.
	Refused string `json:"refused,omitempty"`
}

// MaxRefusedActs bounds the refused acts a run keeps: the most recent ones.
const MaxRefusedActs = 16

// Finished reports whether the run has ended (any status but running and waiting).
func (r *Run) Finished() bool {
	return r != nil && r.Status != RunRunning && r.Status != RunWaiting && r.Status != ""
}

// active reports whether the run has started and not finished: running or waiting.
func active(r *Run) bool {
	return r != nil && (r.Status == RunRunning || r.Status == RunWaiting)
}

// EdgeState is the state of one edge of the definition.
type EdgeState struct {
	State EdgeStatus `json:"state"`
	// Uses counts the times the edge was followed in the run (a loop edge is spent when Uses
	// reaches its max_iterations).
	Uses int `json:"uses,omitempty"`
}

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

// StepRun is the state of one step in a run, or of one child of a parallel or map step.
type StepRun struct {
	// Step is the step of the definition this runs: its own id, or for a child the branch
	// step or the map body ("" for a child that runs a workflow file).
	Step string `json:"step,omitempty"`
	// Parent and Item say which child this is: the parallel or map step, and the index of the
	// branch or item. Parent is empty for a step that is not a child.
	Parent string `json:"parent,omitempty"`
	Item   int    `json:"item,omitempty"`
	// Workflow is the file a child runs as a sub-run (a parallel workflow branch, a map over a
	// workflow).
	Workflow string `json:"workflow,omitempty"`

	Status StepStatus `json:"status"`
	// Activation counts the starts of the step (1-based); a loop edge starts it again. A child
	// carries its parent's activation.
	Activation int `json:"activation"`
	// Iteration is the current iteration of an agent or agent_loop step (1 for other steps).
	Iteration int `json:"iteration,omitempty"`
	// Attempt is the current attempt of the current iteration (1-based).
	Attempt int `json:"attempt,omitempty"`
	// Attempts counts every task dispatched for the step in the run: first attempts and
	// retries, of every iteration and every activation.
	Attempts int `json:"attempts,omitempty"`

	StartedAt        time.Time `json:"started_at,omitzero"`
	FirstIterationAt time.Time `json:"first_iteration_at,omitzero"`
	// NotBefore is when the current attempt may start (loop_delay, retry backoff).
	NotBefore time.Time `json:"not_before,omitzero"`
	// Dispatched is when the task of the current attempt was sent: with NotBefore and the
	// step's timeout it says when the engine times the attempt out itself (TaskWatch).
	Dispatched time.Time `json:"dispatched,omitzero"`

	// Input is what the current task receives: the step's input, or for a later iteration of
	// an agent_loop the output of the previous one.
	Input json.RawMessage `json:"input,omitempty"`
	// Output is the latest output the step produced; it stays when a loop edge resets the step
	// (templates read the latest output).
	Output     json.RawMessage `json:"output,omitempty"`
	Label      string          `json:"label,omitempty"`
	StopReason string          `json:"stop_reason,omitempty"`
	Error      string          `json:"error,omitempty"`

	// Usage adds up what the step's tasks reported, over every iteration and activation.
	Usage Usage `json:"usage,omitzero"`

	// Prompt, Instructions and Goal are rendered once per activation (llm, agent; an approval
	// step's prompt, for whoever decides), so that every attempt and iteration sends the same
	// text.
	Prompt       string `json:"prompt,omitempty"`
	Instructions string `json:"instructions,omitempty"`
	Goal         string `json:"goal,omitempty"`

	// For parallel and map steps: the number of children of this activation; children start in
	// index order, Next is the index of the next one to start; Running and Done count the
	// children in flight and completed.
	Children int `json:"children,omitempty"`
	Next     int `json:"next,omitempty"`
	Running  int `json:"running,omitempty"`
	Done     int `json:"done,omitempty"`

	// Wait says what a waiting step waits for (or, for a running sleep step, that it sleeps);
	// Until is when the wait times out or the sleep ends (zero: only the run's deadline ends
	// it); WaitingSince is when the current wait began, and Waited adds up the time the step
	// waited for humans in this activation (an agent's max_duration does not count it).
	Wait         WaitKind      `json:"wait,omitempty"`
	Until        time.Time     `json:"until,omitzero"`
	WaitingSince time.Time     `json:"waiting_since,omitzero"`
	Waited       time.Duration `json:"waited,omitempty"`
	// Pending and Decisions are an agent's calls waiting for approval and the decisions taken
	// on them (by call id); both stay while the resumed task is in flight, so that it can be
	// dispatched again exactly, and are cleared by the next iteration. An approval step keeps
	// its one decision under the call id "". Resume counts the times the current iteration was
	// dispatched again after every pending call was decided.
	Pending   []PendingCall       `json:"pending,omitempty"`
	Decisions map[string]Decision `json:"decisions,omitempty"`
	Resume    int                 `json:"resume,omitempty"`
	// HumanInput is what a human answered to an agent step paused on needs_human, kept for the
	// iteration after the pause: its tasks with Resume 0 (every attempt) carry it.
	HumanInput json.RawMessage `json:"human_input,omitempty"`
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
	u.CostUSD = model.AddCost(u.CostUSD, o.CostUSD)
}

// EventType is the type of an event.
type EventType string

// Event types.
const (
	EvStart         EventType = "start"          // start the run (Start does it)
	EvCompleted     EventType = "completed"      // a task ended: Complete(output[, label])
	EvContinued     EventType = "continued"      // an agent or agent_loop iteration asks for another
	EvFailed        EventType = "failed"         // a task failed: Fail(err) or, Permanent, FailPermanent(err)
	EvTimedOut      EventType = "timed_out"      // a task's attempt exceeded its Timeout
	EvTick          EventType = "tick"           // a timer the engine scheduled fired
	EvCancel        EventType = "cancel"         // cancel the run
	EvChildFinished EventType = "child_finished" // a sub-run the engine started ended
	// EvStateTooLarge: the shell cannot save the state an event led to (Error says why): the
	// run fails with E_STATE_TOO_LARGE. Only the shell makes it; it never comes from a message.
	EvStateTooLarge EventType = "state_too_large"
	// EvWaiting: an agent iteration stopped on calls that need approval (Pending); the step
	// waits for a decision on each, by call id.
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
)

// Event is an input to Decide. At is the time of the event: the engine reads no clock.
// A task event addresses its task exactly as the task said (Step, Item, Activation, Iteration,
// Attempt); a child_finished event as the ChildRun said (Step, Item, Activation); a tick as the
// schedule command said.
type Event struct {
	Type EventType `json:"type"`
	At   time.Time `json:"at"`
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
	Error      string          `json:"error,omitempty"`
	// Usage is what the attempt spent (model calls, tool calls, tokens, cost), added to the
	// step's Usage when the event counts.
	Usage *Usage `json:"usage,omitempty"`
	// Permanent marks a failure that retrying cannot fix (FailPermanent).
	Permanent bool `json:"permanent,omitempty"`
	// Reason is why the run is cancelled.
	Reason string `json:"reason,omitempty"`
	// Status is the final status of a sub-run (child_finished); anything but completed, or an
	// Error, fails the step.
	Status RunStatus `json:"status,omitempty"`

	// Resume addresses a task dispatched again after a human decision or input (see
	// Task.Resume); answers carry their task's Resume.
	Resume int `json:"resume,omitempty"`
	// Pending lists the calls waiting for approval (waiting).
	Pending []PendingCall `json:"pending,omitempty"`
	// CallID, Approve and Message are a human decision (decision); By names who decided.
	CallID  string `json:"call_id,omitempty"`
	Approve bool   `json:"approve,omitempty"`
	Message string `json:"message,omitempty"`
	By      string `json:"by,omitempty"`
	// OnBehalfOf names the principal an admin decides for (By stays the admin): the approvers
	// of the step are checked against it. The shell refuses it from anyone but an admin.
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
	// recorded once in Run.Acts. A signal whose id the run already took changes nothing; a signal without
	// one is a programming error.
	ID string `json:"id,omitempty"`
}

// PendingCall is a tool call of an agent iteration waiting for a human decision.
type PendingCall struct {
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
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
)

// CommandType is the type of a command.
type CommandType string

// Command types.
const (
	CmdDispatch    CommandType = "dispatch"     // publish Task (deduplicated on its MsgID)
	CmdSchedule    CommandType = "schedule"     // send a tick at At, addressed like the command
	CmdDeadLetter  CommandType = "dead_letter"  // Task exhausted its attempts: Reason says why
	CmdStartChild  CommandType = "start_child"  // start Child as a sub-run
	CmdCancelChild CommandType = "cancel_child" // the engine gave up on Child: cancel it
	CmdFinish      CommandType = "finish"       // the run ended: Status, Output, Error; cancel what is in flight
)

// Command is an output of Decide, for the shell to carry out.
type Command struct {
	Type CommandType `json:"type"`
	Task *Task       `json:"task,omitempty"`
	// At is when a schedule command's tick is due.
	At time.Time `json:"at,omitzero"`
	// Step, Item and Activation address a schedule command's tick ("" for the run's deadline).
	Step       string `json:"step,omitempty"`
	Item       int    `json:"item,omitempty"`
	Activation int    `json:"activation,omitempty"`
	// Watch marks the schedule of a task's watch (TaskWatch): a step has one at a time, so a
	// shell may let each one replace the step's previous watch.
	Watch bool      `json:"watch,omitempty"`
	Child *ChildRun `json:"child,omitempty"`
	// Reason is the last error of a dead-lettered task.
	Reason string `json:"reason,omitempty"`
	// Status, Output and Error are the result of a finish command.
	Status RunStatus       `json:"status,omitempty"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  *RunError       `json:"error,omitempty"`
}

// ChildRun is a sub-run to start (call steps, parallel workflow branches, map over a workflow).
// Its end comes back as a child_finished event with Step, Item and Activation.
type ChildRun struct {
	RunID      string          `json:"run_id"` // run/step/activation, or run/step/activation/index for a child
	Workflow   string          `json:"workflow"`
	Input      json.RawMessage `json:"input"`
	Step       string          `json:"step"`
	Item       int             `json:"item"`
	Activation int             `json:"activation"`
}

// Task is one unit of work for a worker: one attempt of one iteration of one activation of a
// task, llm, agent or agent_loop step.
type Task struct {
	RunID string `json:"run_id"`
	// Step and Item address the task: the step, or for a child its parent and index.
	Step string `json:"step"`
	Item int    `json:"item"`
	// Body is the step of the definition to run: Step itself, or a child's branch or map body.
	Body string            `json:"body"`
	Type workflow.StepType `json:"type"`
	// Handler names the worker handler that serves the task: the step's handler, or
	// HandlerLLM / HandlerAgent for the built-in step types.
	Handler string `json:"handler"`
	// Workflow is the hash of the run's definition, so that a worker can read the step's
	// definition (a built-in handler needs its model, tools and budget).
	Workflow     string          `json:"workflow,omitempty"`
	Model        string          `json:"model,omitempty"`
	Prompt       string          `json:"prompt,omitempty"`       // llm: rendered
	Instructions string          `json:"instructions,omitempty"` // llm, agent: rendered
	Goal         string          `json:"goal,omitempty"`         // agent: rendered
	Activation   int             `json:"activation"`
	Iteration    int             `json:"iteration"`
	Attempt      int             `json:"attempt"`
	Input        json.RawMessage `json:"input"`
	// MsgID is run/step[#item]/activation/iteration/attempt: the same task always gets the same
	// id, so a redelivery is stored once by JetStream.
	MsgID string `json:"msg_id"`
	// NotBefore is when the task may start (loop_delay, retry backoff); zero means now.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Timeout bounds the attempt; past it, the shell sends timed_out.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Resume > 0 marks a task of an iteration dispatched again once every call it left pending
	// was decided: Decisions lists them in the order of the pending calls (act on the pending
	// turn without calling the model). MsgID then ends in "/r" + Resume, so that the resumed
	// task is not taken for a redelivery of the one that paused; a retry of a resumed task
	// keeps its Resume and Decisions.
	Resume    int        `json:"resume,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
	// HumanInput is set on the tasks (every attempt, Resume 0) of the iteration that follows a
	// pause on needs_human: the human's answer (reins resume), to go on with. A resumed task of
	// that iteration has Decisions instead: its checkpoint already holds the answer.
	HumanInput json.RawMessage `json:"human_input,omitempty"`
}

// Clone returns a deep copy of r.
func (r *Run) Clone() *Run {
	if r == nil {
		return nil
	}
	c := *r
	c.Input = bytes.Clone(r.Input)
	c.Output = bytes.Clone(r.Output)
	c.Edges = slices.Clone(r.Edges)
	c.Path = slices.Clone(r.Path)
	c.SignalIDs = slices.Clone(r.SignalIDs)
	c.Acts = slices.Clone(r.Acts)
	if r.Signals != nil {
		c.Signals = make(map[string][]json.RawMessage, len(r.Signals))
		for name, q := range r.Signals {
			c.Signals[name] = cloneRaws(q)
		}
	}
	if r.Error != nil {
		e := *r.Error
		c.Error = &e
	}
	if r.Steps != nil {
		c.Steps = make(map[string]*StepRun, len(r.Steps))
		for k, s := range maps.All(r.Steps) {
			if s == nil {
				continue
			}
			sc := *s
			sc.Input = bytes.Clone(s.Input)
			sc.Output = bytes.Clone(s.Output)
			sc.HumanInput = bytes.Clone(s.HumanInput)
			if s.Pending != nil {
				sc.Pending = make([]PendingCall, len(s.Pending))
				for i, p := range s.Pending {
					p.Arguments = bytes.Clone(p.Arguments)
					sc.Pending[i] = p
				}
			}
			sc.Decisions = maps.Clone(s.Decisions)
			c.Steps[k] = &sc
		}
	}
	return &c
}

// cloneRaws deep-copies a list of raw JSON values.
func cloneRaws(q []json.RawMessage) []json.RawMessage {
	if q == nil {
		return nil
	}
	c := make([]json.RawMessage, len(q))
	for i, v := range q {
		c[i] = bytes.Clone(v)
	}
	return c
}
