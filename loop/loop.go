// Package loop is the bounded agent-loop controller: observe → propose → validate → act → observe,
// under hard budgets, with an explicit stop reason every time.
//
// The model only proposes. This package decides: it checks budgets before each iteration, validates
// every part of every proposal (tool known, allowed, not forbidden, arguments matching the schema,
// answers non-empty and backed by the required evidence), asks for approval where policy says so,
// executes the accepted calls with idempotency keys, records one result per proposed call, and
// stops with one of the stop reasons (StopReasons).
//
// It owns the loop's State, budgets, policy enforcement and trace events. It must not do I/O of
// its own (no NATS, no network, no files): models, tools, approvers, clocks and trace sinks are
// handed to it, which keeps it deterministic under a scripted model and a virtual clock.
package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// ErrConfig is wrapped by every configuration error returned by New.
var ErrConfig = errors.New("invalid loop configuration")

// entry is a declared tool with everything the controller precomputes about it.
type entry struct {
	tool      tool.Tool
	spec      tool.Spec
	validator *tool.Validator
	allowed   bool
	approval  bool
	child     bool // its calls run as child runs (Config.ChildTools)
}

// Controller runs bounded loops with one configuration. It is safe for concurrent use: each run
// has its own State.
type Controller struct {
	cfg      Config
	budget   Budget
	clock    clock.Clock
	tools    map[string]*entry
	names    []string // declared tool names, sorted, for error messages
	forbid   map[string]bool
	evidence []string
	defs     []model.ToolDef // what the model is offered: allowed, not forbidden
	ctx      ContextPolicy   // with its defaults; MaxTokens 0: no policy
	fixed    int64           // estimated input tokens of the instructions and defs, under a policy
}

// New checks cfg and returns a controller. Policy names that are not declared tools are errors
// (except in Forbid), since they are almost always typos that would silently weaken a rule.
func New(cfg Config) (*Controller, error) {
	if cfg.Model == nil {
		return nil, fmt.Errorf("%w: no model", ErrConfig)
	}
	c := &Controller{
		cfg:    cfg,
		budget: cfg.Budget.withDefaults(),
		clock:  cfg.Clock,
		tools:  make(map[string]*entry, len(cfg.Tools)),
		forbid: make(map[string]bool, len(cfg.Policy.Forbid)),
	}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	if c.cfg.MaxConcurrentTools <= 0 {
		c.cfg.MaxConcurrentTools = 4
	}
	if c.cfg.ModelRetries == 0 {
		c.cfg.ModelRetries = 2
	}
	if c.cfg.RetryBackoff <= 0 {
		c.cfg.RetryBackoff = 200 * time.Millisecond
	}
	if c.cfg.MaxToolOutput <= 0 {
		c.cfg.MaxToolOutput = 32 << 10
	}
	for _, t := range cfg.Tools {
		spec := t.Spec()
		if spec.Name == "" {
			return nil, fmt.Errorf("%w: a tool has no name", ErrConfig)
		}
		if _, dup := c.tools[spec.Name]; dup {
			return nil, fmt.Errorf("%w: tool %q is declared twice", ErrConfig, spec.Name)
		}
		v, err := tool.NewValidator(spec.Name, spec.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		c.tools[spec.Name] = &entry{tool: t, spec: spec, validator: v, allowed: cfg.Policy.Allow == nil, approval: spec.NeedsApproval}
		c.names = append(c.names, spec.Name)
	}
	sort.Strings(c.names)
	for _, n := range cfg.Policy.Forbid {
		c.forbid[n] = true
	}
	for _, list := range []struct {
		key   string
		names []string
		apply func(*entry)
	}{
		{"allow", cfg.Policy.Allow, func(e *entry) { e.allowed = true }},
		{"require_approval", cfg.Policy.RequireApproval, func(e *entry) { e.approval = true }},
		{"required_evidence", cfg.Policy.RequiredEvidence, func(*entry) {}},
	} {
		for _, n := range list.names {
			e, ok := c.tools[n]
			if !ok {
				return nil, fmt.Errorf("%w: policy.%s names %q, which is not a declared tool", ErrConfig, list.key, n)
			}
			list.apply(e)
		}
	}
	c.evidence = cfg.Policy.RequiredEvidence
	if err := c.markChildren(cfg.ChildTools); err != nil {
		return nil, err
	}
	for _, n := range c.names {
		if e := c.tools[n]; e.allowed && !c.forbid[n] {
			c.defs = append(c.defs, model.ToolDef{Name: n, Description: e.spec.Description, InputSchema: e.spec.InputSchema})
		}
	}
	if cfg.Context.set() {
		c.fixed = model.EstimateInputTokens(&model.Request{Instructions: cfg.Instructions, Tools: c.defs})
	}
	var err error
	if c.ctx, err = cfg.Context.check(c.fixed); err != nil {
		return nil, err
	}
	return c, nil
}

// Budget returns the effective budget (defaults applied).
func (c *Controller) Budget() Budget { return c.budget }

// Run is one run of a controller: its State and trace, advanced one iteration per Step.
type Run struct {
	c      *Controller
	st     *State
	events []trace.Event
	req    model.Request
	checks []callCheck // scratch, reused across iterations
	// malformed marks the calls of the current turn whose arguments were not JSON (nil when none).
	malformed []bool
	iter      int    // the iteration in progress, for OnDelta
	win       window // what a context policy sends (unused without one)
	ctxRaw    int64  // the estimate of the request the policy prepared
	// proposed lists the keys of State.CallProposed this Run counted (ProposedChanged).
	proposed []uint64
}

// Start begins a new run with the given id and goal. The run's wall clock starts now.
func (c *Controller) Start(runID, goal string) *Run {
	return c.Resume(newState(runID, goal, c.clock.Now()))
}

// Resume continues a run from a saved State (for example one decoded from JSON after a crash).
// The budget keeps counting from where the state left it: iterations, tool calls, tokens, cost
// and the wall clock since StartedAt.
func (c *Controller) Resume(st *State) *Run {
	st.ensureMaps()
	// A typical iteration emits about seven events and adds two messages; sizing both from the
	// iteration budget (capped, since budgets can be large) saves regrowing them during the run.
	n := min(c.budget.MaxIterations-st.Iteration, 64) + 1
	r := &Run{c: c, st: st, events: make([]trace.Event, 0, 8*n)}
	if cap(st.Messages)-len(st.Messages) < 2*n {
		st.Messages = append(make([]model.Message, 0, len(st.Messages)+2*n), st.Messages...)
	}
	r.req.Instructions = c.cfg.Instructions
	r.req.Tools = c.defs
	r.req.ToolChoice = c.cfg.ToolChoice
	if on := c.cfg.OnDelta; on != nil {
		r.req.OnDelta = func(d model.Delta) { on(r.iter, d) }
	}
	return r
}

// Run executes a whole run and returns its result.
func (c *Controller) Run(ctx context.Context, runID, goal string) Result {
	r := c.Start(runID, goal)
	for !r.Step(ctx) {
	}
	return r.Result()
}

// State returns the run's state; it changes with every Step.
func (r *Run) State() *State { return r.st }

// Result returns the outcome so far: a stopped run's reason, detail and answer, with the state
// and every trace event emitted by this Run.
func (r *Run) Result() Result {
	return Result{StopReason: r.st.StopReason, Detail: r.st.Detail, Answer: r.st.Answer, State: r.st, Trace: r.events}
}

// Step runs one iteration: budgets, model call, validation, action, observation. It returns true
// when the run has stopped (then or earlier), or waits for child runs (State.AwaitingChildren:
// it cannot go on by itself).
func (r *Run) Step(ctx context.Context) bool {
	st := r.st
	if st.Stopped() || st.AwaitingChildren() {
		return true
	}
	deadline := r.deadline()
	ctx, cancel := r.c.clock.WithDeadline(ctx, deadline)
	defer cancel()
	if r.checkBudgets(ctx, deadline) {
		return true
	}
	iter := st.Iteration + 1
	r.iter = iter
	r.emit(trace.Event{Type: trace.IterationStart, Iteration: iter})
	resp, ok := r.callModel(ctx, iter, deadline)
	if !ok {
		return true
	}
	st.Iteration = iter
	r.propose(ctx, iter, deadline, resp)
	if h := r.c.cfg.Hooks.AfterIteration; h != nil {
		h(ctx, st)
	}
	return st.Stopped() || st.AwaitingChildren()
}

// deadline is when the wall-clock budget runs out: MaxDuration after StartedAt, not counting the
// time the run waited for humans.
func (r *Run) deadline() time.Time {
	return r.st.StartedAt.Add(r.st.Waited).Add(r.c.budget.MaxDuration)
}

// checkBudgets stops the run if a budget is spent before an iteration starts.
func (r *Run) checkBudgets(ctx context.Context, deadline time.Time) bool {
	st, b := r.st, &r.c.budget
	switch {
	case r.stopOnContext(ctx, st.Iteration):
	case !r.c.clock.Now().Before(deadline):
		r.stop(st.Iteration, Timeout, fmt.Sprintf("the wall-clock budget of %s ran out", b.MaxDuration))
	case st.Iteration >= b.MaxIterations:
		r.stop(st.Iteration, MaxIterations, fmt.Sprintf("the iteration budget of %d ran out before an answer", b.MaxIterations))
	case r.overTokens():
	default:
		return false
	}
	return true
}

// overTokens stops the run when the token or cost budget has been reached.
func (r *Run) overTokens() bool {
	if reason, detail := r.spentTokens(); reason != "" {
		r.stop(r.st.Iteration, reason, detail)
		return true
	}
	return false
}

// spentTokens says which of the token and cost budgets has been reached, if any.
func (r *Run) spentTokens() (StopReason, string) {
	st, b := r.st, &r.c.budget
	if b.MaxTokens > 0 && st.Usage.Total() >= b.MaxTokens {
		return MaxTokens, fmt.Sprintf("%d tokens used, budget %d", st.Usage.Total(), b.MaxTokens)
	}
	if b.MaxCostUSD > 0 && st.CostUSD >= b.MaxCostUSD {
		return MaxCost, fmt.Sprintf("cost $%.4f reached the budget of $%.4f", st.CostUSD, b.MaxCostUSD)
	}
	return "", ""
}

// stopOnContext stops the run if ctx is done: cancelled by the caller, or past a deadline.
func (r *Run) stopOnContext(ctx context.Context, iter int) bool {
	if reason, detail := contextStop(ctx); reason != "" {
		r.stop(iter, reason, detail)
		return true
	}
	return false
}

// contextStop says why a done ctx stops the run: cancelled by the caller, or past a deadline.
func contextStop(ctx context.Context) (StopReason, string) {
	switch err := ctx.Err(); {
	case err == nil:
		return "", ""
	case errors.Is(err, context.Canceled):
		return Cancelled, "the caller cancelled the run"
	default:
		return Timeout, "the run's deadline passed"
	}
}

// callModel asks the model for a proposal, retrying retryable errors with backoff on the clock.
func (r *Run) callModel(ctx context.Context, iter int, deadline time.Time) (*model.Response, bool) {
	st, hooks := r.st, &r.c.cfg.Hooks
	if !r.fitContext(ctx, iter, deadline) {
		return nil, false
	}
	for {
		if !r.capReply(iter) {
			return nil, false
		}
		r.req.Seq = st.ModelCalls
		st.ModelCalls++
		if hooks.BeforeModel != nil {
			hooks.BeforeModel(ctx, &r.req)
		}
		start := r.c.clock.Now()
		resp, err := r.c.cfg.Model.Generate(ctx, &r.req)
		if resp == nil && err == nil {
			err = &model.Error{Message: "the model returned neither a response nor an error"}
		}
		if hooks.AfterModel != nil {
			hooks.AfterModel(ctx, &r.req, resp, err)
		}
		elapsed := r.c.clock.Now().Sub(start)
		if err == nil {
			st.ModelErrorStreak = 0
			st.Usage.InputTokens += resp.Usage.InputTokens
			st.Usage.OutputTokens += resp.Usage.OutputTokens
			st.CostUSD = model.AddCost(st.CostUSD, resp.CostUSD)
			if r.c.ctx.MaxTokens > 0 {
				st.Context.Input, st.Context.Estimate = resp.Usage.InputTokens, r.ctxRaw
			}
			r.emit(trace.Event{Type: trace.ModelCall, Iteration: iter, Duration: elapsed,
				InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, CostUSD: resp.CostUSD})
			return resp, true
		}
		retryable := model.IsRetryable(err)
		r.emit(trace.Event{Type: trace.ModelCall, Iteration: iter, Duration: elapsed, Error: err.Error(), Retryable: retryable})
		if r.stopOnContext(ctx, iter) {
			return nil, false
		}
		st.ModelErrorStreak++
		if !retryable || st.ModelErrorStreak > r.c.cfg.ModelRetries {
			r.stop(iter, Failed, fmt.Sprintf("%v (%d failed model calls in a row)", err, st.ModelErrorStreak))
			return nil, false
		}
		backoff := r.c.cfg.RetryBackoff << (st.ModelErrorStreak - 1)
		if me := (*model.Error)(nil); errors.As(err, &me) && me.RetryAfter > backoff {
			backoff = me.RetryAfter // the provider asked for a longer wait
		}
		if err := r.c.clock.Sleep(ctx, backoff); err != nil || !r.c.clock.Now().Before(deadline) {
			if !r.stopOnContext(ctx, iter) {
				r.stop(iter, Timeout, fmt.Sprintf("the wall-clock budget of %s ran out while retrying the model", r.c.budget.MaxDuration))
			}
			return nil, false
		}
	}
}

// capReply makes the budgets hard for the next model call: it caps the reply
// (Request.MaxOutputTokens) to what the token budget leaves after the call's estimated input
// (model.EstimateInputTokens), and to what the cost budget leaves at the model's output price
// (model.Pricing); it stops the run instead when the estimated input alone would pass either.
// A call then spends at most the budget plus the error of its input estimate.
func (r *Run) capReply(iter int) bool {
	b, raise := &r.c.budget, r.st.OutputCap
	// After a reply cut off at its cap, the call asks for the larger cap decided then (cutOff).
	r.req.MaxOutputTokens, r.req.RaiseOutputTokens = raise, raise
	if b.MaxTokens <= 0 && b.MaxCostUSD <= 0 {
		return true
	}
	limit, reason, detail := r.replyCap(r.c.cfg.Model, model.EstimateInputTokens(&r.req))
	if reason != "" {
		r.stop(iter, reason, detail)
		return false
	}
	if limit > 0 && (raise <= 0 || limit < raise) {
		r.req.MaxOutputTokens = limit
	}
	return true
}

// replyCap is the reply cap of a call of m whose input is about in tokens, by the token and
// cost budgets (0: no cap); or, when that input alone would pass either, the stop reason and
// its detail. The main model's calls and a summarizer's share the budgets.
func (r *Run) replyCap(m model.Model, in int64) (int64, StopReason, string) {
	st, b := r.st, &r.c.budget
	limit := int64(math.MaxInt64)
	if b.MaxTokens > 0 {
		left := b.MaxTokens - st.Usage.Total()
		if left-in < 1 {
			return 0, MaxTokens, fmt.Sprintf("%d tokens used, budget %d: the next model call's input alone (about %d tokens) would pass it", st.Usage.Total(), b.MaxTokens, in)
		}
		limit = left - in
	}
	if b.MaxCostUSD > 0 {
		if p, ok := m.(model.Pricing); ok {
			if pin, pout, priced := p.TokenPrices(); priced {
				left := b.MaxCostUSD - st.CostUSD - float64(in)*pin
				if left <= 0 || left < pout {
					return 0, MaxCost, fmt.Sprintf("cost $%.4f, budget $%.4f: the next model call's input alone (about %d tokens) would pass it", st.CostUSD, b.MaxCostUSD, in)
				}
				if pout > 0 {
					limit = min(limit, int64(left/pout))
				}
			}
		}
	}
	if limit == math.MaxInt64 {
		return 0, "", ""
	}
	return limit, "", ""
}

// propose records the proposal and acts on it, unless a budget spent by the model call itself
// forbids acting.
func (r *Run) propose(ctx context.Context, iter int, deadline time.Time, resp *model.Response) {
	st, p := r.st, &resp.Proposal
	r.emit(trace.Event{Type: trace.Proposal, Iteration: iter, Proposal: string(p.Kind), Calls: len(p.Calls), Reason: p.Reason})
	p = r.quoteMalformed(p)
	if p.Kind == model.KindToolCalls && len(p.Calls) > 0 {
		st.Messages = append(st.Messages, model.Message{Role: model.RoleAssistant, Content: p.Text, Calls: p.Calls})
	} else {
		st.Messages = append(st.Messages, model.Message{Role: model.RoleAssistant, Content: proposalText(p)})
	}
	// The model call may itself have spent the token, cost or time budget: then its proposal is
	// recorded but not acted on, and each of its calls is answered as not executed (before the
	// stop event, which is always the last event of a run).
	notActed := func(reason StopReason, detail, why string) {
		for i := range p.Calls {
			r.answer(iter, p.Calls[i], false, "not executed: "+why, "")
		}
		r.stop(iter, reason, detail)
	}
	if reason, detail := r.spentTokens(); reason != "" {
		notActed(reason, detail, string(reason)+" budget reached")
		return
	}
	if reason, detail := contextStop(ctx); reason != "" {
		notActed(reason, detail, string(reason))
		return
	}
	if !r.c.clock.Now().Before(deadline) {
		notActed(Timeout, fmt.Sprintf("the wall-clock budget of %s ran out during the model call", r.c.budget.MaxDuration), "timeout")
		return
	}
	if r.cutOff(iter, p, resp) {
		return
	}
	switch p.Kind {
	case model.KindEscalate:
		r.stop(iter, NeedsHuman, "the model escalated: "+p.Reason)
	case model.KindRefuse:
		r.stop(iter, Refused, "the model refused: "+p.Reason)
	case model.KindAnswer:
		r.finalAnswer(iter, p.Text)
	case model.KindToolCalls:
		if len(p.Calls) == 0 {
			r.finalAnswer(iter, p.Text) // a turn without calls is an answer
			return
		}
		r.act(ctx, iter, deadline, p)
	default:
		st.Proposals++
		r.invalid(iter, "", fmt.Sprintf("the model returned an unknown kind of proposal %q", p.Kind))
	}
}

// quoteMalformed returns p with every call's arguments valid JSON, so that State always marshals:
// arguments that are not JSON are kept, as a JSON string holding their text, and marked in
// r.malformed so validation rejects those calls with that reason. The model's own proposal is
// read-only, so a turn with malformed arguments is copied.
func (r *Run) quoteMalformed(p *model.Proposal) *model.Proposal {
	r.malformed = r.malformed[:0]
	for i := range p.Calls {
		if !json.Valid(p.Calls[i].Arguments) {
			r.malformed = make([]bool, len(p.Calls))
			break
		}
	}
	if len(r.malformed) == 0 {
		return p
	}
	cp := *p
	cp.Calls = slices.Clone(p.Calls)
	for i := range cp.Calls {
		args := cp.Calls[i].Arguments
		switch {
		case len(bytes.TrimSpace(args)) == 0: // no arguments at all: a call of a tool without parameters
			cp.Calls[i].Arguments = json.RawMessage("{}")
		case !json.Valid(args):
			quoted, _ := json.Marshal(string(args)) // a string always marshals
			cp.Calls[i].Arguments = quoted
			r.malformed[i] = true
		}
	}
	return &cp
}

func proposalText(p *model.Proposal) string {
	switch p.Kind {
	case model.KindEscalate:
		return "[escalate] " + p.Reason
	case model.KindRefuse:
		return "[refuse] " + p.Reason
	}
	return p.Text
}

// finalAnswer accepts a non-empty answer backed by the required evidence; anything else is an
// invalid action fed back to the model.
func (r *Run) finalAnswer(iter int, text string) {
	st := r.st
	st.Proposals++
	if strings.TrimSpace(text) == "" {
		r.invalid(iter, "", "the answer is empty")
		return
	}
	for _, need := range r.c.evidence {
		if st.Succeeded[need] == 0 {
			r.invalid(iter, "", fmt.Sprintf("the answer came before the required evidence: call %s first", need))
			return
		}
	}
	st.InvalidStreak = 0
	r.emit(trace.Event{Type: trace.Validation, Iteration: iter, Decision: trace.DecisionAccept, Reason: "final answer"})
	st.Answer = text
	r.stop(iter, Completed, "the model gave a final answer that passed validation")
}

// invalid records a rejected answer (callID empty: the rejection is fed back as a user message)
// and stops the loop once the invalid streak reaches its budget.
func (r *Run) invalid(iter int, callID, reason string) {
	st := r.st
	st.InvalidActions++
	st.InvalidStreak++
	r.emit(trace.Event{Type: trace.Validation, Iteration: iter, CallID: callID, Decision: trace.DecisionInvalid, Reason: reason})
	if callID == "" {
		st.Messages = append(st.Messages, model.Message{Role: model.RoleUser, Content: "reins: your answer was not accepted: " + reason})
	}
	r.stopOnInvalidStreak(iter)
}

func (r *Run) stopOnInvalidStreak(iter int) bool {
	if n := r.c.budget.MaxInvalidActions; r.st.InvalidStreak >= n {
		r.stop(iter, Refused, fmt.Sprintf("%d invalid proposals in a row (budget %d)", r.st.InvalidStreak, n))
		return true
	}
	return false
}

// answer appends the one result message of a call and its tool_result event.
func (r *Run) answer(iter int, call model.ToolCall, executed bool, content, errText string) {
	r.answerOutcome(iter, call, executed, content, errText, false, 0)
}

// answerOutcome is answer for an executed call: the event carries whether the failure is
// retryable and how long the call took, set before it is emitted so the sink sees them too.
func (r *Run) answerOutcome(iter int, call model.ToolCall, executed bool, content, errText string, retryable bool, d time.Duration) {
	r.st.Messages = append(r.st.Messages, model.Message{Role: model.RoleTool, Name: call.Name, CallID: call.ID,
		Content: content, IsError: !executed || errText != ""})
	r.emit(trace.Event{Type: trace.ToolResult, Iteration: iter, Tool: call.Name, CallID: call.ID, Executed: executed,
		Error: errText, Retryable: retryable, Duration: d})
}

// stop ends the run once; later calls keep the first reason.
func (r *Run) stop(iter int, reason StopReason, detail string) {
	st := r.st
	if st.Stopped() {
		return
	}
	st.StopReason, st.Detail = reason, detail
	if reason == NeedsHuman {
		st.WaitingSince = r.c.clock.Now() // a human may answer (ActOnDecisions, ResumeWithMessage)
	}
	r.emit(trace.Event{Type: trace.Stop, Iteration: iter, StopReason: string(reason), Reason: detail})
}

func (r *Run) emit(e trace.Event) {
	e.RunID = r.st.RunID
	e.Time = r.c.clock.Now()
	r.events = append(r.events, e)
	if r.c.cfg.Sink != nil {
		r.c.cfg.Sink.Emit(e)
	}
}

// declared lists the declared tools for an error message.
func (c *Controller) declared() string {
	if len(c.names) == 0 {
		return "no tools are declared"
	}
	return "declared tools: " + strings.Join(c.names, ", ")
}

// allowedNames lists the tools the model may call, for an error message.
func (c *Controller) allowedNames() string {
	var names []string
	for _, n := range c.names {
		if c.tools[n].allowed && !c.forbid[n] {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}
