package builtin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// refundWorkflow is a workflow with one agent step "investigate" on a scripted model, with
// mocked read tools, a Go tool lookup_customer (handler crm.lookup) and issue_refund (handler
// payments.issue_refund).
func refundWorkflow(script, tools, policy, budget string) string {
	return `name = "refund"
[models.investigator]
provider = "scripted"
script = ` + script + `

[tools.read_order]
description = "Read an order by id."
input_schema = { type = "object", properties = { order_id = { type = "string", minLength = 1 } }, required = ["order_id"], additionalProperties = false }
mock = [{ output = { order_id = "O-104", status = "delivered" } }]

[tools.read_delivery_status]
description = "Read the carrier's delivery record of an order."
mock = [{ output = { late_days = 4 } }, { error = "carrier down", retryable = false }]

[tools.lookup_customer]
description = "Look up the customer of an order."
handler = "crm.lookup"

[tools.issue_refund]
description = "Issue a refund."
input_schema = { type = "object", properties = { order_id = { type = "string" } }, required = ["order_id"] }
side_effect = true
handler = "payments.issue_refund"

[[steps]]
id = "investigate"
type = "agent"
model = "investigator"
instructions = "You investigate refunds."
goal = "Decide whether refund evidence is sufficient for order O-104."
tools = ` + tools + `
policy = ` + policy + `
budget = ` + budget + "\n"
}

const (
	readOrder    = `{ tool_calls = [{ name = "read_order", arguments = { order_id = "O-104" } }], usage = { input_tokens = 100, output_tokens = 10 }, cost_usd = 0.01 }`
	readDelivery = `{ tool_calls = [{ name = "read_delivery_status", arguments = { order_id = "O-104" } }], usage = { input_tokens = 150, output_tokens = 12 }, cost_usd = 0.02 }`
	lookup       = `{ tool_calls = [{ name = "lookup_customer", arguments = { order_id = "O-104" } }] }`
	refund       = `{ tool_calls = [{ name = "issue_refund", arguments = { order_id = "O-104" } }] }`
	answer       = `{ text = "Refund: the order arrived 4 days late.", usage = { input_tokens = 200, output_tokens = 20 }, cost_usd = 0.03 }`

	allTools  = `["read_order", "read_delivery_status", "issue_refund"]`
	noRefunds = `{ forbid = ["issue_refund"], required_evidence = ["read_order"] }`
	noBudget  = `{}`
)

func script(turns ...string) string { return "[" + strings.Join(turns, ", ") + "]" }

// recorder is a Go tool that records its calls.
type recorder struct {
	mu   sync.Mutex
	keys []string
	args []string
}

func (r *recorder) tool(name string) tool.Tool {
	return tool.New(tool.Spec{Name: name, Description: "the Go tool's own description"},
		func(_ context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.keys, r.args = append(r.keys, key), append(r.args, string(args))
			return json.RawMessage(`{"customer":"C-9","tier":"gold"}`), nil
		})
}

// drive runs an agent step iteration by iteration as the engine and the worker would: each
// task gets the checkpoint the previous one wrote, until one answers other than continue.
func drive(t *testing.T, h *builtin.Handlers, b *workflow.Bundle, hash, input string) []*fakeTask {
	t.Helper()
	var checkpoint json.RawMessage
	var tasks []*fakeTask
	for iter := 1; iter <= 20; iter++ {
		ft := newTask(b, hash, "investigate", iter, input)
		ft.checkpoint = checkpoint
		if err := h.Agent(ft); err != nil {
			t.Fatalf("iteration %d: Agent returned %v", iter, err)
		}
		tasks = append(tasks, ft)
		// Every iteration that ran the loop recorded what it did.
		if ft.answer == "continue" || ft.answer == "complete" {
			if len(ft.records) != 1 || ft.records[0].Iteration != iter || ft.records[0].ModelCalls < 1 || ft.records[0].Proposal == nil {
				t.Fatalf("iteration %d recorded %+v, want one record of its model call and proposal", iter, ft.records)
			}
		}
		if ft.answer != "continue" {
			return tasks
		}
		if string(ft.output) != "null" || ft.saved == nil {
			t.Fatalf("iteration %d continued with %s and checkpoint %s, want null and a state", iter, ft.output, ft.saved)
		}
		checkpoint, input = ft.saved, "null" // a continued output is the next iteration's input
	}
	t.Fatal("the agent step did not stop in 20 iterations")
	return nil
}

func TestAgentSteps(t *testing.T) {
	tests := []struct {
		name                        string
		script, tools, policy, budg string
		goTools                     bool // register crm.lookup and payments.issue_refund
		wantTasks                   int
		wantAnswer                  string // of the last task
		wantStop, wantText, wantErr string
		wantUsage                   protocol.Usage
		wantGoCalls                 []string // idempotency keys of the Go tools' calls
	}{
		{name: "completes with mocked tools (issue_refund forbidden, no handler needed)",
			script: script(readOrder, readDelivery, answer), tools: allTools, policy: noRefunds, budg: noBudget,
			wantTasks: 3, wantAnswer: "complete", wantStop: "completed", wantText: "Refund: the order arrived 4 days late.",
			wantUsage: protocol.Usage{ModelCalls: 3, ToolCalls: 2, InputTokens: 450, OutputTokens: 42, CostUSD: 0.06}},
		{name: "a forbidden tool stops the loop and never runs",
			script: script(readOrder, refund, answer), tools: allTools, policy: noRefunds, budg: noBudget, goTools: true,
			wantTasks: 2, wantAnswer: "complete", wantStop: "refused",
			wantUsage: protocol.Usage{ModelCalls: 2, ToolCalls: 1, InputTokens: 100, OutputTokens: 10, CostUSD: 0.01}},
		{name: "the iteration budget stops the loop in its last iteration",
			script: script(readOrder, readDelivery, answer), tools: allTools, policy: noRefunds, budg: `{ max_iterations = 2 }`,
			wantTasks: 2, wantAnswer: "complete", wantStop: "max_iterations",
			wantUsage: protocol.Usage{ModelCalls: 2, ToolCalls: 2, InputTokens: 250, OutputTokens: 22, CostUSD: 0.03}},
		{name: "a Go tool served by handler",
			script: script(lookup, answer), tools: `["lookup_customer"]`, policy: `{}`, budg: noBudget, goTools: true,
			wantTasks: 2, wantAnswer: "complete", wantStop: "completed", wantText: "Refund: the order arrived 4 days late.",
			wantUsage:   protocol.Usage{ModelCalls: 2, ToolCalls: 1, InputTokens: 200, OutputTokens: 20, CostUSD: 0.03},
			wantGoCalls: []string{"run1/investigate/1/0"}},
		{name: "a tool whose handler is not registered fails the step",
			script: script(lookup, answer), tools: `["read_order", "lookup_customer"]`, policy: `{}`, budg: noBudget,
			wantTasks: 1, wantAnswer: "fail_permanent",
			wantErr: `step investigate: tool lookup_customer needs the Go tool "crm.lookup", which this worker does not register`},
		{name: "a call that needs approval makes the step wait",
			script: script(readOrder, answer), tools: allTools, policy: `{ forbid = ["issue_refund"], require_approval = ["read_order"] }`, budg: noBudget,
			wantTasks: 1, wantAnswer: "wait",
			wantUsage: protocol.Usage{ModelCalls: 1, InputTokens: 100, OutputTokens: 10, CostUSD: 0.01}},
		{name: "an escalation completes the step with needs_human",
			script: script(`{ escalate = "which order?" }`), tools: allTools, policy: noRefunds, budg: noBudget,
			wantTasks: 1, wantAnswer: "complete", wantStop: "needs_human",
			wantUsage: protocol.Usage{ModelCalls: 1}},
		{name: "a non-retryable tool failure",
			script: script(readDelivery, readDelivery, answer), tools: allTools, policy: `{ forbid = ["issue_refund"] }`, budg: `{ max_repeated_calls = 5 }`,
			wantTasks: 2, wantAnswer: "complete", wantStop: "tool_failure",
			wantUsage: protocol.Usage{ModelCalls: 2, ToolCalls: 2, InputTokens: 300, OutputTokens: 24, CostUSD: 0.04}},
		{name: "a policy naming an undeclared tool fails the step",
			script: script(answer), tools: `["read_order"]`, policy: `{ allow = ["read_orders"] }`, budg: noBudget,
			wantTasks: 1, wantAnswer: "fail_permanent",
			wantErr: `step investigate: invalid loop configuration: policy.allow names "read_orders", which is not a declared tool`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, hash := bundleOf(t, refundWorkflow(tt.script, tt.tools, tt.policy, tt.budg), "")
			var rec recorder
			cfg := builtin.Config{}
			if tt.goTools {
				cfg.Tools = map[string]tool.Tool{"crm.lookup": rec.tool("crm_lookup"), "payments.issue_refund": rec.tool("refund")}
			}
			tasks := drive(t, newHandlers(t, cfg), b, hash, "null")
			last := tasks[len(tasks)-1]
			if len(tasks) != tt.wantTasks || last.answer != tt.wantAnswer {
				t.Fatalf("%d tasks, the last answered %s (%v), want %d ending %s", len(tasks), last.answer, last.err, tt.wantTasks, tt.wantAnswer)
			}
			if tt.wantErr != "" && (last.err == nil || !strings.Contains(last.err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want one containing %q", last.err, tt.wantErr)
			}
			if tt.wantStop != "" {
				checkAgentOutput(t, last, tt.wantStop, tt.wantText)
			}
			var usage protocol.Usage
			for _, ft := range tasks {
				usage.Add(ft.usage)
			}
			if usage.ModelCalls != tt.wantUsage.ModelCalls || usage.ToolCalls != tt.wantUsage.ToolCalls ||
				usage.InputTokens != tt.wantUsage.InputTokens || usage.OutputTokens != tt.wantUsage.OutputTokens ||
				abs(usage.CostUSD-tt.wantUsage.CostUSD) > 1e-9 {
				t.Errorf("usage %+v, want %+v", usage, tt.wantUsage)
			}
			if strings.Join(rec.keys, ",") != strings.Join(tt.wantGoCalls, ",") {
				t.Errorf("Go tools called with keys %v, want %v", rec.keys, tt.wantGoCalls)
			}
		})
	}
}

// checkAgentOutput checks a completed agent task: its stop reason, and its output's.
func checkAgentOutput(t *testing.T, ft *fakeTask, stop, answer string) {
	t.Helper()
	var out struct {
		StopReason string  `json:"stop_reason"`
		Detail     string  `json:"detail"`
		Answer     *string `json:"answer"`
	}
	dec := json.NewDecoder(bytes.NewReader(ft.output))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("output %s: %v", ft.output, err)
	}
	if ft.stopReason != stop || out.StopReason != stop || out.Detail == "" || ft.stopDetail != out.Detail {
		t.Errorf("stop reason %q (detail %q), output %s, want %s with its detail", ft.stopReason, ft.stopDetail, ft.output, stop)
	}
	switch {
	case answer == "" && out.Answer != nil:
		t.Errorf("answer %q, want null", *out.Answer)
	case answer != "" && (out.Answer == nil || *out.Answer != answer):
		t.Errorf("output %s, want the answer %q", ft.output, answer)
	}
}

// The step's input is added to the goal, which is the loop's first message; a Go tool's spec
// takes the workflow's name and description and its own schema.
func TestAgentInputAndSpecs(t *testing.T) {
	b, hash := bundleOf(t, refundWorkflow(script(lookup, answer), `["lookup_customer"]`, `{}`, noBudget), "")
	var rec recorder
	h := newHandlers(t, builtin.Config{Tools: map[string]tool.Tool{"crm.lookup": rec.tool("crm_lookup")}})
	ft := newTask(b, hash, "investigate", 1, `{ "order_id": "O-104", "note": "late" }`)
	if err := h.Agent(ft); err != nil || ft.answer != "continue" {
		t.Fatalf("iteration 1: %v, answer %s (%v)", err, ft.answer, ft.err)
	}
	st := state(t, ft.saved)
	wantGoal := "Decide whether refund evidence is sufficient for order O-104.\n\nInput:\n{\"order_id\":\"O-104\",\"note\":\"late\"}"
	if st.RunID != "run1/investigate" || len(st.Messages) == 0 || st.Messages[0].Content != wantGoal {
		t.Fatalf("run %q, first message %+v, want run1/investigate and %q", st.RunID, st.Messages, wantGoal)
	}
	if len(rec.args) != 1 || rec.args[0] != `{"order_id":"O-104"}` {
		t.Errorf("the Go tool got %v", rec.args)
	}
}

// Re-running any iteration from the checkpoint before it, on fresh handlers, writes the same
// checkpoint and answers the same; a task whose checkpoint already holds its iteration answers
// from it without running again; a later iteration without a checkpoint fails.
func TestAgentDeterminism(t *testing.T) {
	b, hash := bundleOf(t, refundWorkflow(script(readOrder, readDelivery, answer), allTools, noRefunds, noBudget), "")
	tasks := drive(t, newHandlers(t, builtin.Config{}), b, hash, `{"order_id":"O-104"}`)
	if len(tasks) != 3 {
		t.Fatalf("%d iterations, want 3", len(tasks))
	}
	for i, want := range tasks {
		iter := i + 1
		again := newTask(b, hash, "investigate", iter, string(want.task.Input))
		if i > 0 {
			again.checkpoint = tasks[i-1].saved
		}
		if err := newHandlers(t, builtin.Config{}).Agent(again); err != nil {
			t.Fatal(err)
		}
		if again.answer != want.answer || !bytes.Equal(again.output, want.output) || !bytes.Equal(again.saved, want.saved) || again.usage != want.usage {
			t.Fatalf("iteration %d again: %s %s, usage %+v, checkpoint\n%s\nwant %s %s, usage %+v, checkpoint\n%s",
				iter, again.answer, again.output, again.usage, again.saved, want.answer, want.output, want.usage, want.saved)
		}

		redelivered := newTask(b, hash, "investigate", iter, "null")
		redelivered.checkpoint = want.saved // an attempt of this iteration already checkpointed
		if err := newHandlers(t, builtin.Config{}).Agent(redelivered); err != nil {
			t.Fatal(err)
		}
		if redelivered.answer != want.answer || !bytes.Equal(redelivered.output, want.output) || redelivered.usage.ModelCalls != 0 || redelivered.saved != nil {
			t.Fatalf("iteration %d from its own checkpoint: %s %s, %d model calls, want %s %s without running",
				iter, redelivered.answer, redelivered.output, redelivered.usage.ModelCalls, want.answer, want.output)
		}
	}
	lost := newTask(b, hash, "investigate", 2, "null")
	if err := newHandlers(t, builtin.Config{}).Agent(lost); err != nil {
		t.Fatal(err)
	}
	if lost.answer != "fail" || !strings.Contains(lost.err.Error(), "step investigate: iteration 2 found no checkpoint") {
		t.Fatalf("iteration 2 without a checkpoint: %s (%v); want a retryable failure", lost.answer, lost.err)
	}
	// A checkpoint older than the previous iteration: not gone on from, a retryable failure.
	behind := newTask(b, hash, "investigate", 3, "null")
	behind.checkpoint = tasks[0].saved // iteration 1's
	if err := newHandlers(t, builtin.Config{}).Agent(behind); err != nil {
		t.Fatal(err)
	}
	if behind.answer != "fail" || !strings.Contains(behind.err.Error(), "iteration 3 found the checkpoint of iteration 1: the writes of iteration 2 are missing") || behind.usage.ModelCalls != 0 {
		t.Fatalf("iteration 3 from iteration 1's checkpoint: %s (%v), %d model calls", behind.answer, behind.err, behind.usage.ModelCalls)
	}
}

// A task whose context ends during the iteration writes no checkpoint and fails the attempt,
// so that it runs again.
func TestAgentInterrupted(t *testing.T) {
	b, hash := bundleOf(t, refundWorkflow(script(readOrder, answer), allTools, noRefunds, noBudget), "")
	ft := newTask(b, hash, "investigate", 1, "null")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ft.Context = ctx
	if err := newHandlers(t, builtin.Config{}).Agent(ft); err != nil {
		t.Fatal(err)
	}
	if ft.answer != "fail" || ft.saved != nil || !strings.Contains(ft.err.Error(), "step investigate: iteration 1 was interrupted") {
		t.Fatalf("answer %s (%v), checkpoint %s, want a retryable failure and no checkpoint", ft.answer, ft.err, ft.saved)
	}
}

// An agent step on a recorded OpenAI conversation (examples/cassettes/refund-openai.json, made
// by `reins agent` with the example MCP server), with mocks that answer as that server did: as
// the workflow's replay model (the cassette relative to the workflow's directory), and as
// Config.Model replacing the workflow's model.
func TestAgentReplay(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "examples", "cassettes"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, model, override string }{
		{name: "replay model", model: "provider = \"replay\"\ncassette = \"refund-openai.json\""},
		{name: "Config.Model", model: "provider = \"scripted\"\nscript = []", override: "replay:" + filepath.Join(dir, "refund-openai.json")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, hash := bundleOf(t, replayWorkflow(tt.model), dir)
			tasks := drive(t, newHandlers(t, builtin.Config{Model: tt.override}), b, hash, "null")
			last := tasks[len(tasks)-1]
			if len(tasks) != 2 || last.answer != "complete" {
				t.Fatalf("%d tasks ending %s (%v), want 2 ending complete", len(tasks), last.answer, last.err)
			}
			checkAgentOutput(t, last, "completed",
				"Evidence is sufficient: O-104 was promised on 2026-11-10 and delivered on 2026-11-14, 4 days late, so the $42.50 order qualifies for a late-delivery refund.")
			var usage protocol.Usage
			for _, ft := range tasks {
				usage.Add(ft.usage)
			}
			if usage.ModelCalls != 2 || usage.ToolCalls != 2 || usage.InputTokens != 298+412 || usage.OutputTokens != 52+41 {
				t.Errorf("usage %+v, want 2 model calls, 2 tool calls, 710 in, 93 out", usage)
			}
		})
	}
}

// replayWorkflow is the agent of the recorded conversation, with the model keys given.
func replayWorkflow(modelKeys string) string {
	return `name = "replayed"
[models.recorded]
` + modelKeys + `

[tools.read_order]
description = "Read an order by id."
input_schema = { type = "object", properties = { order_id = { type = "string", description = "the order id, such as O-104" } }, required = ["order_id"], additionalProperties = false }
mock = [{ output = { amount = 42.5, late_days = 4, order_id = "O-104", status = "delivered" } }]

[tools.read_delivery_status]
description = "Read the carrier's delivery record of an order."
input_schema = { type = "object", properties = { order_id = { type = "string", description = "the order id, such as O-104" } }, required = ["order_id"], additionalProperties = false }
mock = [{ output = { carrier = "acme", delivered = "2026-11-14", order_id = "O-104", promised = "2026-11-10" } }]

[[steps]]
id = "investigate"
type = "agent"
model = "recorded"
goal = "Decide whether refund evidence is sufficient for order O-104."
tools = ["read_order", "read_delivery_status"]
`
}

// A fork (client.Fork) hands the forked run the original's checkpoint: the loop becomes the
// new run's, with its own wall clock from the fork, so that an old run's fork does not stop
// with timeout at once, and its side effects are not the original's (other idempotency keys).
func TestAgentForkedState(t *testing.T) {
	wf := refundWorkflow(script(readOrder, answer), `["read_order"]`, `{}`, `{ max_duration = "5m" }`)
	b, hash := bundleOf(t, wf, "")
	clk := clock.NewVirtual(epoch)
	h := newHandlers(t, builtin.Config{Clock: clk})
	first := newTask(b, hash, "investigate", 1, "null")
	if err := h.Agent(first); err != nil || first.answer != "continue" {
		t.Fatalf("iteration 1: %v, %s (%v)", err, first.answer, first.err)
	}
	clk.Advance(24 * time.Hour) // the run is forked a day later
	forked := newTask(b, hash, "investigate", 2, "null")
	forked.task.RunID = "run1-fork"
	forked.checkpoint = first.saved
	if err := h.Agent(forked); err != nil || forked.answer != "complete" {
		t.Fatalf("the forked iteration: %v, %s (%v)", err, forked.answer, forked.err)
	}
	var out builtin.AgentOutput
	if err := json.Unmarshal(forked.output, &out); err != nil || out.StopReason != "completed" {
		t.Fatalf("output %s, want the loop completed, not stopped by its wall clock", forked.output)
	}
	st := state(t, forked.saved)
	if st.RunID != "run1-fork/investigate" || !st.StartedAt.Equal(clk.Now()) {
		t.Errorf("the loop state is run %s started %s; want the fork's, started at the fork", st.RunID, st.StartedAt)
	}
}

// A loop state too large to checkpoint fails the step for good, with a sentence saying why:
// retrying the iteration cannot make the conversation shorter.
func TestAgentStateTooLarge(t *testing.T) {
	wf := refundWorkflow(script(readOrder, answer), `["read_order"]`, `{}`, noBudget)
	b, hash := bundleOf(t, wf, "")
	h := newHandlers(t, builtin.Config{})
	ft := newTask(b, hash, "investigate", 1, "null")
	ft.checkpointErr = fmt.Errorf("worker: checkpoint of task t: the write is 2000000 bytes: %w", worker.ErrCheckpointTooLarge)
	if err := h.Agent(ft); err != nil {
		t.Fatal(err)
	}
	if ft.answer != "fail_permanent" || !strings.Contains(ft.err.Error(), "step investigate: the loop's state after iteration 1 cannot be kept, its conversation is too long") {
		t.Errorf("answer %s (%v), want a permanent failure saying why", ft.answer, ft.err)
	}
}

// The agent's checkpoint is an array of deltas, each the messages an iteration added and the
// rest of the state; a state set whole (what earlier versions wrote) reads as it is.
func TestDecodeAgentState(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		msgs      []string // contents, in order
		iteration int
		err       string
		proposed  map[uint64]int
	}{
		{"nothing", `null`, nil, 0, "", nil},
		{"a state set whole", `{"run_id":"r","iteration":2,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`, []string{"a", "b"}, 2, "", nil},
		{"deltas", `[{"from":0,"messages":[{"role":"user","content":"a"}],"state":{"iteration":1}},` +
			`{"from":1,"messages":[{"role":"assistant","content":"b"},{"role":"tool","content":"c"}],"state":{"iteration":2}}]`, []string{"a", "b", "c"}, 2, "", nil},
		{"a delta that rewrites", `[{"from":0,"messages":[{"role":"user","content":"a"},{"role":"user","content":"x"}],"state":{"iteration":1}},` +
			`{"from":1,"messages":[{"role":"user","content":"y"}],"state":{"iteration":2}}]`, []string{"a", "y"}, 2, "", nil},
		{"a delta past the end", `[{"from":3,"messages":[],"state":{}}]`, nil, 0, "write 0 continues the conversation at message 3, but it has 0", nil},
		{"not a state", `[1]`, nil, 0, "cannot unmarshal", nil},
		{"proposed calls written as they change", `[{"from":0,"messages":[{"role":"user","content":"a"}],"proposed":{"7":1},"state":{"iteration":1}},` +
			`{"from":1,"messages":[],"proposed":{"7":2,"9":1},"state":{"iteration":2}}]`, []string{"a"}, 2, "", map[uint64]int{7: 2, 9: 1}},
		{"proposed calls of an earlier version, whole in the state", `[{"from":0,"messages":[{"role":"user","content":"a"}],"state":{"iteration":1,"call_proposed":{"5":1}}},` +
			`{"from":1,"messages":[],"proposed":{"6":1},"state":{"iteration":2}}]`, []string{"a"}, 2, "", map[uint64]int{5: 1, 6: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := builtin.DecodeAgentState(json.RawMessage(tc.raw))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.msgs == nil {
				if st != nil {
					t.Fatalf("state %+v, want none", st)
				}
				return
			}
			var got []string
			for _, m := range st.Messages {
				got = append(got, m.Content)
			}
			if !slices.Equal(got, tc.msgs) || st.Iteration != tc.iteration {
				t.Errorf("messages %q iteration %d, want %q and %d", got, st.Iteration, tc.msgs, tc.iteration)
			}
			if tc.proposed != nil && !maps.Equal(st.CallProposed, tc.proposed) {
				t.Errorf("proposed calls %v, want %v", st.CallProposed, tc.proposed)
			}
		})
	}
}

// An iteration whose answer was lost after it checkpointed runs again and answers from the
// checkpoint: its record is rebuilt from the conversation it left, marked recovered, so that the
// run's history still says what the iteration did.
func TestAgentLostAnswerKeepsItsRecord(t *testing.T) {
	b, hash := bundleOf(t, refundWorkflow(script(readOrder, answer), allTools, noRefunds, noBudget), "")
	h := newHandlers(t, builtin.Config{})
	first := newTask(b, hash, "investigate", 1, "null")
	if err := h.Agent(first); err != nil || first.answer != "continue" {
		t.Fatalf("iteration 1 answered %s, %v", first.answer, err)
	}
	again := newTask(b, hash, "investigate", 1, "null")
	again.checkpoint = first.saved // the redelivery finds the lost attempt's write
	if err := h.Agent(again); err != nil || again.answer != "continue" {
		t.Fatalf("iteration 1 again answered %s, %v", again.answer, err)
	}
	if len(again.records) != 1 {
		t.Fatalf("the second delivery recorded %d records, want 1", len(again.records))
	}
	rec := again.records[0]
	if !rec.Recovered || rec.Iteration != 1 || len(rec.Calls) != 1 || rec.Calls[0].Tool != "read_order" ||
		!strings.Contains(rec.Calls[0].Output, "delivered") || rec.Calls[0].Arguments != `{"order_id":"O-104"}` {
		t.Errorf("the recovered record: %+v", rec)
	}
	if again.usage != (protocol.Usage{}) {
		t.Errorf("the second delivery reported usage %+v: the model was called again", again.usage)
	}
}

// A tool result larger than a message's keepMin is kept out of the checkpoint by reference: the
// writes stay small however large the results, and the next iteration reads it back whole. Each
// write carries only the proposed calls it changed.
func TestAgentKeepsLargeResultsOutOfItsCheckpoint(t *testing.T) {
	big := strings.Repeat("p", 20_000)
	wf := strings.Replace(refundWorkflow(script(readOrder, lookup, answer), `["read_order", "lookup_customer"]`, `{}`, noBudget),
		`mock = [{ output = { order_id = "O-104", status = "delivered" } }]`, `mock = [{ output = "`+big+`" }]`, 1)
	b, hash := bundleOf(t, wf, "")
	rec := &recorder{}
	h := newHandlers(t, builtin.Config{Tools: map[string]tool.Tool{"crm.lookup": rec.tool("lookup_customer")}})
	tasks := drive(t, h, b, hash, "null")
	if len(tasks) != 3 || tasks[2].answer != "complete" {
		t.Fatalf("%d tasks ending %s (%v)", len(tasks), tasks[len(tasks)-1].answer, tasks[len(tasks)-1].err)
	}
	for i, ft := range tasks[:2] {
		if len(ft.saved) > 8_000 {
			t.Errorf("iteration %d wrote %d bytes, want the 20 KB result by reference", i+1, len(ft.saved))
		}
	}
	if got := tasks[0].records[0].Calls[0].Output; got != `"`+big+`"` {
		t.Errorf("iteration 1's record shows a result of %d bytes, want the whole %d", len(got), len(big)+2)
	}
	var writes []struct {
		Proposed map[string]int `json:"proposed"`
	}
	if err := json.Unmarshal(tasks[1].saved, &writes); err != nil || len(writes) != 2 || len(writes[1].Proposed) != 1 {
		t.Errorf("the writes %s: want the second to carry the one call it proposed", tasks[1].saved)
	}
	st, err := builtin.DecodeAgentState(tasks[1].saved)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.CallProposed) != 2 {
		t.Errorf("the folded state has %d proposed calls, want 2", len(st.CallProposed))
	}
	kept := st.Messages[2].Content // the goal, read_order's call, its result
	if !strings.HasPrefix(kept, "\x00reins-value:") {
		t.Fatalf("the large result is checkpointed as %.40q, want a reference", kept)
	}
	if text, err := tasks[1].ReadText(kept); err != nil || text != `"`+big+`"` {
		t.Errorf("the reference reads back %d bytes (%v), want the result", len(text), err)
	}
}

// pagesWorkflow is an agent that fetches pages 1..n-1 (each result size bytes: over 8 KiB, kept
// by reference), then answers, under a drop_oldest context policy of maxTokens and keepLast.
func pagesWorkflow(n, size, maxTokens, keepLast int) string {
	return pagesWorkflowWith(n, size, fmt.Sprintf(`{ max_tokens = %d, strategy = "drop_oldest", keep_last = %d }`, maxTokens, keepLast))
}

// pagesWorkflowWith is pagesWorkflow under the context policy context, with a summarizer
// model "cheap" that has a summary for each of the n turns.
func pagesWorkflowWith(n, size int, context string) string {
	var b strings.Builder
	b.WriteString("name = \"pages\"\n[models.m]\nprovider = \"scripted\"\nscript = [\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  { tool_calls = [{ name = \"fetch\", arguments = { page = %d } }], usage = { input_tokens = 100, output_tokens = 5 } },\n", i)
	}
	b.WriteString("  { text = \"done\" },\n]\n[models.cheap]\nprovider = \"scripted\"\nscript = [\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  { text = \"Summary %d: the pages read so far.\", usage = { input_tokens = 50, output_tokens = 10 } },\n", i)
	}
	b.WriteString("]\n[tools.fetch]\ninput_schema = { type = \"object\", properties = { page = { type = \"integer\" } } }\n")
	fmt.Fprintf(&b, "mock = [{ output = %q }]\n", strings.Repeat("p", size))
	fmt.Fprintf(&b, "[[steps]]\nid = \"investigate\"\ntype = \"agent\"\nmodel = \"m\"\ngoal = \"Read every page.\"\ntools = [\"fetch\"]\n")
	fmt.Fprintf(&b, "budget = { max_iterations = %d, max_tool_calls = %d }\ncontext = %s\n", n, n, context)
	return b.String()
}

// The state a loop's last write left on this worker (the cache of Handlers) is an optimisation
// only: an agent whose iterations all run on one Handlers writes, answers and records exactly
// what it does when every iteration runs on new Handlers that fold the checkpoint whole.
func TestAgentStateCacheIsEquivalent(t *testing.T) {
	last := checkCacheEquivalent(t, 30, 10_000, 9000, 2)
	st, err := builtin.DecodeAgentState(last)
	if err != nil || st.Context.From < 2 {
		t.Fatalf("the last state (%v): the context policy never left a message out (from %d)", err, st.Context.From)
	}
}

// FuzzAgentStateCache: the cache is equivalent whatever the length of the run, the size of the
// results (by reference or inline), and the window.
func FuzzAgentStateCache(f *testing.F) {
	f.Add(uint8(12), uint16(10_000), uint16(9000), uint8(2))
	f.Add(uint8(5), uint16(100), uint16(500), uint8(1))
	f.Add(uint8(20), uint16(30_000), uint16(20_000), uint8(4))
	f.Fuzz(func(t *testing.T, n uint8, size, maxTokens uint16, keepLast uint8) {
		if n < 2 || n > 40 || size > 40_000 || maxTokens < 200 || keepLast > 8 {
			return
		}
		checkCacheEquivalent(t, int(n), int(size), int(maxTokens), int(keepLast))
	})
}

// runPages runs pagesWorkflow's agent step iteration after iteration until it stops, each
// iteration on the Handlers handlers returns, the checkpoint written in place when inPlace (as
// the worker writes it while a loop stays on it); it returns the tasks and the checkpoint after
// each.
func runPages(t testing.TB, b *workflow.Bundle, hash string, n int, handlers func() *builtin.Handlers, inPlace bool) ([]*fakeTask, [][]byte) {
	t.Helper()
	var checkpoint json.RawMessage
	var tasks []*fakeTask
	var saves [][]byte
	for iter := 1; iter <= n+1; iter++ {
		ft := newTask(b, hash, "investigate", iter, "null")
		ft.checkpoint, ft.inPlace = checkpoint, inPlace
		if err := handlers().Agent(ft); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		tasks = append(tasks, ft)
		saves = append(saves, bytes.Clone(ft.saved)) // in place, later writes change its last byte
		if ft.answer != "continue" {
			return tasks, saves
		}
		checkpoint = ft.saved
	}
	t.Fatal("the agent did not stop")
	return nil, nil
}

// checkCacheEquivalent runs pagesWorkflow on one Handlers (each iteration taking the state the
// previous one left) and on new Handlers each iteration (folding the checkpoint whole), and
// requires the same writes, answers, usage and records; it returns the last checkpoint.
func checkCacheEquivalent(t *testing.T, n, size, maxTokens, keepLast int) json.RawMessage {
	t.Helper()
	b, hash := bundleOf(t, pagesWorkflow(n, size, maxTokens, keepLast), "")
	clk := clock.NewVirtual(epoch)
	cached := newHandlers(t, builtin.Config{Clock: clk})
	withCache, cachedSaves := runPages(t, b, hash, n, func() *builtin.Handlers { return cached }, true)
	whole, saves := runPages(t, b, hash, n, func() *builtin.Handlers { return newHandlers(t, builtin.Config{Clock: clk}) }, false)
	if len(withCache) != len(whole) {
		t.Fatalf("%d and %d tasks", len(withCache), len(whole))
	}
	// An append that outgrows its array moves it, and the next iteration folds it whole.
	if hits, most := builtin.StateCacheHits(cached), int64(len(withCache)-1); hits < most/2 || hits > most {
		t.Errorf("%d of %d iterations took the state the previous one left", hits, most)
	}
	for i := range withCache {
		a, z := withCache[i], whole[i]
		if !bytes.Equal(cachedSaves[i], saves[i]) || a.answer != z.answer || !bytes.Equal(a.output, z.output) || a.usage != z.usage {
			t.Fatalf("iteration %d differs: wrote %d and %d bytes, answered %s and %s", i+1, len(cachedSaves[i]), len(saves[i]), a.answer, z.answer)
		}
		if len(a.records) != len(z.records) {
			t.Fatalf("iteration %d: %d and %d records", i+1, len(a.records), len(z.records))
		}
		for k := range a.records {
			ra, rz := a.records[k], z.records[k]
			if !reflect.DeepEqual(ra, rz) {
				t.Fatalf("iteration %d's records differ:\n%+v\n%+v", i+1, ra, rz)
			}
		}
		if i > 0 && size > 8<<10 && len(cachedSaves[i])-len(cachedSaves[i-1]) > 4_000 {
			t.Errorf("iteration %d wrote %d bytes, want its %d-byte result by reference", i+1, len(cachedSaves[i])-len(cachedSaves[i-1]), size)
		}
	}
	return cachedSaves[len(cachedSaves)-1]
}
