package loop_test

// Tests of child tools (Config.ChildTools): a turn with a call of one waits for its child run
// (State.Children) without executing anything, and Run.ActOnChildren acts on it with the
// child's result, in memory and through the State's JSON.

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/trace"
)

// askSetup is a run whose model calls lookup and the child tool ask in one turn, then answers.
func askSetup(turn model.Turn) setup {
	return setup{
		tools:    []toolDef{mockTool("lookup", "", output(`{"found":true}`)), mockTool("ask", "")},
		children: []string{"ask"},
		turns:    []model.Turn{turn, withUsage(answerTurn("done"), 10, 1)},
	}
}

func askTurn() model.Turn {
	return withUsage(callsTurn(tc("lookup", `{"id":1}`), tc("ask", `{"question":"why?"}`)), 100, 10)
}

// suspend runs s until its run stops or waits for children.
func suspend(t *testing.T, s setup) (*world, *loop.Run) {
	t.Helper()
	w := newWorld(t, s, t0)
	r := w.ctrl.Start("run-c", "goal")
	for !r.Step(context.Background()) {
	}
	return w, r
}

func TestActOnChildren(t *testing.T) {
	childUsage := model.Usage{InputTokens: 1000, OutputTokens: 100}
	for _, tc := range []struct {
		name    string
		result  loop.ChildResult
		budget  loop.Budget
		content string // the result message of the ask call
		isError bool
		stop    loop.StopReason
	}{
		{name: "the child's output is the call's result",
			result:  loop.ChildResult{Output: []byte(`{"answer": "because"}`), Usage: childUsage, CostUSD: 0.25},
			content: `{"answer":"because"}`, stop: loop.Completed},
		{name: "a child that did not complete is an error the model reads",
			result:  loop.ChildResult{Error: "the agent helper stopped with max_iterations", Usage: childUsage, CostUSD: 0.25},
			content: "error: the agent helper stopped with max_iterations", isError: true, stop: loop.Completed},
		{name: "the child's tokens count against the token budget",
			result:  loop.ChildResult{Output: []byte(`"x"`), Usage: childUsage, CostUSD: 0.25},
			budget:  loop.Budget{MaxTokens: 1000},
			content: `"x"`, stop: loop.MaxTokens},
		{name: "the child's cost counts against the cost budget",
			result:  loop.ChildResult{Output: []byte(`"x"`), Usage: childUsage, CostUSD: 0.25},
			budget:  loop.Budget{MaxCostUSD: 0.2},
			content: `"x"`, stop: loop.MaxCost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := askSetup(askTurn())
			s.budget = tc.budget
			w, r := suspend(t, s)
			st := r.State()
			if st.Stopped() || !st.AwaitingChildren() || len(st.Children) != 1 || st.Children[0].Call.Name != "ask" || st.Children[0].Index != 1 {
				t.Fatalf("stop %q, children %+v; want the run waiting for ask's child", st.StopReason, st.Children)
			}
			if n := len(w.log.all()); n != 0 || st.ToolCalls != 0 {
				t.Fatalf("%d executions before the child's result: the turn must wait whole", n)
			}
			if !r.Step(context.Background()) || w.model.calls != 1 || r.StopIfSpent(context.Background()) {
				t.Fatalf("a waiting run called the model (%d calls) or stopped", w.model.calls)
			}
			w.clk.Advance(time.Hour)
			if err := r.ActOnChildren(context.Background(), map[string]loop.ChildResult{st.Children[0].Call.ID: tc.result}); err != nil {
				t.Fatal(err)
			}
			if st.Waited != time.Hour || st.AwaitingChildren() || st.PendingTurn != nil {
				t.Errorf("waited %s, children %v, turn %v; want an hour and nothing pending", st.Waited, st.Children, st.PendingTurn)
			}
			if got := executedArgs(w.log.all(), "lookup"); !slices.Equal(got, []string{`{"id":1}`}) || w.log.count("ask") != 0 {
				t.Errorf("lookup ran with %v, ask ran %d times; want lookup once, ask never", got, w.log.count("ask"))
			}
			if st.Usage.InputTokens != 1100 || st.Usage.OutputTokens != 110 || st.CostUSD != 0.25 || st.ToolCalls != 2 {
				t.Errorf("usage %+v, cost %v, tool calls %d; want the child's added and both calls counted", st.Usage, st.CostUSD, st.ToolCalls)
			}
			r.StopIfSpent(context.Background())
			for !r.Step(context.Background()) {
			}
			if st.StopReason != tc.stop {
				t.Errorf("stop reason %s (%s), want %s", st.StopReason, st.Detail, tc.stop)
			}
			msg := resultOf(t, st, st.Messages[1].Calls[1].ID)
			if msg.Content != tc.content || msg.IsError != tc.isError {
				t.Errorf("ask's result %q (error %v), want %q (error %v)", msg.Content, msg.IsError, tc.content, tc.isError)
			}
			checkAnswered(t, st, w.model.proposals())
			var calls []string
			for _, e := range r.Result().Trace {
				if e.Type == trace.ToolCall || e.Type == trace.ToolResult {
					calls = append(calls, string(e.Type)+":"+e.Tool)
				}
			}
			if want := []string{"tool_call:lookup", "tool_call:ask", "tool_result:lookup", "tool_result:ask"}; !slices.Equal(calls, want) {
				t.Errorf("events %v, want %v", calls, want)
			}
		})
	}
}

// A run that waits for its children goes on the same through its State's JSON, in another
// controller.
func TestActOnChildrenThroughJSON(t *testing.T) {
	result := map[string]loop.ChildResult{}
	finish := func(w *world, r *loop.Run) *loop.State {
		t.Helper()
		for _, p := range r.State().Children {
			result[p.Call.ID] = loop.ChildResult{Output: []byte(`"because"`), Usage: model.Usage{InputTokens: 5}}
		}
		w.clk.Advance(time.Minute)
		if err := r.ActOnChildren(context.Background(), result); err != nil {
			t.Fatal(err)
		}
		for !r.Step(context.Background()) {
		}
		return r.State()
	}
	w1, r1 := suspend(t, askSetup(askTurn()))
	mem := finish(w1, r1)

	w2, r2 := suspend(t, askSetup(askTurn()))
	var st loop.State
	if err := json.Unmarshal([]byte(mustJSON(t, r2.State())), &st); err != nil {
		t.Fatal(err)
	}
	w3 := newWorld(t, askSetup(askTurn()), w2.clk.Now())
	viaJSON := finish(w3, w3.ctrl.Resume(&st))
	if a, b := mustJSON(t, viaJSON), mustJSON(t, mem); a != b {
		t.Errorf("states differ:\nthrough JSON %s\nin memory    %s", a, b)
	}
	if w3.model.calls != 1 {
		t.Errorf("the resumed run called the model %d times for the answer: want 1, the acting on the children takes none", w3.model.calls)
	}
}

// A call that needs approval and a child's call in one turn: the humans decide first (the turn
// waits whole), then the turn waits for the child, then it runs.
func TestChildAfterDecisions(t *testing.T) {
	s := askSetup(askTurn())
	s.policy.RequireApproval = []string{"lookup"}
	w, r := suspend(t, s)
	st := r.State()
	if st.StopReason != loop.NeedsHuman || len(st.Pending) != 1 || st.AwaitingChildren() {
		t.Fatalf("stop %q, pending %v, children %v; want lookup pending approval first", st.StopReason, st.Pending, st.Children)
	}
	if err := r.ActOnDecisions(context.Background(), map[string]loop.Decision{st.Pending[0].Call.ID: approve("")}); err != nil {
		t.Fatal(err)
	}
	if st.Stopped() || !st.AwaitingChildren() || w.log.count("lookup") != 0 {
		t.Fatalf("stop %q, children %v, lookup ran %d times; want the turn waiting whole for ask's child", st.StopReason, st.Children, w.log.count("lookup"))
	}
	if err := r.ActOnChildren(context.Background(), map[string]loop.ChildResult{st.Children[0].Call.ID: {Output: []byte(`1`)}}); err != nil {
		t.Fatal(err)
	}
	for !r.Step(context.Background()) {
	}
	if st.StopReason != loop.Completed || w.log.count("lookup") != 1 || st.Approvals["lookup"] != 1 {
		t.Errorf("stop %s, lookup ran %d times, approvals %v", st.StopReason, w.log.count("lookup"), st.Approvals)
	}
	checkAnswered(t, st, w.model.proposals())
}

// Calls that would not run (denied, past the tool-call budget) start no child.
func TestChildCallsThatDoNotRun(t *testing.T) {
	t.Run("denied", func(t *testing.T) {
		s := askSetup(askTurn())
		s.policy.RequireApproval = []string{"ask"}
		_, r := suspend(t, s)
		st := r.State()
		if err := r.ActOnDecisions(context.Background(), map[string]loop.Decision{st.Pending[0].Call.ID: deny("not now")}); err != nil {
			t.Fatal(err)
		}
		if st.AwaitingChildren() {
			t.Fatalf("a denied call waits for a child: %v", st.Children)
		}
		if msg := resultOf(t, st, st.Messages[1].Calls[1].ID); msg.Content != "denied by a human: not now" {
			t.Errorf("ask's result %q", msg.Content)
		}
	})
	t.Run("past the tool-call budget", func(t *testing.T) {
		s := askSetup(askTurn())
		s.budget = loop.Budget{MaxToolCalls: 1}
		w, r := suspend(t, s)
		st := r.State()
		if st.AwaitingChildren() || st.StopReason != loop.MaxToolCalls || w.log.count("lookup") != 1 {
			t.Fatalf("children %v, stop %s, lookup ran %d times; want lookup run and ask skipped", st.Children, st.StopReason, w.log.count("lookup"))
		}
	})
}

func TestActOnChildrenRefuses(t *testing.T) {
	_, r := suspend(t, askSetup(askTurn()))
	before := mustJSON(t, r.State())
	if err := r.ActOnChildren(context.Background(), map[string]loop.ChildResult{"other": {}}); err == nil || !strings.Contains(err.Error(), "has no result") {
		t.Errorf("a missing result: %v", err)
	}
	if after := mustJSON(t, r.State()); after != before {
		t.Errorf("a refused ActOnChildren changed the state")
	}
	_, done := suspend(t, askSetup(answerTurn("no calls")))
	if err := done.ActOnChildren(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "no calls waiting for child runs") {
		t.Errorf("a run that waits for nothing: %v", err)
	}
	_, err := loop.New(loop.Config{Model: &recorder{}, ChildTools: []string{"ghost"}})
	if !errors.Is(err, loop.ErrConfig) || !strings.Contains(err.Error(), `child tool "ghost" is not a declared tool`) {
		t.Errorf("an undeclared child tool: %v", err)
	}
}
