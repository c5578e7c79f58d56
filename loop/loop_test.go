package loop_test

// Tests of the loop controller. The first part holds shared fixtures (script and mock builders, a
// world of deterministic parts with instruments, and the invariants every run must satisfy); the
// tests follow.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// t0 is where every virtual clock of these tests starts.
var t0 = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

// orderSchema exercises required, minLength and additionalProperties.
const orderSchema = `{"type":"object","properties":{"order_id":{"type":"string","minLength":1}},"required":["order_id"],"additionalProperties":false}`

// ---- script builders ----

func sp(s string) *string { return &s }

func lat(d time.Duration) *clock.Duration { cd := clock.Duration(d); return &cd }

func answerTurn(text string) model.Turn { return model.Turn{Text: sp(text)} }

func callsTurn(calls ...model.ToolCall) model.Turn { return model.Turn{ToolCalls: calls} }

func tc(name, args string) model.ToolCall {
	return model.ToolCall{Name: name, Arguments: json.RawMessage(args)}
}

func escalateTurn(reason string) model.Turn { return model.Turn{Escalate: sp(reason)} }

func refuseTurn(reason string) model.Turn { return model.Turn{Refuse: sp(reason)} }

func modelErrTurn(msg string, retryable bool) model.Turn {
	return model.Turn{Error: sp(msg), Retryable: &retryable}
}

func withUsage(t model.Turn, in, out int64) model.Turn {
	t.Usage = &model.Usage{InputTokens: in, OutputTokens: out}
	return t
}

func withCost(t model.Turn, usd float64) model.Turn { t.CostUSD = usd; return t }

func withLatency(t model.Turn, d time.Duration) model.Turn { t.Latency = lat(d); return t }

func output(js string) tool.MockResult { return tool.MockResult{Output: json.RawMessage(js)} }

func failure(msg string, retryable bool) tool.MockResult {
	return tool.MockResult{Error: sp(msg), Retryable: &retryable}
}

func slow(r tool.MockResult, d time.Duration) tool.MockResult { r.Latency = lat(d); return r }

// ---- tools ----

// toolDef declares a tool of a world: a mock with canned results, or fn when set.
type toolDef struct {
	spec    tool.Spec
	results []tool.MockResult
	fn      func(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error)
}

func mockTool(name, schema string, results ...tool.MockResult) toolDef {
	spec := tool.Spec{Name: name}
	if schema != "" {
		spec.InputSchema = json.RawMessage(schema)
	}
	return toolDef{spec: spec, results: results}
}

func funcTool(name string, fn func(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error)) toolDef {
	return toolDef{spec: tool.Spec{Name: name}, fn: fn}
}

// execution is one real execution of a tool, recorded inside the tool itself.
type execution struct {
	Tool string
	Args string
	Key  string
	Info tool.Info // from tool.InfoFrom(ctx); zero if the loop put none there
}

type execLog struct {
	mu   sync.Mutex
	list []execution
}

func (l *execLog) add(e execution) {
	l.mu.Lock()
	l.list = append(l.list, e)
	l.mu.Unlock()
}

func (l *execLog) all() []execution {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}

func (l *execLog) count(name string) int {
	n := 0
	for _, e := range l.all() {
		if e.Tool == name {
			n++
		}
	}
	return n
}

// inIteration lists the executions of one iteration.
func (l *execLog) inIteration(iter int) []execution {
	var out []execution
	for _, e := range l.all() {
		if e.Info.Iteration == iter {
			out = append(out, e)
		}
	}
	return out
}

// counted wraps a tool and records every real execution before delegating.
type counted struct {
	inner  tool.Tool
	log    *execLog
	onCall func(ctx context.Context, args json.RawMessage)
}

func (c counted) Spec() tool.Spec { return c.inner.Spec() }

func (c counted) Call(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
	var info tool.Info
	if p := tool.InfoFrom(ctx); p != nil {
		info = *p
	}
	c.log.add(execution{Tool: c.inner.Spec().Name, Args: string(args), Key: key, Info: info})
	if c.onCall != nil {
		c.onCall(ctx, args)
	}
	return c.inner.Call(ctx, args, key)
}

// ---- model ----

// recorder wraps a model and records every proposal it successfully returned, which is the
// independent list of "proposed calls" the answered-once invariant is checked against.
type recorder struct {
	inner model.Model
	mu    sync.Mutex
	calls int
	props []model.Proposal
	reqs  []model.Request // every request, its messages copied
}

func (r *recorder) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	resp, err := r.inner.Generate(ctx, req)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	c := *req
	c.Messages = slices.Clone(req.Messages)
	r.reqs = append(r.reqs, c)
	if err == nil {
		r.props = append(r.props, resp.Proposal)
	}
	return resp, err
}

func (r *recorder) proposals() []model.Proposal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.props)
}

func (r *recorder) requests() []model.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// ---- approvers ----

type approverFunc func(ctx context.Context, req loop.ApprovalRequest) (loop.Decision, error)

func (f approverFunc) Decide(ctx context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
	return f(ctx, req)
}

// ---- world ----

// setup is everything a world is built from.
type setup struct {
	tools      []toolDef
	policy     loop.Policy
	budget     loop.Budget
	approver   loop.Approver
	turns      []model.Turn
	hooks      loop.Hooks
	concurrent int
	retries    int
	context    loop.ContextPolicy
	// onCall runs inside the named tool when it executes (after it is logged).
	onCall map[string]func(ctx context.Context, args json.RawMessage)
	// children names the tools whose calls run as child runs (Config.ChildTools).
	children []string
}

// world is a controller with deterministic parts and the instruments to observe it.
type world struct {
	clk   *clock.Virtual
	model *recorder
	log   *execLog
	ctrl  *loop.Controller

	mu   sync.Mutex
	sunk []trace.Event
}

func newWorld(t testing.TB, s setup, now time.Time) *world {
	t.Helper()
	w := &world{clk: clock.NewVirtual(now), log: &execLog{}}
	scripted, err := model.NewScripted(s.turns, w.clk)
	if err != nil {
		t.Fatalf("NewScripted: %v", err)
	}
	w.model = &recorder{inner: scripted}
	tools := make([]tool.Tool, 0, len(s.tools))
	for _, d := range s.tools {
		var inner tool.Tool
		if d.fn != nil {
			inner = tool.New(d.spec, d.fn)
		} else {
			m, err := tool.NewMock(d.spec, d.results, w.clk)
			if err != nil {
				t.Fatalf("NewMock(%s): %v", d.spec.Name, err)
			}
			inner = m
		}
		tools = append(tools, counted{inner: inner, log: w.log, onCall: s.onCall[d.spec.Name]})
	}
	w.ctrl, err = loop.New(loop.Config{
		Model:              w.model,
		Tools:              tools,
		Instructions:       "test instructions",
		Policy:             s.policy,
		Budget:             s.budget,
		Approver:           s.approver,
		Clock:              w.clk,
		Sink:               trace.SinkFunc(w.sink),
		Hooks:              s.hooks,
		MaxConcurrentTools: s.concurrent,
		ModelRetries:       s.retries,
		Context:            s.context,
		ChildTools:         s.children,
	})
	if err != nil {
		t.Fatalf("loop.New: %v", err)
	}
	return w
}

func (w *world) sink(e trace.Event) {
	w.mu.Lock()
	w.sunk = append(w.sunk, e)
	w.mu.Unlock()
}

func (w *world) sunkEvents() []trace.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sunk)
}

// run runs the whole loop and checks the invariants every run must satisfy.
func (w *world) run(t testing.TB, ctx context.Context, runID, goal string) loop.Result {
	t.Helper()
	res := w.ctrl.Run(ctx, runID, goal)
	checkRun(t, w, res, runID, 0)
	return res
}

// ---- invariants ----

// checkRun checks what must hold after any run: a known stop reason, every proposed call
// answered exactly once in call order, a well-formed trace identical to what the sink received,
// and executions that match the trace. startIter is the state's iteration when this Run began
// (non-zero for resumed runs).
func checkRun(t testing.TB, w *world, res loop.Result, runID string, startIter int) {
	t.Helper()
	if res.State == nil {
		t.Fatal("Result.State is nil")
	}
	if !slices.Contains(loop.StopReasons, res.StopReason) {
		t.Errorf("stop reason %q is not one of loop.StopReasons", res.StopReason)
	}
	if res.StopReason != res.State.StopReason || res.Detail != res.State.Detail || res.Answer != res.State.Answer {
		t.Errorf("Result (%s, %q, %q) disagrees with State (%s, %q, %q)", res.StopReason, res.Detail, res.Answer,
			res.State.StopReason, res.State.Detail, res.State.Answer)
	}
	if res.Detail == "" {
		t.Errorf("stop reason %s has no detail", res.StopReason)
	}
	if (res.StopReason == loop.Completed) != (res.Answer != "") {
		t.Errorf("stop reason %s with answer %q: only a completed run has an answer", res.StopReason, res.Answer)
	}
	checkAnswered(t, res.State, w.model.proposals())
	checkTrace(t, res, runID, startIter)
	if got := w.sunkEvents(); !reflect.DeepEqual(got, res.Trace) {
		t.Errorf("the sink received different events than Result.Trace:\n%s", diffEvents(got, res.Trace))
	}
	var calls int
	for _, e := range res.Trace {
		if e.Type == trace.ToolCall {
			calls++
		}
	}
	if n := len(w.log.all()); n != calls {
		t.Errorf("%d tool_call events, but the tools executed %d times", calls, n)
	}
}

// checkAnswered is the answered-once invariant: every call the model proposed (as recorded by the
// model wrapper, not by the loop) gets exactly one tool-role result message, matched by CallID,
// right after the turn that proposed it and in call order, whether it executed or not. A turn
// stopped for a pending approval has no results yet: its calls are in State.Pending/PendingTurn.
func checkAnswered(t testing.TB, st *loop.State, proposed []model.Proposal) {
	t.Helper()
	msgs := st.Messages
	if len(msgs) == 0 || msgs[0].Role != model.RoleUser || msgs[0].Content != st.Goal {
		t.Fatalf("the first message must be the goal as a user message, got %+v", msgs)
	}
	var turns []int
	for i, m := range msgs {
		if m.Role == model.RoleAssistant {
			turns = append(turns, i)
		}
	}
	if len(turns) != len(proposed) {
		t.Fatalf("the model returned %d proposals but the conversation has %d assistant turns", len(proposed), len(turns))
	}
	answered := map[string]int{}
	results := 0
	for k, i := range turns {
		p := proposed[k]
		var after []model.Message
		for j := i + 1; j < len(msgs) && msgs[j].Role == model.RoleTool; j++ {
			after = append(after, msgs[j])
		}
		results += len(after)
		if p.Kind != model.KindToolCalls {
			if len(after) != 0 {
				t.Errorf("turn %d (%s) is followed by %d tool result messages", k+1, p.Kind, len(after))
			}
			continue
		}
		if !reflect.DeepEqual(msgs[i].Calls, asRecorded(p.Calls)) {
			t.Errorf("turn %d: the assistant message carries calls %v, the model proposed %v", k+1, msgs[i].Calls, p.Calls)
		}
		if k == len(turns)-1 && st.PendingTurn != nil {
			if len(after) != 0 {
				t.Errorf("the turn pending approval already has %d results", len(after))
			}
			if want := asRecorded(p.Calls); !reflect.DeepEqual(st.PendingTurn.Calls, want) {
				t.Errorf("PendingTurn calls %v, want the last turn's calls as recorded %v", st.PendingTurn.Calls, want)
			}
			continue
		}
		if len(after) != len(p.Calls) {
			t.Errorf("turn %d proposed %d calls but got %d result messages: %+v", k+1, len(p.Calls), len(after), after)
			continue
		}
		for x, c := range p.Calls {
			answered[c.ID]++
			if after[x].CallID != c.ID || after[x].Name != c.Name {
				t.Errorf("turn %d result %d answers %s(%s), want %s(%s) (results must be in call order)",
					k+1, x, after[x].Name, after[x].CallID, c.Name, c.ID)
			}
		}
	}
	for id, n := range answered {
		if n != 1 {
			t.Errorf("call %s was answered %d times", id, n)
		}
	}
	total := 0
	for _, m := range msgs {
		if m.Role == model.RoleTool {
			total++
		}
	}
	if total != results {
		t.Errorf("%d tool messages in the conversation, only %d follow a turn of calls", total, results)
	}
	if (st.PendingTurn != nil) != (len(st.Pending) > 0) {
		t.Errorf("Pending (%d calls) and PendingTurn (%v) disagree", len(st.Pending), st.PendingTurn != nil)
	}
	if st.PendingTurn != nil && st.StopReason != loop.NeedsHuman {
		t.Errorf("a pending turn with stop reason %s", st.StopReason)
	}
}

// checkTrace checks the shape of a run's trace: exactly one stop event and it is last, carrying
// the stop reason; every event with the run id, a time, and the iteration it belongs to.
func checkTrace(t testing.TB, res loop.Result, runID string, startIter int) {
	t.Helper()
	ev := res.Trace
	if len(ev) == 0 {
		t.Fatal("empty trace")
	}
	stops := 0
	for _, e := range ev {
		if e.Type == trace.Stop {
			stops++
		}
	}
	if !res.State.Stopped() {
		// A Run that has not stopped yet (one Step of several) has no stop event.
		if stops != 0 {
			t.Errorf("%d stop events in a run that has not stopped", stops)
		}
	} else if stops != 1 {
		t.Errorf("%d stop events, want exactly 1", stops)
	}
	if last := ev[len(ev)-1]; res.State.Stopped() {
		if last.Type != trace.Stop {
			t.Errorf("the last event is %s, want stop; trace:\n%s", last.Type, formatEvents(ev))
		} else if last.StopReason != string(res.StopReason) {
			t.Errorf("the stop event says %q, the result %q", last.StopReason, res.StopReason)
		}
	}
	iter := startIter
	for i, e := range ev {
		if e.Type == trace.IterationStart {
			iter++
		}
		if e.RunID != runID {
			t.Errorf("event %d (%s) has run id %q, want %q", i, e.Type, e.RunID, runID)
		}
		if e.Time.IsZero() {
			t.Errorf("event %d (%s) has no time", i, e.Type)
		}
		if e.Iteration != iter {
			t.Errorf("event %d (%s) has iteration %d, want %d; trace:\n%s", i, e.Type, e.Iteration, iter, formatEvents(ev))
		}
	}
}

func formatEvents(ev []trace.Event) string {
	var b strings.Builder
	for i, e := range ev {
		fmt.Fprintf(&b, "  %2d %-15s it=%d tool=%s call=%s dec=%s stop=%s exec=%v err=%q retry=%v dur=%s\n",
			i, e.Type, e.Iteration, e.Tool, e.CallID, e.Decision, e.StopReason, e.Executed, e.Error, e.Retryable, e.Duration)
	}
	return b.String()
}

func diffEvents(got, want []trace.Event) string {
	var b strings.Builder
	for i := 0; i < max(len(got), len(want)); i++ {
		switch {
		case i >= len(got):
			fmt.Fprintf(&b, "  %d: missing at the sink: %+v\n", i, want[i])
		case i >= len(want):
			fmt.Fprintf(&b, "  %d: extra at the sink: %+v\n", i, got[i])
		case !reflect.DeepEqual(got[i], want[i]):
			fmt.Fprintf(&b, "  %d: sink %+v\n     trace %+v\n", i, got[i], want[i])
		}
	}
	return b.String()
}

// ---- lookups ----

// resultOf returns the one tool-role message answering callID.
func resultOf(t testing.TB, st *loop.State, callID string) model.Message {
	t.Helper()
	var found []model.Message
	for _, m := range st.Messages {
		if m.Role == model.RoleTool && m.CallID == callID {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("call %s has %d result messages, want 1", callID, len(found))
	}
	return found[0]
}

func eventsOf(ev []trace.Event, typ trace.Type) []trace.Event {
	var out []trace.Event
	for _, e := range ev {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// callID is the id the scripted model gives call j of turn i (0-based).
func callID(turn, j int) string { return fmt.Sprintf("call_%d_%d", turn, j) }

// ============================================================================================
// 1. One row per stop reason.
// ============================================================================================

type scenario struct {
	name string
	setup
	// ctx builds the caller's context; nil means context.Background(). It may keep the cancel
	// function for tools to call through setup.onCall (see cancelled/mid_run).
	ctx   func(t *testing.T) context.Context
	want  loop.StopReason
	check func(t *testing.T, w *world, res loop.Result)
}

func TestStopReasons(t *testing.T) {
	var cancelMidRun context.CancelFunc // set by the ctx of the cancelled/mid_run row
	refundTools := []toolDef{
		mockTool("read_order", orderSchema, output(`{"status":"delivered"}`)),
		mockTool("issue_refund", orderSchema, output(`{"refunded":true}`)),
	}
	tests := []scenario{
		{
			name: "completed",
			setup: setup{
				tools: refundTools[:1],
				turns: []model.Turn{callsTurn(tc("read_order", `{"order_id":"O-1"}`)), answerTurn("The order was delivered.")},
			},
			want: loop.Completed,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.Answer != "The order was delivered." {
					t.Errorf("answer %q", res.Answer)
				}
				if st := res.State; st.Iteration != 2 || st.ToolCalls != 1 || w.log.count("read_order") != 1 {
					t.Errorf("iterations %d, tool calls %d, executions %d; want 2, 1, 1", st.Iteration, st.ToolCalls, w.log.count("read_order"))
				}
				if got := resultOf(t, res.State, callID(0, 0)); got.Content != `{"status":"delivered"}` || got.IsError {
					t.Errorf("result message %+v", got)
				}
			},
		},
		{
			name:  "refused/model_refuses",
			setup: setup{tools: refundTools, turns: []model.Turn{refuseTurn("I will not do that")}},
			want:  loop.Refused,
			check: func(t *testing.T, w *world, res loop.Result) {
				if !strings.Contains(res.Detail, "I will not do that") {
					t.Errorf("detail %q does not carry the refusal", res.Detail)
				}
				if n := len(w.log.all()); n != 0 {
					t.Errorf("%d executions", n)
				}
			},
		},
		{
			name: "refused/forbidden_tool",
			setup: setup{
				tools:  refundTools,
				policy: loop.Policy{Forbid: []string{"issue_refund"}},
				turns: []model.Turn{
					callsTurn(tc("read_order", `{"order_id":"O-1"}`)),
					// The forbidden call sits between two valid calls: none of the three may run.
					callsTurn(tc("read_order", `{"order_id":"O-2"}`), tc("issue_refund", `{"order_id":"O-1"}`), tc("read_order", `{"order_id":"O-3"}`)),
					answerTurn("never reached"),
				},
			},
			want: loop.Refused,
			check: func(t *testing.T, w *world, res loop.Result) {
				if n := w.log.count("issue_refund"); n != 0 {
					t.Errorf("the forbidden tool executed %d times", n)
				}
				if got := w.log.inIteration(2); len(got) != 0 {
					t.Errorf("calls of the forbidden turn executed: %+v", got)
				}
				if n := w.log.count("read_order"); n != 1 {
					t.Errorf("read_order executed %d times, want 1 (iteration 1 only)", n)
				}
				for j := range 3 {
					if m := resultOf(t, res.State, callID(1, j)); !m.IsError || !strings.Contains(m.Content, "not executed") {
						t.Errorf("result of call %d of the forbidden turn: %+v", j, m)
					}
				}
				var forbid int
				for _, e := range eventsOf(res.Trace, trace.Validation) {
					if e.Decision == trace.DecisionForbid {
						forbid++
						if e.Tool != "issue_refund" || e.CallID != callID(1, 1) {
							t.Errorf("forbid decision on %s/%s", e.Tool, e.CallID)
						}
					}
				}
				if forbid != 1 {
					t.Errorf("%d forbid decisions, want 1", forbid)
				}
				if res.State.Iteration != 2 {
					t.Errorf("iteration %d, want 2", res.State.Iteration)
				}
			},
		},
		{
			name: "refused/forbidden_undeclared_tool",
			setup: setup{
				tools:  refundTools[:1],
				policy: loop.Policy{Forbid: []string{"drop_database"}},
				turns:  []model.Turn{callsTurn(tc("drop_database", `{}`))},
			},
			want: loop.Refused,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.State.InvalidActions != 0 {
					t.Errorf("a forbidden proposal counted as %d invalid actions", res.State.InvalidActions)
				}
			},
		},
		{
			name: "refused/invalid_streak",
			setup: setup{
				tools: refundTools[:1],
				turns: []model.Turn{
					callsTurn(tc("no_such_tool", `{}`)),
					callsTurn(tc("read_order", `{"order_id":""}`)),
					answerTurn(""),
					answerTurn("never reached"),
				},
			},
			want: loop.Refused,
			check: func(t *testing.T, w *world, res loop.Result) {
				st := res.State
				if st.InvalidActions != 3 || st.InvalidStreak != 3 || st.Iteration != 3 {
					t.Errorf("invalid actions %d, streak %d, iterations %d; want 3, 3, 3", st.InvalidActions, st.InvalidStreak, st.Iteration)
				}
				if n := len(w.log.all()); n != 0 {
					t.Errorf("%d executions of invalid calls", n)
				}
			},
		},
		{
			name: "completed/valid_calls_reset_the_invalid_streak",
			setup: setup{
				tools:  refundTools[:1],
				budget: loop.Budget{MaxInvalidActions: 2},
				turns: []model.Turn{
					callsTurn(tc("read_order", `{}`)), callsTurn(tc("read_order", `{"order_id":"O-1"}`)),
					callsTurn(tc("read_order", `[]`)), callsTurn(tc("read_order", `{"order_id":"O-2"}`)),
					answerTurn(""), answerTurn("done"),
				},
			},
			want: loop.Completed,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.State.InvalidActions != 3 {
					t.Errorf("invalid actions %d, want 3", res.State.InvalidActions)
				}
			},
		},
		{
			name: "refused/invalid_streak_budget_2",
			setup: setup{
				tools:  refundTools[:1],
				budget: loop.Budget{MaxInvalidActions: 2},
				turns:  []model.Turn{callsTurn(tc("read_order", `{}`)), callsTurn(tc("read_order", `[]`)), answerTurn("x")},
			},
			want: loop.Refused,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.State.InvalidActions != 2 || res.State.Iteration != 2 {
					t.Errorf("invalid actions %d, iterations %d; want 2, 2", res.State.InvalidActions, res.State.Iteration)
				}
			},
		},
		{
			name:  "needs_human/escalate",
			setup: setup{tools: refundTools, turns: []model.Turn{escalateTurn("the customer is angry")}},
			want:  loop.NeedsHuman,
			check: func(t *testing.T, w *world, res loop.Result) {
				if !strings.Contains(res.Detail, "the customer is angry") {
					t.Errorf("detail %q", res.Detail)
				}
				if res.State.Pending != nil || res.State.PendingTurn != nil {
					t.Errorf("an escalation left pending calls")
				}
			},
		},
		{
			name:  "needs_human/script_exhausted",
			setup: setup{tools: refundTools, turns: nil},
			want:  loop.NeedsHuman,
			check: func(t *testing.T, w *world, res loop.Result) {
				if !strings.Contains(res.Detail, "script_exhausted") {
					t.Errorf("detail %q", res.Detail)
				}
			},
		},
		{
			name: "needs_human/approval_without_approver",
			setup: setup{
				tools:  refundTools,
				policy: loop.Policy{RequireApproval: []string{"issue_refund"}},
				turns: []model.Turn{
					callsTurn(tc("read_order", `{"order_id":"O-1"}`)),
					callsTurn(tc("read_order", `{"order_id":"O-2"}`), tc("issue_refund", `{"order_id":"O-1"}`)),
					answerTurn("never reached"),
				},
			},
			want: loop.NeedsHuman,
			check: func(t *testing.T, w *world, res loop.Result) {
				st := res.State
				want := []loop.PendingCall{{Iteration: 2, Index: 1, Call: model.ToolCall{ID: callID(1, 1), Name: "issue_refund", Arguments: json.RawMessage(`{"order_id":"O-1"}`)}}}
				if !reflect.DeepEqual(st.Pending, want) {
					t.Errorf("Pending = %+v, want %+v", st.Pending, want)
				}
				if st.PendingTurn == nil || len(st.PendingTurn.Calls) != 2 || st.PendingTurn.Kind != model.KindToolCalls {
					t.Fatalf("PendingTurn = %+v, want the whole 2-call turn", st.PendingTurn)
				}
				if got := w.log.inIteration(2); len(got) != 0 {
					t.Errorf("calls of the pending turn executed: %+v", got)
				}
				if n := w.log.count("issue_refund"); n != 0 {
					t.Errorf("issue_refund executed %d times without approval", n)
				}
				ap := eventsOf(res.Trace, trace.Approval)
				if len(ap) != 1 || ap[0].Decision != "pending" || ap[0].CallID != callID(1, 1) {
					t.Errorf("approval events %+v, want one pending for %s", ap, callID(1, 1))
				}
			},
		},
		{
			name: "needs_human/retryable_tool_failures",
			setup: setup{
				tools:  []toolDef{mockTool("flaky", "", failure("503 upstream", true))},
				budget: loop.Budget{MaxToolFailures: 2},
				turns: []model.Turn{
					callsTurn(tc("flaky", `{"n":1}`)),
					callsTurn(tc("flaky", `{"n":2}`)),
					answerTurn("never reached"),
				},
			},
			want: loop.NeedsHuman,
			check: func(t *testing.T, w *world, res loop.Result) {
				if n := w.log.count("flaky"); n != 2 || res.State.ToolCalls != 2 {
					t.Errorf("flaky executed %d times, %d tool calls; want 2, 2", n, res.State.ToolCalls)
				}
				m := resultOf(t, res.State, callID(0, 0))
				if !m.IsError || !strings.Contains(m.Content, "503 upstream") {
					t.Errorf("a retryable failure must be shown to the model: %+v", m)
				}
			},
		},
		{
			// A tool's own timeout (its error wraps context.DeadlineExceeded while the run's
			// context is fine) is a retryable failure like any other, counted in the streak.
			name: "needs_human/tool_returns_its_own_context_error",
			setup: setup{
				tools: []toolDef{funcTool("fetch", func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
					return nil, fmt.Errorf("GET /orders: %w", context.DeadlineExceeded)
				})},
				budget: loop.Budget{MaxToolFailures: 2},
				turns: []model.Turn{
					callsTurn(tc("fetch", `{"n":1}`)), callsTurn(tc("fetch", `{"n":2}`)),
					callsTurn(tc("fetch", `{"n":3}`)), answerTurn("never reached"),
				},
			},
			want: loop.NeedsHuman,
			check: func(t *testing.T, w *world, res loop.Result) {
				if n := w.log.count("fetch"); n != 2 {
					t.Errorf("fetch executed %d times, want 2", n)
				}
			},
		},
		{
			name: "completed/tool_failure_streak_reset_by_success",
			setup: setup{
				tools:  []toolDef{mockTool("flaky", "", failure("503", true), output(`"ok"`), failure("503", true), output(`"ok"`))},
				budget: loop.Budget{MaxToolFailures: 2},
				turns: []model.Turn{
					callsTurn(tc("flaky", `{"n":1}`)), callsTurn(tc("flaky", `{"n":2}`)),
					callsTurn(tc("flaky", `{"n":3}`)), callsTurn(tc("flaky", `{"n":4}`)),
					answerTurn("done"),
				},
			},
			want: loop.Completed,
		},
		{
			name: "tool_failure",
			setup: setup{
				tools: []toolDef{mockTool("charge", "", failure("card declined", false))},
				turns: []model.Turn{callsTurn(tc("charge", `{}`)), answerTurn("never reached")},
			},
			want: loop.ToolFailure,
			check: func(t *testing.T, w *world, res loop.Result) {
				if w.log.count("charge") != 1 || res.State.ToolCalls != 1 {
					t.Errorf("charge executed %d times", w.log.count("charge"))
				}
				if m := resultOf(t, res.State, callID(0, 0)); !m.IsError || !strings.Contains(m.Content, "card declined") {
					t.Errorf("result %+v", m)
				}
			},
		},
		{
			name:  "failed/non_retryable_model_error",
			setup: setup{turns: []model.Turn{modelErrTurn("invalid api key", false), answerTurn("never reached")}},
			want:  loop.Failed,
			check: func(t *testing.T, w *world, res loop.Result) {
				if st := res.State; st.ModelCalls != 1 || st.Iteration != 0 {
					t.Errorf("model calls %d, iterations %d; want 1, 0", st.ModelCalls, st.Iteration)
				}
				if !strings.Contains(res.Detail, "invalid api key") {
					t.Errorf("detail %q", res.Detail)
				}
			},
		},
		{
			name: "failed/retryable_model_error_3_times",
			setup: setup{turns: []model.Turn{
				modelErrTurn("overloaded", true), modelErrTurn("overloaded", true), modelErrTurn("overloaded", true),
				answerTurn("never reached"),
			}},
			want: loop.Failed,
			check: func(t *testing.T, w *world, res loop.Result) {
				if st := res.State; st.ModelCalls != 3 || st.Iteration != 0 || st.ModelErrorStreak != 3 {
					t.Errorf("model calls %d, iterations %d, streak %d; want 3, 0, 3", st.ModelCalls, st.Iteration, st.ModelErrorStreak)
				}
				// Backoff on the loop's clock: 200ms then 400ms, no backoff after the last failure.
				if got := w.clk.Now().Sub(t0); got != 600*time.Millisecond {
					t.Errorf("the retries took %s on the virtual clock, want 600ms", got)
				}
			},
		},
		{
			name: "completed/retryable_model_error_2_times_then_success",
			setup: setup{turns: []model.Turn{
				modelErrTurn("overloaded", true), modelErrTurn("rate limited", true), answerTurn("done"),
			}},
			want: loop.Completed,
			check: func(t *testing.T, w *world, res loop.Result) {
				if st := res.State; st.ModelCalls != 3 || st.Iteration != 1 || st.ModelErrorStreak != 0 {
					t.Errorf("model calls %d, iterations %d, streak %d; want 3, 1, 0", st.ModelCalls, st.Iteration, st.ModelErrorStreak)
				}
				if n := len(eventsOf(res.Trace, trace.ModelCall)); n != 3 {
					t.Errorf("%d model_call events, want 3", n)
				}
			},
		},
		{
			name: "no_progress/same_call_default_budget",
			setup: setup{
				tools: []toolDef{mockTool("search", "", output(`[]`))},
				turns: []model.Turn{
					callsTurn(tc("search", `{"q":"refund"}`)), callsTurn(tc("search", `{"q":"refund"}`)),
					callsTurn(tc("search", `{"q":"refund"}`)), answerTurn("never reached"),
				},
			},
			want: loop.NoProgress,
			check: func(t *testing.T, w *world, res loop.Result) {
				if n := w.log.count("search"); n != 2 {
					t.Errorf("search executed %d times, want 2 (the third proposal stops the loop)", n)
				}
				if res.State.RepeatedProposals != 2 {
					t.Errorf("repeated proposals %d, want 2", res.State.RepeatedProposals)
				}
				if m := resultOf(t, res.State, callID(2, 0)); !strings.Contains(m.Content, "not executed") {
					t.Errorf("result of the repeated call: %+v", m)
				}
			},
		},
		{
			name: "no_progress/key_order_and_whitespace_do_not_matter",
			setup: setup{
				tools:  []toolDef{mockTool("search", "", output(`[]`))},
				budget: loop.Budget{MaxRepeatedCalls: 2},
				turns: []model.Turn{
					callsTurn(tc("search", `{"a":1,"b":2}`)),
					callsTurn(tc("search", "{ \"b\":2,\n \"a\":1 }")),
					answerTurn("never reached"),
				},
			},
			want: loop.NoProgress,
			check: func(t *testing.T, w *world, res loop.Result) {
				if n := w.log.count("search"); n != 1 {
					t.Errorf("search executed %d times, want 1", n)
				}
			},
		},
		{
			// The control of the row above: different values, or another tool, make another call.
			name: "completed/different_arguments_are_different_calls",
			setup: setup{
				tools:  []toolDef{mockTool("search", "", output(`[]`)), mockTool("lookup", "", output(`[]`))},
				budget: loop.Budget{MaxRepeatedCalls: 2},
				turns: []model.Turn{
					callsTurn(tc("search", `{"a":1,"b":2}`)), callsTurn(tc("search", `{"a":1,"b":3}`)),
					callsTurn(tc("search", `{"a":"1","b":2}`)), callsTurn(tc("search", `{"a":1,"b":2,"c":null}`)),
					callsTurn(tc("lookup", `{"a":1,"b":2}`)), answerTurn("done"),
				},
			},
			want: loop.Completed,
		},
		{
			name: "max_iterations",
			setup: setup{
				tools:  []toolDef{mockTool("search", "", output(`[]`))},
				budget: loop.Budget{MaxIterations: 2},
				turns: []model.Turn{
					callsTurn(tc("search", `{"q":1}`)), callsTurn(tc("search", `{"q":2}`)),
					callsTurn(tc("search", `{"q":3}`)), answerTurn("never reached"),
				},
			},
			want: loop.MaxIterations,
			check: func(t *testing.T, w *world, res loop.Result) {
				if st := res.State; st.Iteration != 2 || st.ModelCalls != 2 || w.log.count("search") != 2 {
					t.Errorf("iterations %d, model calls %d, executions %d; want 2, 2, 2", st.Iteration, st.ModelCalls, w.log.count("search"))
				}
			},
		},
		{
			name: "max_tool_calls/turn_over_budget",
			setup: setup{
				tools:  []toolDef{mockTool("search", "", output(`[]`))},
				budget: loop.Budget{MaxToolCalls: 3},
				turns: []model.Turn{
					callsTurn(tc("search", `{"q":0}`)),
					callsTurn(tc("search", `{"q":1}`), tc("search", `{"q":2}`), tc("search", `{"q":3}`)),
					answerTurn("never reached"),
				},
			},
			want: loop.MaxToolCalls,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.State.ToolCalls != 3 {
					t.Errorf("tool calls %d, want 3", res.State.ToolCalls)
				}
				var args []string
				for _, e := range w.log.inIteration(2) {
					args = append(args, e.Args)
				}
				slices.Sort(args)
				if want := []string{`{"q":1}`, `{"q":2}`}; !slices.Equal(args, want) {
					t.Errorf("iteration 2 executed %v, want the first two calls %v", args, want)
				}
				if m := resultOf(t, res.State, callID(1, 2)); !m.IsError || !strings.Contains(m.Content, "not executed") {
					t.Errorf("the call over the budget got %+v", m)
				}
				for j := range 2 {
					if m := resultOf(t, res.State, callID(1, j)); m.IsError {
						t.Errorf("call %d within the budget got an error: %+v", j, m)
					}
				}
			},
		},
		{
			name: "max_tokens/proposal_not_acted_on",
			setup: setup{
				tools:  []toolDef{mockTool("search", "", output(`[]`))},
				budget: loop.Budget{MaxTokens: 100},
				turns: []model.Turn{
					withUsage(callsTurn(tc("search", `{"q":1}`)), 30, 10),
					withUsage(callsTurn(tc("search", `{"q":2}`), tc("search", `{"q":3}`)), 50, 20),
					answerTurn("never reached"),
				},
			},
			want: loop.MaxTokens,
			check: func(t *testing.T, w *world, res loop.Result) {
				// The second reply was capped at what the budget left after its estimated input,
				// and its scripted input (50) is more than the estimate: the budget is passed by
				// no more than that error, here not at all.
				if got := res.State.Usage.Total(); got > 100 || res.State.Usage.OutputTokens >= 30 {
					t.Errorf("usage %+v (total %d), want the second reply capped and at most 100 in all", res.State.Usage, got)
				}
				if got := w.log.inIteration(2); len(got) != 0 {
					t.Errorf("the proposal that spent the budget was acted on: %+v", got)
				}
				for j := range 2 {
					if m := resultOf(t, res.State, callID(1, j)); !m.IsError || !strings.Contains(m.Content, "not executed") {
						t.Errorf("call %d: %+v", j, m)
					}
				}
			},
		},
		{
			name: "max_tokens/answer_not_accepted",
			setup: setup{
				budget: loop.Budget{MaxTokens: 100},
				turns:  []model.Turn{withUsage(answerTurn("expensive answer"), 90, 10)},
			},
			want: loop.MaxTokens,
		},
		{
			name: "max_cost/answer_not_accepted",
			setup: setup{
				tools:  []toolDef{mockTool("search", "", output(`[]`))},
				budget: loop.Budget{MaxCostUSD: 0.5},
				turns: []model.Turn{
					withCost(callsTurn(tc("search", `{"q":1}`)), 0.3),
					withCost(answerTurn("an answer that costs too much"), 0.3),
				},
			},
			want: loop.MaxCost,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.Answer != "" {
					t.Errorf("the answer of the call that spent the budget was accepted: %q", res.Answer)
				}
			},
		},
		{
			name: "max_cost/calls_not_acted_on",
			setup: setup{
				tools:  []toolDef{mockTool("search", "", output(`[]`))},
				budget: loop.Budget{MaxCostUSD: 0.5},
				turns:  []model.Turn{withCost(callsTurn(tc("search", `{"q":1}`), tc("search", `{"q":2}`)), 0.5)},
			},
			want: loop.MaxCost,
			check: func(t *testing.T, w *world, res loop.Result) {
				if n := len(w.log.all()); n != 0 {
					t.Errorf("%d executions", n)
				}
			},
		},
		{
			name: "timeout/model_latency",
			setup: setup{
				tools:  []toolDef{mockTool("search", "", output(`[]`))},
				budget: loop.Budget{MaxDuration: 10 * time.Second},
				turns: []model.Turn{
					withLatency(callsTurn(tc("search", `{"q":1}`)), 4*time.Second),
					withLatency(callsTurn(tc("search", `{"q":2}`)), 7*time.Second),
					answerTurn("never reached"),
				},
			},
			want: loop.Timeout,
			check: func(t *testing.T, w *world, res loop.Result) {
				if got := w.clk.Now().Sub(t0); got != 11*time.Second {
					t.Errorf("virtual clock at +%s, want +11s", got)
				}
				if w.log.count("search") != 1 || len(w.log.inIteration(2)) != 0 {
					t.Errorf("executions %+v, want only iteration 1", w.log.all())
				}
			},
		},
		{
			name: "timeout/tool_latency",
			setup: setup{
				tools:  []toolDef{mockTool("search", "", slow(output(`[]`), 20*time.Second))},
				budget: loop.Budget{MaxDuration: 10 * time.Second},
				turns:  []model.Turn{callsTurn(tc("search", `{"q":1}`)), answerTurn("never reached")},
			},
			want: loop.Timeout,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.State.ModelCalls != 1 {
					t.Errorf("model calls %d, want 1", res.State.ModelCalls)
				}
				if tr := eventsOf(res.Trace, trace.ToolResult); len(tr) != 1 || tr[0].Duration != 20*time.Second {
					t.Errorf("tool_result events %+v, want one lasting 20s", tr)
				}
			},
		},
		{
			name:  "timeout/caller_deadline_already_passed",
			setup: setup{turns: []model.Turn{answerTurn("never reached")}},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Hour))
				t.Cleanup(cancel)
				return ctx
			},
			want: loop.Timeout,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.State.ModelCalls != 0 {
					t.Errorf("the model was called %d times after the deadline", res.State.ModelCalls)
				}
			},
		},
		{
			name:  "cancelled/before_start",
			setup: setup{turns: []model.Turn{answerTurn("never reached")}},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			want: loop.Cancelled,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.State.ModelCalls != 0 {
					t.Errorf("the model was called %d times after cancellation", res.State.ModelCalls)
				}
			},
		},
		{
			name: "cancelled/mid_run",
			setup: setup{
				tools: []toolDef{mockTool("search", "", output(`[]`))},
				turns: []model.Turn{callsTurn(tc("search", `{"q":1}`)), answerTurn("never reached")},
				onCall: map[string]func(context.Context, json.RawMessage){
					"search": func(context.Context, json.RawMessage) { cancelMidRun() },
				},
			},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancelMidRun = cancel
				t.Cleanup(cancel)
				return ctx
			},
			want: loop.Cancelled,
			check: func(t *testing.T, w *world, res loop.Result) {
				if res.State.ModelCalls != 1 || res.Answer != "" {
					t.Errorf("model calls %d, answer %q: the run went on after the cancellation", res.State.ModelCalls, res.Answer)
				}
			},
		},
	}

	tests = append(tests, scenario{
		// The tool's result alone is more than the context policy allows, and the last
		// keep_last messages may not be left out: the loop stops before the second call.
		name: "context_exhausted",
		setup: setup{
			tools:   []toolDef{mockTool("read", "", output(bigResult(2000)))},
			turns:   []model.Turn{callsTurn(tc("read", `{}`)), answerTurn("never reached")},
			context: loop.ContextPolicy{MaxTokens: 300},
		},
		want: loop.ContextExhausted,
		check: func(t *testing.T, w *world, res loop.Result) {
			if res.State.ModelCalls != 1 || !strings.Contains(res.Detail, "over the context policy's max_tokens 300") {
				t.Errorf("model calls %d, detail %q; want 1 and the limit named", res.State.ModelCalls, res.Detail)
			}
		},
	})

	tests = append(tests, scenario{
		// The reply is cut off at its output limit, and what the token budget leaves for the
		// next reply is less than the cut one had (loop/truncated_test.go has the rest).
		name: "output_truncated",
		setup: setup{
			budget: loop.Budget{MaxTokens: 800},
			turns:  []model.Turn{{Text: sp("The refund is"), Truncated: true, Usage: &model.Usage{InputTokens: 100, OutputTokens: 400}}, answerTurn("never reached")},
		},
		want: loop.OutputTruncated,
		check: func(t *testing.T, w *world, res loop.Result) {
			if res.State.ModelCalls != 1 || res.Answer != "" {
				t.Errorf("model calls %d, answer %q; want 1 and none", res.State.ModelCalls, res.Answer)
			}
		},
	})

	tests = append(tests, scenario{
		// The tool sees the caller's cancellation and returns ctx.Err(): that is the run
		// being cancelled, not a tool failure.
		name: "cancelled/tool_returns_the_cancellation",
		setup: setup{
			tools: []toolDef{funcTool("wait", func(ctx context.Context, _ json.RawMessage, _ string) (json.RawMessage, error) {
				cancelMidRun()
				<-ctx.Done()
				return nil, ctx.Err()
			})},
			budget: loop.Budget{MaxToolFailures: 1},
			turns:  []model.Turn{callsTurn(tc("wait", `{}`)), answerTurn("never reached")},
		},
		ctx: func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancelMidRun = cancel
			t.Cleanup(cancel)
			return ctx
		},
		want: loop.Cancelled,
		check: func(t *testing.T, w *world, res loop.Result) {
			if n := res.State.FailureRun["wait"]; n != 0 {
				t.Errorf("the cancellation counted as %d tool failure(s)", n)
			}
		},
	})

	covered := map[loop.StopReason]bool{}
	for _, tt := range tests {
		covered[tt.want] = true
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx(t)
			}
			w := newWorld(t, tt.setup, t0)
			res := w.run(t, ctx, "run-"+tt.name, "goal of "+tt.name)
			if res.StopReason != tt.want {
				t.Fatalf("stop reason %s (%s), want %s\ntrace:\n%s", res.StopReason, res.Detail, tt.want, formatEvents(res.Trace))
			}
			if tt.check != nil {
				tt.check(t, w, res)
			}
		})
	}
	for _, r := range loop.StopReasons {
		if !covered[r] {
			t.Errorf("no row for stop reason %s", r)
		}
	}
}

// TestRealClockDeadlineInterruptsATool: with the real clock, the wall-clock budget is a context
// deadline that interrupts a tool still running; the run stops with timeout and the interrupted
// call is not counted as a tool failure. (No sleeping: the tool waits on its context.)
func TestRealClockDeadlineInterruptsATool(t *testing.T) {
	guard, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := model.NewScripted([]model.Turn{callsTurn(tc("wait", `{}`)), answerTurn("never reached")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := tool.New(tool.Spec{Name: "wait"}, func(ctx context.Context, _ json.RawMessage, _ string) (json.RawMessage, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-guard.Done():
			return nil, errors.New("the loop's deadline never reached the tool")
		}
	})
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{wait}, Budget: loop.Budget{MaxDuration: 50 * time.Millisecond, MaxToolFailures: 1}})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "run-1", "goal")
	if guard.Err() != nil {
		t.Fatal("the wall-clock budget did not interrupt the tool within 10s")
	}
	if res.StopReason != loop.Timeout {
		t.Fatalf("stop reason %s (%s), want timeout", res.StopReason, res.Detail)
	}
	if res.State.FailureRun["wait"] != 0 || res.State.ToolCalls != 1 {
		t.Errorf("failure run %v, tool calls %d", res.State.FailureRun, res.State.ToolCalls)
	}
	checkTrace(t, res, "run-1", 0)
}

// ============================================================================================
// 2. Validation: invalid proposals are not executed, fed back, counted, and the loop goes on.
// ============================================================================================

func TestInvalidProposals(t *testing.T) {
	tools := []toolDef{
		mockTool("read_order", orderSchema, output(`{"status":"delivered"}`)),
		mockTool("issue_refund", "", output(`{"refunded":true}`)),
	}
	tests := []struct {
		name   string
		policy loop.Policy
		turns  []model.Turn // the invalid proposal comes first
		// callID is the id of the invalid call; empty for an invalid answer (fed back as a user
		// message instead of a tool result).
		callID   string
		feedback string // substring of the feedback the model gets
	}{
		{name: "unknown_tool", turns: []model.Turn{callsTurn(tc("read_ordr", `{"order_id":"O-1"}`))},
			callID: callID(0, 0), feedback: `unknown tool "read_ordr" (declared tools: issue_refund, read_order)`},
		{name: "tool_outside_allow", policy: loop.Policy{Allow: []string{"read_order"}},
			turns:  []model.Turn{callsTurn(tc("issue_refund", `{}`))},
			callID: callID(0, 0), feedback: "tool issue_refund is not allowed by policy (allowed: read_order)"},
		{name: "schema_required", turns: []model.Turn{callsTurn(tc("read_order", `{}`))},
			callID: callID(0, 0), feedback: "arguments of read_order rejected: invalid arguments: at /: missing property 'order_id'"},
		{name: "schema_min_length", turns: []model.Turn{callsTurn(tc("read_order", `{"order_id":""}`))},
			callID: callID(0, 0), feedback: "at /order_id: minLength"},
		{name: "schema_additional_properties", turns: []model.Turn{callsTurn(tc("read_order", `{"order_id":"O-1","amount":10}`))},
			callID: callID(0, 0), feedback: "additional properties 'amount' not allowed"},
		{name: "schema_wrong_type", turns: []model.Turn{callsTurn(tc("read_order", `{"order_id":104}`))},
			callID: callID(0, 0), feedback: "at /order_id: got number, want string"},
		{name: "args_array", turns: []model.Turn{callsTurn(tc("issue_refund", `[1,2]`))},
			callID: callID(0, 0), feedback: "arguments must be a JSON object, got an array"},
		{name: "args_string", turns: []model.Turn{callsTurn(tc("issue_refund", `"O-1"`))},
			callID: callID(0, 0), feedback: "arguments must be a JSON object, got a string"},
		{name: "args_number", turns: []model.Turn{callsTurn(tc("read_order", `42`))},
			callID: callID(0, 0), feedback: "arguments must be a JSON object, got a number"},
		{name: "args_malformed_json", turns: []model.Turn{callsTurn(tc("issue_refund", `{"order_id":`))},
			callID: callID(0, 0), feedback: "not valid JSON"},
		{name: "empty_answer", turns: []model.Turn{answerTurn("")}, feedback: "the answer is empty"},
		{name: "blank_answer", turns: []model.Turn{answerTurn(" \n\t ")}, feedback: "the answer is empty"},
		{name: "answer_before_required_evidence", policy: loop.Policy{RequiredEvidence: []string{"read_order"}},
			turns:    []model.Turn{answerTurn("Refund it."), callsTurn(tc("read_order", `{"order_id":"O-1"}`))},
			feedback: "the answer came before the required evidence: call read_order first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turns := append(slices.Clone(tt.turns), answerTurn("final answer"))
			w := newWorld(t, setup{tools: tools, policy: tt.policy, turns: turns}, t0)
			res := w.run(t, context.Background(), "run-1", "goal")
			if res.StopReason != loop.Completed || res.Answer != "final answer" {
				t.Fatalf("stop reason %s (%s), answer %q: the loop must go on after one invalid proposal", res.StopReason, res.Detail, res.Answer)
			}
			st := res.State
			if st.InvalidActions != 1 {
				t.Errorf("invalid actions %d, want 1", st.InvalidActions)
			}
			if st.InvalidStreak != 0 {
				t.Errorf("invalid streak %d after a valid answer, want 0", st.InvalidStreak)
			}
			for _, e := range w.log.inIteration(1) {
				t.Errorf("the invalid proposal executed: %+v", e)
			}
			// The feedback: the result message of the call, or a user message after the answer.
			var fb model.Message
			if tt.callID != "" {
				fb = resultOf(t, st, tt.callID)
				if !fb.IsError {
					t.Errorf("the result of an invalid call is not marked as an error: %+v", fb)
				}
			} else {
				if st.Messages[1].Role != model.RoleAssistant || st.Messages[2].Role != model.RoleUser {
					t.Fatalf("messages %+v: want the answer followed by user feedback", st.Messages[:3])
				}
				fb = st.Messages[2]
			}
			if !strings.Contains(fb.Content, tt.feedback) {
				t.Errorf("feedback %q does not contain %q", fb.Content, tt.feedback)
			}
			// The trace: a validation event with decision invalid, on the right call.
			var invalid []trace.Event
			for _, e := range eventsOf(res.Trace, trace.Validation) {
				if e.Decision == trace.DecisionInvalid {
					invalid = append(invalid, e)
				}
			}
			if len(invalid) != 1 || invalid[0].CallID != tt.callID || invalid[0].Iteration != 1 || !strings.Contains(invalid[0].Reason, tt.feedback) {
				t.Errorf("invalid validation events %+v, want one for call %q in iteration 1", invalid, tt.callID)
			}
		})
	}
}

// TestRequiredEvidenceNeedsASuccess: a failed execution of an evidence tool is not evidence.
func TestRequiredEvidenceNeedsASuccess(t *testing.T) {
	w := newWorld(t, setup{
		tools:  []toolDef{mockTool("read_order", orderSchema, failure("503", true), output(`{"status":"delivered"}`))},
		policy: loop.Policy{RequiredEvidence: []string{"read_order"}},
		turns: []model.Turn{
			callsTurn(tc("read_order", `{"order_id":"O-1"}`)),
			answerTurn("Refund it."),
			callsTurn(tc("read_order", `{"order_id":"O-1"}`)),
			answerTurn("Refund it, it was delivered."),
		},
	}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	if res.StopReason != loop.Completed || res.Answer != "Refund it, it was delivered." {
		t.Fatalf("stop reason %s (%s), answer %q", res.StopReason, res.Detail, res.Answer)
	}
	if st := res.State; st.InvalidActions != 1 || st.Executed["read_order"] != 2 || st.Succeeded["read_order"] != 1 {
		t.Errorf("invalid actions %d, executed %d, succeeded %d; want 1, 2, 1", st.InvalidActions, st.Executed["read_order"], st.Succeeded["read_order"])
	}
	var feedback []string
	for _, m := range res.State.Messages {
		if m.Role == model.RoleUser && m.Content != res.State.Goal {
			feedback = append(feedback, m.Content)
		}
	}
	if len(feedback) != 1 || !strings.Contains(feedback[0], "before the required evidence") {
		t.Errorf("feedback %q, want one message about the missing evidence", feedback)
	}
}

// TestMixedTurn: in one turn, the invalid call is answered with its error and the valid ones run.
func TestMixedTurn(t *testing.T) {
	w := newWorld(t, setup{
		tools: []toolDef{mockTool("read_order", orderSchema, output(`{"n":1}`), output(`{"n":2}`))},
		turns: []model.Turn{
			callsTurn(tc("read_order", `{"order_id":"A"}`), tc("read_order", `{"order_id":""}`), tc("read_order", `{"order_id":"B"}`)),
			answerTurn("done"),
		},
	}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	if res.StopReason != loop.Completed {
		t.Fatalf("stop reason %s (%s)", res.StopReason, res.Detail)
	}
	var args []string
	for _, e := range w.log.all() {
		args = append(args, e.Args)
	}
	slices.Sort(args)
	if want := []string{`{"order_id":"A"}`, `{"order_id":"B"}`}; !slices.Equal(args, want) {
		t.Errorf("executed %v, want %v", args, want)
	}
	if m := resultOf(t, res.State, callID(0, 1)); !m.IsError || !strings.Contains(m.Content, "error: arguments of read_order rejected") {
		t.Errorf("the invalid call's result: %+v", m)
	}
	if res.State.InvalidActions != 1 || res.State.ToolCalls != 2 || res.State.Proposals != 4 {
		t.Errorf("invalid %d, tool calls %d, proposals %d; want 1, 2, 4", res.State.InvalidActions, res.State.ToolCalls, res.State.Proposals)
	}
}

// ============================================================================================
// 4. Concurrency.
// ============================================================================================

// gate is closed once `want` callers are inside it at the same time.
type gate struct {
	want     int32
	inflight atomic.Int32
	maxSeen  atomic.Int32
	once     sync.Once
	reached  chan struct{}
}

func newGate(want int) *gate { return &gate{want: int32(want), reached: make(chan struct{})} }

// enter registers a caller and blocks until `want` callers have been inside together, or ctx ends.
func (g *gate) enter(ctx context.Context) error {
	n := g.inflight.Add(1)
	for {
		m := g.maxSeen.Load()
		if n <= m || g.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if n >= g.want {
		g.once.Do(func() { close(g.reached) })
	}
	select {
	case <-g.reached:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("only %d of %d calls were ever in flight together: %w", g.maxSeen.Load(), g.want, ctx.Err())
	}
}

func (g *gate) leave() { g.inflight.Add(-1) }

// TestCallsOfATurnRunConcurrently: every call blocks until all of them have started, so the test
// only finishes if the loop runs them at the same time. Each call also waits for the next one to
// finish, so they complete in reverse order, and the results must still come in call order.
func TestCallsOfATurnRunConcurrently(t *testing.T) {
	const n = 4
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g := newGate(n)
	var done [n + 1]chan struct{}
	for i := range done {
		done[i] = make(chan struct{})
	}
	close(done[n]) // the last call waits for nobody
	work := funcTool("work", func(_ context.Context, args json.RawMessage, _ string) (json.RawMessage, error) {
		var a struct{ I int }
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		defer close(done[a.I])
		defer g.leave()
		if err := g.enter(ctx); err != nil {
			return nil, &tool.Error{Message: err.Error()}
		}
		select {
		case <-done[a.I+1]:
		case <-ctx.Done():
			return nil, &tool.Error{Message: "call " + fmt.Sprint(a.I+1) + " never finished"}
		}
		return json.RawMessage(fmt.Sprintf(`{"i":%d}`, a.I)), nil
	})
	var calls []model.ToolCall
	for i := range n {
		calls = append(calls, tc("work", fmt.Sprintf(`{"i":%d}`, i)))
	}
	w := newWorld(t, setup{tools: []toolDef{work}, concurrent: n, turns: []model.Turn{callsTurn(calls...), answerTurn("done")}}, t0)
	res := w.run(t, ctx, "run-1", "goal")
	if ctx.Err() != nil {
		t.Fatalf("the calls of one turn did not run concurrently (the barrier of %d was never reached; at most %d in flight)", n, g.maxSeen.Load())
	}
	if res.StopReason != loop.Completed {
		t.Fatalf("stop reason %s (%s)", res.StopReason, res.Detail)
	}
	for i := range n {
		if m := resultOf(t, res.State, callID(0, i)); m.Content != fmt.Sprintf(`{"i":%d}`, i) {
			t.Errorf("result of call %d: %q", i, m.Content)
		}
	}
	// Results are in call order in the conversation, and tool_result events likewise.
	var ids []string
	for _, e := range eventsOf(res.Trace, trace.ToolResult) {
		ids = append(ids, e.CallID)
	}
	if want := []string{callID(0, 0), callID(0, 1), callID(0, 2), callID(0, 3)}; !slices.Equal(ids, want) {
		t.Errorf("tool_result events in order %v, want %v", ids, want)
	}
}

// TestMaxConcurrentTools: at most MaxConcurrentTools calls of a turn are in flight, and exactly
// that many start together. The run happens in a synctest bubble: every call blocks on a channel
// until released, and synctest.Wait returns once every goroutine of the bubble is durably
// blocked, which is when the loop cannot start any further call. That makes "no more than the
// limit" observable without sleeps or timing.
func TestMaxConcurrentTools(t *testing.T) {
	tests := []struct {
		limit, want int
	}{
		{limit: 1, want: 1},
		{limit: 2, want: 2},
		{limit: 3, want: 3},
		{limit: 0, want: 4},  // the default
		{limit: 10, want: 7}, // more room than calls
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("limit_%d", tt.limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var inflight, maxSeen atomic.Int32
				work := funcTool("work", func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
					n := inflight.Add(1)
					defer inflight.Add(-1)
					for m := maxSeen.Load(); n > m && !maxSeen.CompareAndSwap(m, n); m = maxSeen.Load() {
					}
					<-release
					return json.RawMessage(`"ok"`), nil
				})
				var calls []model.ToolCall
				for i := range 7 {
					calls = append(calls, tc("work", fmt.Sprintf(`{"i":%d}`, i)))
				}
				w := newWorld(t, setup{tools: []toolDef{work}, concurrent: tt.limit, turns: []model.Turn{callsTurn(calls...), answerTurn("done")}}, t0)
				done := make(chan loop.Result)
				go func() { done <- w.ctrl.Run(context.Background(), "run-1", "goal") }()
				synctest.Wait() // the loop has started every call it can before one finishes
				if got := inflight.Load(); got != int32(tt.want) {
					t.Errorf("%d calls in flight once the loop could start no more, want %d", got, tt.want)
				}
				close(release)
				res := <-done
				checkRun(t, w, res, "run-1", 0)
				if res.StopReason != loop.Completed || res.State.ToolCalls != 7 {
					t.Fatalf("stop reason %s (%s), tool calls %d", res.StopReason, res.Detail, res.State.ToolCalls)
				}
				if got := maxSeen.Load(); got != int32(tt.want) {
					t.Errorf("max in flight %d, want %d", got, tt.want)
				}
			})
		})
	}
}

// ============================================================================================
// 5. Idempotency keys.
// ============================================================================================

func TestIdempotencyKeys(t *testing.T) {
	type seen struct {
		Key, InfoKey     string
		Iteration, Index int
		RunID            string
	}
	run := func(t *testing.T, runID string, firstCall model.ToolCall) (map[string]seen, loop.Result) {
		var mu sync.Mutex
		got := map[string]seen{} // by call args, which are unique in the script
		rec := func(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
			info := tool.InfoFrom(ctx)
			if info == nil {
				return nil, errors.New("no tool.Info in the context")
			}
			mu.Lock()
			got[string(args)] = seen{Key: key, InfoKey: info.Key, Iteration: info.Iteration, Index: info.Index, RunID: info.RunID}
			mu.Unlock()
			return json.RawMessage(`"ok"`), nil
		}
		w := newWorld(t, setup{
			tools: []toolDef{funcTool("write", rec), funcTool("send", rec)},
			turns: []model.Turn{
				callsTurn(firstCall, tc("send", `{"v":2}`), tc("write", `{"v":3}`)),
				callsTurn(tc("send", `{"v":4}`)),
				answerTurn("done"),
			},
		}, t0)
		res := w.run(t, context.Background(), runID, "goal")
		if res.StopReason != loop.Completed {
			t.Fatalf("stop reason %s (%s)", res.StopReason, res.Detail)
		}
		return got, res
	}
	first, res := run(t, "run-A", tc("write", `{"v":1}`))
	second, _ := run(t, "run-A", tc("write", `{"v":1}`))
	other, _ := run(t, "run-B", tc("write", `{"v":1}`))
	// The key depends on the call's index in the turn, not on which calls before it executed.
	skipped, _ := run(t, "run-A", tc("no_such_tool", `{"v":1}`))
	for args, s := range skipped {
		if s.Key != first[args].Key {
			t.Errorf("%s: key %q when the first call of its turn was rejected, %q when it executed", args, s.Key, first[args].Key)
		}
	}
	if len(first) != 4 {
		t.Fatalf("%d calls seen, want 4", len(first))
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("same run id and script, different keys:\n%v\n%v", first, second)
	}
	keys := map[string]string{}
	wantPos := map[string][2]int{`{"v":1}`: {1, 0}, `{"v":2}`: {1, 1}, `{"v":3}`: {1, 2}, `{"v":4}`: {2, 0}}
	for args, s := range first {
		if s.Key == "" || s.Key != s.InfoKey {
			t.Errorf("%s: key passed to Call %q, tool.Info.Key %q", args, s.Key, s.InfoKey)
		}
		if prev, dup := keys[s.Key]; dup {
			t.Errorf("calls %s and %s share the key %q", prev, args, s.Key)
		}
		keys[s.Key] = args
		if pos := wantPos[args]; s.Iteration != pos[0] || s.Index != pos[1] || s.RunID != "run-A" {
			t.Errorf("%s: info (run %s, iteration %d, index %d), want (run-A, %d, %d)", args, s.RunID, s.Iteration, s.Index, pos[0], pos[1])
		}
		if other[args].Key == s.Key {
			t.Errorf("%s: runs run-A and run-B share the key %q", args, s.Key)
		}
	}
	// The tool_call events carry the same keys.
	for _, e := range eventsOf(res.Trace, trace.ToolCall) {
		var args string
		for _, m := range res.State.Messages {
			for _, c := range m.Calls {
				if c.ID == e.CallID {
					args = string(c.Arguments)
				}
			}
		}
		if e.Key != first[args].Key {
			t.Errorf("tool_call event for %s has key %q, the tool got %q", e.CallID, e.Key, first[args].Key)
		}
	}
}

// ============================================================================================
// 6. Approver.
// ============================================================================================

func TestApprover(t *testing.T) {
	decisions := map[string][]loop.Decision{
		"write": {{Approve: true, Message: "ok"}, {Approve: false, Message: "not now, the order is disputed"}, {Approve: true}},
		"send":  {{Approve: false, Message: "no emails today"}},
	}
	var reqs []loop.ApprovalRequest
	approver := approverFunc(func(_ context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
		reqs = append(reqs, req)
		list := decisions[req.Call.Name]
		if req.Seq >= len(list) {
			return loop.Decision{}, loop.ErrNoDecision
		}
		return list[req.Seq], nil
	})
	send := mockTool("send", "", output(`"sent"`))
	send.spec.NeedsApproval = true // approval from the spec rather than the policy
	w := newWorld(t, setup{
		tools:    []toolDef{mockTool("read", "", output(`"data"`)), mockTool("write", "", output(`"written"`)), send},
		policy:   loop.Policy{RequireApproval: []string{"write"}},
		approver: approver,
		turns: []model.Turn{
			callsTurn(tc("read", `{}`), tc("write", `{"v":1}`), tc("send", `{"v":1}`)),
			callsTurn(tc("write", `{"v":2}`)),
			callsTurn(tc("write", `{"v":3}`)),
			answerTurn("done"),
		},
	}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	if res.StopReason != loop.Completed {
		t.Fatalf("stop reason %s (%s)", res.StopReason, res.Detail)
	}
	type req struct {
		tool        string
		seq         int
		iter, index int
		id          string
	}
	var got []req
	for _, r := range reqs {
		if r.RunID != "run-1" {
			t.Errorf("approval request with run id %q", r.RunID)
		}
		got = append(got, req{r.Call.Name, r.Seq, r.Iteration, r.CallIndex, r.Call.ID})
	}
	want := []req{
		{"write", 0, 1, 1, callID(0, 1)}, {"send", 0, 1, 2, callID(0, 2)},
		{"write", 1, 2, 0, callID(1, 0)}, {"write", 2, 3, 0, callID(2, 0)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("approval requests\n%+v\nwant\n%+v", got, want)
	}
	var written []string
	for _, e := range w.log.all() {
		if e.Tool == "write" {
			written = append(written, e.Args)
		}
	}
	if !slices.Equal(written, []string{`{"v":1}`, `{"v":3}`}) {
		t.Errorf("write executed with %v, want only the approved calls", written)
	}
	if n := w.log.count("send"); n != 0 {
		t.Errorf("the denied send executed %d times", n)
	}
	if n := w.log.count("read"); n != 1 {
		t.Errorf("read (no approval needed) executed %d times", n)
	}
	for id, msg := range map[string]string{callID(0, 2): "no emails today", callID(1, 0): "not now, the order is disputed"} {
		if m := resultOf(t, res.State, id); !m.IsError || !strings.Contains(m.Content, msg) {
			t.Errorf("the denied call %s was answered %+v, want the human's message %q", id, m, msg)
		}
	}
	st := res.State
	if st.InvalidActions != 0 || st.ToolCalls != 3 {
		t.Errorf("invalid actions %d, tool calls %d; want 0 (a denial is not invalid), 3", st.InvalidActions, st.ToolCalls)
	}
	var decs []string
	for _, e := range eventsOf(res.Trace, trace.Approval) {
		decs = append(decs, e.Tool+":"+e.Decision)
	}
	if want := []string{"write:approved", "send:denied", "write:denied", "write:approved"}; !slices.Equal(decs, want) {
		t.Errorf("approval events %v, want %v", decs, want)
	}
}

// TestApproverWithoutDecision: an approver that has no decision yet (ErrNoDecision) stops the run
// like a missing approver, with the whole turn pending and nothing of it executed.
func TestApproverWithoutDecision(t *testing.T) {
	approver := approverFunc(func(context.Context, loop.ApprovalRequest) (loop.Decision, error) {
		return loop.Decision{}, fmt.Errorf("%w: ask again tomorrow", loop.ErrNoDecision)
	})
	w := newWorld(t, setup{
		tools:    []toolDef{mockTool("read", "", output(`"data"`)), mockTool("write", "", output(`"ok"`))},
		policy:   loop.Policy{RequireApproval: []string{"write"}},
		approver: approver,
		turns:    []model.Turn{callsTurn(tc("write", `{"v":1}`), tc("read", `{}`), tc("write", `{"v":2}`))},
	}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	if res.StopReason != loop.NeedsHuman {
		t.Fatalf("stop reason %s (%s)", res.StopReason, res.Detail)
	}
	if n := len(w.log.all()); n != 0 {
		t.Errorf("%d calls of the pending turn executed", n)
	}
	var idx []int
	for _, p := range res.State.Pending {
		idx = append(idx, p.Index)
	}
	if !slices.Equal(idx, []int{0, 2}) {
		t.Errorf("pending call indexes %v, want [0 2]", idx)
	}
	if st := res.State; st.PendingTurn == nil || len(st.PendingTurn.Calls) != 3 {
		t.Errorf("PendingTurn %+v, want the 3-call turn", st.PendingTurn)
	}
}

// ============================================================================================
// 7. Tool outputs: panics, non-JSON, pretty JSON.
// ============================================================================================

func TestToolPanicIsANonRetryableFailure(t *testing.T) {
	boom := funcTool("boom", func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
		panic("nil map write")
	})
	w := newWorld(t, setup{tools: []toolDef{boom}, turns: []model.Turn{callsTurn(tc("boom", `{}`)), answerTurn("never reached")}}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	if res.StopReason != loop.ToolFailure {
		t.Fatalf("stop reason %s (%s), want tool_failure", res.StopReason, res.Detail)
	}
	if m := resultOf(t, res.State, callID(0, 0)); !m.IsError || !strings.Contains(m.Content, "panicked: nil map write") {
		t.Errorf("result %+v", m)
	}
	if tr := eventsOf(res.Trace, trace.ToolResult); len(tr) != 1 || tr[0].Retryable || !tr[0].Executed {
		t.Errorf("tool_result events %+v, want one executed, non-retryable", tr)
	}
}

func TestToolOutputBecomesResultText(t *testing.T) {
	tests := []struct {
		name, out, want string
	}{
		{"compact_json", `{"a":1}`, `{"a":1}`},
		{"pretty_json_is_compacted", "{\n  \"a\": 1,\n  \"b\": [1, 2],\n  \"c\": \"x y\"\n}\n", `{"a":1,"b":[1,2],"c":"x y"}`},
		{"non_json_is_passed_as_text", "<html>502 Bad Gateway</html>", "<html>502 Bad Gateway</html>"},
		{"truncated_json_is_text", `{"a":`, `{"a":`},
		{"empty_is_null", "", "null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := funcTool("fetch", func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
				return json.RawMessage(tt.out), nil
			})
			w := newWorld(t, setup{tools: []toolDef{fn}, turns: []model.Turn{callsTurn(tc("fetch", `{}`)), answerTurn("done")}}, t0)
			res := w.run(t, context.Background(), "run-1", "goal")
			if res.StopReason != loop.Completed {
				t.Fatalf("stop reason %s (%s): a malformed output must be an observation, not a failure", res.StopReason, res.Detail)
			}
			if m := resultOf(t, res.State, callID(0, 0)); m.Content != tt.want || m.IsError {
				t.Errorf("result message %+v, want content %q", m, tt.want)
			}
		})
	}
}

// TestPlainToolErrorIsRetryable: an error that is not a *tool.Error is an observation.
func TestPlainToolErrorIsRetryable(t *testing.T) {
	fn := funcTool("fetch", func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
		return nil, errors.New("connection reset")
	})
	w := newWorld(t, setup{tools: []toolDef{fn}, turns: []model.Turn{callsTurn(tc("fetch", `{}`)), answerTurn("done")}}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	if res.StopReason != loop.Completed {
		t.Fatalf("stop reason %s (%s)", res.StopReason, res.Detail)
	}
	if m := resultOf(t, res.State, callID(0, 0)); !m.IsError || m.Content != "error: connection reset" {
		t.Errorf("result %+v", m)
	}
}

// ============================================================================================
// 8. Hooks and trace events.
// ============================================================================================

func TestHooks(t *testing.T) {
	var (
		mu                          sync.Mutex
		beforeModel, afterModelSeqs []int
		modelErrs                   int
		beforeTool, afterTool       = map[string]string{}, map[string]string{} // call id -> key
		toolErrs                    []string
		toolDurations               = map[string]time.Duration{}
		iterations                  []int
	)
	hooks := loop.Hooks{
		BeforeModel: func(_ context.Context, req *model.Request) {
			beforeModel = append(beforeModel, req.Seq)
			if req.Instructions != "test instructions" || len(req.Messages) == 0 {
				t.Errorf("BeforeModel got request %+v", req)
			}
		},
		AfterModel: func(_ context.Context, req *model.Request, resp *model.Response, err error) {
			afterModelSeqs = append(afterModelSeqs, req.Seq)
			if (err == nil) == (resp == nil) {
				t.Errorf("AfterModel: response %v with error %v", resp, err)
			}
			if err != nil {
				modelErrs++
			}
		},
		BeforeTool: func(ctx context.Context, info *tool.Info, call model.ToolCall) {
			mu.Lock()
			defer mu.Unlock()
			if tool.InfoFrom(ctx) != info {
				t.Errorf("BeforeTool: the context does not carry the call's info")
			}
			beforeTool[call.ID] = info.Key
		},
		AfterTool: func(_ context.Context, info *tool.Info, call model.ToolCall, out loop.ToolOutcome) {
			mu.Lock()
			defer mu.Unlock()
			afterTool[call.ID] = info.Key
			toolDurations[call.ID] = out.Duration
			if out.Err != nil {
				toolErrs = append(toolErrs, call.ID)
			}
		},
		AfterIteration: func(_ context.Context, st *loop.State) { iterations = append(iterations, st.Iteration) },
	}
	w := newWorld(t, setup{
		tools: []toolDef{
			mockTool("a", "", slow(output(`1`), 2*time.Second), failure("busy", true)),
			mockTool("b", "", output(`2`)),
		},
		hooks: hooks,
		turns: []model.Turn{
			modelErrTurn("overloaded", true),
			callsTurn(tc("a", `{"n":1}`), tc("b", `{}`)),
			callsTurn(tc("a", `{"n":2}`)),
			callsTurn(tc("nope", `{}`)),
			answerTurn("done"),
		},
	}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	if res.StopReason != loop.Completed {
		t.Fatalf("stop reason %s (%s)", res.StopReason, res.Detail)
	}
	if want := []int{0, 1, 2, 3, 4}; !slices.Equal(beforeModel, want) || !slices.Equal(afterModelSeqs, want) {
		t.Errorf("BeforeModel seqs %v, AfterModel seqs %v; want %v for both (one per model call, failed ones included)", beforeModel, afterModelSeqs, want)
	}
	if modelErrs != 1 {
		t.Errorf("AfterModel saw %d errors, want 1", modelErrs)
	}
	wantKeys := map[string]string{callID(1, 0): "run-1/1/0", callID(1, 1): "run-1/1/1", callID(2, 0): "run-1/2/0"}
	if len(beforeTool) != 3 || !reflect.DeepEqual(beforeTool, afterTool) {
		t.Errorf("BeforeTool %v, AfterTool %v: want one of each per executed call", beforeTool, afterTool)
	}
	for id := range wantKeys {
		if beforeTool[id] == "" {
			t.Errorf("no BeforeTool for executed call %s", id)
		}
	}
	if !slices.Equal(toolErrs, []string{callID(2, 0)}) {
		t.Errorf("AfterTool saw errors for %v, want [%s]", toolErrs, callID(2, 0))
	}
	if d := toolDurations[callID(1, 0)]; d != 2*time.Second {
		t.Errorf("AfterTool duration of the slow call %s, want 2s", d)
	}
	if want := []int{1, 2, 3, 4}; !slices.Equal(iterations, want) {
		t.Errorf("AfterIteration saw iterations %v, want %v", iterations, want)
	}
}

func TestTraceEvents(t *testing.T) {
	approveAll := approverFunc(func(context.Context, loop.ApprovalRequest) (loop.Decision, error) {
		return loop.Decision{Approve: true}, nil
	})
	tools := []toolDef{mockTool("read", "", output(`"r"`)), mockTool("write", "", output(`"w"`))}
	const (
		is  = trace.IterationStart
		mc  = trace.ModelCall
		pr  = trace.Proposal
		va  = trace.Validation
		ap  = trace.Approval
		tc_ = trace.ToolCall
		tr  = trace.ToolResult
		st  = trace.Stop
	)
	tests := []struct {
		name     string
		setup    setup
		want     []trace.Type
		decision []string // decisions of validation and approval events, in order
	}{
		{
			name: "approved_calls_then_answer",
			setup: setup{tools: tools, approver: approveAll, policy: loop.Policy{RequireApproval: []string{"write"}},
				turns: []model.Turn{callsTurn(tc("read", `{}`), tc("write", `{}`)), answerTurn("done")}},
			want:     []trace.Type{is, mc, pr, va, va, ap, tc_, tc_, tr, tr, is, mc, pr, va, st},
			decision: []string{trace.DecisionAccept, trace.DecisionApprove, "approved", trace.DecisionAccept},
		},
		{
			name:     "invalid_call",
			setup:    setup{tools: tools, policy: loop.Policy{Allow: []string{"read"}}, turns: []model.Turn{callsTurn(tc("write", `{}`)), refuseTurn("no")}},
			want:     []trace.Type{is, mc, pr, va, tr, is, mc, pr, st},
			decision: []string{trace.DecisionInvalid},
		},
		{
			name:     "forbidden_call",
			setup:    setup{tools: tools, policy: loop.Policy{Forbid: []string{"write"}}, turns: []model.Turn{callsTurn(tc("read", `{}`), tc("write", `{}`))}},
			want:     []trace.Type{is, mc, pr, va, va, tr, tr, st},
			decision: []string{trace.DecisionAccept, trace.DecisionForbid},
		},
		{
			name:  "model_retry_then_escalation",
			setup: setup{turns: []model.Turn{modelErrTurn("overloaded", true), escalateTurn("help")}},
			want:  []trace.Type{is, mc, mc, pr, st},
		},
		{
			name:  "model_failure",
			setup: setup{turns: []model.Turn{modelErrTurn("bad key", false)}},
			want:  []trace.Type{is, mc, st},
		},
		{
			name:     "budget_spent_before_an_iteration",
			setup:    setup{tools: tools, budget: loop.Budget{MaxIterations: 1}, turns: []model.Turn{callsTurn(tc("read", `{}`))}},
			want:     []trace.Type{is, mc, pr, va, tc_, tr, st},
			decision: []string{trace.DecisionAccept},
		},
	}
	seen := map[trace.Type]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, tt.setup, t0)
			res := w.run(t, context.Background(), "run-"+tt.name, "goal")
			var got []trace.Type
			var decisions []string
			for _, e := range res.Trace {
				got = append(got, e.Type)
				seen[e.Type] = true
				if e.Type == trace.Validation || e.Type == trace.Approval {
					decisions = append(decisions, e.Decision)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("event types\n%v\nwant\n%v", got, tt.want)
			}
			if !slices.Equal(decisions, tt.decision) {
				t.Errorf("decisions %v, want %v", decisions, tt.decision)
			}
			last := res.Trace[len(res.Trace)-1]
			if last.StopReason != string(res.StopReason) || last.Reason != res.Detail {
				t.Errorf("stop event %+v does not carry the stop reason %s and detail %q", last, res.StopReason, res.Detail)
			}
		})
	}
	for _, typ := range []trace.Type{is, mc, pr, va, ap, tc_, tr, st} {
		if !seen[typ] {
			t.Errorf("no run emitted a %s event", typ)
		}
	}
}

// TestModelCallEventPayload: model_call events carry usage, cost and the latency on the clock.
func TestModelCallEventPayload(t *testing.T) {
	w := newWorld(t, setup{turns: []model.Turn{
		withLatency(modelErrTurn("overloaded", true), time.Second),
		withLatency(withCost(withUsage(answerTurn("done"), 120, 30), 0.25), 3*time.Second),
	}}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	mc := eventsOf(res.Trace, trace.ModelCall)
	if len(mc) != 2 {
		t.Fatalf("%d model_call events", len(mc))
	}
	if e := mc[0]; e.Error == "" || !e.Retryable || e.Duration != time.Second {
		t.Errorf("failed model_call event %+v", e)
	}
	if e := mc[1]; e.Error != "" || e.InputTokens != 120 || e.OutputTokens != 30 || e.CostUSD != 0.25 || e.Duration != 3*time.Second {
		t.Errorf("model_call event %+v", e)
	}
	if st := res.State; st.Usage.Total() != 150 || st.CostUSD != 0.25 {
		t.Errorf("state usage %d, cost %v", st.Usage.Total(), st.CostUSD)
	}
	// 1s + 200ms backoff + 3s
	if got := res.Trace[len(res.Trace)-1].Time.Sub(t0); got != 4200*time.Millisecond {
		t.Errorf("the stop event is at +%s, want +4.2s", got)
	}
}

// ============================================================================================
// 9. Resume from saved state.
// ============================================================================================

// resumeSetup is a multi-iteration run touching every piece of state that must survive a save:
// invalid actions, a retried model error, usage and cost, latencies, mocks whose results depend
// on their position, a retryable tool failure, approvals granted and denied, required evidence.
func resumeSetup() setup {
	approver := approverFunc(func(_ context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
		// Stateless, by Seq, as a resumed run needs.
		list := []loop.Decision{{Approve: true, Message: "fine"}, {Approve: false, Message: "O-2 is disputed"}}
		if req.Seq >= len(list) {
			return loop.Decision{}, loop.ErrNoDecision
		}
		return list[req.Seq], nil
	})
	return setup{
		tools: []toolDef{
			mockTool("read_order", orderSchema, slow(output(`{"order":1}`), time.Second), output(`{ "order" : 2 }`)),
			mockTool("flaky", "", failure("timeout upstream", true), output(`"ok"`)),
			mockTool("write", orderSchema, output(`{"written":true}`)),
		},
		policy:   loop.Policy{RequireApproval: []string{"write"}, RequiredEvidence: []string{"read_order"}},
		budget:   loop.Budget{MaxDuration: time.Minute, MaxTokens: 10000, MaxCostUSD: 1},
		approver: approver,
		turns: []model.Turn{
			withUsage(answerTurn("guess: refund"), 50, 5),
			withLatency(modelErrTurn("overloaded", true), time.Second),
			withUsage(callsTurn(tc("read_order", `{"order_id":"O-1"}`), tc("read_order", `{"order_id":"O-2"}`)), 100, 20),
			callsTurn(tc("unknown_tool", `{}`), tc("flaky", `{"n":1}`)),
			withLatency(callsTurn(tc("flaky", `{"n":2}`), tc("write", `{"order_id":"O-1"}`)), 2*time.Second),
			callsTurn(tc("write", `{"order_id":"O-2"}`)),
			withCost(answerTurn("Refund O-1; O-2 is disputed."), 0.01),
		},
	}
}

func TestResumeFromSavedState(t *testing.T) {
	const runID, goal = "run-resume", "Refund what can be refunded."
	ref := newWorld(t, resumeSetup(), t0)
	want := ref.run(t, context.Background(), runID, goal)
	if want.StopReason != loop.Completed || want.State.Iteration < 5 {
		t.Fatalf("the reference run stopped with %s (%s) after %d iterations; the test needs a long completed run",
			want.StopReason, want.Detail, want.State.Iteration)
	}

	// The same run, one Step per controller, with the state saved as JSON in between.
	var (
		saved  []byte
		now    = t0
		events []trace.Event
		execs  []execution
		steps  int
	)
	for {
		var st *loop.State
		w := newWorld(t, resumeSetup(), now)
		var r *loop.Run
		if saved == nil {
			r = w.ctrl.Start(runID, goal)
		} else {
			st = new(loop.State)
			if err := json.Unmarshal(saved, st); err != nil {
				t.Fatalf("step %d: unmarshal state: %v", steps, err)
			}
			r = w.ctrl.Resume(st)
		}
		startIter := r.State().Iteration
		stopped := r.Step(context.Background())
		steps++
		res := r.Result()
		if stopped != res.State.Stopped() {
			t.Fatalf("step %d: Step returned %v, state stopped %v", steps, stopped, res.State.Stopped())
		}
		checkTrace(t, res, runID, startIter)
		if got := w.sunkEvents(); !reflect.DeepEqual(got, res.Trace) {
			t.Errorf("step %d: sink and trace differ:\n%s", steps, diffEvents(got, res.Trace))
		}
		if st != nil && res.State != st {
			t.Errorf("step %d: the run does not work on the state it was resumed from", steps)
		}
		events = append(events, res.Trace...)
		execs = append(execs, w.log.all()...)
		now = w.clk.Now()
		var err error
		if saved, err = json.Marshal(res.State); err != nil {
			t.Fatalf("step %d: marshal state: %v", steps, err)
		}
		if stopped || steps > 20 {
			break
		}
	}
	if steps != want.State.Iteration {
		t.Errorf("%d steps, want one per iteration (%d)", steps, want.State.Iteration)
	}
	var got loop.State
	if err := json.Unmarshal(saved, &got); err != nil {
		t.Fatal(err)
	}
	if got.StopReason != want.StopReason || got.Answer != want.Answer || got.ToolCalls != want.State.ToolCalls || got.Iteration != want.State.Iteration {
		t.Errorf("resumed run: %s %q, %d tool calls, %d iterations; uninterrupted: %s %q, %d, %d",
			got.StopReason, got.Answer, got.ToolCalls, got.Iteration, want.StopReason, want.Answer, want.State.ToolCalls, want.State.Iteration)
	}
	// Messages compared through JSON, which is how the resumed run saw them (JSON compacts raw
	// arguments).
	if a, b := mustJSON(t, got.Messages), mustJSON(t, want.State.Messages); a != b {
		t.Errorf("messages differ:\nresumed       %s\nuninterrupted %s", a, b)
	}
	if a, b := mustJSON(t, &got), mustJSON(t, want.State); a != b {
		t.Errorf("states differ:\nresumed       %s\nuninterrupted %s", a, b)
	}
	// Per-call durations of concurrent calls depend on how they interleave on the virtual clock
	// (their latencies add up in whatever order they run); everything else must be identical.
	if a, b := withoutDurations(events), withoutDurations(want.Trace); !reflect.DeepEqual(a, b) {
		t.Errorf("the traces of the resumed steps differ from the uninterrupted trace:\n%s", diffEvents(a, b))
	}
	if wantExecs := ref.log.all(); !reflect.DeepEqual(sortedExecs(execs), sortedExecs(wantExecs)) {
		t.Errorf("executions differ:\nresumed       %+v\nuninterrupted %+v", execs, wantExecs)
	}
	if ref.clk.Now() != now {
		t.Errorf("the resumed run ended at %s on the clock, the uninterrupted one at %s", now, ref.clk.Now())
	}

	// A stopped state stays stopped: Step does nothing.
	w := newWorld(t, resumeSetup(), now)
	r := w.ctrl.Resume(&got)
	if !r.Step(context.Background()) || len(r.Result().Trace) != 0 || w.model.calls != 0 {
		t.Errorf("resuming a stopped run did something: %d events, %d model calls", len(r.Result().Trace), w.model.calls)
	}
}

func sortedExecs(e []execution) []execution {
	e = slices.Clone(e)
	slices.SortFunc(e, func(a, b execution) int { return strings.Compare(a.Key, b.Key) })
	return e
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}

// TestResumeKeepsBudgets: a resumed run keeps counting from the saved state.
func TestResumeKeepsBudgets(t *testing.T) {
	turns := []model.Turn{
		callsTurn(tc("s", `{"q":1}`)), callsTurn(tc("s", `{"q":2}`)), callsTurn(tc("s", `{"q":3}`)), answerTurn("done"),
	}
	s := setup{tools: []toolDef{mockTool("s", "", output(`1`))}, budget: loop.Budget{MaxIterations: 2}, turns: turns}
	w := newWorld(t, s, t0)
	r := w.ctrl.Start("run-1", "goal")
	if r.Step(context.Background()) {
		t.Fatalf("stopped after one step: %s", r.State().StopReason)
	}
	data := mustJSON(t, r.State())
	var st loop.State
	if err := json.Unmarshal([]byte(data), &st); err != nil {
		t.Fatal(err)
	}
	w2 := newWorld(t, s, w.clk.Now())
	r2 := w2.ctrl.Resume(&st)
	for !r2.Step(context.Background()) {
	}
	if got := r2.State(); got.StopReason != loop.MaxIterations || got.Iteration != 2 || got.ToolCalls != 2 {
		t.Errorf("resumed run: %s after %d iterations and %d tool calls, want max_iterations after 2 and 2", got.StopReason, got.Iteration, got.ToolCalls)
	}

	// The wall clock counts from StartedAt, not from the resume.
	s.budget = loop.Budget{MaxDuration: time.Minute}
	w3 := newWorld(t, s, t0.Add(2*time.Minute))
	var st3 loop.State
	if err := json.Unmarshal([]byte(data), &st3); err != nil {
		t.Fatal(err)
	}
	r3 := w3.ctrl.Resume(&st3)
	if !r3.Step(context.Background()) || r3.State().StopReason != loop.Timeout || w3.model.calls != 0 {
		t.Errorf("resumed after the wall-clock budget: %s with %d model calls, want timeout before any call", r3.State().StopReason, w3.model.calls)
	}
}

// TestProposedChanged: a resumed run reports exactly the entries of CallProposed its steps
// changed, with their counts now, so a caller can checkpoint them instead of the whole map.
func TestProposedChanged(t *testing.T) {
	turns := []model.Turn{
		callsTurn(tc("s", `{"q":1}`)), callsTurn(tc("s", `{"q":2}`)),
		callsTurn(tc("s", `{"q":1}`), tc("s", `{"q":3}`)), answerTurn("done"),
	}
	s := setup{tools: []toolDef{mockTool("s", "", output(`1`))}, turns: turns}
	w := newWorld(t, s, t0)
	r := w.ctrl.Start("run-1", "goal")
	for range 2 {
		if r.Step(context.Background()) {
			t.Fatalf("stopped early: %s", r.State().StopReason)
		}
	}
	if got := len(r.ProposedChanged()); got != 2 {
		t.Fatalf("after two distinct calls ProposedChanged has %d entries, want 2", got)
	}
	var st loop.State
	if err := json.Unmarshal([]byte(mustJSON(t, r.State())), &st); err != nil {
		t.Fatal(err)
	}
	before := maps.Clone(st.CallProposed)
	r2 := w.ctrl.Resume(&st)
	if r2.ProposedChanged() != nil {
		t.Fatalf("a resumed run that has not stepped reports changes %v", r2.ProposedChanged())
	}
	if r2.Step(context.Background()) {
		t.Fatalf("stopped early: %s", r2.State().StopReason)
	}
	changed := r2.ProposedChanged()
	want := map[uint64]int{}
	for k, v := range r2.State().CallProposed {
		if before[k] != v {
			want[k] = v
		}
	}
	if len(want) != 2 || !maps.Equal(changed, want) {
		t.Errorf("ProposedChanged() = %v, want the repeated call counted twice and the new one once: %v", changed, want)
	}
}

// ============================================================================================
// 10. Configuration: budget defaults and rejected configurations.
// ============================================================================================

func TestBudgetDefaults(t *testing.T) {
	m, _ := model.NewScripted(nil, nil)
	d := loop.DefaultBudget()
	want := loop.Budget{MaxIterations: 10, MaxToolCalls: 20, MaxDuration: 5 * time.Minute,
		MaxToolFailures: 3, MaxRepeatedCalls: 3, MaxInvalidActions: 3}
	if d != want {
		t.Errorf("DefaultBudget() = %+v, want the documented defaults %+v", d, want)
	}
	tests := []struct {
		name string
		in   loop.Budget
		want loop.Budget
	}{
		{"zero", loop.Budget{}, want},
		{"negative_fields_default_too", loop.Budget{MaxIterations: -1, MaxToolCalls: -5, MaxDuration: -time.Second}, want},
		{"partial", loop.Budget{MaxIterations: 2, MaxTokens: 500},
			loop.Budget{MaxIterations: 2, MaxToolCalls: 20, MaxDuration: 5 * time.Minute, MaxTokens: 500,
				MaxToolFailures: 3, MaxRepeatedCalls: 3, MaxInvalidActions: 3}},
		{"all_set", loop.Budget{1, 2, time.Second, 3, 0.5, 4, 5, 6}, loop.Budget{1, 2, time.Second, 3, 0.5, 4, 5, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loop.New(loop.Config{Model: m, Budget: tt.in})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Budget(); got != tt.want {
				t.Errorf("Budget() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDefaultBudgetsApply: the defaults are enforced, not only reported.
func TestDefaultBudgetsApply(t *testing.T) {
	var turns []model.Turn
	for i := range 15 {
		turns = append(turns, callsTurn(tc("s", fmt.Sprintf(`{"q":%d}`, i))))
	}
	w := newWorld(t, setup{tools: []toolDef{mockTool("s", "", output(`1`))}, turns: turns}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	if res.StopReason != loop.MaxIterations || res.State.Iteration != 10 {
		t.Errorf("stop %s after %d iterations, want max_iterations after the default 10", res.StopReason, res.State.Iteration)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	m, _ := model.NewScripted(nil, nil)
	mk := func(name, schema string) tool.Tool {
		spec := tool.Spec{Name: name}
		if schema != "" {
			spec.InputSchema = json.RawMessage(schema)
		}
		mt, err := tool.NewMock(spec, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return mt
	}
	two := []tool.Tool{mk("read", ""), mk("write", "")}
	tests := []struct {
		name    string
		cfg     loop.Config
		wantErr string // empty: accepted
	}{
		{"nil_model", loop.Config{Tools: two}, "no model"},
		{"duplicate_tool", loop.Config{Model: m, Tools: []tool.Tool{mk("read", ""), mk("read", "")}}, `"read" is declared twice`},
		{"unnamed_tool", loop.Config{Model: m, Tools: []tool.Tool{mk("", "")}}, "no name"},
		{"schema_not_json", loop.Config{Model: m, Tools: []tool.Tool{mk("read", `{"type":`)}}, "not valid JSON"},
		{"schema_not_a_schema", loop.Config{Model: m, Tools: []tool.Tool{mk("read", `{"type":"objekt"}`)}}, "not a valid JSON Schema"},
		{"allow_undeclared", loop.Config{Model: m, Tools: two, Policy: loop.Policy{Allow: []string{"read", "raed"}}}, `policy.allow names "raed"`},
		{"require_approval_undeclared", loop.Config{Model: m, Tools: two, Policy: loop.Policy{RequireApproval: []string{"delete"}}}, `policy.require_approval names "delete"`},
		{"required_evidence_undeclared", loop.Config{Model: m, Tools: two, Policy: loop.Policy{RequiredEvidence: []string{"audit"}}}, `policy.required_evidence names "audit"`},
		{"forbid_undeclared_is_fine", loop.Config{Model: m, Tools: two, Policy: loop.Policy{Forbid: []string{"drop_database"}}}, ""},
		{"full_valid_policy", loop.Config{Model: m, Tools: two, Policy: loop.Policy{Allow: []string{"read", "write"},
			Forbid: []string{"write"}, RequireApproval: []string{"write"}, RequiredEvidence: []string{"read"}}}, ""},
		{"no_tools", loop.Config{Model: m}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loop.New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || c == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New accepted the configuration, want an error containing %q", tt.wantErr)
			}
			if c != nil {
				t.Errorf("New returned a controller with the error %v", err)
			}
			if !errors.Is(err, loop.ErrConfig) {
				t.Errorf("error %v does not wrap loop.ErrConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestModelSeesOnlyAllowedTools: the request offers allowed, non-forbidden tools, sorted.
func TestModelSeesOnlyAllowedTools(t *testing.T) {
	var offered []string
	w := newWorld(t, setup{
		tools:  []toolDef{mockTool("c", ""), mockTool("a", orderSchema), mockTool("b", ""), mockTool("d", "")},
		policy: loop.Policy{Allow: []string{"a", "b", "d"}, Forbid: []string{"b"}},
		hooks: loop.Hooks{BeforeModel: func(_ context.Context, req *model.Request) {
			offered = offered[:0]
			for _, d := range req.Tools {
				offered = append(offered, d.Name)
			}
		}},
		turns: []model.Turn{answerTurn("done")},
	}, t0)
	w.run(t, context.Background(), "run-1", "goal")
	if !slices.Equal(offered, []string{"a", "d"}) {
		t.Errorf("the model was offered %v, want [a d]", offered)
	}
}

// TestControllerIsSafeForConcurrentRuns: several runs of one controller at once (run with -race).
func TestControllerIsSafeForConcurrentRuns(t *testing.T) {
	w := newWorld(t, setup{
		tools: []toolDef{mockTool("s", "", output(`1`), output(`2`))},
		turns: []model.Turn{callsTurn(tc("s", `{"q":1}`), tc("s", `{"q":2}`)), answerTurn("done")},
	}, t0)
	var wg sync.WaitGroup
	results := make([]loop.Result, 8)
	for i := range results {
		wg.Go(func() { results[i] = w.ctrl.Run(context.Background(), fmt.Sprintf("run-%d", i), "goal") })
	}
	wg.Wait()
	for i, res := range results {
		if res.StopReason != loop.Completed || res.State.ToolCalls != 2 {
			t.Errorf("run %d: %s (%s), %d tool calls", i, res.StopReason, res.Detail, res.State.ToolCalls)
		}
		checkTrace(t, res, fmt.Sprintf("run-%d", i), 0)
	}
}

// asRecorded is how the loop records proposed calls: arguments that are not JSON become a JSON
// string of their text (so the state always marshals), empty arguments become {}, the rest is
// kept as the model sent it.
func asRecorded(calls []model.ToolCall) []model.ToolCall {
	out := slices.Clone(calls)
	for i := range out {
		switch args := out[i].Arguments; {
		case len(bytes.TrimSpace(args)) == 0:
			out[i].Arguments = json.RawMessage("{}")
		case !json.Valid(args):
			quoted, err := json.Marshal(string(args))
			if err != nil {
				panic(err)
			}
			out[i].Arguments = quoted
		}
	}
	return out
}

// A model that returns neither a response nor an error is a broken model, not a crash: the run
// fails with a sentence that says so.
func TestModelReturningNothingFails(t *testing.T) {
	broken := model.Func(func(context.Context, *model.Request) (*model.Response, error) { return nil, nil })
	c, err := loop.New(loop.Config{Model: broken, Clock: clock.NewVirtual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "run-1", "goal")
	if res.StopReason != loop.Failed || !strings.Contains(res.Detail, "neither a response nor an error") {
		t.Fatalf("stop %s (%s), want failed naming the empty reply", res.StopReason, res.Detail)
	}
	if res.State.Iteration != 0 {
		t.Errorf("%d iterations counted for a reply with no proposal", res.State.Iteration)
	}
}

// Invalid proposals in a row are counted in call order, so a streak that reaches the budget in
// the middle of a turn stops the run even when a valid call comes after it in the same turn.
func TestInvalidStreakWithinATurn(t *testing.T) {
	tools := []toolDef{mockTool("read_order", orderSchema, output(`{"status":"delivered"}`))}
	turn := callsTurn(tc("nope", `{}`), tc("nope", `{"x":1}`), tc("read_order", `{"order_id":"O-1"}`))
	w := newWorld(t, setup{tools: tools, budget: loop.Budget{MaxInvalidActions: 2}, turns: []model.Turn{turn, answerTurn("done")}}, t0)
	res := w.run(t, context.Background(), "run-1", "goal")
	if res.StopReason != loop.Refused || !strings.Contains(res.Detail, "2 invalid proposals in a row") {
		t.Fatalf("stop %s (%s), want refused after 2 invalid proposals in a row", res.StopReason, res.Detail)
	}
	if res.State.ToolCalls != 0 {
		t.Errorf("%d calls executed in a refused turn", res.State.ToolCalls)
	}
}
