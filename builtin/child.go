package builtin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/workflow"
)

// Agent and workflow tools: their calls are the loop's child tools (loop.Config.ChildTools). An
// iteration whose turn has one answers waiting with those calls marked Child; the engine runs
// each as a sub-run and dispatches the iteration again with their results (Task.ChildResults),
// which the loop takes as the calls' results (loop.Run.ActOnChildren).

// childTool stands for a tool whose calls run as sub-runs: the loop never calls it.
type childTool struct{ spec tool.Spec }

func (c childTool) Spec() tool.Spec { return c.spec }

func (c childTool) Call(context.Context, json.RawMessage, string) (json.RawMessage, error) {
	return nil, &tool.Error{Message: "tool " + c.spec.Name + " runs as a sub-run: the loop does not call it"}
}

// childTools lists the step's tools whose calls run as sub-runs.
func childTools(j *job) []string {
	var names []string
	for _, name := range j.step.Tools {
		if j.bundle.Definition.Tools[name].RunsChild() {
			names = append(names, name)
		}
	}
	return names
}

// waitChildren answers that the iteration waits for the sub-runs of its calls: the pending
// calls, each with what runs it.
func (h *Handlers) waitChildren(j *job, st *loop.State) error {
	pending := make([]protocol.PendingCall, len(st.Children))
	for i, p := range st.Children {
		def := j.bundle.Definition.Tools[p.Call.Name]
		pending[i] = protocol.PendingCall{CallID: p.Call.ID, Tool: p.Call.Name, Arguments: p.Call.Arguments,
			Child: &protocol.ChildCall{Agent: def.Agent, Workflow: def.Workflow}}
	}
	h.log.DebugContext(j.t, "agent waits for sub-runs", "run_id", j.task.RunID, "step", j.name, "iteration", j.task.Iteration, "calls", len(pending))
	return j.t.Wait(pending)
}

// actOnChildren acts on the turn that waited for sub-runs with their results (a resumed task
// with Task.ChildResults). It reports done, without acting, when the checkpoint shows that an
// earlier delivery acted on them already.
func (h *Handlers) actOnChildren(j *job, run *loop.Run) (done bool, err error) {
	st, task := run.State(), j.task
	switch {
	case !st.AwaitingChildren() && st.Iteration >= task.Iteration:
		return true, nil // a delivery of this resumed task acted on the results and checkpointed
	case !st.AwaitingChildren():
		return false, j.failf("iteration %d was resumed with the results of its sub-runs, but its checkpoint has no calls waiting for them", task.Iteration)
	case st.Children[0].Iteration != task.Iteration:
		return false, j.failf("iteration %d was resumed with the results of its sub-runs, but the calls waiting for them are iteration %d's", task.Iteration, st.Children[0].Iteration)
	}
	names := make(map[string]string, len(st.Children))
	for _, p := range st.Children {
		names[p.Call.ID] = p.Call.Name
	}
	results := make(map[string]loop.ChildResult, len(task.ChildResults))
	for _, r := range task.ChildResults {
		results[r.CallID] = childResult(r, j.bundle.Definition.Tools[names[r.CallID]])
	}
	if err := run.ActOnChildren(j.t, results); err != nil {
		return false, j.failf("%w", err)
	}
	h.log.DebugContext(j.t, "agent acted on sub-runs", "run_id", task.RunID, "step", j.name, "iteration", task.Iteration, "resume", task.Resume)
	return false, nil
}

// childResult is the loop's result of a call from how its sub-run ended: its output when it
// completed (and, for an agent tool, its agent stopped completed), else an error that says
// which stop reason or failure ended it. What it spent counts either way.
func childResult(r protocol.ChildResult, def workflow.ToolDef) loop.ChildResult {
	var out loop.ChildResult
	if u := r.Usage; u != nil {
		out.Usage = model.Usage{InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens)}
		out.CostUSD = u.CostUSD
	}
	what := "the sub-workflow " + def.Workflow
	if def.Agent != "" {
		what = "the agent " + def.Agent
	}
	switch {
	case r.Status != protocol.RunCompleted:
		msg := r.Error
		if msg == "" {
			msg = "no error was given"
		}
		out.Error = fmt.Sprintf("%s (run %s) ended %s: %s", what, r.RunID, r.Status, msg)
	case def.Agent != "" && r.StopReason != string(loop.Completed):
		out.Error = fmt.Sprintf("%s (run %s) stopped with %s: %s", what, r.RunID, r.StopReason, r.StopDetail)
	default:
		out.Output = r.Output
	}
	return out
}
