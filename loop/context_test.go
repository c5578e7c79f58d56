package loop_test

// Tests of the context policy (Config.Context): what each strategy sends the model, the pairing
// rule, keep_last, the summarizer's tokens, its fallback, context_exhausted, resuming, and the
// configuration errors.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// bigResult is a JSON tool output of about n bytes.
func bigResult(n int) string { return fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", n)) }

// sent is one model request as the model received it, with the length of the conversation
// (State.Messages) when it was made.
type sent struct {
	req   model.Request
	state int
}

// ctxCase is a run under a context policy: reads of results of `size` bytes, one per turn, then
// an answer; a scripted summarizer when summary is set.
type ctxCase struct {
	turns   int // turns of one read each before the answer
	calls   int // reads per turn (default 1)
	size    int // bytes of each read's result
	policy  loop.ContextPolicy
	summary []model.Turn // the summarizer's script, for summarize
	budget  loop.Budget
}

type ctxRun struct {
	model, summarizer *recorder
	ctrl              *loop.Controller
	sent              []sent
	res               loop.Result
}

func (cc ctxCase) controller(t *testing.T, clk clock.Clock) (*loop.Controller, *recorder, *recorder) {
	t.Helper()
	calls := max(cc.calls, 1)
	var turns []model.Turn
	for i := range cc.turns {
		var cs []model.ToolCall
		for j := range calls {
			cs = append(cs, tc("read", fmt.Sprintf(`{"n":%d}`, i*calls+j)))
		}
		turns = append(turns, callsTurn(cs...))
	}
	turns = append(turns, answerTurn("done"))
	scripted, err := model.NewScripted(turns, clk)
	if err != nil {
		t.Fatal(err)
	}
	read, err := tool.NewMock(tool.Spec{Name: "read"}, []tool.MockResult{output(bigResult(cc.size))}, clk)
	if err != nil {
		t.Fatal(err)
	}
	m := &recorder{inner: scripted}
	policy := cc.policy
	var s *recorder
	if cc.summary != nil {
		sm, err := model.NewScripted(cc.summary, clk)
		if err != nil {
			t.Fatal(err)
		}
		s = &recorder{inner: sm}
		policy.Summarizer = s
	}
	budget := cc.budget
	if budget.MaxIterations == 0 {
		budget.MaxIterations, budget.MaxToolCalls = 50, 200
	}
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{read}, Instructions: "Read, then answer.",
		Clock: clk, Context: policy, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	return c, m, s
}

// run runs the case one Step at a time, noting the conversation's length before each.
func (cc ctxCase) run(t *testing.T) *ctxRun {
	t.Helper()
	c, m, s := cc.controller(t, clock.NewVirtual(t0))
	r := c.Start("ctx", "Read everything, then answer.")
	var lens []int
	for {
		lens = append(lens, len(r.State().Messages))
		if r.Step(context.Background()) {
			break
		}
	}
	out := &ctxRun{model: m, summarizer: s, ctrl: c, res: r.Result()}
	for i, req := range m.requests() {
		out.sent = append(out.sent, sent{req: req, state: lens[i]}) // one model call per Step here
	}
	return out
}

// checkSent checks every request of a run under policy p against the conversation it was cut
// from: the goal first, then the summary if any, then a contiguous run of the conversation that
// ends with its last message and keeps at least its last keep_last messages whole; no tool
// result without its call; and an estimate within max_tokens.
func checkSent(t *testing.T, p loop.ContextPolicy, run *ctxRun) {
	t.Helper()
	msgs := run.res.State.Messages
	keep := cmpOr(p.KeepLast, loop.DefaultKeepLast)
	for k, s := range run.sent {
		req := s.req
		if len(req.Messages) == 0 || !reflect.DeepEqual(req.Messages[0], msgs[0]) {
			t.Fatalf("request %d does not start with the goal: %+v", k, req.Messages)
		}
		body := req.Messages[1:]
		if len(body) > 0 && strings.HasPrefix(body[0].Content, "reins: the earlier part of this conversation was left out") {
			body = body[1:]
		}
		from := s.state - len(body)
		if from < 1 {
			t.Fatalf("request %d has %d messages after the goal, the conversation had %d", k, len(body), s.state)
		}
		for i, m := range body {
			want := msgs[from+i]
			if m.Role == model.RoleTool && m.Content != want.Content && strings.Contains(m.Content, "bytes of this tool result were left out") {
				want.Content = m.Content // shortened: checked below
			}
			if !reflect.DeepEqual(m, want) {
				t.Fatalf("request %d message %d is not conversation message %d:\n%+v\n%+v", k, i+1, from+i, m, msgs[from+i])
			}
		}
		for i := max(s.state-keep, 1); i < s.state; i++ {
			if i < from || !reflect.DeepEqual(body[i-from], msgs[i]) {
				t.Fatalf("request %d does not carry message %d (one of the last %d) as it is", k, i, keep)
			}
		}
		calls := map[string]bool{}
		for i, m := range body {
			switch m.Role {
			case model.RoleAssistant:
				for _, c := range m.Calls {
					calls[c.ID] = true
				}
			case model.RoleTool:
				if !calls[m.CallID] {
					t.Fatalf("request %d message %d is the result of call %s, whose call it does not carry", k, i+1, m.CallID)
				}
			}
		}
		if est := model.EstimateInputTokens(&req); est > p.MaxTokens {
			t.Fatalf("request %d is estimated at %d input tokens, over max_tokens %d", k, est, p.MaxTokens)
		}
	}
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// contextEvents returns the run's context events.
func contextEvents(res loop.Result) []trace.Event { return eventsOf(res.Trace, trace.Context) }

func TestContextStrategies(t *testing.T) {
	summary := func(text string) model.Turn { return withUsage(answerTurn(text), 900, 40) }
	tests := []struct {
		name string
		cc   ctxCase
		want loop.StopReason
		// check sees the run; every run is also checked by checkSent.
		check func(t *testing.T, run *ctxRun)
	}{
		{
			name: "drop_oldest leaves out whole turns, oldest first",
			cc:   ctxCase{turns: 8, size: 2000, policy: loop.ContextPolicy{MaxTokens: 1800, KeepLast: 2}},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				ev := contextEvents(run.res)
				if len(ev) == 0 || ev[0].Decision != string(loop.DropOldest) || !strings.Contains(ev[0].Reason, "left out 2 message(s)") {
					t.Fatalf("context events %+v, want drop_oldest leaving out a turn", ev)
				}
				if v := run.res.State.Context; v.From < 3 || v.TruncatedBefore != 0 || v.Summary != "" {
					t.Errorf("view %+v, want only From moved", v)
				}
				last := run.sent[len(run.sent)-1].req
				if len(last.Messages) >= len(run.res.State.Messages) {
					t.Errorf("the last request carries %d messages of %d: nothing was left out", len(last.Messages), len(run.res.State.Messages))
				}
			},
		},
		{
			name: "drop_oldest never splits a turn of several calls from its results",
			cc:   ctxCase{turns: 6, calls: 3, size: 700, policy: loop.ContextPolicy{MaxTokens: 1500, KeepLast: 1}},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				if len(contextEvents(run.res)) == 0 {
					t.Fatal("the policy never acted")
				}
			},
		},
		{
			name: "keep_last keeps whole turns that cross it",
			cc:   ctxCase{turns: 5, calls: 2, size: 600, policy: loop.ContextPolicy{MaxTokens: 1500, KeepLast: 2}},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				// keep_last 2 lands on the second result of the last turn: its call and the
				// first result go too.
				for k, s := range run.sent {
					if n := len(s.req.Messages); s.state > 4 && n < 4 {
						t.Errorf("request %d carries %d messages: a turn was split", k, n)
					}
				}
			},
		},
		{
			// The last 4 messages, two turns of 2000-byte results, do not fit in 1000 tokens.
			name: "keep_last defaults to 4",
			cc:   ctxCase{turns: 6, size: 2000, policy: loop.ContextPolicy{MaxTokens: 1000}},
			want: loop.ContextExhausted,
			check: func(t *testing.T, run *ctxRun) {
				if st := run.res.State; st.Iteration != 2 || !strings.HasSuffix(run.res.Detail, "and the last 4 messages") {
					t.Errorf("%d iterations, detail %q: want a stop before the third call, the last 4 messages kept", st.Iteration, run.res.Detail)
				}
			},
		},
		{
			name: "truncate_tool_results shortens the oldest results first",
			cc:   ctxCase{turns: 5, size: 2000, policy: loop.ContextPolicy{MaxTokens: 2000, Strategy: loop.TruncateToolResults, KeepLast: 2}},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				ev := contextEvents(run.res)
				if len(ev) == 0 || ev[0].Decision != string(loop.TruncateToolResults) || !strings.Contains(ev[0].Reason, "truncated 1 tool result(s)") {
					t.Fatalf("context events %+v, want a truncation", ev)
				}
				if v := run.res.State.Context; v.TruncatedBefore < 3 || v.From > 1 {
					t.Errorf("view %+v, want results truncated and nothing left out", v)
				}
				last := run.sent[len(run.sent)-1].req.Messages
				if !strings.Contains(last[2].Content, "bytes of this tool result were left out to fit the context limit; the full result is in the iteration record") {
					t.Errorf("the oldest result is sent as %.80q, want it shortened with the marker", last[2].Content)
				}
				if got, want := len(last[2].Content), 256+len("\n…[reins: 1756 bytes of this tool result were left out to fit the context limit; the full result is in the iteration record]"); got != want {
					t.Errorf("the shortened result has %d bytes, want %d", got, want)
				}
				if full := run.res.State.Messages[2].Content; len(full) < 2000 {
					t.Errorf("the conversation's result itself was changed: %d bytes", len(full))
				}
			},
		},
		{
			name: "truncate_tool_results falls back to drop_oldest",
			cc:   ctxCase{turns: 12, size: 2000, policy: loop.ContextPolicy{MaxTokens: 1500, Strategy: loop.TruncateToolResults, KeepLast: 2}},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				dropped := slices.ContainsFunc(contextEvents(run.res), func(e trace.Event) bool { return strings.Contains(e.Reason, "left out") })
				if !dropped || run.res.State.Context.From < 2 {
					t.Errorf("view %+v, events %+v: want messages left out after the truncations", run.res.State.Context, contextEvents(run.res))
				}
			},
		},
		{
			name: "summarize replaces the oldest turns by a labelled summary",
			cc: ctxCase{turns: 8, size: 2000, policy: loop.ContextPolicy{MaxTokens: 2400, Strategy: loop.Summarize, KeepLast: 2},
				summary: []model.Turn{summary("Read 1 and 2 returned long runs of x."), summary("Reads 1 to 4 returned long runs of x.")}},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				ev := contextEvents(run.res)
				if len(ev) == 0 || ev[0].Decision != string(loop.Summarize) || ev[0].InputTokens != 900 || ev[0].OutputTokens != 40 {
					t.Fatalf("context events %+v, want a summary with the summarizer's tokens", ev)
				}
				st := run.res.State
				if st.Context.Summary != "Reads 1 to 4 returned long runs of x." || st.Context.SummaryCalls != 2 {
					t.Errorf("view %+v, want the second summary after two calls", st.Context)
				}
				reqs := run.summarizer.requests()
				if len(reqs) != 2 || reqs[0].Seq != 0 || reqs[1].Seq != 1 || reqs[0].MaxOutputTokens != 600 {
					t.Fatalf("%d summarizer requests, want 2 with Seq 0 then 1, capped at 600 tokens", len(reqs))
				}
				if in := reqs[1].Messages[0].Content; !strings.Contains(in, "Read 1 and 2 returned") || !strings.Contains(in, "[result of read") {
					t.Errorf("the second summarizer call did not get the summary so far and the messages: %.300q", in)
				}
				last := run.sent[len(run.sent)-1].req.Messages
				if !strings.HasPrefix(last[1].Content, "reins: the earlier part of this conversation was left out to fit the context limit; this is its summary:") ||
					!strings.HasSuffix(last[1].Content, st.Context.Summary) || last[1].Role != model.RoleUser {
					t.Errorf("the second message sent is %+v, want the labelled summary", last[1])
				}
				if st.Usage.InputTokens != 1800 || st.Usage.OutputTokens != 80 { // the main script reports none
					t.Errorf("usage %+v, want the summarizer's 2×(900+40) counted", st.Usage)
				}
			},
		},
		{
			name: "a summarizer error falls back to drop_oldest",
			cc: ctxCase{turns: 6, size: 2000, policy: loop.ContextPolicy{MaxTokens: 2400, Strategy: loop.Summarize, KeepLast: 2},
				summary: []model.Turn{modelErrTurn("overloaded", true)}},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				ev := contextEvents(run.res)
				if len(ev) == 0 || ev[0].Decision != string(loop.DropOldest) || !strings.Contains(ev[0].Error, "overloaded") ||
					!strings.HasPrefix(ev[0].Reason, "the summarizer failed: model call failed (retryable): overloaded; fell back to drop_oldest and left out") {
					t.Fatalf("context events %+v, want the failure and the fallback", ev)
				}
				if v := run.res.State.Context; v.Summary != "" || v.From < 2 || v.SummaryCalls < 2 {
					t.Errorf("view %+v, want no summary, messages left out, every failed call counted", v)
				}
			},
		},
		{
			name: "an empty summary falls back to drop_oldest",
			cc: ctxCase{turns: 6, size: 2000, policy: loop.ContextPolicy{MaxTokens: 2400, Strategy: loop.Summarize, KeepLast: 2},
				summary: []model.Turn{answerTurn("  ")}},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				if ev := contextEvents(run.res); len(ev) == 0 || ev[0].Error != "its summary is empty" {
					t.Fatalf("context events %+v, want an empty summary refused", ev)
				}
			},
		},
		{
			name: "a summary that does not fit falls back to drop_oldest",
			cc: ctxCase{turns: 6, size: 2000, policy: loop.ContextPolicy{MaxTokens: 2400, Strategy: loop.Summarize, KeepLast: 2},
				summary: []model.Turn{answerTurn(strings.Repeat("long ", 2000))}},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				if ev := contextEvents(run.res); len(ev) == 0 || !strings.Contains(ev[0].Error, "over max_tokens") || run.res.State.Context.Summary != "" {
					t.Fatalf("context events %+v, want the summary refused", ev)
				}
			},
		},
		{
			name: "the summarizer's tokens count against the token budget",
			cc: ctxCase{turns: 6, size: 2000, budget: loop.Budget{MaxTokens: 3000},
				policy:  loop.ContextPolicy{MaxTokens: 2400, Strategy: loop.Summarize, KeepLast: 2},
				summary: []model.Turn{withUsage(answerTurn("short"), 2500, 10)}},
			want: loop.MaxTokens,
			check: func(t *testing.T, run *ctxRun) {
				if st := run.res.State; st.Usage.Total() != 2510 || st.Context.Summary != "short" {
					t.Errorf("usage %+v, view %+v: want the budget reached by the summary", st.Usage, st.Context)
				}
			},
		},
		{
			name: "the summarizer's cost counts against the cost budget",
			cc: ctxCase{turns: 6, size: 2000, budget: loop.Budget{MaxCostUSD: 0.01},
				policy:  loop.ContextPolicy{MaxTokens: 2400, Strategy: loop.Summarize, KeepLast: 2},
				summary: []model.Turn{withCost(answerTurn("short"), 0.02)}},
			want: loop.MaxCost,
			check: func(t *testing.T, run *ctxRun) {
				if st := run.res.State; st.CostUSD != 0.02 || st.Context.Summary != "short" {
					t.Errorf("cost %v, view %+v: want the budget reached by the summary", st.CostUSD, st.Context)
				}
				if ev := contextEvents(run.res); len(ev) != 1 || ev[0].CostUSD != 0.02 {
					t.Errorf("context events %+v, want the summarizer's cost on one", ev)
				}
			},
		},
		{
			name: "a summarizer that outlasts the wall clock stops the run timeout",
			cc: ctxCase{turns: 6, size: 2000, budget: loop.Budget{MaxDuration: time.Minute},
				policy:  loop.ContextPolicy{MaxTokens: 2400, Strategy: loop.Summarize, KeepLast: 2},
				summary: []model.Turn{withLatency(answerTurn("too late"), 2*time.Minute)}},
			want: loop.Timeout,
			check: func(t *testing.T, run *ctxRun) {
				if ev := contextEvents(run.res); len(ev) != 1 || ev[0].Duration != 2*time.Minute {
					t.Fatalf("context events %+v, want the summary of 2 minutes", ev)
				}
				if st := run.res.State; !strings.Contains(run.res.Detail, "ran out while the summarizer ran") || st.ModelCalls != 5 {
					t.Errorf("detail %q after %d model calls: want the model not called after the summarizer", run.res.Detail, st.ModelCalls)
				}
			},
		},
		{
			name: "without room to leave anything out, the run stops context_exhausted",
			cc:   ctxCase{turns: 8, size: 2000, policy: loop.ContextPolicy{MaxTokens: 1800, KeepLast: 20}},
			want: loop.ContextExhausted,
			check: func(t *testing.T, run *ctxRun) {
				if !strings.Contains(run.res.Detail, "over the context policy's max_tokens 1800, with nothing left that the policy may leave out") {
					t.Errorf("detail %q", run.res.Detail)
				}
				if n := len(contextEvents(run.res)); n != 0 {
					t.Errorf("%d context events, but the policy could do nothing", n)
				}
			},
		},
		{
			name: "without a policy the whole conversation is sent",
			cc:   ctxCase{turns: 3, size: 2000},
			want: loop.Completed,
			check: func(t *testing.T, run *ctxRun) {
				last := run.sent[len(run.sent)-1]
				if !reflect.DeepEqual(last.req.Messages, run.res.State.Messages[:last.state]) {
					t.Error("the last request is not the whole conversation")
				}
				if data, _ := json.Marshal(run.res.State); strings.Contains(string(data), `"context"`) {
					t.Errorf("the state has a context view without a policy: %s", data)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := tt.cc.run(t)
			if run.res.StopReason != tt.want {
				t.Fatalf("stop reason %s (%s), want %s\ntrace:\n%s", run.res.StopReason, run.res.Detail, tt.want, formatEvents(run.res.Trace))
			}
			if tt.cc.policy.MaxTokens > 0 {
				checkSent(t, tt.cc.policy, run)
			}
			checkAnswered(t, run.res.State, proposalsOf(run.res.State))
			checkTrace(t, run.res, "ctx", 0)
			tt.check(t, run)
		})
	}
}

// proposalsOf rebuilds the proposals of a run from its assistant messages, for checkAnswered.
func proposalsOf(st *loop.State) []model.Proposal {
	var out []model.Proposal
	for _, m := range st.Messages {
		if m.Role != model.RoleAssistant {
			continue
		}
		if len(m.Calls) > 0 {
			out = append(out, model.Proposal{Kind: model.KindToolCalls, Calls: m.Calls})
		} else {
			out = append(out, model.Proposal{Kind: model.KindAnswer, Text: m.Content})
		}
	}
	return out
}

// TestContextViewIsMonotonicAcrossResume runs each strategy one iteration per controller, its
// state through JSON in between, as the durable agent step does: the requests, the end and the
// trace are the uninterrupted run's, the view only moves forward, and the conversation only
// grows.
func TestContextViewIsMonotonicAcrossResume(t *testing.T) {
	for _, cc := range []ctxCase{
		{turns: 8, size: 2000, policy: loop.ContextPolicy{MaxTokens: 1800, KeepLast: 2}},
		{turns: 10, size: 2000, policy: loop.ContextPolicy{MaxTokens: 1800, Strategy: loop.TruncateToolResults, KeepLast: 2}},
		{turns: 10, size: 2000, policy: loop.ContextPolicy{MaxTokens: 2400, Strategy: loop.Summarize, KeepLast: 2},
			summary: []model.Turn{answerTurn("first summary"), modelErrTurn("down", false), answerTurn("third summary")}},
	} {
		t.Run(string(cmpOrStrategy(cc.policy.Strategy)), func(t *testing.T) {
			want := cc.run(t)
			var (
				saved  []byte
				reqs   []model.Request
				events []trace.Event
				prev   loop.State
				now    = t0
			)
			for step := 0; ; step++ {
				clk := clock.NewVirtual(now)
				c, m, _ := cc.controller(t, clk)
				var r *loop.Run
				if saved == nil {
					r = c.Start("ctx", "Read everything, then answer.")
				} else {
					st := new(loop.State)
					if err := json.Unmarshal(saved, st); err != nil {
						t.Fatal(err)
					}
					r = c.Resume(st)
				}
				stopped := r.Step(context.Background())
				st := r.State()
				if v, p := st.Context, prev.Context; v.From < p.From || v.TruncatedBefore < p.TruncatedBefore || v.SummaryCalls < p.SummaryCalls ||
					(v.Summary != p.Summary && v.From == p.From) {
					t.Fatalf("step %d: the view went from %+v to %+v", step, p, v)
				}
				if len(st.Messages) < len(prev.Messages) || (len(prev.Messages) > 0 && !reflect.DeepEqual(st.Messages[:len(prev.Messages)], prev.Messages)) {
					t.Fatalf("step %d changed earlier messages of the conversation", step)
				}
				reqs = append(reqs, m.requests()...)
				events = append(events, r.Result().Trace...)
				var err error
				if saved, err = json.Marshal(st); err != nil {
					t.Fatal(err)
				}
				prev = *st
				prev.Messages = slices.Clone(st.Messages)
				now = clk.Now()
				if stopped {
					break
				}
				if step > 30 {
					t.Fatal("the run does not stop")
				}
			}
			wantJSON, _ := json.Marshal(want.res.State)
			if string(saved) != string(wantJSON) {
				t.Errorf("resumed step by step the run ended in\n%s\nuninterrupted in\n%s", saved, wantJSON)
			}
			var wantReqs []model.Request
			for _, s := range want.sent {
				wantReqs = append(wantReqs, s.req)
			}
			if !reflect.DeepEqual(reqs, wantReqs) {
				t.Errorf("resumed step by step the model was sent other requests")
			}
			if !reflect.DeepEqual(events, want.res.Trace) {
				t.Errorf("resumed step by step the trace differs:\n%s", diffEvents(events, want.res.Trace))
			}
		})
	}
}

func cmpOrStrategy(s loop.ContextStrategy) loop.ContextStrategy {
	if s == "" {
		return loop.DropOldest
	}
	return s
}

// TestContextCountsTheProvidersTokens: the provider's count of the last call, not only the
// loop's estimate, decides when the policy acts: what it counted above the estimate is added
// to the estimate of the next requests, before and after the policy leaves messages out.
func TestContextCountsTheProvidersTokens(t *testing.T) {
	clk := clock.NewVirtual(t0)
	// Small messages, but the provider says the second call carried 5,000 input tokens.
	scripted, err := model.NewScripted([]model.Turn{
		callsTurn(tc("read", `{"n":1}`)),
		withUsage(callsTurn(tc("read", `{"n":2}`)), 5000, 10),
		answerTurn("done"),
	}, clk)
	if err != nil {
		t.Fatal(err)
	}
	read, _ := tool.NewMock(tool.Spec{Name: "read"}, []tool.MockResult{output(`{"ok":true}`)}, clk)
	m := &recorder{inner: scripted}
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{read}, Clock: clk, Context: loop.ContextPolicy{MaxTokens: 5010, KeepLast: 1}})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "ctx", "Read twice.")
	if res.StopReason != loop.Completed {
		t.Fatalf("stop reason %s (%s)", res.StopReason, res.Detail)
	}
	ev := contextEvents(res)
	if len(ev) != 1 || ev[0].Iteration != 3 || !strings.Contains(ev[0].Reason, "left out 2 message(s)") || !strings.Contains(ev[0].Reason, "→ 5000 input tokens (max_tokens 5010)") {
		t.Fatalf("context events %+v, want the first turn left out before the third call, down to the provider's 5000", ev)
	}
	if v := res.State.Context; v.Input != 0 || v.Estimate == 0 || v.From != 3 {
		t.Errorf("view %+v: want the last call's count (none reported) and estimate, and the first turn left out", v)
	}
	if reqs := m.requests(); len(reqs[2].Messages) != 3 {
		t.Errorf("the third request carries %d messages, want the goal and the last turn", len(reqs[2].Messages))
	}
}

func TestContextConfigErrors(t *testing.T) {
	m := model.Func(func(context.Context, *model.Request) (*model.Response, error) { return nil, errors.New("unused") })
	for _, tt := range []struct {
		name   string
		policy loop.ContextPolicy
		instr  string
		want   string
	}{
		{"no max_tokens", loop.ContextPolicy{Strategy: loop.DropOldest}, "", "max_tokens is 0: it must be positive"},
		{"negative max_tokens", loop.ContextPolicy{MaxTokens: -5}, "", "max_tokens is -5"},
		{"unknown strategy", loop.ContextPolicy{MaxTokens: 100, Strategy: "forget"}, "", `strategy "forget" is none of drop_oldest, truncate_tool_results, summarize`},
		{"negative keep_last", loop.ContextPolicy{MaxTokens: 100, KeepLast: -1}, "", "keep_last is -1"},
		{"summarize without a summarizer", loop.ContextPolicy{MaxTokens: 100, Strategy: loop.Summarize}, "", "needs a summarizer model"},
		{"a summarizer without summarize", loop.ContextPolicy{MaxTokens: 100, Summarizer: m}, "", "only strategy summarize uses"},
		{"instructions over max_tokens", loop.ContextPolicy{MaxTokens: 100}, strings.Repeat("be careful ", 40), "about 110 input tokens, which leaves nothing of the context policy's max_tokens 100"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loop.New(loop.Config{Model: m, Instructions: tt.instr, Context: tt.policy})
			if !errors.Is(err, loop.ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want ErrConfig saying %q", err, tt.want)
			}
		})
	}
	if _, err := loop.New(loop.Config{Model: m, Instructions: strings.Repeat("be careful ", 36), Context: loop.ContextPolicy{MaxTokens: 100}}); err != nil {
		t.Errorf("instructions of 99 tokens under max_tokens 100: %v", err)
	}
}

// BenchmarkLoopContext is one iteration of a long run under drop_oldest, the policy acting at
// every call: the cost stays flat however long the conversation, since the view is kept up to
// date rather than rebuilt from the history.
func BenchmarkLoopContext(b *testing.B) {
	const runLength = 2000
	clk := clock.NewVirtual(t0)
	turns := make([]model.Turn, runLength)
	for i := range turns {
		turns[i] = callsTurn(tc("read", fmt.Sprintf(`{"n":%d}`, i)))
	}
	m, err := model.NewScripted(turns, clk)
	if err != nil {
		b.Fatal(err)
	}
	read, _ := tool.NewMock(tool.Spec{Name: "read"}, []tool.MockResult{output(bigResult(1000))}, clk)
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{read}, Clock: clk,
		Budget:  loop.Budget{MaxIterations: runLength, MaxToolCalls: runLength},
		Context: loop.ContextPolicy{MaxTokens: 4000}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var r *loop.Run
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%runLength == 0 {
			r = c.Start("bench", "benchmark")
		}
		if r.Step(ctx) {
			b.Fatalf("run stopped early: %s (%s)", r.State().StopReason, r.State().Detail)
		}
	}
}
