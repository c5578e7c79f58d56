package engine_test

import (
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
)

// TestExamples runs the example workflows whose steps the engine supports, with plausible
// answers from workers.
func TestExamples(t *testing.T) {
	t.Run("code_review", func(t *testing.T) {
		def := loadExample(t, "code_review.toml")
		d := drive(t, def, `{"change":"PR 42"}`, script{
			"review": {cont(`{"notes":["unchecked error"]}`), fails("rate limited"), cont(`{"notes":["unchecked error","missing test"]}`), done(`{"findings":2}`)},
			"report": {done(`"2 findings: an unchecked error and a missing test."`)},
		})
		d.expect(engine.RunCompleted, "")
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
		if got := ts[1].task.NotBefore.Sub(ts[1].cause); got != 500*time.Millisecond {
			t.Fatalf("iteration 2 waits %s", got)
		}
		if ts[2].task.Iteration != 2 || ts[2].task.Attempt != 2 || ts[2].task.NotBefore.Sub(ts[2].cause) != time.Second {
			t.Fatalf("retry of iteration 2: %+v", ts[2].task)
		}
		rep := d.tasksOf("report")[0].task
		if rep.Prompt != `Write the review report of PR 42 from these findings: {"findings":2}` || rep.Model != "reporter" {
			t.Fatalf("report task %+v", rep)
		}
		if rep.Instructions == "" {
			t.Fatal("instructions were not rendered")
		}
	})

	t.Run("draft_refiner accepts the second draft", func(t *testing.T) {
		def := loadExample(t, "draft_refiner.toml")
		d := drive(t, def, `{"product":"Reins 1.0"}`, script{
			"generate": {done(`"Reins 1.0 is out."`), done(`"Reins 1.0 is out: bounded loops."`)},
			"evaluate": {done(`{"verdict":"retry","feedback":"Say what makes the loops bounded."}`), done(`{"verdict":"accept","feedback":"Specific."}`)},
		})
		d.expect(engine.RunCompleted, "")
		d.expectOutput(`"Reins 1.0 is out: bounded loops."`)
		d.expectPath("generate", "evaluate", "generate", "evaluate", "publish")
		if p := d.tasksOf("evaluate")[1].task.Prompt; p != "Judge this announcement of Reins 1.0: Reins 1.0 is out: bounded loops." {
			t.Fatalf("evaluate prompt %q", p)
		}
	})

	t.Run("draft_refiner with a critic that never accepts reaches the human review", func(t *testing.T) {
		def := loadExample(t, "draft_refiner.toml")
		retry := done(`{"verdict":"retry","feedback":"no"}`)
		d := drive(t, def, `{"product":"Reins 1.0"}`, script{
			"generate": {done(`"d1"`), done(`"d2"`), done(`"d3"`), done(`"d4"`)},
			"evaluate": {retry, retry, retry, retry},
		})
		// approval is the next issue's: the step fails, and with no error edge so does the run.
		d.expect(engine.RunFailed, engine.CodeStepFailed)
		d.expectErrorContains("step review failed: step type approval is not supported yet")
		if d.dispatchCount("generate") != 4 || d.dispatchCount("evaluate") != 4 {
			t.Fatalf("generate %d, evaluate %d", d.dispatchCount("generate"), d.dispatchCount("evaluate"))
		}
	})

	t.Run("research_fanout", func(t *testing.T) {
		def := loadExample(t, "research_fanout.toml")
		d := drive(t, def, `{"question":"automated refunds"}`, script{
			"market":      {done(`"Market: 40%."`).after(3 * time.Second)},
			"competitors": {done(`"Competitors: two."`)},
			"regulation":  {done(`"Regulation: approval above 500 EUR."`).after(2 * time.Second)},
			"combine":     {done(`"Brief: demand is real."`)},
		})
		d.expect(engine.RunCompleted, "")
		d.expectOutput(`"Brief: demand is real."`)
		d.expectPath("research", "combine", "done")
		if d.maxInFlight["research"] != 3 {
			t.Fatalf("%d branches at once", d.maxInFlight["research"])
		}
		want := `Question: automated refunds. Notes, in order market, competitors, regulation: ["Market: 40%.","Competitors: two.","Regulation: approval above 500 EUR."]`
		if p := d.tasksOf("combine")[0].task.Prompt; p != want {
			t.Fatalf("combine prompt:\n%s\nwant\n%s", p, want)
		}
		if p := d.tasksOf("market")[0].task.Prompt; p != "Size the market for automated refunds. Three sentences at most." {
			t.Fatalf("market prompt %q", p)
		}
	})

	refund := func(t *testing.T, out, stop string) *driver {
		def := loadExample(t, "refund_investigation.toml")
		return drive(t, def, `{"order_id":"O-104"}`, script{"investigate": {stopped(out, stop)}})
	}
	t.Run("refund_investigation recommends", func(t *testing.T) {
		out := `{"stop_reason":"completed","detail":"","answer":"Recommend a refund: O-104 arrived 4 days late."}`
		d := refund(t, out, "completed")
		d.expect(engine.RunCompleted, "")
		d.expectOutput(out)
		d.expectPath("investigate", "route", "recommend")
		tk := d.tasksOf("investigate")[0].task
		if tk.Goal != "Decide whether refund evidence is sufficient for order O-104." || tk.Model != "investigator" {
			t.Fatalf("task %+v", tk)
		}
	})
	t.Run("refund_investigation refused", func(t *testing.T) {
		d := refund(t, `{"stop_reason":"refused","detail":"proposed issue_refund","answer":""}`, "refused")
		d.expect(engine.RunFailed, engine.CodeFail)
		if d.run.Error.Message != "The investigation stopped without a recommendation (refused)." || d.run.Error.Step != "stopped" {
			t.Fatalf("error %+v", d.run.Error)
		}
		d.expectPath("investigate", "route", "stopped")
	})
}
