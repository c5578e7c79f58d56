package engine

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/reins-run/reins/protocol"
)

// EdgeStatus is the state of one edge in the current pass.
type EdgeStatus string

// Edge states.
const (
	EdgePending EdgeStatus = "pending" // its source has not decided yet
	EdgeFired   EdgeStatus = "fired"   // taken
	EdgeDead    EdgeStatus = "dead"    // not taken (or its source was skipped)
)

// Run is the whole state of one run: everything Decide needs, and nothing else. It marshals to
// JSON and back without loss, so the shell can save it after every decision (compare-and-set)
// and an engine that restarts continues from the saved copy exactly.
type Run struct {
	ID        string             `json:"id"`
	Workflow  string             `json:"workflow"`
	Hash      string             `json:"hash"`
	Status    protocol.RunStatus `json:"status"`
	Input     json.RawMessage    `json:"input"`
	StartedAt time.Time          `json:"started_at"`
	Deadline  time.Time          `json:"deadline"`
	// Executed counts step activations (children included), checked against max_steps.
	Executed int `json:"executed"`
	// Steps holds every step that can run on its own, by id, and the children of parallel and
	// map steps, by "parent#index".
	Steps map[string]*StepRun `json:"steps"`
	// Edges is indexed like the definition's Edges.
	Edges []EdgeState `json:"edges"`
	// Path lists the steps (not children) in the order they ended, completed or failed; a step
	// that runs again through a loop edge appears again.
	Path   []string           `json:"path"`
	Output json.RawMessage    `json:"output,omitempty"`
	Error  *protocol.RunError `json:"error,omitempty"`
	// Signals holds signals no wait_event step waited for when they came, by name, oldest
	// first: a wait_event step that starts later takes the oldest one.
	Signals map[string][]json.RawMessage `json:"signals,omitempty"`
	// SignalIDs lists the ids of the signals the run took, in arrival order, so that a signal
	// delivered again (the shell crashed between saving the state and acknowledging the event)
	// is not taken twice.
	SignalIDs []string `json:"signal_ids,omitempty"`
	// StartedBy is the principal who started the run; for a sub-run, its parent's (the root
	// run's submitter), as the engine started it.
	StartedBy string `json:"started_by,omitempty"`
	// Acts records what people did to the run, in order: every decision, resume, signal and
	// cancel that took effect, and the last MaxRefusedActs that were refused, each with the
	// authenticated principal (every decision records it: docs/security.md); and the
	// engine's own cancel of a sub-run, by the engine (the event's By) with its reason.
	Acts []Act `json:"acts,omitempty"`
	// Slot is the run's place under its workflow's concurrency key (nil when the workflow has
	// none, or the key could not be rendered): queued until Granted is set.
	Slot *Slot `json:"slot,omitempty"`
	// Limits are the bounds of a server's operator on the run's growth, given by the shell
	// with the run it starts and kept for the run's life (nil: none).
	Limits *Limits `json:"limits,omitempty"`
	// Events counts the events the run took (the start included), when Limits bounds them:
	// those that changed it, but for a refused act.
	Events int `json:"events,omitempty"`
}

// Limits are a server operator's bounds on a run's growth (0 leaves one out). A workflow may
// ask for less, never more: max_steps is the smaller of the definition's and MaxSteps.
type Limits struct {
	// MaxSteps bounds the step activations (E_MAX_STEPS past it).
	MaxSteps int `json:"max_steps,omitempty"`
	// MaxSignals is the most signals the run takes: a later one is refused.
	MaxSignals int `json:"max_signals,omitempty"`
	// MaxEvents is the most events the run takes: the one that reaches it ends the run failed
	// with E_MAX_EVENTS.
	MaxEvents int `json:"max_events,omitempty"`
}

// Slot is a run's place under its workflow's concurrency key: the key rendered from the run's
// input when it started, the limit of its definition, and when it got its slot (zero while it
// is queued).
type Slot struct {
	Key     string    `json:"key"`
	Limit   int       `json:"limit"`
	Granted time.Time `json:"granted,omitzero"`
}

// Act is one thing a person did to a run, as [Run.Acts] records it.
type Act struct {
	// ID identifies the act's event (the shell gives every event a person sends one), so that
	// an event delivered again is recorded once.
	ID   string             `json:"id"`
	Type protocol.EventType `json:"type"`
	At   time.Time          `json:"at"`
	// By is the authenticated principal; OnBehalfOf the one an admin acted for.
	By         string `json:"by"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	Step       string `json:"step,omitempty"`
	CallID     string `json:"call_id,omitempty"`
	// Refused says why the act changed nothing but its record (a principal who is not one of
	// the step's approvers); empty when it took effect.
	Refused string `json:"refused,omitempty"`
	// Reason is why a cancel was made, as its event says (the engine's cancel of a sub-run:
	// its parent no longer waits for it, or ended).
	Reason string `json:"reason,omitempty"`
}

// MaxRefusedActs bounds the refused acts a run keeps: the most recent ones.
const MaxRefusedActs = 16

// Finished reports whether the run has ended (any status but queued, running and waiting).
func (r *Run) Finished() bool {
	return r != nil && r.Status != "" && !active(r)
}

// Usage adds up what the run's steps spent (children of parallel and map steps included; a
// call step's is its sub-run's).
func (r *Run) Usage() protocol.Usage {
	var u protocol.Usage
	for _, k := range slices.Sorted(maps.Keys(r.Steps)) { // the same sum, float for float, every time
		if sr := r.Steps[k]; sr != nil {
			u.Add(sr.Usage)
		}
	}
	return u
}

// Ending returns the stop reason of the step that ended last (the last of Path) and the
// sentence that explains it: for the sub-run of an agent tool, its agent's.
func (r *Run) Ending() (stopReason, detail string) {
	if len(r.Path) == 0 {
		return "", ""
	}
	if sr := r.Steps[r.Path[len(r.Path)-1]]; sr != nil {
		return sr.StopReason, sr.StopDetail
	}
	return "", ""
}

// active reports whether the run has started and not finished: queued, running or waiting.
func active(r *Run) bool {
	return r != nil && (r.Status == protocol.RunRunning || r.Status == protocol.RunWaiting || r.Status == protocol.RunQueued)
}

// EdgeState is the state of one edge of the definition.
type EdgeState struct {
	State EdgeStatus `json:"state"`
	// Uses counts the times the edge was followed in the run (a loop edge is spent when Uses
	// reaches its max_iterations).
	Uses int `json:"uses,omitempty"`
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

	Status protocol.StepStatus `json:"status"`
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
	// step's timeout it says when the engine times the attempt out itself ([TaskWatch]).
	Dispatched time.Time `json:"dispatched,omitzero"`

	// Input is what the current task receives: the step's input, or for a later iteration of
	// an agent_loop the output of the previous one.
	Input json.RawMessage `json:"input,omitempty"`
	// Output is the latest output the step produced; it stays when a loop edge resets the step
	// (templates read the latest output).
	Output     json.RawMessage `json:"output,omitempty"`
	Label      string          `json:"label,omitempty"`
	StopReason string          `json:"stop_reason,omitempty"`
	// StopDetail is the sentence that explains StopReason: the task's (an agent's loop says why
	// it stopped), or the engine's for a bound it enforced.
	StopDetail string `json:"stop_detail,omitempty"`
	Error      string `json:"error,omitempty"`

	// Usage adds up what the step's tasks reported, over every iteration and activation.
	Usage protocol.Usage `json:"usage,omitzero"`

	// Prompt, Instructions and Goal are rendered once per activation (llm, agent; an approval
	// step's prompt, for whoever decides), so that every attempt and iteration sends the same
	// text.
	Prompt       string `json:"prompt,omitempty"`
	Instructions string `json:"instructions,omitempty"`
	Goal         string `json:"goal,omitempty"`
	// Session is an agent step's rendered session, once per activation like Goal.
	Session string `json:"session,omitempty"`

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
	Wait         protocol.WaitKind `json:"wait,omitempty"`
	Until        time.Time         `json:"until,omitzero"`
	WaitingSince time.Time         `json:"waiting_since,omitzero"`
	Waited       time.Duration     `json:"waited,omitempty"`
	// Pending and Decisions are an agent's calls waiting for approval and the decisions taken
	// on them (by call id); both stay while the resumed task is in flight, so that it can be
	// dispatched again exactly, and are cleared by the next iteration. An approval step keeps
	// its one decision under the call id "". Resume counts the times the current iteration was
	// dispatched again after every pending call was decided.
	Pending   []protocol.PendingCall       `json:"pending,omitempty"`
	Decisions map[string]protocol.Decision `json:"decisions,omitempty"`
	// ChildResults holds how the sub-runs of the pending calls that run as children ended
	// (agent and workflow tools), by call id; it is kept and cleared with Pending.
	ChildResults map[string]protocol.ChildResult `json:"child_results,omitempty"`
	Resume       int                             `json:"resume,omitempty"`
	// HumanInput is what a human answered to an agent step paused on needs_human, kept for the
	// iteration after the pause: its tasks with Resume 0 (every attempt) carry it.
	HumanInput json.RawMessage `json:"human_input,omitempty"`
}

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
	// CmdAcquire: the run starts queued for a slot of its workflow's concurrency key (Slot):
	// the shell queues it under [Slot.Key] and answers with a granted event once it holds one.
	CmdAcquire CommandType = "acquire"
	// CmdRelease: the run of a workflow with a concurrency key ended (after the finish): the
	// shell frees whatever the run held or waited for under its key, once, and grants the
	// freed slot to the next run queued.
	CmdRelease CommandType = "release"
)

// Command is an output of Decide, for the shell to carry out.
type Command struct {
	Type CommandType    `json:"type"`
	Task *protocol.Task `json:"task,omitempty"`
	// At is when a schedule command's tick is due.
	At time.Time `json:"at,omitzero"`
	// Step, Item and Activation address a schedule command's tick ("" for the run's deadline).
	Step       string `json:"step,omitempty"`
	Item       int    `json:"item,omitempty"`
	Activation int    `json:"activation,omitempty"`
	// Watch marks the schedule of a task's watch ([TaskWatch]): a step has one at a time, so a
	// shell may let each one replace the step's previous watch.
	Watch bool `json:"watch,omitempty"`
	// Dispatched is, for a task's watch, when the attempt it watches was dispatched
	// ([StepRun.Dispatched]: the time of the decision that dispatched it), which At counts from.
	// The task went out when the shell carried that decision out, which may be long after it
	// (an event decided late, behind a backlog): a shell fires the tick no earlier than At plus
	// that lateness, so that the attempt has its whole timeout and grace (the tick's At stays
	// At).
	Dispatched time.Time `json:"dispatched,omitzero"`
	Child      *ChildRun `json:"child,omitempty"`
	// Reason is the last error of a dead-lettered task.
	Reason string `json:"reason,omitempty"`
	// Status, Output and Error are the result of a finish command.
	Status protocol.RunStatus `json:"status,omitempty"`
	Output json.RawMessage    `json:"output,omitempty"`
	Error  *protocol.RunError `json:"error,omitempty"`
	// Slot is the concurrency key and limit of an acquire command; nil on a release (the shell
	// releases by run id: the run may end before its key could be rendered).
	Slot *Slot `json:"slot,omitempty"`
}

// ChildRun is a sub-run to start (call steps, parallel workflow branches, map over a workflow,
// and the calls of agent and workflow tools). Its end comes back as a child_finished event with
// Step, Item and Activation (and Iteration and CallID for a tool's call).
type ChildRun struct {
	RunID    string `json:"run_id"` // run/step/activation, or run/step/activation/index for a child
	Workflow string `json:"workflow"`
	// Agent is the agent step an agent tool's call runs (Workflow is then empty): the sub-run
	// runs the workflow workflow.Definition.AgentDefinition derives for it.
	Agent      string          `json:"agent,omitempty"`
	Input      json.RawMessage `json:"input"`
	Step       string          `json:"step"`
	Item       int             `json:"item"`
	Activation int             `json:"activation"`
	// Iteration and CallID address the call of an agent step a tool's sub-run runs.
	Iteration int    `json:"iteration,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	// StartedBy is the principal the sub-run is started as: its parent's [Run.StartedBy], the
	// submitter of the root run, who may signal, resume and cancel it as the root's own.
	StartedBy string `json:"started_by,omitempty"`
}

// Clone returns a deep copy of r: one a caller may change without touching r. ([Decide] makes
// a cheaper copy of its own, which shares with r what the decision leaves alone.)
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
	c.Slot = clonePtr(r.Slot)
	c.Limits = clonePtr(r.Limits)
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
			sc.Pending = clonePending(s.Pending)
			sc.Decisions = maps.Clone(s.Decisions)
			sc.ChildResults = cloneResults(s.ChildResults)
			c.Steps[k] = &sc
		}
	}
	return &c
}

// fork returns the copy of r that a decision changes: a Run and a Steps map of its own, sharing
// everything else with r until the decision changes it, which [decider] does only through
// what copies first ([decider.step], [decider.edge], [decider.ownSignals], and granted for
// Slot). The rest is never written in place, so sharing it is safe:
//
//   - raw JSON values (Input, Output, a step's Input, Output and HumanInput, signals' data,
//     pending calls' Arguments, sub-runs' outputs): the engine only replaces them with values
//     of its own (canon copies what an event brings), and no caller writes into them (the
//     shell's values by reference replace them in a copy, runstore.OutRun; DropValues empties
//     a copy too);
//   - Path, SignalIDs and Acts: appended to only, clipped here so that the first append moves
//     them (Acts drops refused acts in place only after appending to it in the same decision);
//   - Error, Limits and a step's Pending: replaced whole, never written through;
//   - Signals' queues: taken from by slicing, appended to only once the map is the decision's.
func (r *Run) fork() *Run {
	c := *r
	c.Path, c.SignalIDs, c.Acts = slices.Clip(r.Path), slices.Clip(r.SignalIDs), slices.Clip(r.Acts)
	if r.Steps != nil {
		c.Steps = make(map[string]*StepRun, len(r.Steps))
		for k, s := range r.Steps {
			if s != nil { // as Clone: a step without state is not kept
				c.Steps[k] = s
			}
		}
	}
	return &c
}

// ownStep copies s for a decision to change: the raw values and pending calls are shared
// (replaced whole, never written in place: see [Run.fork]), the maps it writes into are not.
func ownStep(s *StepRun) *StepRun {
	c := *s
	c.Decisions = maps.Clone(s.Decisions)
	c.ChildResults = maps.Clone(s.ChildResults)
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

// clonePending deep-copies pending calls.
func clonePending(calls []protocol.PendingCall) []protocol.PendingCall {
	c := slices.Clone(calls)
	for i := range c {
		c[i].Arguments, c[i].Child = bytes.Clone(c[i].Arguments), clonePtr(c[i].Child)
	}
	return c
}

// cloneResults deep-copies the results of sub-runs.
func cloneResults(rs map[string]protocol.ChildResult) map[string]protocol.ChildResult {
	c := maps.Clone(rs)
	for id, r := range c {
		r.Output, r.Usage = bytes.Clone(r.Output), clonePtr(r.Usage)
		c[id] = r
	}
	return c
}

// clonePtr copies what p points to (nil stays nil).
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
