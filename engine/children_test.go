package engine_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

func parallelWorkflow(t *testing.T, maxConcurrent int, errorEdge bool) *workflow.Definition {
	wf := workflow.New("fanned")
	wf.Parallel("research", "a", "b", "c").WithMaxConcurrent(maxConcurrent)
	wf.Task("a", "h.a")
	wf.Task("b", "h.b")
	wf.Task("c", "h.c").WithInput("{{input.topic}} regulation")
	wf.Task("combine", "h.combine")
	wf.Edge("research", "combine")
	if errorEdge {
		wf.Task("fallback", "h.fallback")
		wf.Edge("research", "fallback").When("error")
	}
	return build(t, wf)
}

func TestParallel(t *testing.T) {
	for _, tc := range []struct {
		limit, wantInFlight int
	}{{2, 2}, {1, 1}, {0, 3}, {5, 3}} {
		t.Run("max_concurrent="+strconv.Itoa(tc.limit), func(t *testing.T) {
			d := drive(t, parallelWorkflow(t, tc.limit, false), `{"topic":"refunds"}`, script{
				"a":       {done(`"A"`).after(3 * time.Second)},
				"b":       {done(`"B"`)},
				"c":       {done(`"C"`)},
				"combine": {done(`"brief"`)},
			})
			d.expect(protocol.RunCompleted, "")
			d.expectOutput(`"brief"`)
			d.expectPath("research", "combine")
			if got := d.maxInFlight["research"]; got != tc.wantInFlight {
				t.Fatalf("%d branches in flight at most, want %d", got, tc.wantInFlight)
			}
			// Declaration order, whatever the order of completion.
			if out := d.stepRun("research").Output; string(out) != `["A","B","C"]` {
				t.Fatalf("parallel output %s", out)
			}
			if in := d.tasksOf("combine")[0].task.Input; string(in) != `["A","B","C"]` {
				t.Fatalf("combine input %s", in)
			}
			for i, body := range []string{"a", "b", "c"} {
				ts := d.tasksOf(body)
				if len(ts) != 1 {
					t.Fatalf("%s ran %d times", body, len(ts))
				}
				tk := ts[0].task
				if tk.Step != "research" || tk.Item != i || tk.Body != body || tk.MsgID != "run1/research#"+strconv.Itoa(i)+"/1/1/1" {
					t.Errorf("task of %s: %+v", body, tk)
				}
				c := d.stepRun("research#" + strconv.Itoa(i))
				if c.Status != protocol.StepCompleted || c.Parent != "research" || c.Step != body {
					t.Errorf("child %d: %+v", i, c)
				}
				if _, own := d.run.Steps[body]; own {
					t.Errorf("branch step %s has a StepRun of its own", body)
				}
			}
			if in := d.tasksOf("a")[0].task.Input; string(in) != `{"topic":"refunds"}` {
				t.Fatalf("branch input %s, want the parallel step's input", in)
			}
			if in := d.tasksOf("c")[0].task.Input; string(in) != `"refunds regulation"` {
				t.Fatalf("branch with its own input: %s", in)
			}
			if d.run.Executed != 5 {
				t.Fatalf("executed %d, want 5 (parallel, three branches, combine)", d.run.Executed)
			}
		})
	}

	t.Run("a branch failing for good fails the parallel step", func(t *testing.T) {
		d := drive(t, parallelWorkflow(t, 1, true), `{"topic":"x"}`, script{
			"a":        {done(`"A"`)},
			"b":        {failsForGood("no data")},
			"fallback": {done(`"fallback"`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`"fallback"`)
		d.expectPath("research", "fallback")
		p := d.stepRun("research")
		if p.Status != protocol.StepFailed || p.Error != "branch 1 (b) failed: no data" {
			t.Fatalf("parallel: %+v", p)
		}
		if c := d.stepRun("research#2"); c.Status != protocol.StepSkipped || d.dispatchCount("c") != 0 {
			t.Fatalf("pending branch: %+v", c)
		}
		if len(d.deadLetters) != 1 || d.deadLetters[0].Task.Step != "research" || d.deadLetters[0].Task.Item != 1 {
			t.Fatalf("dead letters: %+v", d.deadLetters)
		}
	})

	t.Run("without an error edge the run fails", func(t *testing.T) {
		d := drive(t, parallelWorkflow(t, 0, false), `{"topic":"x"}`, script{
			"a": {done(`"A"`).after(time.Minute)},
			"b": {fails("boom")},
			"c": {done(`"C"`)},
		})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectErrorContains("step research failed: branch 1 (b) failed: boom")
		if c := d.stepRun("research#0"); c.Status != protocol.StepSkipped {
			t.Fatalf("the running branch a: %+v", c)
		}
	})

	t.Run("a parallel step times out", func(t *testing.T) {
		wf := workflow.New("slowfan")
		wf.Parallel("research", "a", "b").WithTimeout(5 * time.Minute)
		wf.Task("a", "h")
		wf.Task("b", "h")
		d := drive(t, build(t, wf), `{}`, script{
			"a": {done(`"A"`)},
			"b": {done(`"B"`).after(10 * time.Minute)},
		})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectErrorContains("research", "timed out after 5m0s")
		if !d.finishAt().Equal(t0.Add(5 * time.Minute)) {
			t.Fatalf("finished at %s", d.finishAt())
		}
	})
}

// finishAt is the time of the event that finished the run.
func (d *driver) finishAt() time.Time { return d.events[len(d.events)-1].At }

func mapWorkflow(t *testing.T, maxConcurrent int) *workflow.Definition {
	wf := workflow.New("mapping")
	wf.Task("list", "h.list")
	m := wf.Map("each", "list.output.orders").WithStep("check").WithMaxItems(5)
	if maxConcurrent > 0 {
		m.WithMaxConcurrent(maxConcurrent)
	}
	wf.Task("check", "h.check")
	wf.Task("sum", "h.sum")
	wf.Edge("list", "each")
	wf.Edge("each", "sum")
	return build(t, wf)
}

func TestMap(t *testing.T) {
	for _, tc := range []struct {
		limit, wantInFlight int
	}{{2, 2}, {0, 4}, {1, 1}} { // 0: the default, 4
		t.Run("max_concurrent="+strconv.Itoa(tc.limit), func(t *testing.T) {
			d := drive(t, mapWorkflow(t, tc.limit), `{}`, script{
				"list":  {done(`{"orders":[{"id":1},{"id":2},{"id":3},{"id":4}]}`)},
				"check": {done(`"r1"`).after(4 * time.Second), done(`"r2"`), done(`"r3"`), done(`"r4"`)},
				"sum":   {done(`"total"`)},
			})
			d.expect(protocol.RunCompleted, "")
			d.expectPath("list", "each", "sum")
			if got := d.maxInFlight["each"]; got != tc.wantInFlight {
				t.Fatalf("%d items in flight at most, want %d", got, tc.wantInFlight)
			}
			if out := d.stepRun("each").Output; string(out) != `["r1","r2","r3","r4"]` {
				t.Fatalf("map output %s", out)
			}
			for i, x := range d.tasksOf("check") {
				if want := `{"id":` + strconv.Itoa(i+1) + `}`; string(x.task.Input) != want || x.task.Item != i {
					t.Errorf("item %d: input %s, item %d", i, x.task.Input, x.task.Item)
				}
			}
		})
	}

	t.Run("more items than max_items fails the step", func(t *testing.T) {
		d := drive(t, mapWorkflow(t, 2), `{}`, script{
			"list": {done(`{"orders":[1,2,3,4,5,6]}`)},
		})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectErrorContains("step each failed: items: list.output.orders: 6 items, more than the bound of 5")
		if d.dispatchCount("check") != 0 {
			t.Fatal("items were dispatched")
		}
	})

	t.Run("items that are not an array fail the step", func(t *testing.T) {
		d := drive(t, mapWorkflow(t, 2), `{}`, script{"list": {done(`{"orders":"none"}`)}})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectErrorContains("must be an array")
	})

	t.Run("no items", func(t *testing.T) {
		d := drive(t, mapWorkflow(t, 2), `{}`, script{
			"list": {done(`{"orders":[]}`)},
			"sum":  {done(`0`)},
		})
		d.expect(protocol.RunCompleted, "")
		if in := d.tasksOf("sum")[0].task.Input; string(in) != `[]` {
			t.Fatalf("sum input %s", in)
		}
	})

	t.Run("a switch body completes at once", func(t *testing.T) {
		wf := workflow.New("switchmap")
		wf.Map("each", "input.xs").WithStep("pick").WithMaxItems(10).WithMaxConcurrent(2)
		wf.Switch("pick", "input.mode")
		d := drive(t, build(t, wf), `{"xs":[1,2,3,4,5],"mode":"m"}`, nil)
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`[1,2,3,4,5]`)
		if d.run.Executed != 6 {
			t.Fatalf("executed %d", d.run.Executed)
		}
	})

	t.Run("an item failing fails the map", func(t *testing.T) {
		d := drive(t, mapWorkflow(t, 2), `{}`, script{
			"list":  {done(`{"orders":[1,2,3]}`)},
			"check": {done(`"ok"`), failsForGood("bad order").after(2 * time.Second), hangs()},
		})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectErrorContains("item 1 (check) failed: bad order")
	})
}

const childFile = `
name = "child"
[[steps]]
id = "work"
type = "task"
handler = "h.child"
`

func TestCall(t *testing.T) {
	src := `
name = "parent"
[[steps]]
id = "prep"
type = "task"
handler = "h.prep"

[[steps]]
id = "sub"
type = "call"
workflow = "child.toml"
timeout = "1m"

[[steps]]
id = "after"
type = "task"
handler = "h.after"

[[edges]]
from = "prep"
to = "sub"

[[edges]]
from = "sub"
to = "after"
`
	def := load(t, src, map[string]string{"child.toml": childFile})

	t.Run("completes with the sub-run's output", func(t *testing.T) {
		d := drive(t, def, `{}`, script{
			"prep":       {done(`{"p":1}`)},
			"child.toml": {done(`{"child":true}`).after(2 * time.Second)},
			"after":      {done(`"after"`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectPath("prep", "sub", "after")
		if len(d.started) != 1 {
			t.Fatalf("%d sub-runs", len(d.started))
		}
		c := d.started[0]
		if c.RunID != "run1/sub/1" || c.Workflow != "child.toml" || string(c.Input) != `{"p":1}` || c.Step != "sub" || c.Item != -1 || c.Activation != 1 {
			t.Fatalf("child: %+v", c)
		}
		if in := d.tasksOf("after")[0].task.Input; string(in) != `{"child":true}` {
			t.Fatalf("after input %s", in)
		}
	})

	t.Run("a failed sub-run fails the step", func(t *testing.T) {
		d := drive(t, def, `{}`, script{
			"prep":       {done(`1`)},
			"child.toml": {fails("child exploded")},
		})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectErrorContains("sub-run run1/sub/1 failed: child exploded")
	})

	t.Run("a sub-run past the step's timeout is cancelled", func(t *testing.T) {
		d := drive(t, def, `{}`, script{
			"prep":       {done(`1`)},
			"child.toml": {hangs()},
		})
		d.expect(protocol.RunFailed, protocol.CodeStepFailed)
		d.expectErrorContains("sub", "timed out after 1m0s")
		if len(d.cancelled) != 1 || d.cancelled[0].RunID != "run1/sub/1" {
			t.Fatalf("cancelled: %+v", d.cancelled)
		}
	})

	t.Run("workflow branches and a map over a workflow", func(t *testing.T) {
		src := `
name = "subs"
[[steps]]
id = "fan"
type = "parallel"
branches = ["a", { workflow = "child.toml" }]

[[steps]]
id = "a"
type = "task"
handler = "h.a"

[[steps]]
id = "each"
type = "map"
items = "input.xs"
workflow = "child.toml"
max_items = 3
max_concurrent = 2

[[edges]]
from = "fan"
to = "each"
`
		def := load(t, src, map[string]string{"child.toml": childFile})
		d := drive(t, def, `{"xs":["x","y","z"]}`, script{
			"a":          {done(`"A"`)},
			"child.toml": {done(`"branch"`), done(`"x!"`), done(`"y!"`).after(5 * time.Second), done(`"z!"`)},
		})
		d.expect(protocol.RunCompleted, "")
		d.expectOutput(`["x!","y!","z!"]`)
		if out := d.stepRun("fan").Output; string(out) != `["A","branch"]` {
			t.Fatalf("fan output %s", out)
		}
		var ids []string
		for _, c := range d.started {
			ids = append(ids, c.RunID)
		}
		want := []string{"run1/fan/1/1", "run1/each/1/0", "run1/each/1/1", "run1/each/1/2"}
		if len(ids) != len(want) {
			t.Fatalf("sub-runs %v, want %v", ids, want)
		}
		for i := range want {
			if ids[i] != want[i] {
				t.Fatalf("sub-runs %v, want %v", ids, want)
			}
		}
		if d.maxInFlight["each"] != 2 {
			t.Fatalf("map over a workflow ran %d at once", d.maxInFlight["each"])
		}
		if in := d.started[1].Input; string(in) != `"x"` {
			t.Fatalf("item input %s", in)
		}
	})
}
