package loop_test

// Tests of the loop controller. The first part holds shared fixtures (script and mock builders, a
// world of deterministic parts with instruments, and the invariants every run must satisfy); the
// tests follow.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
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
}

func (r *recorder) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	resp, err := r.inner.Generate(ctx, req)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
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
	// onCall runs inside the named tool when it executes (after it is logged).
	onCall map[string]func(ctx context.Context, args json.RawMessage)
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
			inner = tool.Func(d.spec, d.fn)
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

// checkRun checks what must hold after any run: a contract stop reason, every proposed call
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
		if !reflect.DeepEqual(msgs[i].Calls, p.Calls) {
			t.Errorf("turn %d: the assistant message carries calls %v, the model proposed %v", k+1, msgs[i].Calls, p.Calls)
		}
		if k == len(turns)-1 && st.PendingTurn != nil {
			if len(after) != 0 {
				t.Errorf("the turn pending approval already has %d results", len(after))
			}
			if !reflect.DeepEqual(st.PendingTurn.Calls, p.Calls) {
				t.Errorf("PendingTurn calls %v, want the last turn's calls %v", st.PendingTurn.Calls, p.Calls)
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
	if stops != 1 {
		t.Errorf("%d stop events, want exactly 1", stops)
	}
	if last := ev[len(ev)-1]; last.Type != trace.Stop {
		t.Errorf("the last event is %s, want stop; trace:\n%s", last.Type, formatEvents(ev))
	} else if last.StopReason != string(res.StopReason) {
		t.Errorf("the stop event says %q, the result %q", last.StopReason, res.StopReason)
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
