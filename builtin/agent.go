package builtin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/session"
	"github.com/reins-run/reins/trace"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// AgentOutput is the output of an agent step once its loop stopped (the shape `reins agent
// --json` prints): the stop reason, its one-sentence detail, and the final answer (null when
// there is none).
type AgentOutput struct {
	StopReason string  `json:"stop_reason"`
	Detail     string  `json:"detail"`
	Answer     *string `json:"answer"`
}

// Agent answers an agent task: one iteration of the step's bounded loop, from the checkpointed
// state to the next checkpoint; or, for a task dispatched again after humans decided the calls
// the iteration left waiting, the rest of that iteration. It returns the error of answering the
// task, if any.
func (h *Handlers) Agent(t Task) error {
	j, err := h.load(t, workflow.Agent)
	if err != nil {
		return answerErr(t, err)
	}
	fx := h.newEffects(j)
	run, base, err := h.resume(j, fx)
	if err != nil {
		return answerErr(t, err)
	}
	st := run.State()
	before, mark := tallyOf(st), run.Mark()
	done, err := h.iterate(j, run)
	if err != nil {
		return answerErr(t, err)
	}
	if done { // an earlier attempt ran this iteration and checkpointed it, but its answer was lost
		t.Record(loop.Recorded(st, base.from))
		if err := h.saveSession(j, st, base.session); err != nil { // it may have died before saving
			return answerErr(t, err)
		}
		return h.answerAgent(j, st)
	}
	rec := run.Record(mark)
	t.Record(rec)
	h.countTools(rec.Calls)
	if t.Err() == nil {
		run.StopIfSpent(t)
	}
	t.AddUsage(tallyOf(st).since(before))
	if err := context.Cause(t); err != nil {
		return t.Fail(fmt.Errorf("step %s: iteration %d was interrupted and will run again: %w", j.name, j.task.Iteration, err))
	}
	// A side effect that could not be recorded, or an MCP server that died: the attempt runs
	// again (once the server is back).
	if err := cmp.Or(fx.failed(), j.down.err()); err != nil {
		return t.Fail(fmt.Errorf("step %s: iteration %d will run again: %w", j.name, j.task.Iteration, err))
	}
	// A human's resume acts on decisions and must find what an interrupted delivery wrote:
	// it only appends.
	compact := j.step.Context != nil && j.task.Resume == 0
	from, err := base.write(t, st, run.ProposedChanged(), compact)
	if err != nil {
		if errors.Is(err, worker.ErrCheckpointTooLarge) { // the conversation outgrew a message: for good
			return t.FailPermanent(fmt.Errorf("step %s: the loop's state after iteration %d cannot be kept, its conversation is too long: %w", j.name, j.task.Iteration, err))
		}
		return t.Fail(fmt.Errorf("step %s: cannot checkpoint iteration %d: %w", j.name, j.task.Iteration, err))
	}
	// The session after the checkpoint: a delivery that dies between them finds the iteration
	// done and saves then (the done branch above), and one that saved saves nothing twice.
	if err := h.saveSession(j, st, base.session); err != nil {
		return answerErr(t, err)
	}
	h.keepState(j, st, base, from) // before the answer, which may start the next iteration here
	return h.answerAgent(j, st)
}

// iterate does the task's part of its iteration on run: act on the humans' decisions (a
// resumed task), go on with a human's answer and run the iteration (the iteration after a
// pause on needs_human), or run the iteration. It reports done, without doing anything, when
// the checkpoint shows that an earlier attempt or delivery did it already.
func (h *Handlers) iterate(j *job, run *loop.Run) (done bool, err error) {
	st, task := run.State(), j.task
	switch {
	case task.Resume > 0 && len(task.ChildResults) > 0:
		return h.actOnChildren(j, run)
	case task.Resume > 0:
		if len(st.Pending) == 0 { // acted on: the turn ran, or waits for its sub-runs
			if st.Iteration >= task.Iteration {
				return true, nil // a delivery of this resumed task acted on the decisions and checkpointed
			}
			return false, j.failf("iteration %d was resumed after a decision, but its checkpoint has no calls waiting for approval", task.Iteration)
		}
		if st.Iteration != task.Iteration {
			return false, j.failf("iteration %d was resumed after a decision, but the calls waiting for approval are iteration %d's", task.Iteration, st.Iteration)
		}
		decisions := make(map[string]loop.Decision, len(task.Decisions))
		for _, d := range task.Decisions {
			decisions[d.CallID] = loop.Decision{Approve: d.Approve, Message: d.Message, By: decidedBy(d)}
		}
		if err := run.ActOnDecisions(j.t, decisions); err != nil {
			return false, j.failf("%w", err)
		}
		h.log.DebugContext(j.t, "agent acted on decisions", "run_id", task.RunID, "step", j.name, "iteration", task.Iteration, "resume", task.Resume)
		return false, nil
	case len(task.HumanInput) > 0 && st.StopReason == loop.NeedsHuman && st.PendingTurn == nil && st.Iteration < task.Iteration:
		msg, err := humanMessage(task.HumanInput)
		if err != nil {
			return false, j.failf("%w", err)
		}
		if err := run.ResumeWithMessage(msg); err != nil {
			return false, j.failf("%w", err)
		}
	case st.Stopped() || st.Iteration >= task.Iteration:
		return true, nil
	}
	run.Step(j.t)
	return false, nil
}

// decidedBy names who took a decision, for the iteration's record: the principal, and whom an
// admin decided for.
func decidedBy(d protocol.Decision) string {
	if d.OnBehalfOf != "" {
		return d.By + " on behalf of " + d.OnBehalfOf
	}
	return d.By
}

// resume returns the step's loop run: resumed from the checkpoint, or started on iteration 1;
// and what the checkpoint held, for the write after the iteration.
func (h *Handlers) resume(j *job, fx *effects) (*loop.Run, stateBase, error) {
	c, err := h.controller(j, fx)
	if err != nil {
		return nil, stateBase{}, err
	}
	st, base, err := h.loadState(j)
	if err != nil {
		return nil, stateBase{}, err
	}
	if st != nil {
		if id := agentRunID(j.task); st.RunID != id {
			// A state another run checkpointed: a fork (client.Fork copies checkpoints). The
			// loop becomes this run's: its idempotency keys, and its own wall clock from now,
			// the engine keeping the step's max_duration from where the fork took it.
			shift := h.clock.Now().Sub(st.StartedAt)
			st.RunID, st.StartedAt = id, st.StartedAt.Add(shift)
			if !st.WaitingSince.IsZero() {
				st.WaitingSince = st.WaitingSince.Add(shift)
			}
		}
		return c.Resume(st), base, nil
	}
	goal := joinParts(j.task.Goal, inputText(j.t.Input()))
	if j.task.Session != "" {
		st, mark, err := h.startSession(j, agentRunID(j.task), goal)
		if err != nil {
			return nil, stateBase{}, err
		}
		base.session = mark
		return c.Resume(st), base, nil
	}
	return c.Start(agentRunID(j.task), goal), base, nil
}

// controller builds the loop controller of the step: its model, tools, policy, budget and
// context policy (with its summarizer, a model of the workflow like the step's). It
// has no Approver: every call that needs approval stops the iteration, which waits for humans.
func (h *Handlers) controller(j *job, fx *effects) (*loop.Controller, error) {
	m, err := h.model(j)
	if err != nil {
		return nil, err
	}
	tools, err := h.tools(j, fx)
	if err != nil {
		return nil, err
	}
	cfg := loop.Config{Model: m, Tools: tools, Instructions: j.task.Instructions, Clock: h.clock, ChildTools: childTools(j)}
	if p := j.step.Policy; p != nil {
		cfg.Policy = p.Policy()
	}
	var turn int
	if on := h.onDelta(j, func() int { return turn }); on != nil {
		cfg.OnDelta = func(iter int, d model.Delta) { turn = iter; on(d) }
	}
	if b := j.step.Budget; b != nil {
		cfg.Budget = b.Budget()
	}
	if cs := j.step.Context; cs != nil {
		var s model.Model
		if cs.Summarizer != "" {
			if s, err = h.modelNamed(j, cs.Summarizer); err != nil {
				return nil, err
			}
		}
		cfg.Context = cs.Policy(s)
	}
	c, err := loop.New(cfg)
	if err != nil {
		return nil, j.failf("%w", err)
	}
	return c, nil
}

// loadState reads the checkpointed loop state (DecodeAgentState) and what the checkpoint held,
// for the write after the iteration: nil on iteration 1, required after it.
func (h *Handlers) loadState(j *job) (*loop.State, stateBase, error) {
	raw, err := j.t.LoadCheckpoint()
	if err != nil {
		return nil, stateBase{}, fmt.Errorf("step %s: cannot load the checkpoint before iteration %d: %w", j.name, j.task.Iteration, err)
	}
	st, base := h.cachedState(j, raw)
	if st == nil {
		var from int
		var mark *session.Mark
		if st, from, mark, err = decodeAgentState(raw); err != nil {
			return nil, stateBase{}, j.failf("the checkpoint of the loop's state is not valid: %w", err)
		}
		base = baseOf(raw, st, from)
		base.session = mark
	}
	if st != nil {
		if err := resolve(j.t, st, window(st), h.texts, &base); err != nil {
			return nil, stateBase{}, fmt.Errorf("step %s: iteration %d: %w", j.name, j.task.Iteration, err)
		}
		if n := len(st.Messages); n > 0 {
			base.last = st.Messages[n-1] // with its text read back, as the iteration sees it
		}
	}
	// The previous iteration's writes missing (another delivery of it discarded them, see
	// docs/engine.md): the attempt fails, retryable, rather than go on from an older state.
	if st == nil && j.task.Iteration > 1 {
		return nil, stateBase{}, fmt.Errorf("step %s: iteration %d found no checkpoint of the loop's state", j.name, j.task.Iteration)
	}
	if st != nil && j.task.Resume == 0 && len(j.task.HumanInput) == 0 && st.Iteration < j.task.Iteration-1 {
		return nil, stateBase{}, fmt.Errorf("step %s: iteration %d found the checkpoint of iteration %d: the writes of iteration %d are missing", j.name, j.task.Iteration, st.Iteration, j.task.Iteration-1)
	}
	return st, base, nil
}

// cachedState is the state this worker's last write of the step's loop left, with the writes
// made since folded onto it, when raw (the checkpoint) begins with what it wrote; nil when it
// does not (stateCache).
func (h *Handlers) cachedState(j *job, raw []byte) (*loop.State, stateBase) {
	e, tail := h.states.take(agentRunID(j.task), raw)
	if e == nil {
		return nil, stateBase{}
	}
	deltas, err := tailDeltas(tail)
	if err != nil {
		return nil, stateBase{}
	}
	f := foldedOf(e.st, e.from)
	for _, d := range deltas {
		if d.From != len(f.msgs) || d.Window > 0 { // a write that changed earlier messages, or a compaction: fold it all again
			return nil, stateBase{}
		}
		if err := f.add([]stateDelta{d}); err != nil {
			return nil, stateBase{}
		}
	}
	st := f.state()
	base := baseOf(raw, st, f.from)
	base.refs, base.kept, base.session = e.refs, e.kept, e.session
	return st, base
}

// keepState keeps the state the iteration wrote for the step's next iteration (stateCache),
// the texts of the messages the context policy left behind put back out as references.
func (h *Handlers) keepState(j *job, st *loop.State, base stateBase, from int) {
	if st.Stopped() { // its next iteration, if any, waits for a human: not worth the memory
		return
	}
	raw, err := j.t.LoadCheckpoint()
	if err != nil {
		return
	}
	w := window(st)
	for i, ref := range base.kept {
		if i > 0 && i < w {
			st.Messages[i].Content = ref
			base.refs[i] = true
			delete(base.kept, i)
		}
	}
	h.states.put(agentRunID(j.task), raw, &cachedState{st: st, from: from, refs: base.refs, kept: base.kept, session: base.session})
}

// agentRunID names the loop run of a task: RUN/STEP, RUN/STEP#ITEM for a child, with
// /ACTIVATION after the first activation, so that idempotency keys never repeat across them.
func agentRunID(task *protocol.Task) string {
	id := task.RunID + "/" + stepName(task)
	if task.Activation > 1 {
		id += "/" + strconv.Itoa(task.Activation)
	}
	return id
}

// answerAgent answers from the state after the iteration: wait while calls wait for sub-runs,
// continue while the run goes on, wait while calls wait for approval, complete with the stop
// reason once it stopped.
func (h *Handlers) answerAgent(j *job, st *loop.State) error {
	if st.AwaitingChildren() {
		return h.waitChildren(j, st)
	}
	if !st.Stopped() {
		h.log.DebugContext(j.t, "agent iteration", "run_id", j.task.RunID, "step", j.name, "iteration", j.task.Iteration)
		return j.t.Continue(nil)
	}
	if st.StopReason == loop.NeedsHuman && len(st.Pending) > 0 {
		pending := make([]protocol.PendingCall, len(st.Pending))
		for i, p := range st.Pending {
			pending[i] = protocol.PendingCall{CallID: p.Call.ID, Tool: p.Call.Name, Arguments: p.Call.Arguments}
		}
		h.log.DebugContext(j.t, "agent waits for decisions", "run_id", j.task.RunID, "step", j.name, "iteration", j.task.Iteration, "calls", len(pending))
		return j.t.Wait(pending)
	}
	out := AgentOutput{StopReason: string(st.StopReason), Detail: st.Detail}
	if st.Answer != "" {
		out.Answer = &st.Answer
	}
	h.log.DebugContext(j.t, "agent stopped", "run_id", j.task.RunID, "step", j.name, "iteration", j.task.Iteration, "stop_reason", st.StopReason)
	return j.t.CompleteWithStop(out, string(st.StopReason), st.Detail)
}

// goOn is the message a human's input without text becomes: the human answered, and asks for
// nothing but to go on.
const goOn = "A human read your request and asks you to go on."

// humanMessage is the user message a human's input (Task.HumanInput, JSON) becomes: a string is
// the message itself; null or a blank string is goOn; any other value is its compact JSON text.
func humanMessage(raw json.RawMessage) (string, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return goOn, nil
	}
	if !json.Valid(trimmed) {
		return "", fmt.Errorf("the human's input is not valid JSON: %.60q", trimmed)
	}
	if trimmed[0] == '"' {
		var s string
		if err := json.Unmarshal(trimmed, &s); err != nil {
			return "", fmt.Errorf("the human's input is not a valid JSON string: %w", err)
		}
		if strings.TrimSpace(s) == "" {
			return goOn, nil
		}
		return s, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, trimmed); err != nil {
		return "", fmt.Errorf("the human's input is not valid JSON: %w", err)
	}
	if buf.String() == "null" {
		return goOn, nil
	}
	return buf.String(), nil
}

// tally is what a run has spent so far, to report an iteration's share.
type tally struct {
	modelCalls, toolCalls int
	usage                 model.Usage
	cost                  float64
}

func tallyOf(st *loop.State) tally {
	return tally{modelCalls: st.ModelCalls, toolCalls: st.ToolCalls, usage: st.Usage, cost: st.CostUSD}
}

// since is the usage spent between b and a.
func (a tally) since(b tally) protocol.Usage {
	u := usageOf(a.modelCalls-b.modelCalls, model.Usage{
		InputTokens: a.usage.InputTokens - b.usage.InputTokens, OutputTokens: a.usage.OutputTokens - b.usage.OutputTokens,
	}, a.cost-b.cost)
	u.ToolCalls = a.toolCalls - b.toolCalls
	return u
}

// countTools counts the tool calls an iteration dealt with by outcome: those that wait (for a
// human's decision, or as sub-runs) are counted by the part that ends them.
func (h *Handlers) countTools(calls []trace.CallRecord) {
	if h.cfg.Metrics == nil {
		return
	}
	for _, c := range calls {
		if o := toolOutcome(c); o != "" {
			h.cfg.Metrics.ToolCall(c.Tool, o)
		}
	}
}

// toolOutcome is the outcome label of a call: ok, error, denied, invalid, forbidden, not_run
// (accepted, but the iteration stopped first), or "" for a call that waits.
func toolOutcome(c trace.CallRecord) string {
	switch {
	case c.Approval == "pending" || c.SubRun:
		return ""
	case c.Executed && c.Error == "":
		return "ok"
	case c.Executed:
		return "error"
	case c.Approval == "denied":
		return "denied"
	case c.Decision == trace.DecisionInvalid:
		return "invalid"
	case c.Decision == trace.DecisionForbid:
		return "forbidden"
	}
	return "not_run"
}
