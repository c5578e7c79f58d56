package loop_test

// FuzzLoop decodes its bytes into a random trajectory (tools, policy, budget, approvals, a model
// script and mocked results) and checks the loop's invariants on it. The byte format is defined
// once, by traj.walk, which both decodes fuzz input and encodes the hand-written seeds.

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

// qSchema: an object with exactly one non-empty string "q".
const qSchema = `{"type":"object","properties":{"q":{"type":"string","minLength":1}},"required":["q"],"additionalProperties":false}`

// The declared tools: a and c have a schema, b and d accept any object. c always needs approval
// (from its spec); the policy flags add the rest.
var fuzzTools = [4]struct{ name, schema string }{{"a", qSchema}, {"b", ""}, {"c", qSchema}, {"d", ""}}

// The names the model may call: the four declared tools, an unknown one, and "z", which is
// undeclared and forbidden when traj.ForbidZ is set.
var fuzzCallNames = [6]string{"a", "b", "c", "d", "x", "z"}

// The arguments the model may pass. 0 and 2 are the same call; 9 ("null") becomes {} in the
// scripted model.
var fuzzArgs = [10]string{`{"q":"x"}`, `{"q":"y"}`, `{ "q" : "x" }`, `{}`, `{"q":""}`, `{"q":"x","extra":1}`, `[1]`, `"s"`, `{bad`, `null`}

// Policy flags of a declared tool.
const (
	flagAllow    = 1 // listed in Policy.Allow (when traj.AllowList is set)
	flagForbid   = 2
	flagApproval = 4
	flagEvidence = 8
)

// Turn kinds of the script.
const (
	turnAnswer = iota
	turnEmptyAnswer
	turnCalls
	turnCalls2
	turnCalls3
	turnEscalate
	turnRefuse
	turnError
	numTurnKinds
)

// Mock result kinds.
const (
	mockJSON = iota
	mockPrettyJSON
	mockText
	mockRetryable
	mockFatal
	numMockKinds
)

// Approval decisions, per tool and Seq.
const (
	decideApprove = iota
	decideDeny
	decideNone
)

// Context modes.
const (
	ctxBackground = iota
	ctxExpired    // a caller's deadline that has already passed
	ctxCancel     // the caller cancels after CancelAfter+1 tool executions
	ctxBackground2
)

type fuzzCall struct{ Name, Args int }

type fuzzTurn struct {
	Kind, Retryable, Usage, Cost, Latency int
	Calls                                 []fuzzCall
}

type fuzzMock struct{ Kind, Latency int }

// traj is one fuzz case. Every field is a small int; walk defines its byte encoding.
type traj struct {
	AllowList int
	Flags     [4]int
	ForbidZ   int
	// Budget: each value v means the limit below (see budget()).
	Iterations, ToolCalls, Duration, Tokens, Cost, Failures, Repeated, Invalid int
	Retries, Concurrent                                                        int
	Approver                                                                   int // 0 none, 1 scripted by Decisions, 2 approves everything
	Decisions                                                                  [4][4]int
	Ctx, CancelAfter                                                           int
	Mocks                                                                      [4][]fuzzMock
	Turns                                                                      []fuzzTurn
	// The context policy: none when CtxMax is 0; Summaries script the summarizer (summaryKinds).
	CtxMax, CtxStrategy, CtxKeep int
	Summaries                    []int
}

// Summarizer replies.
const (
	summaryShort = iota
	summaryLong  // longer than the room for it
	summaryError
	summaryEmpty
	numSummaryKinds
)

// codec reads (decoder) or writes (encoder) one small int of k possible values.
type codec interface{ val(p *int, k int) }

type decoder struct{ b []byte }

func (d *decoder) val(p *int, k int) {
	if len(d.b) == 0 {
		*p = 0
		return
	}
	*p = int(d.b[0]) % k
	d.b = d.b[1:]
}

type encoder struct{ b []byte }

func (e *encoder) val(p *int, k int) {
	if *p < 0 || *p >= k {
		panic(fmt.Sprintf("seed value %d out of range [0,%d)", *p, k))
	}
	e.b = append(e.b, byte(*p))
}

// walk visits every field in a fixed order: the byte format of a fuzz case.
func (t *traj) walk(c codec) {
	c.val(&t.AllowList, 2)
	for i := range t.Flags {
		c.val(&t.Flags[i], 16)
	}
	c.val(&t.ForbidZ, 2)
	for _, p := range []*int{&t.Iterations, &t.ToolCalls, &t.Duration} {
		c.val(p, 5)
	}
	c.val(&t.Tokens, 6)
	c.val(&t.Cost, 6)
	for _, p := range []*int{&t.Failures, &t.Repeated, &t.Invalid} {
		c.val(p, 5)
	}
	c.val(&t.Retries, 4)
	c.val(&t.Concurrent, 4)
	c.val(&t.Approver, 3)
	for i := range t.Decisions {
		for j := range t.Decisions[i] {
			c.val(&t.Decisions[i][j], 3)
		}
	}
	c.val(&t.Ctx, 4)
	c.val(&t.CancelAfter, 4)
	for i := range t.Mocks {
		n := len(t.Mocks[i]) - 1
		c.val(&n, 3)
		if len(t.Mocks[i]) != n+1 {
			t.Mocks[i] = make([]fuzzMock, n+1)
		}
		for j := range t.Mocks[i] {
			c.val(&t.Mocks[i][j].Kind, numMockKinds)
			c.val(&t.Mocks[i][j].Latency, 4)
		}
	}
	n := len(t.Turns)
	c.val(&n, 13)
	if len(t.Turns) != n {
		t.Turns = make([]fuzzTurn, n)
	}
	for i := range t.Turns {
		tu := &t.Turns[i]
		c.val(&tu.Kind, numTurnKinds)
		c.val(&tu.Retryable, 2)
		c.val(&tu.Usage, 4)
		c.val(&tu.Cost, 4)
		c.val(&tu.Latency, 4)
		if tu.isCalls() {
			m := len(tu.Calls) - 1
			c.val(&m, 3)
			if len(tu.Calls) != m+1 {
				tu.Calls = make([]fuzzCall, m+1)
			}
			for j := range tu.Calls {
				c.val(&tu.Calls[j].Name, len(fuzzCallNames))
				c.val(&tu.Calls[j].Args, len(fuzzArgs))
			}
		} else {
			tu.Calls = nil
		}
	}
	// Last, so that the corpus written before the context policy still decodes, without one.
	c.val(&t.CtxMax, 6)
	c.val(&t.CtxStrategy, len(loop.ContextStrategies))
	c.val(&t.CtxKeep, 4)
	m := len(t.Summaries)
	c.val(&m, 5)
	if len(t.Summaries) != m {
		t.Summaries = make([]int, m)
	}
	for i := range t.Summaries {
		c.val(&t.Summaries[i], numSummaryKinds)
	}
}

func (tu *fuzzTurn) isCalls() bool {
	return tu.Kind == turnCalls || tu.Kind == turnCalls2 || tu.Kind == turnCalls3
}

func decodeTraj(data []byte) *traj {
	t := new(traj)
	t.walk(&decoder{b: data})
	return t
}

func (t *traj) encode() []byte {
	e := &encoder{}
	t.walk(e)
	return e.b
}

// ---- what a trajectory means ----

func (t *traj) budget() loop.Budget {
	return loop.Budget{
		MaxIterations:     t.Iterations + 1,
		MaxToolCalls:      t.ToolCalls + 1,
		MaxDuration:       time.Duration(t.Duration+1) * 10 * time.Second,
		MaxTokens:         int64(t.Tokens) * 100, // 0: unlimited
		MaxCostUSD:        float64(t.Cost) * 0.1, // 0: unlimited
		MaxToolFailures:   t.Failures + 1,
		MaxRepeatedCalls:  t.Repeated + 1,
		MaxInvalidActions: t.Invalid + 1,
	}
}

func (t *traj) policy() loop.Policy {
	var p loop.Policy
	if t.AllowList == 1 {
		p.Allow = []string{} // non-nil: only the flagged tools
	}
	for i, f := range t.Flags {
		name := fuzzTools[i].name
		if t.AllowList == 1 && f&flagAllow != 0 {
			p.Allow = append(p.Allow, name)
		}
		if f&flagForbid != 0 {
			p.Forbid = append(p.Forbid, name)
		}
		if f&flagApproval != 0 {
			p.RequireApproval = append(p.RequireApproval, name)
		}
		if f&flagEvidence != 0 {
			p.RequiredEvidence = append(p.RequiredEvidence, name)
		}
	}
	if t.ForbidZ == 1 {
		p.Forbid = append(p.Forbid, "z")
	}
	return p
}

// The independent oracle: what may execute, decided from the trajectory, not by the loop.

func (t *traj) forbidden(tool int) bool { return t.Flags[tool]&flagForbid != 0 }

func (t *traj) allowed(tool int) bool {
	return !t.forbidden(tool) && (t.AllowList == 0 || t.Flags[tool]&flagAllow != 0)
}

func (t *traj) needsApproval(tool int) bool {
	return fuzzTools[tool].name == "c" || t.Flags[tool]&flagApproval != 0
}

func validArgs(tool int, args []byte) bool {
	var v any
	if json.Unmarshal(args, &v) != nil {
		return false
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return false
	}
	if fuzzTools[tool].schema == "" {
		return true
	}
	q, ok := obj["q"].(string)
	return ok && q != "" && len(obj) == 1
}

func (t *traj) turns() []model.Turn {
	out := make([]model.Turn, len(t.Turns))
	for i, tu := range t.Turns {
		var m model.Turn
		switch tu.Kind {
		case turnAnswer:
			m = answerTurn(fmt.Sprintf("answer %d", i))
		case turnEmptyAnswer:
			m = answerTurn("")
		case turnEscalate:
			m = escalateTurn("help")
		case turnRefuse:
			m = refuseTurn("no")
		case turnError:
			m = modelErrTurn("model down", tu.Retryable == 1)
		default:
			for _, c := range tu.Calls {
				m.ToolCalls = append(m.ToolCalls, tc(fuzzCallNames[c.Name], fuzzArgs[c.Args]))
			}
		}
		// Retryable on an answer or calls: the reply was cut off at its output limit.
		m.Truncated = tu.Retryable == 1 && (m.Text != nil || m.ToolCalls != nil)
		if tu.Usage > 0 {
			m = withUsage(m, int64(tu.Usage)*20, int64(tu.Usage)*20)
		}
		m.CostUSD = float64(tu.Cost) * 0.05
		if tu.Latency > 0 {
			m = withLatency(m, time.Duration(tu.Latency)*4*time.Second)
		}
		out[i] = m
	}
	return out
}

// fuzzToolsTokens is the estimate of every fuzz tool's definition: a context policy's
// max_tokens above it is always accepted by loop.New.
var fuzzToolsTokens = func() int64 {
	var defs []model.ToolDef
	for _, d := range fuzzTools {
		defs = append(defs, model.ToolDef{Name: d.name, InputSchema: json.RawMessage(d.schema)})
	}
	return model.EstimateInputTokens(&model.Request{Tools: defs})
}()

// contextPolicy is the trajectory's context policy: max_tokens a little over the tools'
// definitions, so that a few of the fuzz's small messages fill it.
func (t *traj) contextPolicy(clk clock.Clock) (loop.ContextPolicy, error) {
	if t.CtxMax == 0 {
		return loop.ContextPolicy{}, nil
	}
	p := loop.ContextPolicy{MaxTokens: fuzzToolsTokens + 10 + int64(t.CtxMax)*30, Strategy: loop.ContextStrategies[t.CtxStrategy], KeepLast: t.CtxKeep}
	if p.Strategy != loop.Summarize {
		return p, nil
	}
	turns := make([]model.Turn, len(t.Summaries))
	for i, k := range t.Summaries {
		switch k {
		case summaryShort:
			turns[i] = withUsage(answerTurn(fmt.Sprintf("summary %d", i)), 30, 10)
		case summaryLong:
			turns[i] = answerTurn(strings.Repeat("long summary ", 100))
		case summaryError:
			turns[i] = modelErrTurn("summarizer down", true)
		case summaryEmpty:
			turns[i] = answerTurn("")
		}
	}
	s, err := model.NewScripted(turns, clk)
	p.Summarizer = s
	return p, err
}

func mockResult(m fuzzMock) tool.MockResult {
	var r tool.MockResult
	switch m.Kind {
	case mockJSON:
		r = output(`{"v":1}`)
	case mockPrettyJSON:
		r = output("{\n  \"v\": [1, 2]\n}")
	case mockText:
		r = output("plain text, not JSON")
	case mockRetryable:
		r = failure("try again", true)
	case mockFatal:
		r = failure("broken", false)
	}
	if m.Latency > 0 {
		r = slow(r, time.Duration(m.Latency)*3*time.Second)
	}
	return r
}

// ---- running a trajectory ----

// fuzzWorld is one controller for a trajectory, with tools that police themselves: every real
// execution is logged and checked against the oracle inside the tool.
type fuzzWorld struct {
	clk   *clock.Virtual
	model *recorder
	ctrl  *loop.Controller

	mu         sync.Mutex
	execs      []execution
	violations []string
	approved   map[string]bool // "iteration/index" of approved calls
	succeeded  map[string]int  // successful executions per tool, from the mocks' own results
	sunk       []trace.Event
	cancel     context.CancelFunc
}

func newFuzzWorld(t testing.TB, tr *traj, now time.Time, cancel context.CancelFunc) *fuzzWorld {
	t.Helper()
	w := &fuzzWorld{clk: clock.NewVirtual(now), approved: map[string]bool{}, succeeded: map[string]int{}, cancel: cancel}
	scripted, err := model.NewScripted(tr.turns(), w.clk)
	if err != nil {
		t.Fatalf("NewScripted: %v", err)
	}
	w.model = &recorder{inner: scripted}
	var tools []tool.Tool
	for i, d := range fuzzTools {
		spec := tool.Spec{Name: d.name, NeedsApproval: d.name == "c"}
		if d.schema != "" {
			spec.InputSchema = json.RawMessage(d.schema)
		}
		results := make([]tool.MockResult, len(tr.Mocks[i]))
		for j, m := range tr.Mocks[i] {
			results[j] = mockResult(m)
		}
		m, err := tool.NewMock(spec, results, w.clk)
		if err != nil {
			t.Fatalf("NewMock: %v", err)
		}
		tools = append(tools, &guard{w: w, tr: tr, index: i, inner: m})
	}
	var approver loop.Approver
	switch tr.Approver {
	case 1, 2:
		approver = approverFunc(func(_ context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
			d := decideApprove
			if tr.Approver == 1 {
				i := slices.IndexFunc(fuzzTools[:], func(x struct{ name, schema string }) bool { return x.name == req.Call.Name })
				if i < 0 || req.Seq >= len(tr.Decisions[i]) {
					return loop.Decision{}, loop.ErrNoDecision
				}
				d = tr.Decisions[i][req.Seq]
			}
			switch d {
			case decideApprove:
				w.mu.Lock()
				w.approved[fmt.Sprintf("%d/%d", req.Iteration, req.CallIndex)] = true
				w.mu.Unlock()
				return loop.Decision{Approve: true}, nil
			case decideDeny:
				return loop.Decision{Message: "denied"}, nil
			}
			return loop.Decision{}, loop.ErrNoDecision
		})
	}
	policy, err := tr.contextPolicy(w.clk)
	if err != nil {
		t.Fatalf("summarizer: %v", err)
	}
	w.ctrl, err = loop.New(loop.Config{
		Context: policy,
		Model:   w.model, Tools: tools, Policy: tr.policy(), Budget: tr.budget(), Approver: approver, Clock: w.clk,
		Sink:               trace.SinkFunc(func(e trace.Event) { w.sunk = append(w.sunk, e) }),
		MaxConcurrentTools: tr.Concurrent,
		ModelRetries:       tr.Retries - 1,
	})
	if err != nil {
		t.Fatalf("loop.New: %v", err)
	}
	return w
}

// guard wraps a mocked tool: it logs each real execution and records a violation when the
// execution should never have happened.
type guard struct {
	w     *fuzzWorld
	tr    *traj
	index int
	inner *tool.Mock
}

func (g *guard) Spec() tool.Spec { return g.inner.Spec() }

func (g *guard) Call(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
	w, name := g.w, fuzzTools[g.index].name
	info := tool.InfoFrom(ctx)
	w.mu.Lock()
	var bad []string
	if info == nil {
		bad = append(bad, "no tool.Info in the context")
		info = &tool.Info{}
	}
	if g.tr.forbidden(g.index) {
		bad = append(bad, "forbidden tool executed")
	}
	if !g.tr.allowed(g.index) {
		bad = append(bad, "tool outside policy.allow executed")
	}
	if !validArgs(g.index, args) {
		bad = append(bad, "schema-invalid arguments reached the tool")
	}
	if g.tr.needsApproval(g.index) && !w.approved[fmt.Sprintf("%d/%d", info.Iteration, info.Index)] {
		bad = append(bad, "executed without an approve decision")
	}
	for _, b := range bad {
		w.violations = append(w.violations, fmt.Sprintf("%s(%s) at %d/%d: %s", name, args, info.Iteration, info.Index, b))
	}
	w.execs = append(w.execs, execution{Tool: name, Args: string(args), Key: key, Info: *info})
	n := len(w.execs)
	mocks := g.tr.Mocks[g.index]
	if k := mocks[min(info.Seq, len(mocks)-1)].Kind; k != mockRetryable && k != mockFatal {
		w.succeeded[name]++
	}
	w.mu.Unlock()
	if w.cancel != nil && g.tr.Ctx == ctxCancel && n == g.tr.CancelAfter+1 {
		w.cancel()
	}
	return g.inner.Call(ctx, args, key)
}

func (t *traj) context() (context.Context, context.CancelFunc) {
	switch t.Ctx {
	case ctxExpired:
		return context.WithDeadline(context.Background(), time.Unix(1, 0))
	case ctxCancel:
		return context.WithCancel(context.Background())
	}
	return context.WithCancel(context.Background())
}

const fuzzRunID = "fuzz-run"

// runTraj runs a trajectory to its end and checks every invariant. It returns the result.
func runTraj(t *testing.T, tr *traj) loop.Result {
	ctx, cancel := tr.context()
	defer cancel()
	w := newFuzzWorld(t, tr, t0, cancel)
	res := w.ctrl.Run(ctx, fuzzRunID, "fuzz goal")
	checkFuzzRun(t, tr, w, res)

	// A stopped run stays stopped.
	r := w.ctrl.Resume(res.State)
	if !r.Step(ctx) || len(r.Result().Trace) != 0 {
		t.Errorf("Step after the stop did something: %d events", len(r.Result().Trace))
	}

	if tr.Ctx == ctxCancel {
		return res // the cancellation races with concurrent tools: no replay comparisons
	}
	// Determinism: the same trajectory gives the same run.
	ctx2, cancel2 := tr.context()
	defer cancel2()
	w2 := newFuzzWorld(t, tr, t0, cancel2)
	res2 := w2.ctrl.Run(ctx2, fuzzRunID, "fuzz goal")
	if !reflect.DeepEqual(res.State, res2.State) {
		t.Errorf("two runs of one trajectory ended in different states:\n%+v\n%+v", res.State, res2.State)
	}
	if !reflect.DeepEqual(withoutDurations(res.Trace), withoutDurations(res2.Trace)) {
		t.Errorf("two runs of one trajectory have different traces:\n%s", diffEvents(withoutDurations(res.Trace), withoutDurations(res2.Trace)))
	}
	// Every state must survive JSON, malformed arguments included (the loop keeps those as a
	// JSON string of their text).
	checkResumeEquivalence(t, tr, w, res)
	return res
}

// withoutDurations drops the measured durations of tool calls, which depend on how concurrent
// calls interleave on the virtual clock.
func withoutDurations(ev []trace.Event) []trace.Event {
	out := slices.Clone(ev)
	for i := range out {
		if out[i].Type == trace.ToolResult {
			out[i].Duration = 0
		}
	}
	return out
}

func checkFuzzRun(t *testing.T, tr *traj, w *fuzzWorld, res loop.Result) {
	t.Helper()
	st := res.State
	b := w.ctrl.Budget()
	if !slices.Contains(loop.StopReasons, res.StopReason) {
		t.Fatalf("stop reason %q is not one of loop.StopReasons", res.StopReason)
	}
	if res.StopReason != st.StopReason || res.Answer != st.Answer || res.Detail != st.Detail {
		t.Errorf("Result and State disagree")
	}
	if st.ToolCalls > b.MaxToolCalls {
		t.Errorf("%d tool calls, budget %d", st.ToolCalls, b.MaxToolCalls)
	}
	if st.Iteration > b.MaxIterations {
		t.Errorf("%d iterations, budget %d", st.Iteration, b.MaxIterations)
	}
	for _, v := range w.violations {
		t.Errorf("violation: %s", v)
	}
	if len(w.execs) != st.ToolCalls {
		t.Errorf("the tools executed %d times, State.ToolCalls is %d", len(w.execs), st.ToolCalls)
	}
	sum := 0
	for _, n := range st.Executed {
		sum += n
	}
	if sum != st.ToolCalls {
		t.Errorf("State.Executed sums to %d, State.ToolCalls is %d", sum, st.ToolCalls)
	}
	keys := map[string]bool{}
	for _, e := range w.execs {
		if keys[e.Key] {
			t.Errorf("idempotency key %q used twice", e.Key)
		}
		keys[e.Key] = true
	}
	if st.InvalidActions > st.Proposals {
		t.Errorf("%d invalid actions out of %d proposals", st.InvalidActions, st.Proposals)
	}
	if res.StopReason == loop.Completed {
		if strings.TrimSpace(res.Answer) == "" {
			t.Errorf("completed with an empty answer")
		}
		for _, need := range tr.policy().RequiredEvidence {
			if w.succeeded[need] == 0 {
				t.Errorf("completed without the required evidence %s", need)
			}
		}
	} else if res.Answer != "" {
		t.Errorf("stopped with %s but has an answer %q", res.StopReason, res.Answer)
	}
	if tr.Ctx == ctxExpired && (res.StopReason != loop.Timeout || st.ModelCalls != 0) {
		t.Errorf("an expired caller deadline gave %s after %d model calls, want timeout before any", res.StopReason, st.ModelCalls)
	}
	if res.StopReason == loop.Cancelled && tr.Ctx != ctxCancel {
		t.Errorf("cancelled, but nobody cancelled")
	}
	checkFuzzContext(t, tr, w, res)
	props := w.model.proposals()
	checkTerminalProposals(t, tr, props, res)
	checkAnswered(t, st, props)
	checkTrace(t, res, fuzzRunID, 0)
	if !reflect.DeepEqual(w.sunk, res.Trace) {
		t.Errorf("the sink received different events than Result.Trace:\n%s", diffEvents(w.sunk, res.Trace))
	}
	if t.Failed() {
		t.Logf("trajectory: %+v\ntrace:\n%s", *tr, formatEvents(res.Trace))
	}
}

// checkFuzzContext checks what a context policy promises: every request starts with the goal,
// carries no tool result without its call, and is estimated within max_tokens; without a policy
// every request is the whole conversation, and there are no context events nor
// context_exhausted.
func checkFuzzContext(t *testing.T, tr *traj, w *fuzzWorld, res loop.Result) {
	t.Helper()
	policy, _ := tr.contextPolicy(nil)
	msgs := res.State.Messages
	for k, r := range w.model.requests() {
		req := r.Messages
		if policy.MaxTokens == 0 {
			if len(req) > len(msgs) || !reflect.DeepEqual(req, msgs[:len(req)]) {
				t.Errorf("request %d is not the conversation, without a context policy", k)
			}
			continue
		}
		if len(req) == 0 || !reflect.DeepEqual(req[0], msgs[0]) {
			t.Errorf("request %d does not start with the goal", k)
		}
		calls := map[string]bool{}
		for i, m := range req {
			for _, c := range m.Calls {
				calls[c.ID] = true
			}
			if m.Role == model.RoleTool && !calls[m.CallID] {
				t.Errorf("request %d message %d answers call %s, which it does not carry", k, i, m.CallID)
			}
		}
		if est := model.EstimateInputTokens(&r); est > policy.MaxTokens {
			t.Errorf("request %d is estimated at %d tokens, over max_tokens %d", k, est, policy.MaxTokens)
		}
	}
	if policy.MaxTokens == 0 && (res.StopReason == loop.ContextExhausted || trace.Has(res.Trace, trace.Context)) {
		t.Errorf("without a context policy: stop reason %s, context events %d", res.StopReason, len(eventsOf(res.Trace, trace.Context)))
	}
}

// checkTerminalProposals: an escalation, a refusal or a turn with a forbidden call always ends
// the run, with its own stop reason unless the model call that proposed it spent a budget (or
// the caller gave up); and a completed run's answer is the last proposal.
func checkTerminalProposals(t *testing.T, tr *traj, props []model.Proposal, res loop.Result) {
	t.Helper()
	policy := tr.policy()
	terminal := func(p model.Proposal) loop.StopReason {
		switch p.Kind {
		case model.KindEscalate:
			return loop.NeedsHuman
		case model.KindRefuse:
			return loop.Refused
		case model.KindToolCalls:
			for _, c := range p.Calls {
				if slices.Contains(policy.Forbid, c.Name) {
					return loop.Refused
				}
			}
		}
		return ""
	}
	for i, p := range props {
		want := terminal(p)
		if want == "" {
			continue
		}
		if i != len(props)-1 {
			t.Errorf("proposal %d (%s) should have ended the run, but the model was called again", i+1, p.Kind)
			continue
		}
		switch res.StopReason {
		case want, loop.MaxTokens, loop.MaxCost, loop.Timeout, loop.Cancelled:
		default:
			t.Errorf("the last proposal (%s) ended the run with %s, want %s", p.Kind, res.StopReason, want)
		}
	}
	if res.StopReason == loop.Completed {
		if last := props[len(props)-1]; last.Kind != model.KindAnswer || last.Text != res.Answer {
			t.Errorf("completed with %q, but the last proposal is %+v", res.Answer, last)
		}
	}
}

// checkResumeEquivalence replays the trajectory one Step per fresh controller, through JSON, and
// requires the same end as the uninterrupted run.
func checkResumeEquivalence(t *testing.T, tr *traj, ref *fuzzWorld, want loop.Result) {
	t.Helper()
	var (
		saved  []byte
		now    = t0
		events []trace.Event
		execs  []execution
	)
	for step := 0; ; step++ {
		ctx, cancel := tr.context()
		w := newFuzzWorld(t, tr, now, nil)
		var r *loop.Run
		if saved == nil {
			r = w.ctrl.Start(fuzzRunID, "fuzz goal")
		} else {
			st := new(loop.State)
			if err := json.Unmarshal(saved, st); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			r = w.ctrl.Resume(st)
		}
		startIter := r.State().Iteration
		stopped := r.Step(ctx)
		cancel()
		res := r.Result()
		checkTrace(t, res, fuzzRunID, startIter)
		for _, v := range w.violations {
			t.Errorf("resumed step %d: violation: %s", step, v)
		}
		events = append(events, res.Trace...)
		execs = append(execs, w.execs...)
		now = w.clk.Now()
		var err error
		if saved, err = json.Marshal(res.State); err != nil {
			t.Fatalf("marshal state: %v", err)
		}
		if stopped {
			break
		}
		if step > 20 {
			t.Fatalf("the step-by-step run did not stop")
		}
	}
	wantJSON, err := json.Marshal(want.State)
	if err != nil {
		t.Fatal(err)
	}
	if string(saved) != string(wantJSON) {
		t.Errorf("resumed step by step, the run ended in\n%s\nuninterrupted in\n%s", saved, wantJSON)
	}
	if !reflect.DeepEqual(withoutDurations(events), withoutDurations(want.Trace)) {
		t.Errorf("the step-by-step traces differ from the uninterrupted one:\n%s", diffEvents(withoutDurations(events), withoutDurations(want.Trace)))
	}
	if !reflect.DeepEqual(sortedExecs(execs), sortedExecs(ref.execs)) {
		t.Errorf("the step-by-step executions differ:\n%+v\n%+v", sortedExecs(execs), sortedExecs(ref.execs))
	}
}

// ---- seeds ----

// base is a permissive trajectory: every budget at 5 (tokens and cost unlimited), no policy, one
// JSON result per mock, no approver.
func base(turns ...fuzzTurn) traj {
	t := traj{Iterations: 4, ToolCalls: 4, Duration: 4, Failures: 4, Repeated: 4, Invalid: 4}
	for i := range t.Mocks {
		t.Mocks[i] = []fuzzMock{{Kind: mockJSON}}
	}
	t.Turns = turns
	return t
}

func fCalls(calls ...fuzzCall) fuzzTurn { return fuzzTurn{Kind: turnCalls, Calls: calls} }
func fAnswer() fuzzTurn                 { return fuzzTurn{Kind: turnAnswer} }

// call names and argument indexes, for readable seeds
const (
	fa, fb, fc, fd, fx, fz = 0, 1, 2, 3, 4, 5
	argX, argY, argXSpaced = 0, 1, 2
	argEmpty               = 3
)

type fuzzSeed struct {
	name string
	want loop.StopReason
	t    traj
}

func fuzzSeeds() []fuzzSeed {
	var seeds []fuzzSeed
	add := func(name string, want loop.StopReason, t traj) { seeds = append(seeds, fuzzSeed{name, want, t}) }

	add("completed", loop.Completed, base(fCalls(fuzzCall{fa, argX}, fuzzCall{fb, argEmpty}), fAnswer()))
	{
		t := base(fuzzTurn{Kind: turnAnswer}, fCalls(fuzzCall{fa, argX}, fuzzCall{fc, argY}), fAnswer())
		t.Flags[fa] = flagEvidence
		t.Approver = 1 // c: seq 0 approved (Decisions are zero: approve)
		add("completed/evidence_and_approval", loop.Completed, t)
	}
	{
		t := base(fCalls(fuzzCall{fb, argEmpty}), fCalls(fuzzCall{fa, argX}), fAnswer())
		t.AllowList = 1
		t.Flags[fa] = flagAllow
		add("completed/not_allowed_is_invalid", loop.Completed, t)
	}
	{
		t := base(fCalls(fuzzCall{fc, argX}), fCalls(fuzzCall{fc, argY}), fAnswer())
		t.Approver = 1
		t.Decisions[fc] = [4]int{decideDeny, decideApprove, decideNone, decideNone}
		add("completed/denied_then_approved", loop.Completed, t)
	}
	add("refused/model", loop.Refused, base(fuzzTurn{Kind: turnRefuse}))
	{
		t := base(fCalls(fuzzCall{fa, argX}, fuzzCall{fd, argEmpty}, fuzzCall{fb, argEmpty}))
		t.Flags[fd] = flagForbid
		add("refused/forbidden", loop.Refused, t)
	}
	{
		t := base(fCalls(fuzzCall{fz, argEmpty}))
		t.ForbidZ = 1
		add("refused/forbidden_undeclared", loop.Refused, t)
	}
	{
		t := base(fCalls(fuzzCall{fx, argEmpty}), fuzzTurn{Kind: turnEmptyAnswer}, fAnswer())
		t.Invalid = 1
		add("refused/invalid_streak", loop.Refused, t)
	}
	add("needs_human/escalate", loop.NeedsHuman, base(fuzzTurn{Kind: turnEscalate}))
	add("needs_human/script_exhausted", loop.NeedsHuman, base())
	add("needs_human/approval_pending", loop.NeedsHuman, base(fCalls(fuzzCall{fa, argX}, fuzzCall{fc, argX})))
	{
		t := base(fCalls(fuzzCall{fb, argEmpty}), fCalls(fuzzCall{fb, argX}), fAnswer())
		t.Mocks[fb] = []fuzzMock{{Kind: mockRetryable}}
		t.Failures = 1
		add("needs_human/tool_failures", loop.NeedsHuman, t)
	}
	{
		t := base(fCalls(fuzzCall{fa, argX}, fuzzCall{fb, argEmpty}))
		t.Mocks[fb] = []fuzzMock{{Kind: mockFatal}}
		add("tool_failure", loop.ToolFailure, t)
	}
	add("failed/non_retryable", loop.Failed, base(fuzzTurn{Kind: turnError}))
	add("failed/retries_exhausted", loop.Failed, base(
		fuzzTurn{Kind: turnError, Retryable: 1}, fuzzTurn{Kind: turnError, Retryable: 1}, fuzzTurn{Kind: turnError, Retryable: 1}))
	{
		t := base(fCalls(fuzzCall{fa, argX}), fCalls(fuzzCall{fa, argXSpaced}), fAnswer())
		t.Repeated = 1
		add("no_progress", loop.NoProgress, t)
	}
	{
		t := base(fCalls(fuzzCall{fa, argX}), fCalls(fuzzCall{fa, argY}), fAnswer())
		t.Iterations = 0
		add("max_iterations", loop.MaxIterations, t)
	}
	{
		t := base(fCalls(fuzzCall{fa, argX}, fuzzCall{fa, argY}, fuzzCall{fb, argEmpty}), fAnswer())
		t.ToolCalls = 1
		add("max_tool_calls", loop.MaxToolCalls, t)
	}
	{
		t := base(fuzzTurn{Kind: turnCalls, Usage: 3, Calls: []fuzzCall{{fa, argX}}}, fAnswer())
		t.Tokens = 1
		add("max_tokens", loop.MaxTokens, t)
	}
	{
		t := base(fCalls(fuzzCall{fa, argX}), fuzzTurn{Kind: turnAnswer, Cost: 3})
		t.Cost = 1
		add("max_cost", loop.MaxCost, t)
	}
	{
		t := base(fCalls(fuzzCall{fa, argX}), fuzzTurn{Kind: turnCalls, Latency: 3, Calls: []fuzzCall{{fa, argY}}}, fAnswer())
		t.Duration = 0
		add("timeout/model_latency", loop.Timeout, t)
	}
	{
		t := base(fCalls(fuzzCall{fa, argX}, fuzzCall{fb, argEmpty}), fAnswer())
		t.Mocks[fb] = []fuzzMock{{Kind: mockText, Latency: 3}, {Kind: mockPrettyJSON}}
		t.Mocks[fa] = []fuzzMock{{Kind: mockPrettyJSON, Latency: 2}}
		t.Duration = 0
		add("timeout/tool_latency", loop.Timeout, t)
	}
	{
		t := base(fAnswer())
		t.Ctx = ctxExpired
		add("timeout/expired_deadline", loop.Timeout, t)
	}
	{
		t := base(fCalls(fuzzCall{fa, argX}), fAnswer())
		t.Ctx = ctxCancel
		add("cancelled", loop.Cancelled, t)
	}
	{
		// The last 4 messages alone are over max_tokens.
		t := base(fCalls(fuzzCall{fa, argX}, fuzzCall{fb, argEmpty}), fCalls(fuzzCall{fa, argY}), fAnswer())
		t.CtxMax = 1
		add("context_exhausted", loop.ContextExhausted, t)
	}
	{
		cutCalls := fCalls(fuzzCall{fa, argX})
		cutCalls.Retryable = 1
		add("output_truncated", loop.OutputTruncated, base(fuzzTurn{Kind: turnAnswer, Retryable: 1, Usage: 1}, cutCalls,
			fuzzTurn{Kind: turnEmptyAnswer, Retryable: 1}, fAnswer()))
	}
	{
		t := base(fuzzTurn{Kind: turnAnswer, Retryable: 1, Usage: 2}, fAnswer())
		add("completed/after_a_cut_reply", loop.Completed, t)
	}
	for strategy, summaries := range [][]int{nil, nil, {summaryShort, summaryError, summaryEmpty, summaryLong}} {
		t := base(fCalls(fuzzCall{fa, argX}), fCalls(fuzzCall{fb, argEmpty}), fCalls(fuzzCall{fa, argY}), fCalls(fuzzCall{fd, argX}), fAnswer())
		t.CtxMax, t.CtxStrategy, t.CtxKeep, t.Summaries = 2, strategy, 1, summaries
		add("completed/context_"+string(loop.ContextStrategies[strategy]), loop.Completed, t)
	}
	{
		// A bit of everything, ending well.
		t := base(
			fuzzTurn{Kind: turnError, Retryable: 1, Latency: 1},
			fuzzTurn{Kind: turnEmptyAnswer, Usage: 1},
			fCalls(fuzzCall{fa, argX}, fuzzCall{fb, 6}, fuzzCall{fc, argX}),
			fCalls(fuzzCall{fx, argEmpty}),
			fCalls(fuzzCall{fb, 9}, fuzzCall{fd, argEmpty}, fuzzCall{fa, 5}),
			fuzzTurn{Kind: turnAnswer, Cost: 1},
		)
		t.Flags[fb] = flagEvidence | flagApproval
		t.Approver = 2
		t.Concurrent = 1
		t.Mocks[fb] = []fuzzMock{{Kind: mockText, Latency: 1}, {Kind: mockRetryable}}
		t.Iterations, t.Invalid, t.Retries = 4, 4, 3
		add("completed/mixed", loop.Completed, t)
	}
	return seeds
}

// TestFuzzSeeds runs every seed and checks it reaches the stop reason it was written for, so the
// seeds keep covering every stop reason as the loop evolves.
func TestFuzzSeeds(t *testing.T) {
	covered := map[loop.StopReason]bool{}
	for _, s := range fuzzSeeds() {
		t.Run(s.name, func(t *testing.T) {
			data := s.t.encode()
			if got := decodeTraj(data); !reflect.DeepEqual(*got, s.t) {
				t.Fatalf("the seed does not survive encoding:\n%+v\n%+v", *got, s.t)
			}
			res := runTraj(t, &s.t)
			if res.StopReason != s.want {
				t.Errorf("stop reason %s (%s), want %s\ntrace:\n%s", res.StopReason, res.Detail, s.want, formatEvents(res.Trace))
			}
			covered[res.StopReason] = true
		})
	}
	for _, r := range loop.StopReasons {
		if !covered[r] {
			t.Errorf("no seed stops with %s", r)
		}
	}
}

func FuzzLoop(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.t.encode())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runTraj(t, decodeTraj(data))
	})
}
