package engine_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

func TestLinearChain(t *testing.T) {
	wf := workflow.New("linear")
	wf.Task("a", "h.a")
	wf.Task("b", "h.b").WithTimeout(30 * time.Second)
	wf.Task("c", "h.c")
	wf.Edge("a", "b")
	wf.Edge("b", "c")
	def := build(t, wf)
	d := drive(t, def, `{"n": 1}`, script{
		"a": {done(`{"x":1}`)},
		"b": {done(`{"y":2}`)},
		"c": {done(`"end"`)},
	})
	d.expect(protocol.RunCompleted, "")
	d.expectOutput(`"end"`)
	d.expectPath("a", "b", "c")

	if first := d.cmds[0]; first.Type != engine.CmdSchedule || !first.At.Equal(t0.Add(time.Hour)) || first.Step != "" {
		t.Fatalf("first command %+v, want the deadline tick at start + 1h", first)
	}
	if !d.run.Deadline.Equal(t0.Add(time.Hour)) || !d.run.StartedAt.Equal(t0) {
		t.Fatalf("started %s, deadline %s", d.run.StartedAt, d.run.Deadline)
	}
	for _, tc := range []struct {
		step, input, handler, msgID string
		timeout                     time.Duration
	}{
		{"a", `{"n":1}`, "h.a", "run1/a/1/1/1", 0},
		{"b", `{"x":1}`, "h.b", "run1/b/1/1/1", 30 * time.Second},
		{"c", `{"y":2}`, "h.c", "run1/c/1/1/1", 0},
	} {
		ts := d.tasksOf(tc.step)
		if len(ts) != 1 {
			t.Fatalf("%s dispatched %d times, want 1", tc.step, len(ts))
		}
		tk := ts[0].task
		if string(tk.Input) != tc.input || tk.Handler != tc.handler || tk.MsgID != tc.msgID || tk.Item != -1 ||
			tk.Type != workflow.Task || tk.Timeout != tc.timeout || !tk.NotBefore.IsZero() || tk.RunID != "run1" {
			t.Errorf("task of %s: %+v", tc.step, tk)
		}
		sr := d.stepRun(tc.step)
		if sr.Status != protocol.StepCompleted || sr.Activation != 1 || sr.Attempts != 1 {
			t.Errorf("step %s: %+v", tc.step, sr)
		}
	}
	if d.run.Executed != 3 || d.run.Workflow != "linear" || d.run.Hash == "" {
		t.Fatalf("executed %d, workflow %q, hash %q", d.run.Executed, d.run.Workflow, d.run.Hash)
	}
	for i, e := range d.run.Edges {
		if e.State != engine.EdgeFired || e.Uses != 1 {
			t.Errorf("edge %d: %+v", i, e)
		}
	}
}

func switchWorkflow(t *testing.T) *workflow.Definition {
	wf := workflow.New("switching")
	wf.Task("classify", "h.classify")
	wf.Switch("route", "classify.output.kind")
	wf.Task("refund", "h.refund")
	wf.Task("other", "h.other")
	wf.Edge("classify", "route")
	wf.Edge("route", "refund").When("refund")
	wf.Edge("route", "other").When("question")
	wf.Edge("route", "other").When("true")
	wf.Edge("route", "other").When("2")
	return build(t, wf)
}

func TestSwitchRouting(t *testing.T) {
	def := switchWorkflow(t)
	for _, tc := range []struct {
		name, classified string
		status           protocol.RunStatus
		code             string
		path             []string
		errParts         []string
	}{
		{"string label", `{"kind":"refund"}`, protocol.RunCompleted, "", []string{"classify", "route", "refund"}, nil},
		{"other label", `{"kind":"question"}`, protocol.RunCompleted, "", []string{"classify", "route", "other"}, nil},
		{"boolean label", `{"kind":true}`, protocol.RunCompleted, "", []string{"classify", "route", "other"}, nil},
		{"number label", `{"kind":2}`, protocol.RunCompleted, "", []string{"classify", "route", "other"}, nil},
		{"no edge for the label", `{"kind":"spam"}`, protocol.RunFailed, protocol.CodeNoRoute, []string{"classify", "route"}, []string{"route", `"spam"`}},
		{"expr finds nothing", `{"type":"refund"}`, protocol.RunFailed, protocol.CodeStepFailed, []string{"classify", "route"}, []string{`step route failed: expr: classify.output.kind: classify.output has no key "kind"`}},
		{"label of the wrong type", `{"kind":{"a":1}}`, protocol.RunFailed, protocol.CodeStepFailed, []string{"classify", "route"}, []string{"step route failed: expr classify.output.kind: a label must be a string, number or boolean, got an object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := drive(t, def, `{}`, script{
				"classify": {done(tc.classified)},
				"refund":   {done(`"refunded"`)},
				"other":    {done(`"answered"`)},
			})
			d.expect(tc.status, tc.code)
			d.expectPath(tc.path...)
			d.expectErrorContains(tc.errParts...)
			if tc.status != protocol.RunCompleted {
				if d.run.Error.Step != "route" {
					t.Fatalf("error names step %q, want route", d.run.Error.Step)
				}
				return
			}
			route := d.stepRun("route")
			if string(route.Output) != tc.classified && !jsonEqual(t, route.Output, []byte(tc.classified)) {
				t.Fatalf("switch output %s, want its input %s", route.Output, tc.classified)
			}
			target := tc.path[2]
			if in := d.tasksOf(target)[0].task.Input; !jsonEqual(t, in, []byte(tc.classified)) {
				t.Fatalf("%s input %s, want the switch's output", target, in)
			}
			if d.dispatchCount("route") != 0 {
				t.Fatal("a switch dispatched a task")
			}
			if d.dispatchCount("refund")+d.dispatchCount("other") != 1 {
				t.Fatal("not exactly one branch ran")
			}
		})
	}
}

// refiner is draft_refiner with the human review as a task, so that every path completes.
func refiner(t *testing.T) *workflow.Definition {
	wf := workflow.New("refiner").Start("generate")
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	wf.LLM("generate", "m").WithPrompt("Announce {{input.product}}.")
	wf.LLM("evaluate", "m").WithPrompt("Judge {{generate.output}}").WithBranch("verdict")
	wf.Task("review", "human.review")
	wf.Terminate("publish").WithInput("generate.output")
	wf.Edge("generate", "evaluate")
	wf.Edge("evaluate", "generate").When("retry").MaxIterations(3)
	wf.Edge("evaluate", "review").When("retry")
	wf.Edge("evaluate", "publish").When("accept")
	wf.Edge("review", "publish")
	return build(t, wf)
}

func TestEvaluatorOptimizerLoop(t *testing.T) {
	def := refiner(t)
	retry := func(n int) reply { return done(`{"verdict":"retry","feedback":"again ` + string(rune('0'+n)) + `"}`) }

	t.Run("retries three times then takes the plain edge out", func(t *testing.T) {
		d := drive(t, def, `{"product":"reins"}`, script{
			"generate": {done(`"d1"`), done(`"d2"`), done(`"d3"`), done(`"d4"`)},
			"evaluate": {retry(1), retry(2), retry(3), retry(4)},
			"review":   {done(`"ok"`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`"d4"`)
		d.expectPath("generate", "evaluate", "generate", "evaluate", "generate", "evaluate", "generate", "evaluate", "review", "publish")
		if g, e := d.dispatchCount("generate"), d.dispatchCount("evaluate"); g != 4 || e != 4 || d.dispatchCount("review") != 1 {
			t.Fatalf("dispatches generate %d, evaluate %d, review %d", g, e, d.dispatchCount("review"))
		}
		if a := d.stepRun("generate").Activation; a != 4 {
			t.Fatalf("generate activation %d, want 4", a)
		}
		if loop := d.run.Edges[1]; loop.Uses != 3 {
			t.Fatalf("loop edge used %d times, want 3", loop.Uses)
		}
		gens := d.tasksOf("generate")
		for k, x := range gens {
			if x.task.Activation != k+1 || x.task.MsgID != "run1/generate/"+string(rune('1'+k))+"/1/1" {
				t.Errorf("generate task %d: activation %d, msg id %s", k, x.task.Activation, x.task.MsgID)
			}
			if x.task.Prompt != "Announce reins." {
				t.Errorf("prompt %q", x.task.Prompt)
			}
		}
		// After a retry, the writer's input is the critic's verdict (the default input).
		if in := gens[1].task.Input; !jsonEqual(t, in, []byte(`{"verdict":"retry","feedback":"again 1"}`)) {
			t.Fatalf("second generate input %s", in)
		}
		if in := gens[0].task.Input; !jsonEqual(t, in, []byte(`{"product":"reins"}`)) {
			t.Fatalf("first generate input %s", in)
		}
		if p := d.tasksOf("evaluate")[3].task.Prompt; p != "Judge d4" {
			t.Fatalf("evaluate prompt %q", p)
		}
	})

	t.Run("accept on the second draft", func(t *testing.T) {
		d := drive(t, def, `{"product":"reins"}`, script{
			"generate": {done(`"d1"`), done(`"d2"`)},
			"evaluate": {retry(1), done(`{"verdict":"accept"}`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`"d2"`)
		d.expectPath("generate", "evaluate", "generate", "evaluate", "publish")
		if d.dispatchCount("review") != 0 || d.stepRun("review").Status != protocol.StepSkipped {
			t.Fatalf("review: %+v", d.stepRun("review"))
		}
	})

	t.Run("a spent loop with no way out is E_NO_ROUTE", func(t *testing.T) {
		wf := workflow.New("spent").Start("generate")
		wf.Task("generate", "h")
		wf.Task("evaluate", "h").WithBranch("verdict")
		wf.Task("publish", "h")
		wf.Edge("generate", "evaluate")
		wf.Edge("evaluate", "generate").When("retry").MaxIterations(2)
		wf.Edge("evaluate", "publish").When("accept")
		d := drive(t, build(t, wf), `{}`, script{
			"generate": {done(`1`), done(`2`), done(`3`)},
			"evaluate": {retry(1), retry(2), retry(3)},
		})
		d.expect(protocol.RunFailed, protocol.CodeNoRoute)
		d.expectErrorContains(`step evaluate has no edge for label "retry"`, "loop edge to generate is spent (max_iterations = 2)")
	})
}

func TestNoRoute(t *testing.T) {
	t.Run("branch label without an edge", func(t *testing.T) {
		wf := workflow.New("noroute")
		wf.Task("judge", "h").WithBranch("verdict")
		wf.Task("ship", "h")
		wf.Edge("judge", "ship").When("accept")
		d := drive(t, build(t, wf), `{}`, script{"judge": {done(`{"verdict":"maybe"}`)}})
		d.expect(protocol.RunFailed, protocol.CodeNoRoute)
		d.expectErrorContains("judge", `"maybe"`)
		if d.run.Error.Step != "judge" || d.dispatchCount("ship") != 0 {
			t.Fatalf("error %+v, ship dispatched %d", d.run.Error, d.dispatchCount("ship"))
		}
	})
	t.Run("no label and only conditional edges", func(t *testing.T) {
		wf := workflow.New("nolabel")
		wf.Task("judge", "h")
		wf.Task("ship", "h")
		wf.Edge("judge", "ship").When("accept")
		d := drive(t, build(t, wf), `{}`, script{"judge": {done(`{}`)}})
		d.expect(protocol.RunFailed, protocol.CodeNoRoute)
		d.expectErrorContains(`label ""`)
	})
	t.Run("explicit label wins over the branch", func(t *testing.T) {
		wf := workflow.New("explicit")
		wf.Task("judge", "h").WithBranch("verdict")
		wf.Task("ship", "h")
		wf.Edge("judge", "ship").When("accept")
		d := drive(t, build(t, wf), `{}`, script{"judge": {doneAs(`{"verdict":"maybe"}`, "accept")}, "ship": {done(`1`)}})
		d.expect(protocol.RunCompleted, "")
		d.expectPath("judge", "ship")
	})
	t.Run("branch path missing fails the step", func(t *testing.T) {
		wf := workflow.New("badbranch")
		wf.Task("judge", "h").WithBranch("verdict")
		wf.Task("ship", "h")
		wf.Edge("judge", "ship").When("accept")
		d := drive(t, build(t, wf), `{}`, script{"judge": {done(`{"other":1}`)}})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectErrorContains(`step judge failed: branch: verdict: output has no key "verdict"`)
	})
}

func TestErrorEdge(t *testing.T) {
	base := func(withErrorEdge, withEdges bool) *workflow.Definition {
		wf := workflow.New("charging")
		wf.Task("charge", "payments.charge")
		if withEdges {
			wf.Task("ship", "h.ship")
			wf.Edge("charge", "ship")
		}
		if withErrorEdge {
			wf.Task("compensate", "h.compensate")
			wf.Edge("charge", "compensate").When("error")
		}
		return build(t, wf)
	}
	t.Run("the error edge is taken", func(t *testing.T) {
		d := drive(t, base(true, true), `{}`, script{
			"charge":     {fails("card declined")},
			"compensate": {done(`"compensated"`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`"compensated"`)
		d.expectPath("charge", "compensate")
		if in := d.tasksOf("compensate")[0].task.Input; !jsonEqual(t, in, []byte(`{"step":"charge","error":"card declined"}`)) {
			t.Fatalf("compensate input %s", in)
		}
		if d.dispatchCount("ship") != 0 || d.stepRun("ship").Status != protocol.StepSkipped {
			t.Fatal("ship ran after a failure")
		}
		if sr := d.stepRun("charge"); sr.Status != protocol.StepFailed || sr.Label != "error" || sr.Error != "card declined" {
			t.Fatalf("charge: %+v", sr)
		}
		if len(d.deadLetters) != 1 {
			t.Fatalf("%d dead letters, want 1", len(d.deadLetters))
		}
	})
	t.Run("an unconditional edge does not catch a failure", func(t *testing.T) {
		d := drive(t, base(false, true), `{}`, script{"charge": {fails("card declined")}})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectErrorContains("step charge failed: card declined")
		if d.run.Error.Step != "charge" || d.dispatchCount("ship") != 0 {
			t.Fatalf("error %+v; ship dispatched %d times", d.run.Error, d.dispatchCount("ship"))
		}
	})
	t.Run("a step without edges fails the run", func(t *testing.T) {
		d := drive(t, base(false, false), `{}`, script{"charge": {fails("card declined")}})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectPath("charge")
	})
}

func TestFanOutFanIn(t *testing.T) {
	wf := workflow.New("fan")
	wf.Task("a", "h")
	wf.Task("b", "h")
	wf.Task("c", "h")
	wf.Task("j", "h")
	wf.Edge("a", "b")
	wf.Edge("a", "c")
	wf.Edge("c", "j") // declared first: the join's input lists c first
	wf.Edge("b", "j")
	d := drive(t, build(t, wf), `{}`, script{
		"a": {done(`"A"`)},
		"b": {done(`"B"`).after(time.Second)},
		"c": {done(`"C"`).after(5 * time.Second)},
		"j": {done(`"J"`)},
	})
	d.expect(protocol.RunCompleted, "")
	d.expectOutput(`"J"`)
	d.expectPath("a", "b", "c", "j")
	j := d.tasksOf("j")
	if len(j) != 1 {
		t.Fatalf("the join ran %d times", len(j))
	}
	if string(j[0].task.Input) != `{"c":"C","b":"B"}` {
		t.Fatalf("join input %s", j[0].task.Input)
	}
	if want := t0.Add(6 * time.Second); !j[0].cause.Equal(want) {
		t.Fatalf("join dispatched at %s, want after both branches (%s)", j[0].cause, want)
	}
	if b, c := d.tasksOf("b")[0], d.tasksOf("c")[0]; !b.cause.Equal(c.cause) {
		t.Fatal("the fan-out branches did not start together")
	}
}

func TestFanInWithDeadPaths(t *testing.T) {
	wf := workflow.New("deadpaths")
	wf.Task("check", "h").WithBranch("ok")
	wf.Task("fast", "h")
	wf.Task("slow", "h")
	wf.Task("slow2", "h")
	wf.Task("join", "h")
	wf.Edge("check", "fast").When("true")
	wf.Edge("check", "slow").When("false")
	wf.Edge("slow", "slow2")
	wf.Edge("fast", "join")
	wf.Edge("slow2", "join")
	def := build(t, wf)
	for _, tc := range []struct {
		ok, ran, skipped1, skipped2 string
		input                       string
	}{
		{"true", "fast", "slow", "slow2", `"F"`},
		{"false", "slow2", "fast", "", `"S2"`},
	} {
		t.Run("ok="+tc.ok, func(t *testing.T) {
			d := drive(t, def, `{}`, script{
				"check": {done(`{"ok":` + tc.ok + `}`)},
				"fast":  {done(`"F"`)},
				"slow":  {done(`"S"`)},
				"slow2": {done(`"S2"`)},
				"join":  {done(`"J"`)},
			})
			d.expect(protocol.RunCompleted, "")
			d.expectOutput(`"J"`)
			if d.dispatchCount("join") != 1 {
				t.Fatalf("join dispatched %d times", d.dispatchCount("join"))
			}
			if in := d.tasksOf("join")[0].task.Input; string(in) != tc.input {
				t.Fatalf("join input %s, want %s", in, tc.input)
			}
			for _, s := range []string{tc.skipped1, tc.skipped2} {
				if s == "" {
					continue
				}
				if sr := d.stepRun(s); sr.Status != protocol.StepSkipped || d.dispatchCount(s) != 0 {
					t.Fatalf("%s: %+v, dispatched %d", s, sr, d.dispatchCount(s))
				}
			}
		})
	}
}

func TestSeveralBranchesEnd(t *testing.T) {
	wf := workflow.New("ends")
	wf.Task("a", "h")
	wf.Task("x", "h")
	wf.Task("y", "h")
	wf.Edge("a", "y")
	wf.Edge("a", "x")
	d := drive(t, build(t, wf), `{}`, script{"a": {done(`1`)}, "x": {done(`"X"`).after(3 * time.Second)}, "y": {done(`"Y"`)}})
	d.expect(protocol.RunCompleted, "")
	// Declaration order of the steps, not completion order.
	if string(d.run.Output) != `{"x":"X","y":"Y"}` {
		t.Fatalf("output %s", d.run.Output)
	}
	d.expectPath("a", "y", "x")
}

func TestTerminateAndFailSteps(t *testing.T) {
	wf := workflow.New("ending")
	wf.Task("check", "h").WithBranch("verdict")
	wf.Terminate("ok").WithInput("{{input.order}}")
	wf.Fail("bad", "order {{input.order.id}} rejected: {{check.output.why}}")
	wf.Edge("check", "ok").When("ok")
	wf.Edge("check", "bad").When("bad")
	def := build(t, wf)
	d := drive(t, def, `{"order":{"id":"O-1"}}`, script{"check": {done(`{"verdict":"ok"}`)}})
	d.expect(protocol.RunCompleted, "")
	d.expectOutput(`{"id":"O-1"}`)
	d.expectPath("check", "ok")

	d = drive(t, def, `{"order":{"id":"O-1"}}`, script{"check": {done(`{"verdict":"bad","why":"fraud"}`)}})
	d.expect(protocol.RunFailed, protocol.CodeFail)
	if d.run.Error.Message != "order O-1 rejected: fraud" || d.run.Error.Step != "bad" {
		t.Fatalf("error %+v", d.run.Error)
	}
	d.expectPath("check", "bad")
}

func TestStepInputTemplates(t *testing.T) {
	wf := workflow.New("inputs")
	wf.Task("a", "h")
	wf.Task("b", "h").WithInput("Order {{input.id}} has {{a.output.n}} items <ok>")
	wf.Task("c", "h").WithInput("{{ a.output }}")
	wf.Task("d", "h").WithInput("a.output.missing")
	wf.Edge("a", "b")
	wf.Edge("b", "c")
	wf.Edge("c", "d")
	d := drive(t, build(t, wf), `{"id":"O-7"}`, script{"a": {done(`{"n":3}`)}, "b": {done(`1`)}, "c": {done(`2`)}})
	if in := d.tasksOf("b")[0].task.Input; !jsonEqual(t, in, []byte(`"Order O-7 has 3 items <ok>"`)) {
		t.Fatalf("b input %s", in)
	}
	if in := d.tasksOf("c")[0].task.Input; string(in) != `{"n":3}` {
		t.Fatalf("c input %s", in)
	}
	// An input that cannot be evaluated fails the step.
	d.expect(protocol.RunFailed, protocol.CodeStepFailed)
	d.expectErrorContains(`step d failed: input: a.output.missing: a.output has no key "missing"`)
	if d.dispatchCount("d") != 0 {
		t.Fatal("d was dispatched")
	}
}

// A prompt that cannot be rendered (a path missing from an output the validator cannot see)
// fails the step before anything is dispatched for it.
func TestLLMPromptThatCannotRender(t *testing.T) {
	wf := workflow.New("prompt").Start("gen")
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	wf.LLM("gen", "m").WithPrompt("Write")
	wf.LLM("eval", "m").WithPrompt("Judge {{gen.output.draft}}")
	wf.Edge("gen", "eval")
	d := drive(t, build(t, wf), `{}`, script{"gen": {done(`"just text"`)}})
	d.expect(protocol.RunFailed, protocol.CodeStepFailed)
	d.expectErrorContains("prompt", "gen.output is a string")
	if d.dispatchCount("eval") != 0 {
		t.Fatal("a task was dispatched for eval")
	}
}

// The evaluator–optimizer: the writer's prompt reads the critic's feedback with a default, which
// stands for it on the first pass, before the critic ran; after a retry it is the feedback.
func TestEvaluatorOptimizerWithDefault(t *testing.T) {
	wf := workflow.New("refine").Start("gen")
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	wf.LLM("gen", "m").WithPrompt(`Write. Feedback: {{eval.output.feedback ?? "none yet"}}`)
	wf.LLM("eval", "m").WithPrompt("Judge {{gen.output}}").WithBranch("verdict")
	wf.Edge("gen", "eval")
	wf.Edge("eval", "gen").When("retry").MaxIterations(1)
	wf.Task("publish", "h")
	wf.Edge("eval", "publish").When("ok")
	d := drive(t, build(t, wf), `{}`, script{
		"publish": {done(`1`)},
		"gen":     {done(`"draft 1"`), done(`"draft 2"`)},
		"eval":    {done(`{"verdict":"retry","feedback":"shorter"}`), doneAs(`{"verdict":"ok","feedback":""}`, "ok")},
	})
	d.expect(protocol.RunCompleted, "")
	prompts := []string{}
	for _, x := range d.tasksOf("gen") {
		prompts = append(prompts, x.task.Prompt)
	}
	if want := []string{"Write. Feedback: none yet", "Write. Feedback: shorter"}; !slices.Equal(prompts, want) {
		t.Fatalf("prompts %q, want %q", prompts, want)
	}
}

// A switch's expr written as a template may give a default: on the first pass, before the
// critic it reads ran, the default is the label.
func TestSwitchExprDefault(t *testing.T) {
	wf := workflow.New("route_first").Start("route")
	wf.Switch("route", `{{judge.output.verdict ?? "first"}}`)
	wf.Task("work", "h")
	wf.Task("judge", "h")
	wf.Terminate("done")
	wf.Edge("route", "work").When("first")
	wf.Edge("route", "work").When("retry")
	wf.Edge("route", "done").When("accept")
	wf.Edge("work", "judge")
	wf.Edge("judge", "route").MaxIterations(3)
	d := drive(t, build(t, wf), `{}`, script{
		"work":  {done(`1`), done(`2`)},
		"judge": {done(`{"verdict":"retry"}`), done(`{"verdict":"accept"}`)},
	})
	d.expect(protocol.RunCompleted, "")
	d.expectPath("route", "work", "judge", "route", "work", "judge", "route", "done")
}

func TestErrorMessages(t *testing.T) {
	e := &protocol.RunError{Code: protocol.CodeNoRoute, Message: "m", Step: "s"}
	if got := e.Error(); !strings.Contains(got, "E_NO_ROUTE") || !strings.Contains(got, "s") {
		t.Fatalf("%q", got)
	}
}

// TestOneRuleForEveryStepType: whatever the step's type, its label (a branch value, an agent's
// stop reason, a bound) is routed by the one rule of the workflow file: no outgoing edge ends the branch
// and the run completes, keeping the stop reason; outgoing edges none of which matches fail the
// run with E_NO_ROUTE; a failure with no error edge fails it with E_STEP_FAILED.
func TestOneRuleForEveryStepType(t *testing.T) {
	type kind struct {
		name  string
		add   func(wf *workflow.Builder) // adds step "s"
		reply []reply                    // what its tasks answer: ending with label "limit"
		label string
	}
	kinds := []kind{
		{"task with a branch", func(wf *workflow.Builder) { wf.Task("s", "h").WithBranch("verdict") },
			[]reply{done(`{"verdict":"limit"}`)}, "limit"},
		{"llm with a branch", func(wf *workflow.Builder) { wf.LLM("s", "m").WithPrompt("p").WithBranch("verdict") },
			[]reply{done(`{"verdict":"limit"}`)}, "limit"},
		{"agent_loop at its bound", func(wf *workflow.Builder) { wf.AgentLoop("s", "h").WithMaxIterations(2) },
			[]reply{cont(`1`), cont(`2`)}, "max_iterations"},
		{"agent stopped by its budget", func(wf *workflow.Builder) { wf.Agent("s", "m").WithGoal("g") },
			[]reply{stopped(`{"stop_reason":"max_tokens"}`, "max_tokens")}, "max_tokens"},
	}
	for _, k := range kinds {
		def := func(edges func(wf *workflow.Builder)) *workflow.Definition {
			wf := workflow.New("rule")
			wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: []byte(`[{"text":"x"}]`)})
			k.add(wf)
			if edges != nil {
				wf.Task("next", "h")
				edges(wf)
			}
			return build(t, wf)
		}
		t.Run(k.name+": no outgoing edge", func(t *testing.T) {
			d := drive(t, def(nil), `{}`, script{"s": k.reply})
			d.expect(protocol.RunCompleted, "")
			if sr := d.stepRun("s"); sr.Label != k.label {
				t.Errorf("label %q, want %q kept in the result", sr.Label, k.label)
			}
		})
		t.Run(k.name+": no matching edge", func(t *testing.T) {
			d := drive(t, def(func(wf *workflow.Builder) { wf.Edge("s", "next").When("other") }), `{}`, script{"s": k.reply})
			d.expect(protocol.RunFailed, protocol.CodeNoRoute)
			d.expectErrorContains(`"` + k.label + `"`)
		})
		t.Run(k.name+": an edge for the label", func(t *testing.T) {
			d := drive(t, def(func(wf *workflow.Builder) { wf.Edge("s", "next").When(k.label) }), `{}`, script{"s": k.reply, "next": {done(`1`)}})
			d.expect(protocol.RunCompleted, "")
			d.expectPath("s", "next")
		})
		t.Run(k.name+": failed without an error edge", func(t *testing.T) {
			d := drive(t, def(nil), `{}`, script{"s": {failsForGood("boom")}})
			d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		})
	}
}
