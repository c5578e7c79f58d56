package builtin_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/tool"
)

// readAndRefund proposes reading the order and refunding it in one turn.
const readAndRefund = `{ tool_calls = [{ name = "read_order", arguments = { order_id = "O-104" } }, { name = "issue_refund", arguments = { order_id = "O-104" } }], usage = { input_tokens = 100, output_tokens = 10 } }`

// state decodes a checkpoint.
func state(t *testing.T, raw json.RawMessage) *loop.State {
	t.Helper()
	st, err := builtin.DecodeAgentState(raw)
	if err != nil || st == nil {
		t.Fatalf("checkpoint %s: %v", raw, err)
	}
	return st
}

// toolResult is the content of the result message of call id in st.
func toolResult(t *testing.T, st *loop.State, id string) string {
	t.Helper()
	for _, m := range st.Messages {
		if m.Role == model.RoleTool && m.CallID == id {
			return m.Content
		}
	}
	t.Fatalf("no result for call %s", id)
	return ""
}

// resumedTask is the task of iteration iter dispatched again after the decisions, with the
// checkpoint the paused task wrote.
func resumedTask(paused *fakeTask, decisions ...protocol.Decision) *fakeTask {
	ft := *paused
	task := *paused.task
	task.Resume, task.Decisions = 1, decisions
	ft.task = &task
	ft.checkpoint = paused.saved
	ft.answer, ft.output, ft.stopReason, ft.err, ft.answers, ft.saved, ft.usage, ft.pending = "", nil, "", nil, 0, nil, protocol.Usage{}, nil
	return &ft
}

// An agent step whose call needs approval waits; the resumed task acts on the decisions without
// calling the model, in the paused iteration, and the next iteration goes on; a resumed task
// delivered again after it checkpointed answers again without acting.
func TestAgentActsOnDecisions(t *testing.T) {
	wf := refundWorkflow(script(readAndRefund, answer), `["read_order", "issue_refund"]`, `{ require_approval = ["issue_refund"] }`, noBudget)
	b, hash := bundleOf(t, wf, "")
	tests := []struct {
		name     string
		approve  bool
		message  string
		refunds  int
		result   string // what the model sees as the refund call's result
		wantStop string
	}{
		{name: "approved", approve: true, refunds: 1, result: `{"customer":"C-9","tier":"gold"}`, wantStop: "completed"},
		{name: "denied", message: "no refunds this week", result: "denied by a human: no refunds this week", wantStop: "completed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec recorder
			h := newHandlers(t, builtin.Config{Tools: map[string]tool.Tool{"payments.issue_refund": rec.tool("refund")}})
			paused := newTask(b, hash, "investigate", 1, "null")
			if err := h.Agent(paused); err != nil {
				t.Fatal(err)
			}
			if paused.answer != "wait" || len(paused.pending) != 1 || paused.pending[0].Tool != "issue_refund" ||
				string(paused.pending[0].Arguments) != `{"order_id":"O-104"}` || paused.pending[0].CallID == "" {
				t.Fatalf("answer %s (%v) with pending %+v, want wait on the issue_refund call", paused.answer, paused.err, paused.pending)
			}
			if len(rec.keys) != 0 {
				t.Fatalf("the refund ran before a decision: %v", rec.keys)
			}
			call := paused.pending[0].CallID

			res := resumedTask(paused, protocol.Decision{CallID: call, Approve: tt.approve, Message: tt.message})
			if err := h.Agent(res); err != nil {
				t.Fatal(err)
			}
			if res.answer != "continue" || res.usage.ModelCalls != 0 || res.usage.ToolCalls != 1+tt.refunds {
				t.Fatalf("resumed: %s (%v), usage %+v; want continue without a model call, %d tool calls", res.answer, res.err, res.usage, 1+tt.refunds)
			}
			if len(rec.keys) != tt.refunds || tt.refunds == 1 && rec.keys[0] != "run1/investigate/1/1" {
				t.Errorf("the refund ran with keys %v, want %d run(s) with the paused iteration's key run1/investigate/1/1", rec.keys, tt.refunds)
			}
			st := state(t, res.saved)
			if st.Iteration != 1 || st.PendingTurn != nil || st.Stopped() || st.Approvals["issue_refund"] != 1 {
				t.Errorf("after the decision: iteration %d, pending turn %v, stop %q, approvals %v", st.Iteration, st.PendingTurn, st.StopReason, st.Approvals)
			}
			if got := toolResult(t, st, call); got != tt.result {
				t.Errorf("the model sees %q for the refund, want %q", got, tt.result)
			}

			// Delivered again after it checkpointed (the worker keeps a resumed task's writes).
			again := resumedTask(paused, protocol.Decision{CallID: call, Approve: tt.approve, Message: tt.message})
			again.checkpoint = res.saved
			if err := h.Agent(again); err != nil {
				t.Fatal(err)
			}
			if again.answer != "continue" || again.saved != nil || again.usage != (protocol.Usage{}) || len(rec.keys) != tt.refunds {
				t.Errorf("delivered again: %s, checkpoint %s, usage %+v, refunds %d; want continue from the checkpoint without acting",
					again.answer, again.saved, again.usage, len(rec.keys))
			}

			next := newTask(b, hash, "investigate", 2, "null")
			next.checkpoint = res.saved
			if err := h.Agent(next); err != nil {
				t.Fatal(err)
			}
			checkAgentOutput(t, next, tt.wantStop, "Refund: the order arrived 4 days late.")
		})
	}
}

// A resumed task that cannot be acted on fails the step, in one sentence naming it.
func TestAgentResumeErrors(t *testing.T) {
	wf := refundWorkflow(script(readAndRefund, answer), `["read_order", "issue_refund"]`, `{ require_approval = ["issue_refund"] }`, noBudget)
	b, hash := bundleOf(t, wf, "")
	var rec recorder
	h := newHandlers(t, builtin.Config{Tools: map[string]tool.Tool{"payments.issue_refund": rec.tool("refund")}})
	paused := newTask(b, hash, "investigate", 1, "null")
	if err := h.Agent(paused); err != nil || paused.answer != "wait" {
		t.Fatalf("%v, answer %s", err, paused.answer)
	}
	// The state of an iteration 1 that waits for nothing.
	st := state(t, paused.saved)
	st.Pending, st.PendingTurn, st.Settled, st.StopReason, st.Detail = nil, nil, nil, "", ""
	plain, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		task func() *fakeTask
		want string
	}{
		{"no decision for the pending call", func() *fakeTask {
			return resumedTask(paused, protocol.Decision{CallID: "someone_else", Approve: true})
		}, "step investigate: loop: run run1/investigate: call " + paused.pending[0].CallID + " of issue_refund waits for approval and has no decision"},
		{"a checkpoint without calls waiting", func() *fakeTask {
			ft := resumedTask(paused, protocol.Decision{CallID: paused.pending[0].CallID, Approve: true})
			ft.task.Iteration, ft.checkpoint = 2, plain
			return ft
		}, "step investigate: iteration 2 was resumed after a decision, but its checkpoint has no calls waiting for approval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ft := tt.task()
			if err := h.Agent(ft); err != nil {
				t.Fatal(err)
			}
			if ft.answer != "fail_permanent" || ft.err == nil || ft.err.Error() != tt.want {
				t.Fatalf("answer %s (%v), want fail_permanent %q", ft.answer, ft.err, tt.want)
			}
			if ft.saved != nil || len(rec.keys) != 0 {
				t.Errorf("a refused resume checkpointed or ran tools")
			}
		})
	}
}

// The iteration after a pause on needs_human goes on with the human's input as a user message.
func TestAgentHumanInput(t *testing.T) {
	wf := refundWorkflow(script(`{ escalate = "which order?" }`, answer), `["read_order"]`, `{}`, noBudget)
	b, hash := bundleOf(t, wf, "")
	tests := []struct {
		name, input, message string
	}{
		{"a string is the message", `"Order O-104, please."`, "Order O-104, please."},
		{"an object is shown as JSON", `{ "order_id": "O-104", "note": "late" }`, `{"order_id":"O-104","note":"late"}`},
		{"null asks to go on", `null`, "A human read your request and asks you to go on."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHandlers(t, builtin.Config{})
			paused := newTask(b, hash, "investigate", 1, "null")
			if err := h.Agent(paused); err != nil {
				t.Fatal(err)
			}
			checkAgentOutput(t, paused, "needs_human", "")
			next := newTask(b, hash, "investigate", 2, string(paused.output)) // the engine passes the paused output on
			next.task.HumanInput = json.RawMessage(tt.input)
			next.checkpoint = paused.saved
			if err := h.Agent(next); err != nil {
				t.Fatal(err)
			}
			checkAgentOutput(t, next, "completed", "Refund: the order arrived 4 days late.")
			if next.usage.ModelCalls != 1 {
				t.Errorf("%d model calls, want 1", next.usage.ModelCalls)
			}
			st := state(t, next.saved)
			var conv []string
			for _, m := range st.Messages[1:] {
				conv = append(conv, string(m.Role)+": "+m.Content)
			}
			want := []string{"assistant: [escalate] which order?", "user: " + tt.message, "assistant: Refund: the order arrived 4 days late."}
			if strings.Join(conv, "\n") != strings.Join(want, "\n") {
				t.Errorf("conversation\n%s\nwant\n%s", strings.Join(conv, "\n"), strings.Join(want, "\n"))
			}

			// Delivered again with its own checkpoint: answered from it, the message not added twice.
			again := newTask(b, hash, "investigate", 2, "null")
			again.task.HumanInput, again.checkpoint = json.RawMessage(tt.input), next.saved
			if err := h.Agent(again); err != nil {
				t.Fatal(err)
			}
			if again.answer != "complete" || !bytes.Equal(again.output, next.output) || again.saved != nil || again.usage.ModelCalls != 0 {
				t.Errorf("delivered again: %s %s, checkpoint %s, %d model calls; want the same answer without running",
					again.answer, again.output, again.saved, again.usage.ModelCalls)
			}
		})
	}

	bad := newTask(b, hash, "investigate", 2, "null")
	paused := newTask(b, hash, "investigate", 1, "null")
	if err := newHandlers(t, builtin.Config{}).Agent(paused); err != nil {
		t.Fatal(err)
	}
	bad.task.HumanInput, bad.checkpoint = json.RawMessage(`{"unterminated`), paused.saved
	if err := newHandlers(t, builtin.Config{}).Agent(bad); err != nil {
		t.Fatal(err)
	}
	if bad.answer != "fail_permanent" || !strings.HasPrefix(bad.err.Error(), "step investigate: the human's input is not valid JSON: ") {
		t.Errorf("input that is not JSON: %s (%v)", bad.answer, bad.err)
	}
}
