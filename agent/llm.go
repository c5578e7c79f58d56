package agent

import (
	"context"
	"fmt"
	"iter"
	"strings"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/template"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// LLMConfig configures an LLM agent.
type LLMConfig struct {
	Name string
	// Goal is the goal of each turn's loop, a template (package template's syntax, with the
	// state's keys as names): {{key}} takes the text of state key key (a missing key is an
	// error of the turn), {{key ?? ""}} the same or nothing when key is not set.
	Goal string
	// OutputKey, when set, is the state key the answer is written under (a JSON string).
	OutputKey string
	// Loop configures the controller of each turn: model (required), tools, instructions,
	// policy, budget, clock, sink, hooks.
	Loop loop.Config
	// EscalateWhen, when set, is asked about each accepted answer; reporting true escalates with
	// reason, after the answer's message and state events (a critic's approval).
	EscalateWhen func(answer string) (reason string, escalate bool)
	// EscalateTo is the target of the agent's escalations: "" for the innermost enclosing loop.
	EscalateTo string
}

// LLM is a leaf agent that runs one bounded loop (package loop) per turn: the goal rendered
// from the state, the model and tools of its configuration, under its loop budget. Its turn
// yields the loop's trace events as each iteration ends, then:
//
//   - completed: a message with the answer, the answer under OutputKey, and an escalation if
//     EscalateWhen says so;
//   - needs_human without calls waiting (the model escalated, or a tool kept failing): an
//     escalation with the loop's reason, to [EscalateTo];
//   - stopped by the context: the turn fails with the context's error, which the run reports
//     as cancelled or timeout;
//   - any other stop reason, and calls waiting for approval (a composition has no way to wait
//     for humans yet): a *StopError, which fails the run.
//
// Each turn is a new loop run (RunID from the Invocation), so the model sees the goal, not
// earlier turns: what passes between turns and agents goes through state keys. The model's
// Request.Seq and the tools' [tool.Info.Seq] count across the agent's turns in the run, so a
// scripted model or a mocked tool goes on where the previous turn stopped.
type LLM struct {
	cfg  LLMConfig
	ctrl *loop.Controller
}

// StopError is the error of an LLM agent's turn whose loop stopped without an answer.
type StopError struct {
	Agent  string
	Reason loop.StopReason
	Detail string
}

func (e *StopError) Error() string {
	return fmt.Sprintf("the loop of agent %q stopped %s: %s", e.Agent, e.Reason, e.Detail)
}

// NewLLM checks cfg and builds the agent's loop controller.
func NewLLM(cfg LLMConfig) (*LLM, error) {
	if cfg.Loop.Model == nil {
		return nil, fmt.Errorf("agent: LLM agent %q has no model (LLMConfig.Loop.Model)", cfg.Name)
	}
	if strings.TrimSpace(cfg.Goal) == "" {
		return nil, fmt.Errorf("agent: LLM agent %q has no goal (LLMConfig.Goal)", cfg.Name)
	}
	lc := cfg.Loop
	lc.Model = &seqModel{m: lc.Model}
	user := lc.Hooks.BeforeTool
	lc.Hooks.BeforeTool = func(ctx context.Context, info *tool.Info, call model.ToolCall) {
		// tool.Info.Seq counts this turn's executions only; the earlier turns' are added so that
		// a mocked tool's next result is the one after the last turn's.
		if inv, ok := ctx.Value(invocationKey{}).(*Invocation); ok {
			info.Seq += inv.ToolCalls[call.Name]
		}
		if user != nil {
			user(ctx, info, call)
		}
	}
	ctrl, err := loop.New(lc)
	if err != nil {
		return nil, fmt.Errorf("agent: LLM agent %q: %w", cfg.Name, err)
	}
	return &LLM{cfg: cfg, ctrl: ctrl}, nil
}

// Name returns the agent's name.
func (a *LLM) Name() string { return a.cfg.Name }

// OutputKey returns the state key of the agent's answer.
func (a *LLM) OutputKey() string { return a.cfg.OutputKey }

type invocationKey struct{}

// seqModel adds the model calls of the agent's earlier turns to Request.Seq.
type seqModel struct{ m model.Model }

func (s *seqModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if inv, ok := ctx.Value(invocationKey{}).(*Invocation); ok && inv.ModelCalls > 0 {
		r := *req
		r.Seq += inv.ModelCalls
		return s.m.Generate(ctx, &r)
	}
	return s.m.Generate(ctx, req)
}

// TokenPrices passes on the wrapped model's prices (model.Pricing), so that the loop can cap a
// leaf's calls by its cost budget.
func (s *seqModel) TokenPrices() (input, output float64, ok bool) {
	if p, priced := s.m.(model.Pricing); priced {
		return p.TokenPrices()
	}
	return 0, 0, false
}

// Run runs one turn: one loop run to its stop.
func (a *LLM) Run(ctx context.Context, s *Session) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		goal, err := a.render(s)
		if err != nil {
			yield(Event{}, err)
			return
		}
		inv := s.Invocation()
		ctx = context.WithValue(ctx, invocationKey{}, &inv)
		r := a.ctrl.Start(inv.RunID, goal)
		sent := 0
		for {
			stopped := r.Step(ctx)
			events := r.Result().Trace
			for ; sent < len(events); sent++ {
				// The loop only appends to its trace, so an event can point into it (a copy
				// would cost an allocation per trace event).
				if !yield(Event{Type: EventTrace, Trace: &events[sent]}, nil) {
					return
				}
			}
			if stopped {
				break
			}
		}
		a.conclude(ctx, r, yield)
	}
}

// conclude yields what the loop's stop means for the composition.
func (a *LLM) conclude(ctx context.Context, r *loop.Run, yield func(Event, error) bool) {
	st := r.State()
	switch {
	case st.StopReason == loop.Completed:
		if !yield(Say(st.Answer), nil) {
			return
		}
		if a.cfg.OutputKey != "" {
			ev, _ := Write(a.cfg.OutputKey, st.Answer) // a string always encodes
			if !yield(ev, nil) {
				return
			}
		}
		if a.cfg.EscalateWhen != nil {
			if reason, ok := a.cfg.EscalateWhen(st.Answer); ok {
				yield(EscalateTo(a.cfg.EscalateTo, reason), nil)
			}
		}
	case st.StopReason == loop.NeedsHuman && len(st.Pending) == 0:
		yield(EscalateTo(a.cfg.EscalateTo, escalationReason(r.Result().Trace, st.Detail)), nil)
	case (st.StopReason == loop.Cancelled || st.StopReason == loop.Timeout) && ctx.Err() != nil:
		yield(Event{}, context.Cause(ctx))
	case st.StopReason == loop.NeedsHuman:
		yield(Event{}, &StopError{Agent: a.cfg.Name, Reason: st.StopReason,
			Detail: fmt.Sprintf("%d calls wait for approval, which a composition cannot wait for: give the loop an Approver", len(st.Pending))})
	default:
		yield(Event{}, &StopError{Agent: a.cfg.Name, Reason: st.StopReason, Detail: st.Detail})
	}
}

// escalationReason is the model's own reason for escalating (the last escalate proposal), or
// the loop's detail when a tool's failures escalated.
func escalationReason(events []trace.Event, detail string) string {
	for i := len(events) - 1; i >= 0; i-- {
		if e := events[i]; e.Type == trace.Proposal && e.Proposal == string(model.KindEscalate) {
			return e.Reason
		}
	}
	return detail
}

// render is the goal of this turn, from the state s shows: the template package's syntax, the
// state keys as names ({{topic}}, {{feedback ?? ""}}).
func (a *LLM) render(s *Session) (string, error) {
	goal, err := template.Render(template.Scope{Vars: s.State()}, a.cfg.Goal)
	if err != nil {
		return "", fmt.Errorf("the goal of agent %q: %w (give a default, {{key ?? \"\"}}, to a key that may be missing)", a.cfg.Name, err)
	}
	return goal, nil
}
