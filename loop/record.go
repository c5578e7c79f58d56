package loop

import (
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/trace"
)

// Mark is a point in a run: how many trace events it had emitted and how many messages its
// conversation held. Record tells what the run did since a mark.
type Mark struct{ events, messages int }

// Mark returns the run's current point, to record what the next Step (or ActOnDecisions,
// ResumeWithMessage) does.
func (r *Run) Mark() Mark { return Mark{events: len(r.events), messages: len(r.st.Messages)} }

// Record returns the record of what the run did since m: the proposal with its text, every
// call with its arguments, validation decision, human decision and result, the user messages
// added, the model's usage and time, the stop, and the trace events. Texts are whole: clip
// them (trace.Iteration.Clip) before sending the record where size matters.
func (r *Run) Record(m Mark) trace.Iteration {
	b := recorder{it: trace.Iteration{Iteration: r.st.Iteration}, byID: map[string]int{}}
	msgs := r.st.Messages
	if m.messages > len(msgs) {
		m.messages = len(msgs)
	}
	for i := m.messages; i < len(msgs); i++ {
		b.message(&msgs[i])
	}
	if m.events < len(r.events) {
		b.it.Events = append([]trace.Event(nil), r.events[m.events:]...)
	}
	for i := range b.it.Events {
		b.event(&b.it.Events[i])
	}
	b.arguments(msgs[:m.messages])
	b.subRuns(r.st)
	return b.it
}

// Recorded returns what can be told of the last iteration of st from its conversation alone,
// the messages from message from on: the proposal, the calls and their results, and the stop,
// without trace events, usage or validation decisions. It marks the record Recovered: for an
// iteration whose answer was lost after it was checkpointed, so that its record is not.
func Recorded(st *State, from int) trace.Iteration {
	b := recorder{it: trace.Iteration{Iteration: st.Iteration, Recovered: true}, byID: map[string]int{}}
	from = min(max(from, 0), len(st.Messages))
	for i := from; i < len(st.Messages); i++ {
		b.message(&st.Messages[i])
	}
	b.arguments(st.Messages[:from])
	b.subRuns(st)
	b.it.StopReason, b.it.StopDetail = string(st.StopReason), st.Detail
	return b.it
}

// subRuns marks the calls that wait for their child runs (State.Children).
func (b *recorder) subRuns(st *State) {
	for _, ch := range st.Children {
		if i, ok := b.byID[ch.Call.ID]; ok {
			b.it.Calls[i].SubRun = true
		}
	}
}

// recorder builds an Iteration from messages and events.
type recorder struct {
	it   trace.Iteration
	byID map[string]int // call id → index in it.Calls
}

// call returns the record of call id, adding it when it is new.
func (b *recorder) call(id, tool string) *trace.CallRecord {
	i, ok := b.byID[id]
	if !ok {
		i = len(b.it.Calls)
		b.byID[id] = i
		b.it.Calls = append(b.it.Calls, trace.CallRecord{ID: id, Tool: tool})
	}
	return &b.it.Calls[i]
}

func (b *recorder) message(msg *model.Message) {
	switch msg.Role {
	case model.RoleAssistant:
		if b.it.Proposal == nil {
			b.it.Proposal = &trace.ProposalRecord{}
		}
		b.it.Proposal.Text = msg.Content
		for _, c := range msg.Calls {
			b.call(c.ID, c.Name).Arguments = string(c.Arguments)
		}
	case model.RoleTool:
		c := b.call(msg.CallID, msg.Name)
		c.Output, c.OutputBytes = msg.Content, len(msg.Content)
	case model.RoleUser:
		b.it.Messages = append(b.it.Messages, msg.Content)
	}
}

func (b *recorder) event(e *trace.Event) {
	it := &b.it
	switch e.Type {
	case trace.ModelCall:
		it.ModelCalls++
		it.InputTokens += e.InputTokens
		it.OutputTokens += e.OutputTokens
		it.CostUSD = model.AddCost(it.CostUSD, e.CostUSD)
		it.ModelTime += e.Duration
	case trace.Proposal:
		if it.Proposal == nil {
			it.Proposal = &trace.ProposalRecord{}
		}
		it.Proposal.Kind, it.Proposal.Reason = e.Proposal, e.Reason
	case trace.Validation:
		if e.CallID == "" { // an answer
			if it.Proposal != nil {
				it.Proposal.Decision, it.Proposal.Why = e.Decision, e.Reason
			}
			return
		}
		c := b.call(e.CallID, e.Tool)
		c.Decision, c.Reason = e.Decision, e.Reason
	case trace.Approval:
		c := b.call(e.CallID, e.Tool)
		c.Approval, c.By, c.Message = e.Decision, e.By, e.Reason
	case trace.ToolCall:
		b.call(e.CallID, e.Tool).Key = e.Key
	case trace.ToolResult:
		c := b.call(e.CallID, e.Tool)
		c.Executed, c.Error, c.Retryable, c.Duration = e.Executed, e.Error, e.Retryable, e.Duration
	case trace.Stop:
		it.StopReason, it.StopDetail = e.StopReason, e.Reason
	case trace.Context:
		it.Context = append(it.Context, e.Reason)
	}
}

// arguments fills in the arguments of calls proposed before the mark (a part that acted on the
// humans' decisions on an earlier proposal): they are in the last assistant message before it.
func (b *recorder) arguments(before []model.Message) {
	missing := false
	for i := range b.it.Calls {
		missing = missing || b.it.Calls[i].Arguments == ""
	}
	if !missing {
		return
	}
	for i := len(before) - 1; i >= 0; i-- {
		if before[i].Role != model.RoleAssistant {
			continue
		}
		for _, c := range before[i].Calls {
			if j, ok := b.byID[c.ID]; ok && b.it.Calls[j].Arguments == "" {
				b.it.Calls[j].Arguments = string(c.Arguments)
			}
		}
		return
	}
}

// ProposedChanged returns the entries of State.CallProposed this Run changed, with their counts
// now (nil when none): for a caller that checkpoints the state by what an iteration changed,
// without copying a map that grows with every distinct call the run proposed.
func (r *Run) ProposedChanged() map[uint64]int {
	if len(r.proposed) == 0 {
		return nil
	}
	out := make(map[uint64]int, len(r.proposed))
	for _, k := range r.proposed {
		out[k] = r.st.CallProposed[k]
	}
	return out
}
