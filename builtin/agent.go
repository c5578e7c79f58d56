package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
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
// state to the next checkpoint. It returns the error of answering the task, if any.
func (h *Handlers) Agent(t Task) error {
	j, err := h.load(t, workflow.Agent)
	if err != nil {
		return answerErr(t, err)
	}
	run, err := h.resume(j)
	if err != nil {
		return answerErr(t, err)
	}
	st := run.State()
	if st.Stopped() || st.Iteration >= j.task.Iteration {
		return h.answerAgent(j, st) // an earlier attempt ran this iteration and checkpointed it
	}
	before := tallyOf(st)
	run.Step(t)
	if t.Err() == nil {
		run.StopIfSpent(t)
	}
	t.AddUsage(tallyOf(st).since(before))
	if err := context.Cause(t); err != nil {
		return t.Fail(fmt.Errorf("step %s: iteration %d was interrupted and will run again: %w", j.name, j.task.Iteration, err))
	}
	if err := t.Checkpoint(st); err != nil {
		return t.Fail(fmt.Errorf("step %s: cannot checkpoint iteration %d: %w", j.name, j.task.Iteration, err))
	}
	return h.answerAgent(j, st)
}

// resume returns the step's loop run: resumed from the checkpoint, or started on iteration 1.
func (h *Handlers) resume(j *job) (*loop.Run, error) {
	c, err := h.controller(j)
	if err != nil {
		return nil, err
	}
	st, err := loadState(j)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return c.Resume(st), nil
	}
	return c.Start(agentRunID(j.task), joinParts(j.task.Goal, inputText(j.t.Input()))), nil
}

// controller builds the loop controller of the step: its model, tools, policy and budget.
func (h *Handlers) controller(j *job) (*loop.Controller, error) {
	m, err := h.model(j)
	if err != nil {
		return nil, err
	}
	tools, err := h.tools(j)
	if err != nil {
		return nil, err
	}
	cfg := loop.Config{Model: m, Tools: tools, Instructions: j.task.Instructions, Clock: h.clock}
	if p := j.step.Policy; p != nil {
		cfg.Policy = p.Policy()
	}
	if b := j.step.Budget; b != nil {
		cfg.Budget = b.Budget()
	}
	c, err := loop.New(cfg)
	if err != nil {
		return nil, j.failf("%w", err)
	}
	return c, nil
}

// loadState reads the checkpointed loop state: nil on iteration 1, required after it.
func loadState(j *job) (*loop.State, error) {
	raw, err := j.t.LoadCheckpoint()
	if err != nil {
		return nil, fmt.Errorf("step %s: cannot load the checkpoint before iteration %d: %w", j.name, j.task.Iteration, err)
	}
	if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		if j.task.Iteration > 1 {
			return nil, j.failf("iteration %d found no checkpoint of the loop's state", j.task.Iteration)
		}
		return nil, nil
	}
	st := new(loop.State)
	if err := json.Unmarshal(raw, st); err != nil {
		return nil, j.failf("the checkpoint of the loop's state is not valid: %w", err)
	}
	return st, nil
}

// agentRunID names the loop run of a task: RUN/STEP, RUN/STEP#ITEM for a child, with
// /ACTIVATION after the first activation, so that idempotency keys never repeat across them.
func agentRunID(task *engine.Task) string {
	id := task.RunID + "/" + stepName(task)
	if task.Activation > 1 {
		id += "/" + strconv.Itoa(task.Activation)
	}
	return id
}

// answerAgent answers from the state after the iteration: continue while the run goes on,
// complete with the stop reason once it stopped.
func (h *Handlers) answerAgent(j *job, st *loop.State) error {
	if !st.Stopped() {
		h.log.Debug("agent iteration", "run", j.task.RunID, "step", j.name, "iteration", j.task.Iteration)
		return j.t.Continue(nil)
	}
	out := AgentOutput{StopReason: string(st.StopReason), Detail: st.Detail}
	if st.Answer != "" {
		out.Answer = &st.Answer
	}
	h.log.Debug("agent stopped", "run", j.task.RunID, "step", j.name, "iteration", j.task.Iteration, "stop_reason", st.StopReason)
	return j.t.CompleteWithStopReason(out, string(st.StopReason))
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
func (a tally) since(b tally) engine.Usage {
	u := usageOf(a.modelCalls-b.modelCalls, model.Usage{
		InputTokens: a.usage.InputTokens - b.usage.InputTokens, OutputTokens: a.usage.OutputTokens - b.usage.OutputTokens,
	}, a.cost-b.cost)
	u.ToolCalls = a.toolCalls - b.toolCalls
	return u
}
