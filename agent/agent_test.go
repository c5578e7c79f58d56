package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/agent"
	"github.com/reins-run/reins/clock"
)

// TestScoping runs compositions whose ends are the point: the events (compact form), the
// result's reason and who escalated, and how each loop ended.
func TestScoping(t *testing.T) {
	cases := []struct {
		name      string
		root      func() agent.Agent
		budget    agent.Budget
		want      []string
		reason    agent.Reason
		by        string
		loops     map[string]agent.Reason
		errSubstr string
	}{
		{
			name: "sequential runs each agent once in order",
			root: func() agent.Agent {
				return agent.NewSequential("seq", setter("a", "x", 1), setter("b", "y", 2))
			},
			want: []string{"seq start", "a start", "a sets x=1", "a ends completed", "b start",
				"b sets y=2", "b ends completed", "seq ends completed"},
			reason: agent.Completed,
		},
		{
			name: "a loop ends at its max iterations",
			root: func() agent.Agent { return agent.NewLoop("loop", 2, counter("count", "n")) },
			want: []string{"loop start", "loop iteration 1", "count start", "count sets n=1", "count ends completed",
				"loop iteration 2", "count start", "count sets n=2", "count ends completed", "loop ends max_iterations"},
			reason: agent.MaxIterations,
			loops:  map[string]agent.Reason{"loop": agent.MaxIterations},
		},
		{
			name: "an escalation ends the innermost loop, which ends escalated, and the rest of its iteration does not run",
			root: func() agent.Agent {
				return agent.NewLoop("loop", 5, escalateAt("critic", "", 2), setter("after", "z", true))
			},
			want: []string{"loop start", "loop iteration 1", "critic start", "critic ends completed",
				"after start", "after sets z=true", "after ends completed",
				"loop iteration 2", "critic start", "critic escalates: critic is done at turn 2",
				"critic ends escalated by critic", "loop ends escalated by critic"},
			reason: agent.Escalated, by: "critic",
			loops: map[string]agent.Reason{"loop": agent.Escalated},
		},
		{
			name: "nested loops: an escalation without target ends the inner loop only; the outer goes on",
			root: func() agent.Agent {
				return agent.NewLoop("outer", 2, agent.NewLoop("inner", 9, escalateAt("critic", "", 1), counter("never", "n")),
					counter("tick", "ticks"))
			},
			want: []string{"outer start", "outer iteration 1",
				"inner start", "inner iteration 1", "critic start", "critic escalates: critic is done at turn 1",
				"critic ends escalated by critic", "inner ends escalated by critic",
				"tick start", "tick sets ticks=1", "tick ends completed",
				"outer iteration 2",
				"inner start", "inner iteration 1", "critic start", "critic ends completed",
				"never start", "never sets n=1", "never ends completed",
				"inner iteration 2", "critic start", "critic ends completed",
				"never start", "never sets n=2", "never ends completed",
				"inner iteration 3", "critic start", "critic ends completed",
				"inner ends max_turns", "outer ends max_turns",
			},
			budget: agent.Budget{MaxTurns: 7},
			reason: agent.MaxTurns,
			loops:  map[string]agent.Reason{"outer": agent.MaxTurns, "inner": agent.MaxTurns},
		},
		{
			name: "an escalation with a target ends the named outer loop and everything inside it",
			root: func() agent.Agent {
				return agent.NewSequential("all",
					agent.NewLoop("outer", 5, agent.NewLoop("inner", 5, escalateAt("critic", "outer", 2)), counter("never", "n")),
					setter("after", "done", true))
			},
			want: []string{"all start", "outer start", "outer iteration 1", "inner start", "inner iteration 1",
				"critic start", "critic ends completed", "inner iteration 2", "critic start",
				"critic escalates: critic is done at turn 2 (to outer)", "critic ends escalated by critic",
				"inner ends escalated by critic", "outer ends escalated by critic",
				"after start", "after sets done=true", "after ends completed", "all ends completed"},
			reason: agent.Completed,
			loops:  map[string]agent.Reason{"outer": agent.Escalated, "inner": agent.Escalated},
		},
		{
			name: "an unrelated outer loop is not ended: the escalation ends the loop it is in, the sequence goes on",
			root: func() agent.Agent {
				return agent.NewLoop("outer", 1,
					agent.NewSequential("steps", agent.NewLoop("refine", 3, escalateAt("critic", "", 1)), counter("report", "reports")))
			},
			reason: agent.MaxIterations,
			loops:  map[string]agent.Reason{"outer": agent.MaxIterations, "refine": agent.Escalated},
		},
		{
			name: "an escalation outside every loop ends the run escalated",
			root: func() agent.Agent {
				return agent.NewSequential("seq", escalateAt("gate", "", 1), setter("never", "x", 1))
			},
			want: []string{"seq start", "gate start", "gate escalates: gate is done at turn 1", "gate ends escalated by gate",
				"seq ends escalated by gate"},
			reason: agent.Escalated, by: "gate",
		},
		{
			name: "an escalation to an unknown agent is an error of the run",
			root: func() agent.Agent {
				return agent.NewLoop("loop", 3, escalateAt("critic", "nowhere", 1))
			},
			reason:    agent.Failed,
			errSubstr: `agent "critic" escalated to "nowhere", which is not an agent of this composition`,
			loops:     map[string]agent.Reason{"loop": agent.Failed},
		},
		{
			name: "an escalation to a loop that does not enclose the agent is an error, not the end of that loop",
			root: func() agent.Agent {
				return agent.NewSequential("seq", agent.NewLoop("first", 1, counter("a", "n")),
					agent.NewLoop("second", 3, escalateAt("critic", "first", 1)))
			},
			reason:    agent.Failed,
			errSubstr: `agent "critic" escalated to loop "first", which does not enclose it`,
			loops:     map[string]agent.Reason{"first": agent.MaxIterations, "second": agent.Failed},
		},
		{
			name: "an escalation to an agent that is not a loop is an error",
			root: func() agent.Agent {
				return agent.NewLoop("loop", 3, agent.NewSequential("seq", escalateAt("critic", "seq", 1)))
			},
			reason:    agent.Failed,
			errSubstr: `agent "critic" escalated to "seq", which is a sequential agent, not a loop`,
		},
		{
			name: "an error of a sub-agent stops the loop and is reported",
			root: func() agent.Agent {
				return agent.NewLoop("loop", 0, counter("count", "n"), agent.Func("flaky", func(_ context.Context, t *agent.Turn) error {
					if t.Invocation().N == 2 {
						return errors.New("the disk is full")
					}
					return nil
				}))
			},
			want: []string{"loop start", "loop iteration 1", "count start", "count sets n=1", "count ends completed",
				"flaky start", "flaky ends completed", "loop iteration 2", "count start", "count sets n=2",
				"count ends completed", "flaky start", "flaky ends failed", "loop ends failed"},
			reason:    agent.Failed,
			errSubstr: `agent "loop/flaky" failed: the disk is full`,
			loops:     map[string]agent.Reason{"loop": agent.Failed},
		},
		{
			name:   "max_iterations 0 is bounded by the turn budget",
			root:   func() agent.Agent { return agent.NewLoop("forever", 0, counter("count", "n")) },
			budget: agent.Budget{MaxTurns: 3},
			want: []string{"forever start", "forever iteration 1", "count start", "count sets n=1", "count ends completed",
				"forever iteration 2", "count start", "count sets n=2", "count ends completed",
				"forever iteration 3", "count start", "count sets n=3", "count ends completed",
				"forever ends max_turns"},
			reason: agent.MaxTurns,
			loops:  map[string]agent.Reason{"forever": agent.MaxTurns},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := run(t, context.Background(), tc.root(), agent.Config{Budget: tc.budget, Clock: clock.NewVirtual(t0)}, nil)
			if tc.want != nil {
				equalLines(t, lines(o.events), tc.want)
			}
			if o.res.Reason != tc.reason || o.res.By != tc.by {
				t.Errorf("result %s by %q (%s), want %s by %q", o.res.Reason, o.res.By, o.res.Detail, tc.reason, tc.by)
			}
			for name, want := range tc.loops {
				if got := o.res.Loops[name].Reason; got != want {
					t.Errorf("loop %s ended %s, want %s", name, got, want)
				}
			}
			checkError(t, o, tc.errSubstr)
		})
	}
}

// checkError checks that a run failed with an error containing substr (and that the stream's
// last error, the result's Err and its text agree), or did not fail when substr is empty.
func checkError(t *testing.T, o outcome, substr string) {
	t.Helper()
	if substr == "" {
		if o.err != nil || o.res.Err != nil {
			t.Errorf("the run failed: %v", o.err)
		}
		return
	}
	if o.err == nil || !strings.Contains(o.err.Error(), substr) {
		t.Fatalf("error %v, want one containing %q", o.err, substr)
	}
	if o.res.Err != o.err || o.res.Error != o.err.Error() {
		t.Errorf("result error %v (%q), stream error %v", o.res.Err, o.res.Error, o.err)
	}
	if strings.Count(o.err.Error(), ". ") > 0 {
		t.Errorf("the error is more than one sentence: %v", o.err)
	}
	last := o.events[len(o.events)-1]
	if last.Type != agent.EventEnd || last.End.Reason != agent.Failed || last.End.Detail != o.err.Error() {
		t.Errorf("the last event is %s (%+v), want the root's failed end with the error", line(last), last.End)
	}
}

// TestUnrelatedLoopEvents shows the events of the unrelated-loop case: the escalation ends
// refine, report still runs in the same iteration of outer.
func TestUnrelatedLoopEvents(t *testing.T) {
	root := agent.NewLoop("outer", 1,
		agent.NewSequential("steps", agent.NewLoop("refine", 3, escalateAt("critic", "", 1)), counter("report", "reports")))
	o := run(t, context.Background(), root, agent.Config{}, nil)
	equalLines(t, lines(o.events), []string{"outer start", "outer iteration 1", "steps start", "refine start",
		"refine iteration 1", "critic start", "critic escalates: critic is done at turn 1", "critic ends escalated by critic",
		"refine ends escalated by critic", "report start", "report sets reports=1", "report ends completed",
		"steps ends completed", "outer ends max_iterations"})
}

// TestBudgets ends MaxIterations=0 loops with each budget of the run.
func TestBudgets(t *testing.T) {
	cases := []struct {
		name   string
		budget agent.Budget
		root   func(clk *clock.Virtual) agent.Agent
		reason agent.Reason
		turns  int
	}{
		{"turns", agent.Budget{MaxTurns: 4}, func(*clock.Virtual) agent.Agent {
			return agent.NewLoop("loop", 0, counter("a", "n"), counter("b", "m"))
		}, agent.MaxTurns, 4},
		{"wall clock", agent.Budget{MaxDuration: time.Minute}, func(clk *clock.Virtual) agent.Agent {
			return agent.NewLoop("loop", 0, agent.Func("slow", func(context.Context, *agent.Turn) error {
				clk.Advance(25 * time.Second)
				return nil
			}))
		}, agent.Timeout, 3},
		{"tokens", agent.Budget{MaxTokens: 40}, func(clk *clock.Virtual) agent.Agent {
			return agent.NewLoop("loop", 0, llmWriter(t, clk, "draft"))
		}, agent.MaxTokens, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewVirtual(t0)
			o := run(t, context.Background(), tc.root(clk), agent.Config{Budget: tc.budget, Clock: clk}, nil)
			if o.res.Reason != tc.reason || o.res.Turns != tc.turns {
				t.Errorf("ended %s after %d turns (%s), want %s after %d", o.res.Reason, o.res.Turns, o.res.Detail, tc.reason, tc.turns)
			}
			if o.res.Loops["loop"].Reason != tc.reason {
				t.Errorf("the loop ended %+v", o.res.Loops["loop"])
			}
		})
	}
}

// llmWriter is an LLM agent answering draft N on its N-th model call.
func llmWriter(t testing.TB, clk clock.Clock, key string) *agent.LLM {
	answers := make([]string, 50)
	for i := range answers {
		answers[i] = "draft " + string(rune('A'+i%26))
	}
	return llm(t, clk, "writer", "Write about {{topic ?? \"\"}}.", key, scripted(t, clk, answers...))
}

// TestCancellation cancels the context during a turn: the run ends cancelled, not failed, with
// every open agent ended cancelled, and nothing more runs.
func TestCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := agent.NewLoop("loop", 0, counter("count", "n"), agent.Func("stopper", func(ctx context.Context, t *agent.Turn) error {
		if t.Invocation().N == 2 {
			cancel()
			return ctx.Err()
		}
		return nil
	}))
	o := run(t, ctx, root, agent.Config{}, nil)
	if o.res.Reason != agent.Cancelled || o.err != nil || o.res.Turns != 4 {
		t.Fatalf("ended %s after %d turns, error %v", o.res.Reason, o.res.Turns, o.err)
	}
	got := lines(o.events)
	equalLines(t, got[len(got)-3:], []string{"stopper start", "stopper ends cancelled", "loop ends cancelled"})
	if string(o.res.State["n"]) != "2" {
		t.Errorf("state %s", o.res.State)
	}
}

// TestStopReading stops reading the events: the run ends cancelled and runs nothing more.
func TestStopReading(t *testing.T) {
	turns := 0
	root := agent.NewLoop("loop", 0, agent.Func("count", func(context.Context, *agent.Turn) error {
		turns++
		return nil
	}))
	s := agent.NewSession("s", agent.Config{})
	seen := 0
	for ev := range agent.Run(context.Background(), root, s) {
		if ev.Type == agent.EventEnd {
			seen++
		}
		if seen == 3 {
			break
		}
	}
	if res := s.Result(); res.Reason != agent.Cancelled || turns != 3 {
		t.Errorf("ended %s after %d turns", res.Reason, turns)
	}
}

// TestOutputKey passes state between agents under explicit keys: an LLM writer's answer under
// its output key, a Func critic reading it, the writer's next goal using the critic's feedback.
// Each state write is an event.
func TestOutputKey(t *testing.T) {
	clk := clock.NewVirtual(t0)
	var goals []string
	writer, err := agent.NewLLM(agent.LLMConfig{Name: "writer", OutputKey: "draft",
		Goal: "Write about {{topic}}. {{feedback ?? \"\"}}",
		Loop: loopConfig(clk, scripted(t, clk, "short", "a longer draft"), &goals)})
	if err != nil {
		t.Fatal(err)
	}
	critic := agent.Func("critic", func(_ context.Context, t *agent.Turn) error {
		if len(t.Text("draft")) < 10 {
			return t.Set("feedback", "Make it longer than "+t.Text("draft")+".")
		}
		t.Escalate("approved")
		return nil
	})
	o := run(t, context.Background(), agent.NewLoop("refine", 5, writer, critic), agent.Config{Clock: clk}, map[string]any{"topic": "loops"})
	equalLines(t, lines(o.events), []string{"refine start", "refine iteration 1",
		"writer start", "writer says short", `writer sets draft="short"`, "writer ends completed",
		"critic start", `critic sets feedback="Make it longer than short."`, "critic ends completed",
		"refine iteration 2",
		"writer start", "writer says a longer draft", `writer sets draft="a longer draft"`, "writer ends completed",
		"critic start", "critic escalates: approved", "critic ends escalated by critic", "refine ends escalated by critic"})
	want := []string{"Write about loops. ", "Write about loops. Make it longer than short."}
	if strings.Join(goals, "|") != strings.Join(want, "|") {
		t.Errorf("goals %q, want %q", goals, want)
	}
	if o.res.Reason != agent.Escalated || o.res.By != "critic" || o.res.Detail != "approved" || o.res.Turns != 4 {
		t.Errorf("result %+v", o.res)
	}
	if u := o.res.Usage; u.ModelCalls != 2 || u.InputTokens != 20 || u.OutputTokens != 10 {
		t.Errorf("usage %+v", u)
	}
	var draft string
	if err := json.Unmarshal(o.res.State["draft"], &draft); err != nil || draft != "a longer draft" {
		t.Errorf("state %s", o.res.State)
	}
	traces := 0
	for _, ev := range o.events {
		if ev.Type == agent.EventTrace {
			traces++
			if ev.Author != "writer" || !strings.HasPrefix(ev.Trace.RunID, "s1/refine/writer/") {
				t.Errorf("trace event of %s, loop run %s", ev.Author, ev.Trace.RunID)
			}
		}
	}
	if traces == 0 {
		t.Error("the writer's loop trace is not in the events")
	}
}

// TestGoalMissingKey fails the turn of an LLM agent whose goal needs a key that is not set.
func TestGoalMissingKey(t *testing.T) {
	clk := clock.NewVirtual(t0)
	w := llm(t, clk, "writer", "Improve {{draft}}.", "out", scripted(t, clk, "x"))
	o := run(t, context.Background(), w, agent.Config{Clock: clk}, nil)
	checkError(t, o, `the goal of agent "writer": column 9: draft: not set (give a default`)
}

// TestParallel runs branches concurrently many times: the merged state, the result and each
// branch's own events are the same every time, and a key written by several branches takes the
// value of the last in declaration order, with a state event of the Parallel saying so.
func TestParallel(t *testing.T) {
	var first outcome
	for i := range 30 {
		root := agent.NewSequential("all",
			agent.NewParallel("fan",
				agent.NewSequential("left", setter("l1", "shared", "left"), setter("l2", "l", 1)),
				agent.NewSequential("right", setter("r1", "shared", "right"), setter("r2", "r", 2)),
				setter("solo", "s", 3)),
			agent.Func("reader", func(_ context.Context, t *agent.Turn) error {
				return t.Set("seen", t.Text("shared"))
			}))
		o := run(t, context.Background(), root, agent.Config{}, nil)
		if i == 0 {
			first = o
			continue
		}
		if !sameJSON(t, o.res, first.res) {
			t.Fatalf("run %d ended with %+v, the first with %+v", i, o.res, first.res)
		}
		for _, author := range []string{"left", "l1", "l2", "right", "r1", "r2", "solo"} {
			equalLines(t, byAuthor(o.events, author), byAuthor(first.events, author))
		}
	}
	if got := string(first.res.State["seen"]); got != `"right"` {
		t.Errorf("the reader saw shared=%s, want the last branch's", got)
	}
	got := lines(first.events)
	equalLines(t, got[len(got)-6:], []string{`fan sets shared="right"`, "fan ends completed",
		"reader start", `reader sets seen="right"`, "reader ends completed", "all ends completed"})
}

// TestParallelViews: a branch sees the state as the Parallel began and its own writes, not its
// siblings'.
func TestParallelViews(t *testing.T) {
	look := func(name, key string) agent.Agent {
		return agent.Func(name, func(_ context.Context, t *agent.Turn) error {
			_, ok := t.Get(key)
			return t.Set(name+"_saw_"+key, ok)
		})
	}
	root := agent.NewSequential("all", setter("init", "base", 0), agent.NewParallel("fan",
		agent.NewSequential("a", setter("a1", "ka", 1), look("a2", "ka"), look("a3", "kb"), look("a4", "base")),
		agent.NewSequential("b", setter("b1", "kb", 1), look("b2", "ka"))))
	o := run(t, context.Background(), root, agent.Config{}, nil)
	want := map[string]string{"a2_saw_ka": "true", "a3_saw_kb": "false", "a4_saw_base": "true", "b2_saw_ka": "false"}
	for k, v := range want {
		if string(o.res.State[k]) != v {
			t.Errorf("%s = %s, want %s", k, o.res.State[k], v)
		}
	}
}

// TestParallelEscalation: a branch that escalates to the loop around the Parallel ends it once
// every branch has ended, and the writes of every branch are kept.
func TestParallelEscalation(t *testing.T) {
	root := agent.NewLoop("loop", 5, agent.NewParallel("fan", escalateAt("stop", "", 1), counter("other", "n")))
	o := run(t, context.Background(), root, agent.Config{}, nil)
	if o.res.Reason != agent.Escalated || o.res.By != "stop" || string(o.res.State["n"]) != "1" {
		t.Errorf("result %+v", o.res)
	}
	if end := o.res.Loops["loop"]; end.Iterations != 1 {
		t.Errorf("the loop ended after %d iterations", end.Iterations)
	}
}

// TestParallelError: a failing branch cancels the others and the run fails with its error.
func TestParallelError(t *testing.T) {
	root := agent.NewParallel("fan",
		agent.Func("bad", func(context.Context, *agent.Turn) error { return errors.New("boom") }),
		agent.NewLoop("busy", 0, agent.Func("spin", func(ctx context.Context, _ *agent.Turn) error { return ctx.Err() })))
	o := run(t, context.Background(), root, agent.Config{Budget: agent.Budget{MaxTurns: 1000}}, nil)
	checkError(t, o, `agent "fan/bad" failed: boom`)
	// The sibling is cancelled, or had not started, or (on a slow scheduler) spent the turns.
	if r := o.res.Loops["busy"].Reason; r != "" && r != agent.Cancelled && r != agent.MaxTurns {
		t.Errorf("the sibling loop ended %+v", o.res.Loops["busy"])
	}
}

// TestValidate refuses compositions that are not valid, each with one sentence.
func TestValidate(t *testing.T) {
	a := counter("a", "n")
	cases := []struct {
		root agent.Agent
		want string
	}{
		{agent.NewSequential("s", a, a), `two agents are named "a": names must be unique in a composition`},
		{agent.NewLoop("l", 1), `loop agent "l" has no sub-agents`},
		{agent.NewLoop("l", -1, a), `loop "l" has MaxIterations -1: want 0 (until an escalation) or more`},
		{agent.NewSequential("a/b", a), `agent name "a/b" is not valid`},
		{agent.NewParallel("p", nil), `a sub-agent of "p" is nil`},
	}
	for _, tc := range cases {
		err := agent.Validate(tc.root)
		if !errors.Is(err, agent.ErrComposition) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%s) = %v, want %q", tc.root.Name(), err, tc.want)
		}
		o := run(t, context.Background(), tc.root, agent.Config{}, nil)
		if o.res.Reason != agent.Failed || !errors.Is(o.err, agent.ErrComposition) {
			t.Errorf("running %s: %+v, %v", tc.root.Name(), o.res, o.err)
		}
	}
}

// TestBadEvents: events a leaf may not yield fail the run as composition errors.
func TestBadEvents(t *testing.T) {
	cases := []struct {
		ev   agent.Event
		want string
	}{
		{agent.Event{Type: agent.EventStart}, `yielded an event of type "start", which only the runtime emits`},
		{agent.Event{Type: agent.EventState, Value: json.RawMessage(`1`)}, "wrote a state value without a key"},
		{agent.Event{Key: "k", Value: json.RawMessage(`{bad`)}, `the value of state key "k" is not valid JSON`},
	}
	for _, tc := range cases {
		leaf := agent.Func("leaf", func(_ context.Context, t *agent.Turn) error {
			if t.Emit(tc.ev) {
				return errors.New("the bad event was accepted")
			}
			return nil
		})
		o := run(t, context.Background(), agent.NewLoop("loop", 2, leaf), agent.Config{}, nil)
		if !errors.Is(o.err, agent.ErrComposition) || !strings.Contains(o.err.Error(), tc.want) {
			t.Errorf("error %v, want %q", o.err, tc.want)
		}
	}
}

// TestSessionOnce: a session runs once, and its inputs are set before.
func TestSessionOnce(t *testing.T) {
	s := agent.NewSession("s", agent.Config{})
	a := counter("a", "n")
	for range agent.Run(context.Background(), a, s) {
	}
	if err := s.Put("x", 1); err == nil {
		t.Error("Put after the run succeeded")
	}
	for _, err := range agent.Run(context.Background(), a, s) {
		if err == nil || !strings.Contains(err.Error(), "has already run") {
			t.Errorf("second run: %v", err)
		}
	}
}

func byAuthor(events []agent.Event, author string) []string {
	var out []string
	for _, ev := range events {
		if ev.Author == author {
			out = append(out, line(ev))
		}
	}
	return out
}

func sameJSON(t testing.TB, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}

// TestStopReadingParallel stops reading during concurrent branches: no event is handed on after
// that, every branch stops, and the run ends cancelled.
func TestStopReadingParallel(t *testing.T) {
	spin := func(name string) agent.Agent {
		return agent.NewLoop(name, 0, agent.Func(name+"-leaf", func(context.Context, *agent.Turn) error { return nil }))
	}
	root := agent.NewParallel("fan", spin("a"), spin("b"), spin("c"))
	s := agent.NewSession("s", agent.Config{Budget: agent.Budget{MaxTurns: 100000}})
	n := 0
	for range agent.Run(context.Background(), root, s) {
		if n++; n == 50 {
			break
		}
	}
	if res := s.Result(); res.Reason != agent.Cancelled || res.Turns >= 100000 {
		t.Errorf("ended %s after %d turns", res.Reason, res.Turns)
	}
}

// TestPanic: a leaf's panic fails the run with its value, in a Parallel branch too.
func TestPanic(t *testing.T) {
	boom := agent.Func("boom", func(context.Context, *agent.Turn) error { panic("out of cheese") })
	o := run(t, context.Background(), agent.NewParallel("fan", boom, counter("other", "n")), agent.Config{}, nil)
	checkError(t, o, `agent "fan/boom" failed: panic: out of cheese`)
}

// TestWallClockCutsTurn: on the real clock, the run's wall-clock budget cancels the context of
// the turn in flight, and the run ends timeout.
func TestWallClockCutsTurn(t *testing.T) {
	wait := agent.Func("wait", func(ctx context.Context, _ *agent.Turn) error {
		<-ctx.Done() // a turn that would never end on its own
		return ctx.Err()
	})
	o := run(t, context.Background(), agent.NewLoop("loop", 0, wait), agent.Config{Budget: agent.Budget{MaxDuration: 20 * time.Millisecond}}, nil)
	if o.res.Reason != agent.Timeout || o.err != nil || !strings.Contains(o.res.Detail, `the wall-clock budget of 20ms ran out during a turn of "wait"`) {
		t.Errorf("result %+v, error %v", o.res, o.err)
	}
}
