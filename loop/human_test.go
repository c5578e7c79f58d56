package loop_test

// Tests of going on after a human: acting on a turn that waited for approval
// (Run.ActOnDecisions) and continuing after needs_human with a message (Run.ResumeWithMessage),
// each in memory and through the State's JSON, which must give the same run.

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// humanOutcome is a run that paused for a human, was answered, and went on to its end.
type humanOutcome struct {
	paused string // the State's JSON at the pause
	res    loop.Result
	after  []trace.Event // the events from the answer on
	execs  []execution   // every execution of the run
	// answerModelCalls counts the model calls made by the answer itself (before any Step).
	answerModelCalls int
	answerErr        error
}

// answerFunc answers a paused run: ActOnDecisions or ResumeWithMessage.
type answerFunc func(ctx context.Context, r *loop.Run) error

func actOn(decisions map[string]loop.Decision) answerFunc {
	return func(ctx context.Context, r *loop.Run) error { return r.ActOnDecisions(ctx, decisions) }
}

func resumeWith(message string) answerFunc {
	return func(_ context.Context, r *loop.Run) error { return r.ResumeWithMessage(message) }
}

// pauseInMemory runs s until it stops, lets wait pass, answers it on the same Run, and steps it
// to its end.
func pauseInMemory(t *testing.T, s setup, wait time.Duration, answer answerFunc) humanOutcome {
	t.Helper()
	ctx := context.Background()
	w := newWorld(t, s, t0)
	r := w.ctrl.Start("run-h", "goal")
	for !r.Step(ctx) {
	}
	out := humanOutcome{paused: mustJSON(t, r.State())}
	n, calls := len(r.Result().Trace), w.model.calls
	w.clk.Advance(wait)
	out.answerErr = answer(ctx, r)
	out.answerModelCalls = w.model.calls - calls
	for !r.Step(ctx) {
	}
	out.res = r.Result()
	out.after = out.res.Trace[n:]
	out.execs = w.log.all()
	checkAnswered(t, out.res.State, w.model.proposals())
	return out
}

// pauseThroughJSON runs s until it stops, saves the State as JSON, and answers it on a new
// controller wait later, as a process that resumes a checkpoint does.
func pauseThroughJSON(t *testing.T, s func() setup, wait time.Duration, answer answerFunc) humanOutcome {
	t.Helper()
	ctx := context.Background()
	w1 := newWorld(t, s(), t0)
	r1 := w1.ctrl.Start("run-h", "goal")
	for !r1.Step(ctx) {
	}
	saved := mustJSON(t, r1.State())
	var st loop.State
	if err := json.Unmarshal([]byte(saved), &st); err != nil {
		t.Fatal(err)
	}
	w2 := newWorld(t, s(), w1.clk.Now().Add(wait))
	r2 := w2.ctrl.Resume(&st)
	out := humanOutcome{paused: saved}
	out.answerErr = answer(ctx, r2)
	out.answerModelCalls = w2.model.calls
	for !r2.Step(ctx) {
	}
	out.res = r2.Result()
	out.after = out.res.Trace
	out.execs = append(w1.log.all(), w2.log.all()...)
	return out
}

// checkSameOutcome requires the JSON path to end exactly as the in-memory one.
func checkSameOutcome(t *testing.T, mem, viaJSON humanOutcome) {
	t.Helper()
	if (mem.answerErr == nil) != (viaJSON.answerErr == nil) {
		t.Fatalf("answer in memory: %v; through JSON: %v", mem.answerErr, viaJSON.answerErr)
	}
	if a, b := mustJSON(t, viaJSON.res.State), mustJSON(t, mem.res.State); a != b {
		t.Errorf("states differ:\nthrough JSON %s\nin memory    %s", a, b)
	}
	if a, b := withoutDurations(viaJSON.after), withoutDurations(mem.after); !reflect.DeepEqual(a, b) {
		t.Errorf("the events after the answer differ (through JSON, in memory):\n%s", diffEvents(a, b))
	}
	if a, b := sortedExecs(viaJSON.execs), sortedExecs(mem.execs); !reflect.DeepEqual(a, b) {
		t.Errorf("executions differ:\nthrough JSON %+v\nin memory    %+v", a, b)
	}
	if viaJSON.answerModelCalls != 0 || mem.answerModelCalls != 0 {
		t.Errorf("the answer called the model (%d in memory, %d through JSON)", mem.answerModelCalls, viaJSON.answerModelCalls)
	}
}

// decisionsOf lists the approval events of ev as tool:decision:call.
func decisionsOf(ev []trace.Event) []string {
	var out []string
	for _, e := range eventsOf(ev, trace.Approval) {
		out = append(out, e.Tool+":"+e.Decision+":"+e.CallID)
	}
	return out
}

// executedArgs lists the arguments tool was executed with, in execution order.
func executedArgs(execs []execution, name string) []string {
	var out []string
	for _, e := range execs {
		if e.Tool == name {
			out = append(out, e.Args)
		}
	}
	return out
}

func approve(msg string) loop.Decision { return loop.Decision{Approve: true, Message: msg} }
func deny(msg string) loop.Decision    { return loop.Decision{Message: msg} }

func TestActOnDecisions(t *testing.T) {
	readWrite := func() []toolDef {
		return []toolDef{mockTool("read", "", output(`"data"`)), mockTool("write", "", output(`{"written":true}`), failure("disk full", false))}
	}
	needWrite := loop.Policy{RequireApproval: []string{"write"}}
	tests := []struct {
		name      string
		setup     func() setup
		wait      time.Duration
		decisions map[string]loop.Decision
		want      loop.StopReason
		check     func(t *testing.T, o humanOutcome)
	}{
		{
			name: "approved/the_turn_executes_without_a_model_call",
			setup: func() setup {
				return setup{tools: readWrite(), policy: needWrite, turns: []model.Turn{
					callsTurn(tc("read", `{"q":1}`), tc("write", `{"v":1}`)), answerTurn("done"),
				}}
			},
			decisions: map[string]loop.Decision{callID(0, 1): approve("go")},
			want:      loop.Completed,
			check: func(t *testing.T, o humanOutcome) {
				if got := executedArgs(o.execs, "write"); !slices.Equal(got, []string{`{"v":1}`}) {
					t.Errorf("write executed with %v, want once with {\"v\":1}", got)
				}
				if got := executedArgs(o.execs, "read"); !slices.Equal(got, []string{`{"q":1}`}) {
					t.Errorf("read executed with %v, want once (after the decision, not before)", got)
				}
				for _, e := range o.execs {
					if e.Info.Iteration != 1 || e.Key != "run-h/1/"+map[string]string{"read": "0", "write": "1"}[e.Tool] {
						t.Errorf("%s ran in iteration %d with key %q, want the paused iteration 1 and its own key", e.Tool, e.Info.Iteration, e.Key)
					}
				}
				if got, want := decisionsOf(o.after), []string{"write:approved:" + callID(0, 1)}; !slices.Equal(got, want) {
					t.Errorf("approval events after the decision %v, want %v", got, want)
				}
				st := o.res.State
				if st.Approvals["write"] != 1 || st.ToolCalls != 2 || st.Iteration != 2 || st.Pending != nil || st.PendingTurn != nil || st.Settled != nil {
					t.Errorf("approvals %v, tool calls %d, iterations %d, pending %v/%v/%v; want 1, 2, 2, none",
						st.Approvals, st.ToolCalls, st.Iteration, st.Pending, st.PendingTurn, st.Settled)
				}
				// The decision's events belong to the paused iteration; the run goes on with
				// iteration 2 (the answer).
				if o.after[0].Type != trace.Approval || o.after[0].Iteration != 1 {
					t.Errorf("the first event after the decision is %+v, want the approval in iteration 1", o.after[0])
				}
			},
		},
		{
			name: "denied/the_message_is_the_result",
			setup: func() setup {
				return setup{tools: readWrite(), policy: needWrite, turns: []model.Turn{
					callsTurn(tc("write", `{"v":1}`), tc("read", `{}`)), answerTurn("done"),
				}}
			},
			decisions: map[string]loop.Decision{callID(0, 0): deny("not this order")},
			want:      loop.Completed,
			check: func(t *testing.T, o humanOutcome) {
				if n := len(executedArgs(o.execs, "write")); n != 0 {
					t.Errorf("the denied write executed %d times", n)
				}
				if m := resultOf(t, o.res.State, callID(0, 0)); !m.IsError || m.Content != "denied by a human: not this order" {
					t.Errorf("the denied call was answered %+v", m)
				}
				if st := o.res.State; st.InvalidActions != 0 || st.Approvals["write"] != 1 || st.ToolCalls != 1 {
					t.Errorf("invalid actions %d, approvals %v, tool calls %d; want 0, write 1, 1", st.InvalidActions, st.Approvals, st.ToolCalls)
				}
				if got, want := decisionsOf(o.after), []string{"write:denied:" + callID(0, 0)}; !slices.Equal(got, want) {
					t.Errorf("approval events %v, want %v", got, want)
				}
				if e := eventsOf(o.after, trace.Approval); len(e) != 1 || e[0].Reason != "not this order" {
					t.Errorf("the denial event %+v does not carry the message", e)
				}
			},
		},
		{
			// The approver decided the first write and had no decision for the second: the
			// first keeps its decision, and each is counted once, so that the scripted
			// approver's next request (Seq 2) is the third decision.
			name: "approver_decided_part_of_the_turn/each_decision_counted_once",
			setup: func() setup {
				byseq := map[int]loop.Decision{0: approve("first"), 2: approve("third")}
				return setup{
					tools: []toolDef{mockTool("write", "", output(`1`), output(`3`))}, policy: needWrite,
					approver: approverFunc(func(_ context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
						if d, ok := byseq[req.Seq]; ok {
							return d, nil
						}
						return loop.Decision{}, loop.ErrNoDecision
					}),
					turns: []model.Turn{
						callsTurn(tc("write", `{"v":1}`), tc("write", `{"v":2}`)),
						callsTurn(tc("write", `{"v":3}`)),
						answerTurn("done"),
					},
				}
			},
			decisions: map[string]loop.Decision{callID(0, 1): deny("no second write"), "call_unknown": approve("ignored")},
			want:      loop.Completed,
			check: func(t *testing.T, o humanOutcome) {
				var paused loop.State
				if err := json.Unmarshal([]byte(o.paused), &paused); err != nil {
					t.Fatal(err)
				}
				if want := []loop.SettledCall{{Index: 0, Approved: true}}; !reflect.DeepEqual(paused.Settled, want) || paused.Approvals["write"] != 1 {
					t.Errorf("at the pause: settled %+v, approvals %v; want %+v and write 1", paused.Settled, paused.Approvals, want)
				}
				if got := executedArgs(o.execs, "write"); !slices.Equal(got, []string{`{"v":1}`, `{"v":3}`}) {
					t.Errorf("write executed with %v, want v=1 (approved before the pause) and v=3", got)
				}
				want := []string{"write:denied:" + callID(0, 1), "write:approved:" + callID(1, 0)}
				if got := decisionsOf(o.after); !slices.Equal(got, want) {
					t.Errorf("approval events after the decision %v, want %v (the first call is not decided again)", got, want)
				}
				if n := o.res.State.Approvals["write"]; n != 3 {
					t.Errorf("approvals of write %d, want 3: one per decided call", n)
				}
			},
		},
		{
			name: "rejected_call_of_the_paused_turn/answered_with_its_reason_counted_once",
			setup: func() setup {
				return setup{tools: readWrite(), policy: needWrite, turns: []model.Turn{
					callsTurn(tc("nope", `{}`), tc("write", `{"v":1}`)), answerTurn("done"),
				}}
			},
			decisions: map[string]loop.Decision{callID(0, 1): approve("")},
			want:      loop.Completed,
			check: func(t *testing.T, o humanOutcome) {
				if m := resultOf(t, o.res.State, callID(0, 0)); !m.IsError || !strings.HasPrefix(m.Content, `error: unknown tool "nope"`) {
					t.Errorf("the rejected call was answered %+v", m)
				}
				if st := o.res.State; st.InvalidActions != 1 || st.Proposals != 3 {
					t.Errorf("invalid actions %d, proposals %d; want 1 and 3 (counted when proposed, not again)", st.InvalidActions, st.Proposals)
				}
				if n := len(eventsOf(o.after, trace.Validation)); n != 1 {
					t.Errorf("%d validation events after the decision, want only the final answer's", n)
				}
			},
		},
		{
			name: "tool_call_budget/applies_to_the_resumed_turn",
			setup: func() setup {
				return setup{tools: readWrite(), policy: needWrite, budget: loop.Budget{MaxToolCalls: 1}, turns: []model.Turn{
					callsTurn(tc("read", `{}`), tc("write", `{"v":1}`)), answerTurn("never reached"),
				}}
			},
			decisions: map[string]loop.Decision{callID(0, 1): approve("")},
			want:      loop.MaxToolCalls,
			check: func(t *testing.T, o humanOutcome) {
				if n := len(executedArgs(o.execs, "write")); n != 0 {
					t.Errorf("write executed %d times over the tool-call budget", n)
				}
				if m := resultOf(t, o.res.State, callID(0, 1)); !strings.HasPrefix(m.Content, "not executed: the tool-call budget of 1 is spent") {
					t.Errorf("the call over the budget was answered %+v", m)
				}
			},
		},
		{
			name: "non_retryable_failure/stops_the_run",
			setup: func() setup {
				write := mockTool("write", "", failure("disk full", false))
				return setup{tools: []toolDef{write}, policy: needWrite, turns: []model.Turn{
					callsTurn(tc("write", `{"v":1}`)), answerTurn("never reached"),
				}}
			},
			decisions: map[string]loop.Decision{callID(0, 0): approve("")},
			want:      loop.ToolFailure,
			check: func(t *testing.T, o humanOutcome) {
				if last := o.after[len(o.after)-1]; last.Type != trace.Stop || last.Iteration != 1 {
					t.Errorf("the last event %+v, want the stop in iteration 1", last)
				}
			},
		},
		{
			// An hour of waiting for a human on a one-minute budget: the wall clock counts only
			// the loop's own work.
			name: "wall_clock/does_not_count_the_wait",
			setup: func() setup {
				return setup{tools: readWrite(), policy: needWrite, budget: loop.Budget{MaxDuration: time.Minute}, turns: []model.Turn{
					callsTurn(tc("write", `{"v":1}`)), answerTurn("done"),
				}}
			},
			wait:      time.Hour,
			decisions: map[string]loop.Decision{callID(0, 0): approve("")},
			want:      loop.Completed,
			check: func(t *testing.T, o humanOutcome) {
				if got := executedArgs(o.execs, "write"); len(got) != 1 {
					t.Errorf("write executed %d times after the wait, want once", len(got))
				}
				if st := o.res.State; st.Waited != time.Hour || !st.WaitingSince.IsZero() {
					t.Errorf("waited %s (since %s), want 1h and no wait in progress", st.Waited, st.WaitingSince)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := pauseInMemory(t, tt.setup(), tt.wait, actOn(tt.decisions))
			if mem.answerErr != nil {
				t.Fatalf("ActOnDecisions: %v", mem.answerErr)
			}
			var paused loop.State
			if err := json.Unmarshal([]byte(mem.paused), &paused); err != nil {
				t.Fatal(err)
			}
			if paused.StopReason != loop.NeedsHuman || paused.PendingTurn == nil || paused.WaitingSince.IsZero() {
				t.Fatalf("the run stopped with %s (pending turn %v, waiting since %s), want needs_human waiting for approval",
					paused.StopReason, paused.PendingTurn, paused.WaitingSince)
			}
			if mem.res.StopReason != tt.want {
				t.Fatalf("stopped with %s (%s), want %s", mem.res.StopReason, mem.res.Detail, tt.want)
			}
			tt.check(t, mem)
			checkSameOutcome(t, mem, pauseThroughJSON(t, tt.setup, tt.wait, actOn(tt.decisions)))
		})
	}
}

// A run that cannot be acted on is left as it was, with an error of one sentence naming what is
// missing.
func TestActOnDecisionsRefuses(t *testing.T) {
	pausing := setup{
		tools:  []toolDef{mockTool("write", "", output(`1`)), mockTool("send", "", output(`2`))},
		policy: loop.Policy{RequireApproval: []string{"write", "send"}},
		turns:  []model.Turn{callsTurn(tc("write", `{}`), tc("send", `{}`)), escalateTurn("help")},
	}
	tests := []struct {
		name   string
		setup  setup
		answer answerFunc
		want   string
	}{
		{"a_decision_is_missing", pausing, actOn(map[string]loop.Decision{callID(0, 0): approve("")}),
			"loop: run run-h: call call_0_1 of send waits for approval and has no decision"},
		{"no_decision_at_all", pausing, actOn(nil), "loop: run run-h: call call_0_0 of write waits for approval and has no decision"},
		{"a_message_for_a_turn_waiting_for_approval", pausing, resumeWith("go on"),
			"loop: run run-h waits for decisions on 2 call(s), not for a message"},
		{"decisions_for_an_escalation", setup{turns: []model.Turn{escalateTurn("help")}},
			actOn(map[string]loop.Decision{"x": approve("")}), "loop: run run-h has no turn waiting for approval"},
		{"decisions_for_a_completed_run", setup{turns: []model.Turn{answerTurn("done")}},
			actOn(map[string]loop.Decision{"x": approve("")}), "loop: run run-h has no turn waiting for approval"},
		{"a_message_for_a_completed_run", setup{turns: []model.Turn{answerTurn("done")}}, resumeWith("more"),
			`loop: run run-h does not wait for a human (stop reason "completed")`},
		{"an_empty_message", setup{turns: []model.Turn{escalateTurn("help")}}, resumeWith(" \n"),
			"loop: run run-h: the human's message is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, tt.setup, t0)
			r := w.ctrl.Start("run-h", "goal")
			for !r.Step(context.Background()) {
			}
			before, events, calls := mustJSON(t, r.State()), len(r.Result().Trace), w.model.calls
			w.clk.Advance(time.Minute)
			err := tt.answer(context.Background(), r)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if after := mustJSON(t, r.State()); after != before {
				t.Errorf("a refused answer changed the state:\nbefore %s\nafter  %s", before, after)
			}
			if len(r.Result().Trace) != events || w.model.calls != calls || len(w.log.all()) != 0 {
				t.Errorf("a refused answer emitted events, called the model or ran tools")
			}
		})
	}
}

func TestResumeWithMessage(t *testing.T) {
	flaky := func() []toolDef { return []toolDef{mockTool("flaky", "", failure("503 upstream", true))} }
	tests := []struct {
		name    string
		setup   func() setup
		wait    time.Duration
		message string
		want    loop.StopReason
		check   func(t *testing.T, o humanOutcome)
	}{
		{
			name: "escalation/the_message_goes_to_the_model",
			setup: func() setup {
				return setup{turns: []model.Turn{escalateTurn("which order?"), answerTurn("Refund O-7.")}}
			},
			message: "Order O-7, please.",
			want:    loop.Completed,
			check: func(t *testing.T, o humanOutcome) {
				var roles []string
				for _, m := range o.res.State.Messages {
					roles = append(roles, string(m.Role)+":"+m.Content)
				}
				want := []string{"user:goal", "assistant:[escalate] which order?", "user:Order O-7, please.", "assistant:Refund O-7."}
				if !slices.Equal(roles, want) {
					t.Errorf("conversation %q, want %q", roles, want)
				}
				if o.res.Answer != "Refund O-7." || o.res.State.Iteration != 2 {
					t.Errorf("answer %q after %d iterations", o.res.Answer, o.res.State.Iteration)
				}
				if starts := eventsOf(o.after, trace.IterationStart); len(starts) != 1 || starts[0].Iteration != 2 {
					t.Errorf("iteration_start events after the message %+v, want iteration 2", starts)
				}
			},
		},
		{
			// Two failures in a row stopped the run; the human's message starts fresh streaks,
			// so one more failure is an observation, not another stop.
			name: "repeated_tool_failures/fresh_streaks",
			setup: func() setup {
				return setup{tools: flaky(), budget: loop.Budget{MaxToolFailures: 2, MaxRepeatedCalls: 5}, turns: []model.Turn{
					callsTurn(tc("flaky", `{"n":1}`)), callsTurn(tc("flaky", `{"n":2}`)),
					callsTurn(tc("flaky", `{"n":3}`)), answerTurn("gave up on flaky"),
				}}
			},
			message: "The upstream is back, try once more.",
			want:    loop.Completed,
			check: func(t *testing.T, o humanOutcome) {
				if n := len(executedArgs(o.execs, "flaky")); n != 3 {
					t.Errorf("flaky executed %d times, want 3", n)
				}
				if st := o.res.State; st.FailureRun["flaky"] != 1 {
					t.Errorf("failure streak of flaky %d, want 1 (the failure after the message)", st.FailureRun["flaky"])
				}
			},
		},
		{
			name: "wall_clock/does_not_count_the_wait",
			setup: func() setup {
				return setup{budget: loop.Budget{MaxDuration: time.Minute}, turns: []model.Turn{escalateTurn("?"), answerTurn("done")}}
			},
			wait:    2 * time.Hour,
			message: "go on",
			want:    loop.Completed,
			check: func(t *testing.T, o humanOutcome) {
				if o.res.State.Waited != 2*time.Hour {
					t.Errorf("waited %s, want 2h", o.res.State.Waited)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := pauseInMemory(t, tt.setup(), tt.wait, resumeWith(tt.message))
			if mem.answerErr != nil {
				t.Fatalf("ResumeWithMessage: %v", mem.answerErr)
			}
			if mem.res.StopReason != tt.want {
				t.Fatalf("stopped with %s (%s), want %s", mem.res.StopReason, mem.res.Detail, tt.want)
			}
			tt.check(t, mem)
			checkSameOutcome(t, mem, pauseThroughJSON(t, tt.setup, tt.wait, resumeWith(tt.message)))
		})
	}
}

// A human's answer after a wait longer than the budget still finds the run's context and tools
// usable: the context handed to the tools has the deadline of the remaining budget.
func TestActOnDecisionsGivesToolsTheRemainingBudget(t *testing.T) {
	var deadline time.Time
	s := setup{
		tools: []toolDef{funcTool("write", func(ctx context.Context, _ json.RawMessage, _ string) (json.RawMessage, error) {
			d, ok := ctx.Deadline()
			if !ok {
				return nil, errors.New("no deadline")
			}
			deadline = d
			return json.RawMessage(`1`), ctx.Err()
		})},
		policy: loop.Policy{RequireApproval: []string{"write"}},
		budget: loop.Budget{MaxDuration: time.Minute},
		turns:  []model.Turn{callsTurn(tc("write", `{}`)), answerTurn("done")},
	}
	w := newWorld(t, s, t0)
	// A real clock, so that the deadline reaches the tool's context.
	ctrl, err := loop.New(loop.Config{Model: w.model, Tools: []tool.Tool{tool.New(s.tools[0].spec, s.tools[0].fn)},
		Policy: s.policy, Budget: s.budget})
	if err != nil {
		t.Fatal(err)
	}
	r := ctrl.Start("run-h", "goal")
	r.Step(context.Background())
	st := r.State()
	if st.StopReason != loop.NeedsHuman {
		t.Fatalf("stopped with %s", st.StopReason)
	}
	// The human answered two hours after the run started (and stopped).
	st.StartedAt = st.StartedAt.Add(-2 * time.Hour)
	st.WaitingSince = st.WaitingSince.Add(-2 * time.Hour)
	if err := r.ActOnDecisions(context.Background(), map[string]loop.Decision{callID(0, 0): approve("")}); err != nil {
		t.Fatal(err)
	}
	if r.State().Stopped() {
		t.Fatalf("stopped with %s (%s) after the decision", r.State().StopReason, r.State().Detail)
	}
	if left := time.Until(deadline); left <= 0 || left > time.Minute {
		t.Errorf("the tool's deadline is %s away, want within the one-minute budget and not passed", left)
	}
}
