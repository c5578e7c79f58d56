package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
)

// TestExamples runs the example workflows with plausible answers from workers and humans.
func TestExamples(t *testing.T) {
	t.Run("code_review", func(t *testing.T) {
		def := loadExample(t, "codereview")
		d := drive(t, def, `{"change":"PR 42"}`, script{
			"review": {cont(`{"notes":["unchecked error"]}`), fails("rate limited"), cont(`{"notes":["unchecked error","missing test"]}`), done(`{"findings":["unchecked error","missing test"]}`)},
			"report": {done(`"2 findings: an unchecked error and a missing test."`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`"2 findings: an unchecked error and a missing test."`)
		d.expectPath("review", "report")
		ts := d.tasksOf("review")
		if len(ts) != 4 {
			t.Fatalf("%d review tasks", len(ts))
		}
		for _, x := range ts {
			if x.task.Timeout != 30*time.Second || x.task.Handler != "llm-review" {
				t.Fatalf("task %+v", x.task)
			}
		}
		// Iteration 2: loop_delay after the continue; its retry: exponential backoff from 1s.
		if got := ts[1].task.NotBefore.Sub(ts[1].cause); got != 250*time.Millisecond {
			t.Fatalf("iteration 2 waits %s", got)
		}
		if ts[2].task.Iteration != 2 || ts[2].task.Attempt != 2 || ts[2].task.NotBefore.Sub(ts[2].cause) != time.Second {
			t.Fatalf("retry of iteration 2: %+v", ts[2].task)
		}
		rep := d.tasksOf("report")[0].task
		if rep.Prompt != `Write the review report of PR 42 from these findings, one per reviewed file: ["unchecked error","missing test"]` || rep.Model != "reporter" {
			t.Fatalf("report task %+v", rep)
		}
		if rep.Instructions == "" {
			t.Fatal("instructions were not rendered")
		}
	})

	t.Run("draft_refiner accepts the second draft", func(t *testing.T) {
		def := loadExample(t, "evaluator")
		d := drive(t, def, `{"product":"Reins 1.0"}`, script{
			"generate": {done(`"Reins 1.0 is out."`), done(`"Reins 1.0 is out: bounded loops."`)},
			"evaluate": {done(`{"verdict":"retry","feedback":"Say what makes the loops bounded."}`), done(`{"verdict":"accept","feedback":"Specific."}`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`"Reins 1.0 is out: bounded loops."`)
		d.expectPath("generate", "evaluate", "generate", "evaluate", "publish")
		if p := d.tasksOf("evaluate")[1].task.Prompt; p != "Judge this announcement of Reins 1.0: Reins 1.0 is out: bounded loops." {
			t.Fatalf("evaluate prompt %q", p)
		}
	})

	// A critic that never accepts: after 3 rewrites the draft goes to the human review.
	neverAccepts := func(t *testing.T) *driver {
		def := loadExample(t, "evaluator")
		retry := done(`{"verdict":"retry","feedback":"no"}`)
		d := newDriver(t, def, `{"product":"Reins 1.0"}`, script{
			"generate": {done(`"d1"`), done(`"d2"`), done(`"d3"`), done(`"d4"`)},
			"evaluate": {retry, retry, retry, retry},
		})
		d.runUntil("the review", waiting("review"))
		if d.dispatchCount("generate") != 4 || d.dispatchCount("evaluate") != 4 {
			t.Fatalf("generate %d, evaluate %d", d.dispatchCount("generate"), d.dispatchCount("evaluate"))
		}
		if p := d.stepRun("review").Prompt; p != "The critic still wants changes after 3 rewrites. Publish this draft anyway? d4" {
			t.Fatalf("review prompt %q", p)
		}
		return d
	}
	review := protocol.Event{Type: protocol.EvDecision, Step: "review", Item: -1}
	t.Run("draft_refiner: a human publishes the draft the critic never accepted", func(t *testing.T) {
		d := neverAccepts(t)
		ok := review
		ok.Approve, ok.By = true, "editor"
		d.human(5*time.Minute, ok)
		d.runToEnd()
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`"d4"`)
		d.expectPath("generate", "evaluate", "generate", "evaluate", "generate", "evaluate", "generate", "evaluate", "review", "publish")
	})
	t.Run("draft_refiner: a human rejects it", func(t *testing.T) {
		d := neverAccepts(t)
		no := review
		no.Message = "Too vague."
		d.human(time.Minute, no)
		d.runToEnd()
		d.expect(protocol.RunFailed, protocol.CodeFail)
		d.expectErrorContains("A human rejected the draft after 3 rewrites: Too vague.")
	})
	t.Run("draft_refiner: nobody decides within the review's timeout", func(t *testing.T) {
		// The review's 24h timeout is shorter than the run's 48h deadline: on_timeout denies.
		d := neverAccepts(t)
		d.runToEnd()
		d.expect(protocol.RunFailed, protocol.CodeFail)
		d.expectErrorContains("A human rejected the draft after 3 rewrites: no decision within 24h0m0s")
		if sr := d.stepRun("review"); sr.Status != protocol.StepCompleted || sr.Label != "denied" {
			t.Fatalf("review: %s, label %q", sr.Status, sr.Label)
		}
	})

	t.Run("research_fanout", func(t *testing.T) {
		def := loadExample(t, "research")
		// Each branch is an agent: one search, then its finding.
		agent := func(answer string, took time.Duration) []reply {
			return []reply{cont(`null`), stopped(`{"stop_reason":"completed","detail":"","answer":"`+answer+`"}`, "completed").after(took)}
		}
		d := drive(t, def, `{"question":"automated refunds"}`, script{
			"market":      agent("Market: 40%.", 3*time.Second),
			"competitors": agent("Competitors: two.", 0),
			"regulation":  agent("Regulation: approval above 500 EUR.", 2*time.Second),
			"combine":     {done(`"Brief: demand is real."`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`"Brief: demand is real."`)
		d.expectPath("research", "combine", "done")
		if d.maxInFlight["research"] != 3 {
			t.Fatalf("%d branches at once", d.maxInFlight["research"])
		}
		want := `Question: automated refunds. Notes of the market, competitors and regulation agents, in that order (each with its stop reason and answer): [` +
			`{"stop_reason":"completed","detail":"","answer":"Market: 40%."},` +
			`{"stop_reason":"completed","detail":"","answer":"Competitors: two."},` +
			`{"stop_reason":"completed","detail":"","answer":"Regulation: approval above 500 EUR."}]`
		if p := d.tasksOf("combine")[0].task.Prompt; p != want {
			t.Fatalf("combine prompt:\n%s\nwant\n%s", p, want)
		}
		if g := d.tasksOf("market")[0].task.Goal; g != "Size the market for automated refunds. Answer in three sentences at most." {
			t.Fatalf("market goal %q", g)
		}
		for _, branch := range []string{"market", "competitors", "regulation"} {
			if ts := d.tasksOf(branch); len(ts) != 2 || ts[1].task.Iteration != 2 {
				t.Fatalf("%s: %d tasks; want its 2 iterations", branch, len(ts))
			}
		}
	})

	refund := func(t *testing.T, out, stop string) *driver {
		def := loadExample(t, "refund")
		return drive(t, def, `{"order_id":"O-104"}`, script{"investigate": {stopped(out, stop)}})
	}
	t.Run("refund_investigation recommends", func(t *testing.T) {
		out := `{"stop_reason":"completed","detail":"","answer":"Recommend a refund: O-104 arrived 4 days late."}`
		d := refund(t, out, "completed")
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(out)
		d.expectPath("investigate", "route", "recommend")
		tk := d.tasksOf("investigate")[0].task
		if tk.Goal != "Decide whether refund evidence is sufficient for order O-104." || tk.Model != "investigator" {
			t.Fatalf("task %+v", tk)
		}
	})
	t.Run("refund_investigation needs a human, who approves", func(t *testing.T) {
		out := `{"stop_reason":"needs_human","detail":"the policy is unclear","answer":""}`
		def := loadExample(t, "refund")
		d := newDriver(t, def, `{"order_id":"O-104"}`, script{"investigate": {stopped(out, "needs_human")}})
		d.runUntil("the human review", waiting("human_review"))
		if d.run.Status != protocol.RunWaiting {
			t.Fatalf("run status %s while a step waits", d.run.Status)
		}
		want := "The investigation of order O-104 needs a person: the policy is unclear. Approve the refund?"
		if p := d.stepRun("human_review").Prompt; p != want {
			t.Fatalf("prompt %q", p)
		}
		d.human(20*time.Minute, protocol.Event{Type: protocol.EvDecision, Step: "human_review", Item: -1, Approve: true, Message: "Refund it."})
		d.runToEnd()
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(out)
		d.expectPath("investigate", "route", "human_review", "recommend")
	})
	t.Run("refund_investigation refused", func(t *testing.T) {
		d := refund(t, `{"stop_reason":"refused","detail":"proposed issue_refund","answer":""}`, "refused")
		d.expect(protocol.RunFailed, protocol.CodeFail)
		if d.run.Error.Message != "The investigation stopped without a recommendation (refused)." || d.run.Error.Step != "stopped" {
			t.Fatalf("error %+v", d.run.Error)
		}
		d.expectPath("investigate", "route", "stopped")
	})
}

// The call of an agent tool runs as a sub-run whose id ends with its call: the call id itself,
// or a digest of one that cannot be part of a run id.
func ExampleCallToken() {
	fmt.Println(engine.CallToken("toolu_01A"))
	fmt.Println(engine.CallToken("call.7 (retry)"))
	// Output:
	// toolu_01A
	// he24f53b7b675512c
}
