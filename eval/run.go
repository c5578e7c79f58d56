package eval

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/fixture"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// Epoch is where the virtual clock of every scripted eval run starts, so traces are reproducible.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Options change how cases run.
type Options struct {
	// Model, when set, replaces every fixture's scripted model (reins eval --model), a scripted
	// summarizer of a context policy included. Runs then use the real clock, since a real model
	// takes real time.
	Model model.Model
	// Sink, when set, receives every trace event of every run.
	Sink trace.Sink
}

// RunResult is the outcome of one run of one case.
type RunResult struct {
	Run               int             `json:"run"`
	Passed            bool            `json:"passed"`
	Failure           string          `json:"failure,omitempty"`
	StopReason        loop.StopReason `json:"stop_reason"`
	Detail            string          `json:"detail"`
	Answer            string          `json:"answer,omitempty"`
	Iterations        int             `json:"iterations"`
	ToolCalls         int             `json:"tool_calls"`
	Tokens            int64           `json:"tokens"`
	CostUSD           float64         `json:"cost_usd"`
	Latency           time.Duration   `json:"latency_ns"`
	Proposals         int             `json:"proposals"`
	InvalidActions    int             `json:"invalid_actions"`
	RepeatedProposals int             `json:"repeated_proposals"`

	Result loop.Result `json:"-"`
}

// Controller builds the loop controller for a fixture: its mocked tools, policy, budget, scripted
// approver and (unless opts.Model replaces it) scripted model, all on clk.
func Controller(f *fixture.Fixture, clk clock.Clock, opts Options) (*loop.Controller, error) {
	tools := make([]tool.Tool, 0, len(f.Tools))
	for _, d := range f.Tools {
		spec := tool.Spec{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema, SideEffect: d.SideEffect}
		m, err := tool.NewMock(spec, f.MockedTools[d.Name], clk)
		if err != nil {
			return nil, &fixture.InvalidError{File: f.File, Key: "mocked_tools." + d.Name, Msg: err.Error()}
		}
		tools = append(tools, m)
	}
	m := opts.Model
	if m == nil {
		s, err := model.NewScripted(f.Model, clk)
		if err != nil {
			return nil, &fixture.InvalidError{File: f.File, Key: "model", Msg: err.Error()}
		}
		m = s
	}
	policy, err := contextPolicy(f, clk, opts)
	if err != nil {
		return nil, err
	}
	c, err := loop.New(loop.Config{
		Model:        m,
		Tools:        tools,
		Instructions: f.Instructions,
		Policy:       f.Policy.Policy(),
		Budget:       f.Budget.Budget(),
		Approver:     newApprover(f.Approvals),
		Clock:        clk,
		Sink:         opts.Sink,
		Context:      policy,
	})
	if err != nil {
		return nil, &fixture.InvalidError{File: f.File, Msg: err.Error()}
	}
	return c, nil
}

// contextPolicy is the fixture's context policy: its summarizer scripted, on clk, unless
// opts.Model replaces every scripted model.
func contextPolicy(f *fixture.Fixture, clk clock.Clock, opts Options) (loop.ContextPolicy, error) {
	c := f.Context
	if c == nil {
		return loop.ContextPolicy{}, nil
	}
	spec := loop.ContextSpec{MaxTokens: c.MaxTokens, Strategy: c.Strategy, KeepLast: c.KeepLast}
	if c.Strategy != loop.Summarize {
		return spec.Policy(nil), nil
	}
	if opts.Model != nil {
		return spec.Policy(opts.Model), nil
	}
	s, err := model.NewScripted(c.Summarizer, clk)
	if err != nil {
		return loop.ContextPolicy{}, &fixture.InvalidError{File: f.File, Key: "context.summarizer", Msg: err.Error()}
	}
	return spec.Policy(s), nil
}

// RunCase runs a fixture once (run is 1-based) and checks its expectations.
func RunCase(ctx context.Context, f *fixture.Fixture, run int, opts Options) (RunResult, error) {
	var clk clock.Clock = clock.Real{}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opts.Model == nil {
		v := clock.NewVirtual(Epoch)
		clk = v
		if f.CancelAfter != nil {
			clk = &cancellingClock{Virtual: v, at: Epoch.Add(f.CancelAfter.Std()), cancel: cancel}
			if f.CancelAfter.Std() <= 0 {
				cancel() // the clock starts where the caller cancels: no sleep will get there
			}
		}
	}
	c, err := Controller(f, clk, opts)
	if err != nil {
		return RunResult{}, err
	}
	start := clk.Now()
	res := c.Run(ctx, f.CaseID+"-"+strconv.Itoa(run), f.Goal)
	st := res.State
	rr := RunResult{
		Run: run, StopReason: res.StopReason, Detail: res.Detail, Answer: res.Answer,
		Iterations: st.Iteration, ToolCalls: st.ToolCalls, Tokens: st.Usage.Total(), CostUSD: st.CostUSD,
		Latency: clk.Now().Sub(start), Proposals: st.Proposals, InvalidActions: st.InvalidActions,
		RepeatedProposals: st.RepeatedProposals, Result: res,
	}
	rr.Failure = Check(&f.Expected, res)
	rr.Passed = rr.Failure == ""
	return rr, nil
}

// Check returns the first expectation the result does not meet, with expected and actual, or ""
// when it meets them all.
func Check(e *fixture.Expected, res loop.Result) string {
	st := res.State
	if res.StopReason != e.StopReason {
		return fmt.Sprintf("stop_reason: expected %s, got %s (%s)", e.StopReason, res.StopReason, res.Detail)
	}
	if e.AnswerContains != "" && !strings.Contains(res.Answer, e.AnswerContains) {
		return fmt.Sprintf("answer_contains: expected the answer to contain %q, got %q", e.AnswerContains, res.Answer)
	}
	if msg := checkRange(e.ToolCalls, "tool_calls", st.ToolCalls); msg != "" {
		return msg
	}
	if msg := checkRange(e.Iterations, "iterations", st.Iteration); msg != "" {
		return msg
	}
	for _, t := range e.ForbiddenTools {
		if n := st.Executed[t]; n > 0 {
			return fmt.Sprintf("forbidden_tools: expected %s never to execute, it executed %d time(s)", t, n)
		}
	}
	for _, t := range e.CalledTools {
		if st.Executed[t] == 0 {
			return fmt.Sprintf("called_tools: expected %s to execute at least once, it never did", t)
		}
	}
	for _, t := range e.RequiresTraceEvents {
		if !trace.Has(res.Trace, t) {
			return fmt.Sprintf("requires_trace_events: expected an event of type %s in the trace, found none", t)
		}
	}
	return ""
}

// checkRange says how got falls outside r (nil: anywhere is fine), or "".
func checkRange(r *fixture.Range, key string, got int) string {
	if r == nil {
		return ""
	}
	if r.Min != nil && got < *r.Min {
		return fmt.Sprintf("%s: expected at least %d, got %d", key, *r.Min, got)
	}
	if r.Max != nil && got > *r.Max {
		return fmt.Sprintf("%s: expected at most %d, got %d", key, *r.Max, got)
	}
	return ""
}

// approver replays the fixture's scripted decisions: the n-th call of a tool that needs approval
// gets the n-th decision listed for that tool. With none left it has no decision.
type approver struct {
	byTool map[string][]fixture.Approval
}

func newApprover(list []fixture.Approval) *approver {
	a := &approver{byTool: map[string][]fixture.Approval{}}
	for _, d := range list {
		a.byTool[d.Tool] = append(a.byTool[d.Tool], d)
	}
	return a
}

func (a *approver) Decide(_ context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
	list := a.byTool[req.Call.Name]
	if req.Seq >= len(list) {
		return loop.Decision{}, fmt.Errorf("%w: no scripted approval left for %s", loop.ErrNoDecision, req.Call.Name)
	}
	d := list[req.Seq]
	return loop.Decision{Approve: d.Decision == "approve", Message: d.Message}, nil
}

// cancellingClock is the virtual clock of a fixture with cancel_after: the caller cancels the run
// when the clock reaches that point, interrupting whatever was waiting on it.
type cancellingClock struct {
	*clock.Virtual
	at     time.Time
	cancel context.CancelFunc
	once   sync.Once
}

func (c *cancellingClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if left := c.at.Sub(c.Now()); d >= left {
		c.Advance(left)
		c.once.Do(c.cancel)
		return ctx.Err()
	}
	c.Advance(d)
	return nil
}
