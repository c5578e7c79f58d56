package builtin

import (
	"encoding/json"
	"fmt"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// LLM answers an llm task: one model call, re-asked while the reply fails the step's
// output_schema and repairs are left. It reports the usage of every call it made, and returns
// the error of answering the task, if any.
func (h *Handlers) LLM(t Task) error {
	j, err := h.load(t, workflow.LLM)
	if err != nil {
		return answerErr(t, err)
	}
	out, usage, err := h.runLLM(j)
	t.AddUsage(usage)
	if err != nil {
		h.log.DebugContext(j.t, "llm step failed", "run_id", j.task.RunID, "step", j.name, "iteration", j.task.Iteration, "err", err)
		return answerErr(t, err)
	}
	h.log.DebugContext(j.t, "llm step completed", "run_id", j.task.RunID, "step", j.name, "iteration", j.task.Iteration, "model_calls", usage.ModelCalls)
	return t.Complete(out)
}

// runLLM makes the step's model calls and returns its output: the reply text, or with an
// output_schema the reply's JSON.
func (h *Handlers) runLLM(j *job) (any, protocol.Usage, error) {
	var u protocol.Usage
	m, err := h.model(j)
	if err != nil {
		return nil, u, err
	}
	sch, err := h.outputSchema(j)
	if err != nil {
		return nil, u, err
	}
	repairs := repairsOf(j.step)
	req := &model.Request{
		Instructions: j.task.Instructions,
		Messages:     []model.Message{{Role: model.RoleUser, Content: llmMessage(j.task.Prompt, j.t.Input(), sch)}},
	}
	// A scripted model reads its turn from Seq: one turn per activation and per retried attempt,
	// the repairs of an attempt after its first call (see the package documentation).
	first := max(j.task.Activation-1, 0) + max(j.task.Attempt-1, 0)
	var i int
	req.OnDelta = h.onDelta(j, func() int { return i + 1 })
	for i = 0; ; i++ {
		req.Seq = first + i
		text, err := h.ask(j, m, req, &u)
		if err != nil || sch == nil {
			return text, u, err
		}
		out, problem := sch.check(text)
		switch {
		case problem == "":
			return out, u, nil
		case i >= repairs:
			return nil, u, j.failf("%s%s", afterRepairs(repairs), problem)
		}
		req.Messages = append(req.Messages,
			model.Message{Role: model.RoleAssistant, Content: text},
			model.Message{Role: model.RoleUser, Content: "reins: your reply was not accepted: " + problem + "; reply again with only the JSON value."})
	}
}

// repairsOf is the step's output_repairs, default workflow.DefaultOutputRepairs.
func repairsOf(step *workflow.Step) int {
	if step.OutputRepairs == nil {
		return workflow.DefaultOutputRepairs
	}
	return max(*step.OutputRepairs, 0)
}

// afterRepairs introduces the last problem of a reply that spent its repairs.
func afterRepairs(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "after 1 repair, "
	}
	return fmt.Sprintf("after %d repairs, ", n)
}

// llmMessage is the user message of an llm step: the prompt, the input and the output schema,
// each when present, separated by blank lines.
func llmMessage(prompt string, input json.RawMessage, sch *outputSchema) string {
	var schemaPart string
	if sch != nil {
		schemaPart = "Reply with only a JSON value that validates against this JSON Schema:\n" + string(sch.raw)
	}
	return joinParts(prompt, inputText(input), schemaPart)
}

// ask makes one model call and returns the answer's text, adding the call to u. A retryable
// model error, or one caused by the task's context ending, fails the attempt; any other error,
// and a reply that is not an answer, fails the task for good.
func (h *Handlers) ask(j *job, m model.Model, req *model.Request, u *protocol.Usage) (string, error) {
	resp, err := m.Generate(j.t, req)
	u.ModelCalls++
	if err == nil && resp == nil {
		err = &model.Error{Message: "the model returned neither a response nor an error"}
	}
	if err != nil {
		if j.t.Err() != nil || model.IsRetryable(err) {
			return "", fmt.Errorf("step %s: %w", j.name, err)
		}
		return "", j.failf("%w", err)
	}
	u.Add(usageOf(0, resp.Usage, resp.CostUSD))
	p := &resp.Proposal
	switch {
	case p.Kind == model.KindAnswer, p.Kind == model.KindToolCalls && len(p.Calls) == 0:
		return p.Text, nil
	case p.Kind == model.KindToolCalls:
		return "", j.failf("the model proposed %d tool call(s) (%s first), but an llm step offers no tools", len(p.Calls), p.Calls[0].Name)
	case p.Kind == model.KindEscalate:
		return "", j.failf("the model escalated instead of answering: %s", p.Reason)
	case p.Kind == model.KindRefuse:
		return "", j.failf("the model refused to answer: %s", p.Reason)
	}
	return "", j.failf("the model returned an unknown kind of reply %q", p.Kind)
}
