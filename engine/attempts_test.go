package engine_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

func retrying(t *testing.T, r *workflow.Retry) *workflow.Definition {
	wf := workflow.New("retrying")
	s := wf.Task("t", "h.flaky").WithTimeout(30 * time.Second)
	if r != nil {
		s.WithRetry(*r)
	}
	wf.Task("next", "h")
	wf.Edge("t", "next")
	return build(t, wf)
}

func TestRetryBackoff(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name   string
		retry  workflow.Retry
		delays []time.Duration // before attempts 2, 3, ...
	}{
		{"fixed", workflow.Retry{MaxAttempts: 5, Backoff: "fixed", InitialDelay: clock.Duration(2 * s)}, []time.Duration{2 * s, 2 * s, 2 * s, 2 * s}},
		{"linear", workflow.Retry{MaxAttempts: 5, Backoff: "linear", InitialDelay: clock.Duration(s)}, []time.Duration{s, 2 * s, 3 * s, 4 * s}},
		{"exponential", workflow.Retry{MaxAttempts: 5, Backoff: "exponential", InitialDelay: clock.Duration(s)}, []time.Duration{s, 2 * s, 4 * s, 8 * s}},
		{"exponential capped", workflow.Retry{MaxAttempts: 5, Backoff: "exponential", InitialDelay: clock.Duration(s), MaxDelay: clock.Duration(5 * s)}, []time.Duration{s, 2 * s, 4 * s, 5 * s}},
		{"linear capped", workflow.Retry{MaxAttempts: 5, Backoff: "linear", InitialDelay: clock.Duration(3 * s), MaxDelay: clock.Duration(7 * s)}, []time.Duration{3 * s, 6 * s, 7 * s, 7 * s}},
		{"defaults: exponential from 1s", workflow.Retry{MaxAttempts: 4}, []time.Duration{s, 2 * s, 4 * s}},
		{"fixed with the default delay", workflow.Retry{MaxAttempts: 3, Backoff: "fixed"}, []time.Duration{s, s}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.delays)
			var replies []reply
			for k := range n {
				replies = append(replies, fails("flaky "+strconv.Itoa(k+1)).after(time.Duration(k+1)*time.Second))
			}
			replies = append(replies, done(`"ok"`))
			d := drive(t, retrying(t, &tc.retry), `{"x":1}`, script{"t": replies, "next": {done(`"n"`)}})
			d.expect(protocol.RunCompleted, "")
			ts := d.tasksOf("t")
			if len(ts) != n+1 {
				t.Fatalf("%d attempts, want %d", len(ts), n+1)
			}
			for k, x := range ts {
				if x.task.Attempt != k+1 || x.task.MsgID != "run1/t/1/1/"+strconv.Itoa(k+1) || string(x.task.Input) != `{"x":1}` {
					t.Errorf("attempt %d: %+v", k+1, x.task)
				}
				if k == 0 {
					if !x.task.NotBefore.IsZero() {
						t.Errorf("first attempt not before %s", x.task.NotBefore)
					}
					continue
				}
				if got := x.task.NotBefore.Sub(x.cause); got != tc.delays[k-1] {
					t.Errorf("attempt %d waits %s after the failure, want %s", k+1, got, tc.delays[k-1])
				}
			}
			if sr := d.stepRun("t"); sr.Attempt != n+1 || sr.Attempts != n+1 || sr.Status != protocol.StepCompleted {
				t.Fatalf("step: %+v", sr)
			}
			if len(d.deadLetters) != 0 {
				t.Fatal("a retried task was dead-lettered")
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		r       *workflow.Retry
		attempt int
		want    time.Duration
	}{
		{nil, 1, s},
		{nil, 3, 4 * s},
		{&workflow.Retry{Backoff: "fixed", InitialDelay: clock.Duration(3 * s)}, 9, 3 * s},
		{&workflow.Retry{Backoff: "linear", InitialDelay: clock.Duration(s)}, 4, 4 * s},
		{&workflow.Retry{Backoff: "exponential", InitialDelay: clock.Duration(500 * time.Millisecond)}, 4, 4 * s},
		{&workflow.Retry{Backoff: "exponential", MaxDelay: clock.Duration(time.Minute)}, 200, time.Minute},
		{&workflow.Retry{Backoff: "linear", InitialDelay: clock.Duration(time.Hour), MaxDelay: clock.Duration(time.Minute)}, math.MaxInt, time.Minute},
		{&workflow.Retry{Backoff: "exponential"}, 100, time.Duration(math.MaxInt64)},
		{&workflow.Retry{Backoff: "fixed"}, 0, s},
	} {
		if got := engine.Backoff(tc.r, tc.attempt); got != tc.want {
			t.Errorf("Backoff(%+v, %d) = %s, want %s", tc.r, tc.attempt, got, tc.want)
		}
	}
}

func TestFailures(t *testing.T) {
	three := &workflow.Retry{MaxAttempts: 3, Backoff: "fixed"}
	for _, tc := range []struct {
		name      string
		retry     *workflow.Retry
		replies   []reply
		status    protocol.RunStatus
		attempts  int
		deadAt    int // attempt dead-lettered, 0 for none
		reason    string
		errorPart string
	}{
		{"no policy: one attempt", nil, []reply{fails("boom")}, protocol.RunFailed, 1, 1, "boom", "step t failed: boom"},
		{"permanent failure skips retries", three, []reply{failsForGood("bad request")}, protocol.RunFailed, 1, 1, "bad request", "bad request"},
		{"exhausted", three, []reply{fails("e1"), fails("e2"), fails("e3")}, protocol.RunFailed, 3, 3, "e3", "e3"},
		{"timeouts are retried", three, []reply{timesOut(), done(`1`)}, protocol.RunCompleted, 2, 0, "", ""},
		{"timeouts exhausted", three, []reply{timesOut(), timesOut(), timesOut()}, protocol.RunFailed, 3, 3, "attempt 3 timed out after 30s", "attempt 3 timed out after 30s"},
		{"output that is not JSON is permanent", three, []reply{done(`{nope`)}, protocol.RunFailed, 1, 1, "the output is not valid JSON", "not valid JSON"},
		{"failure then success", three, []reply{fails("e1"), done(`1`)}, protocol.RunCompleted, 2, 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := drive(t, retrying(t, tc.retry), `{}`, script{"t": tc.replies, "next": {done(`"n"`)}})
			code := ""
			if tc.status == protocol.RunFailed {
				code = protocol.CodeStepFailed
			}
			d.expect(tc.status, code)
			if tc.errorPart != "" {
				d.expectErrorContains(tc.errorPart)
			}
			if n := d.dispatchCount("t"); n != tc.attempts {
				t.Fatalf("%d attempts, want %d", n, tc.attempts)
			}
			if tc.deadAt == 0 {
				if len(d.deadLetters) != 0 {
					t.Fatalf("dead letters: %+v", d.deadLetters)
				}
				return
			}
			if len(d.deadLetters) != 1 {
				t.Fatalf("%d dead letters, want 1", len(d.deadLetters))
			}
			dl := d.deadLetters[0]
			if dl.Task.Attempt != tc.deadAt || dl.Task.MsgID != "run1/t/1/1/"+strconv.Itoa(tc.deadAt) || dl.Reason != tc.reason || dl.Task.Handler != "h.flaky" {
				t.Fatalf("dead letter: %+v %+v", dl, dl.Task)
			}
			if d.dispatchCount("next") != 0 {
				t.Fatal("the next step ran after a failure")
			}
		})
	}
}

func agentLoop(t *testing.T, configure func(*workflow.AgentLoopStep), edges func(*workflow.Builder)) *workflow.Definition {
	wf := workflow.New("agentloop")
	s := wf.AgentLoop("review", "llm-review").WithMaxIterations(10)
	if configure != nil {
		configure(s)
	}
	wf.Task("report", "h.report")
	if edges != nil {
		edges(wf)
	} else {
		wf.Edge("review", "report")
	}
	return build(t, wf)
}

func TestAgentLoop(t *testing.T) {
	t.Run("continues until complete", func(t *testing.T) {
		d := drive(t, agentLoop(t, nil, nil), `{"change":"c1"}`, script{
			"review": {cont(`{"n":1}`), cont(`{"n":2}`), done(`{"findings":2}`)},
			"report": {done(`"report"`)},
		})
		d.expect(protocol.RunCompleted, "")
		ts := d.tasksOf("review")
		if len(ts) != 3 {
			t.Fatalf("%d iterations", len(ts))
		}
		wantIn := []string{`{"change":"c1"}`, `{"n":1}`, `{"n":2}`}
		for k, x := range ts {
			if x.task.Iteration != k+1 || x.task.Attempt != 1 || x.task.Activation != 1 ||
				x.task.MsgID != "run1/review/1/"+strconv.Itoa(k+1)+"/1" || string(x.task.Input) != wantIn[k] || x.task.Type != workflow.AgentLoop {
				t.Errorf("iteration %d: %+v", k+1, x.task)
			}
			if !x.task.NotBefore.IsZero() {
				t.Errorf("no loop_delay, but iteration %d waits until %s", k+1, x.task.NotBefore)
			}
		}
		sr := d.stepRun("review")
		if sr.Iteration != 3 || sr.StopReason != "completed" || sr.Label != "completed" || string(sr.Output) != `{"findings":2}` {
			t.Fatalf("review: %+v", sr)
		}
		if in := d.tasksOf("report")[0].task.Input; string(in) != `{"findings":2}` {
			t.Fatalf("report input %s", in)
		}
	})

	t.Run("max_iterations routes on its label", func(t *testing.T) {
		def := agentLoop(t, func(s *workflow.AgentLoopStep) { s.WithMaxIterations(3) }, func(wf *workflow.Builder) {
			wf.Task("escalate", "h.escalate")
			wf.Edge("review", "report").When("completed")
			wf.Edge("review", "escalate").When("max_iterations")
		})
		d := drive(t, def, `{}`, script{
			"review":   {cont(`1`), cont(`2`), cont(`3`)},
			"escalate": {done(`"escalated"`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectPath("review", "escalate")
		if n := d.dispatchCount("review"); n != 3 {
			t.Fatalf("%d iterations, want 3", n)
		}
		if sr := d.stepRun("review"); sr.StopReason != "max_iterations" || sr.Label != "max_iterations" || sr.Iteration != 3 {
			t.Fatalf("review: %+v", sr)
		}
		if in := d.tasksOf("escalate")[0].task.Input; string(in) != `3` {
			t.Fatalf("escalate input %s, want the last iteration's output", in)
		}
	})

	t.Run("max_iterations without an edge is E_NO_ROUTE", func(t *testing.T) {
		def := agentLoop(t, func(s *workflow.AgentLoopStep) { s.WithMaxIterations(2) }, func(wf *workflow.Builder) {
			wf.Edge("review", "report").When("completed")
		})
		d := drive(t, def, `{}`, script{"review": {cont(`1`), cont(`2`)}})
		d.expect(protocol.RunFailed, protocol.CodeNoRoute)
		d.expectErrorContains("review", "max_iterations (2)", `"max_iterations"`)
	})

	t.Run("max_iterations with an unconditional edge goes on", func(t *testing.T) {
		def := agentLoop(t, func(s *workflow.AgentLoopStep) { s.WithMaxIterations(1) }, nil)
		d := drive(t, def, `{}`, script{"review": {cont(`1`)}, "report": {done(`"r"`)}})
		d.expect(protocol.RunCompleted, "")
		d.expectPath("review", "report")
	})

	t.Run("max_duration from the first iteration", func(t *testing.T) {
		def := agentLoop(t, func(s *workflow.AgentLoopStep) {
			s.WithMaxIterations(100).WithMaxDuration(10 * time.Second)
		}, func(wf *workflow.Builder) {
			wf.Edge("review", "report").When("max_duration")
		})
		d := drive(t, def, `{}`, script{
			"review": {cont(`1`).after(4 * time.Second), cont(`2`).after(4 * time.Second), cont(`3`).after(4 * time.Second)},
			"report": {done(`"r"`)},
		})
		d.expect(protocol.RunCompleted, "")
		if n := d.dispatchCount("review"); n != 3 {
			t.Fatalf("%d iterations, want 3 (4s, 8s, then 12s ≥ 10s)", n)
		}
		if sr := d.stepRun("review"); sr.StopReason != "max_duration" || !sr.FirstIterationAt.Equal(t0) {
			t.Fatalf("review: %+v", sr)
		}
	})

	t.Run("loop_delay spaces iterations", func(t *testing.T) {
		def := agentLoop(t, func(s *workflow.AgentLoopStep) { s.WithLoopDelay(500 * time.Millisecond) }, nil)
		d := drive(t, def, `{}`, script{
			"review": {cont(`1`), cont(`2`).after(3 * time.Second), done(`3`)},
			"report": {done(`"r"`)},
		})
		d.expect(protocol.RunCompleted, "")
		ts := d.tasksOf("review")
		if len(ts) != 3 || !ts[0].task.NotBefore.IsZero() {
			t.Fatalf("tasks %+v", ts)
		}
		for k, x := range ts[1:] {
			if got := x.task.NotBefore.Sub(x.cause); got != 500*time.Millisecond {
				t.Errorf("iteration %d waits %s after the continue, want 500ms", k+2, got)
			}
		}
		// Iteration 2 starts at 1.5s (1s + delay), answers 3s later; iteration 3 waits until 5s.
		if want := t0.Add(5 * time.Second); !ts[2].task.NotBefore.Equal(want) {
			t.Fatalf("iteration 3 not before %s, want %s", ts[2].task.NotBefore, want)
		}
	})

	t.Run("an iteration is retried with the same input", func(t *testing.T) {
		def := agentLoop(t, func(s *workflow.AgentLoopStep) {
			s.WithRetry(workflow.Retry{MaxAttempts: 2, Backoff: "fixed"})
		}, nil)
		d := drive(t, def, `{}`, script{
			"review": {cont(`"i1"`), fails("model overloaded"), done(`"final"`)},
			"report": {done(`"r"`)},
		})
		d.expect(protocol.RunCompleted, "")
		ts := d.tasksOf("review")
		if len(ts) != 3 || ts[2].task.MsgID != "run1/review/1/2/2" || string(ts[2].task.Input) != `"i1"` {
			t.Fatalf("tasks: %+v", ts[2].task)
		}
		if sr := d.stepRun("review"); sr.Attempts != 3 || sr.Iteration != 2 || sr.Attempt != 2 {
			t.Fatalf("review: %+v", sr)
		}
	})

	t.Run("continued is ignored for a task step", func(t *testing.T) {
		wf := workflow.New("notloop")
		wf.Task("t", "h")
		d := newDriver(t, build(t, wf), `{}`, script{"t": {hangs()}})
		before := mustJSON(t, d.run)
		run, cmds, err := engine.Decide(d.def, d.run, protocol.Event{Type: protocol.EvContinued, At: t0.Add(time.Second), Step: "t", Item: -1, Activation: 1, Iteration: 1, Attempt: 1})
		if err != nil || len(cmds) != 0 || string(mustJSON(t, run)) != string(before) {
			t.Fatalf("err %v, cmds %v", err, cmds)
		}
	})
}

func TestAgentStep(t *testing.T) {
	build := func(budget *workflow.Budget) *workflow.Definition {
		wf := workflow.New("agentstep")
		wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: []byte(`[{"text":"x"}]`)})
		s := wf.Agent("investigate", "m").WithGoal("Investigate order {{input.order_id}}").WithInstructions("Be brief.")
		if budget != nil {
			s.WithBudget(*budget)
		}
		wf.Task("ok", "h")
		wf.Task("human", "h")
		wf.Task("late", "h")
		wf.Edge("investigate", "ok").When("completed")
		wf.Edge("investigate", "human").When("needs_human")
		wf.Edge("investigate", "human").When("max_iterations")
		wf.Edge("investigate", "late").When("timeout")
		def, err := wf.Build()
		if err != nil {
			t.Fatal(err)
		}
		return def
	}
	for _, tc := range []struct {
		name    string
		budget  *workflow.Budget
		replies []reply
		path    []string
		stop    string
		iters   int
	}{
		{"completed", nil, []reply{done(`"answer"`)}, []string{"investigate", "ok"}, "completed", 1},
		{"stop reason is the label", nil, []reply{cont(`1`), stopped(`"help"`, "needs_human")}, []string{"investigate", "human"}, "needs_human", 2},
		{"budget max_iterations", &workflow.Budget{MaxIterations: 2}, []reply{cont(`1`), cont(`2`)}, []string{"investigate", "human"}, "max_iterations", 2},
		{"default max_iterations is 10", nil, []reply{cont(`1`), cont(`2`), cont(`3`), cont(`4`), cont(`5`), cont(`6`), cont(`7`), cont(`8`), cont(`9`), cont(`10`)}, []string{"investigate", "human"}, "max_iterations", 10},
		{"budget max_duration is the timeout stop reason", &workflow.Budget{MaxDuration: clock.Duration(time.Minute)}, []reply{cont(`1`).after(time.Minute)}, []string{"investigate", "late"}, "timeout", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := drive(t, build(tc.budget), `{"order_id":"O-1"}`, script{
				"investigate": tc.replies, "ok": {done(`1`)}, "human": {done(`2`)}, "late": {done(`3`)},
			})
			d.expect(protocol.RunCompleted, "")
			d.expectPath(tc.path...)
			sr := d.stepRun("investigate")
			if sr.StopReason != tc.stop || sr.Label != tc.stop || sr.Iteration != tc.iters {
				t.Fatalf("investigate: %+v", sr)
			}
			tk := d.tasksOf("investigate")[0].task
			if tk.Goal != "Investigate order O-1" || tk.Instructions != "Be brief." || tk.Model != "m" || tk.Type != workflow.Agent {
				t.Fatalf("task: %+v", tk)
			}
		})
	}
}
