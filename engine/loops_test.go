package engine_test

import (
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
)

// TestLoopRegionAbandonsWorkInFlight: a loop edge fires while a sibling branch of the region is
// still running. The region runs again: the sibling's late answer is ignored, its sub-run is
// cancelled, and the join waits for the new pass.
func TestLoopRegionAbandonsWorkInFlight(t *testing.T) {
	src := `
name = "region"
start = "a"

[[steps]]
id = "a"
type = "task"
handler = "h.a"

[[steps]]
id = "b"
type = "task"
handler = "h.b"
branch = "next"

[[steps]]
id = "c"
type = "task"
handler = "h.c"

[[steps]]
id = "sub"
type = "call"
workflow = "child.toml"

[[steps]]
id = "d"
type = "task"
handler = "h.d"

[[edges]]
from = "a"
to = "b"

[[edges]]
from = "a"
to = "c"

[[edges]]
from = "a"
to = "sub"

[[edges]]
from = "b"
to = "a"
when = "again"
max_iterations = 1

[[edges]]
from = "b"
to = "d"
when = "done"

[[edges]]
from = "c"
to = "d"

[[edges]]
from = "sub"
to = "d"
`
	def := load(t, src, map[string]string{"child.toml": childFile})
	d := drive(t, def, `{}`, script{
		"a":          {done(`"A1"`), done(`"A2"`)},
		"b":          {done(`{"next":"again"}`), done(`{"next":"done"}`)},
		"c":          {done(`"C1"`).after(10 * time.Second), done(`"C2"`)},
		"child.toml": {hangs(), done(`"S2"`)},
		"d":          {done(`"D"`).after(20 * time.Second)},
	})
	d.expect(protocol.RunCompleted, "")
	d.expectOutput(`"D"`)
	if in := d.tasksOf("d")[0].task.Input; string(in) != `{"b":{"next":"done"},"c":"C2","sub":"S2"}` {
		t.Fatalf("join input %s", in)
	}
	if d.dispatchCount("d") != 1 {
		t.Fatalf("d ran %d times", d.dispatchCount("d"))
	}
	if c := d.stepRun("c"); c.Activation != 2 || string(c.Output) != `"C2"` {
		t.Fatalf("c: %+v", c)
	}
	if len(d.cancelled) != 1 || d.cancelled[0].RunID != "run1/sub/1" {
		t.Fatalf("cancelled %+v", d.cancelled)
	}
	if len(d.started) != 2 || d.started[1].RunID != "run1/sub/2" {
		t.Fatalf("started %+v", d.started)
	}
	// The first answer of c (activation 1) came while d was running, and changed nothing.
	late := false
	for _, ev := range d.events {
		if ev.Step == "c" && ev.Activation == 1 {
			late = true
		}
	}
	if !late {
		t.Fatal("the stale answer was never delivered")
	}
	d.expectPath("a", "b", "a", "b", "c", "sub", "d")
}

// TestMapInALoop: a map step activated again replaces its children, dropping the extra ones.
func TestMapInALoop(t *testing.T) {
	src := `
name = "maploop"
start = "list"

[[steps]]
id = "list"
type = "task"
handler = "h.list"

[[steps]]
id = "each"
type = "map"
items = "list.output.xs"
step = "work"
max_items = 5

[[steps]]
id = "judge"
type = "task"
handler = "h.judge"
branch = "ok"

[[steps]]
id = "work"
type = "task"
handler = "h.work"

[[edges]]
from = "list"
to = "each"

[[edges]]
from = "each"
to = "judge"

[[steps]]
id = "end"
type = "terminate"

[[edges]]
from = "judge"
to = "list"
when = "false"
max_iterations = 2

[[edges]]
from = "judge"
to = "end"
when = "true"
`
	def := load(t, src, nil)
	d := drive(t, def, `{}`, script{
		"list":  {done(`{"xs":[1,2,3]}`), done(`{"xs":[9]}`)},
		"work":  {done(`"w1"`), done(`"w2"`), done(`"w3"`), done(`"w9"`)},
		"judge": {done(`{"ok":false}`), done(`{"ok":true}`)},
	})
	d.expect(protocol.RunCompleted, "")
	d.expectOutput(`{"ok":true}`)
	if out := d.stepRun("each").Output; string(out) != `["w9"]` {
		t.Fatalf("map output %s", out)
	}
	if _, ok := d.run.Steps["each#1"]; ok {
		t.Fatal("a child of the earlier activation is left")
	}
	if c := d.stepRun("each#0"); c.Activation != 2 || c.Status != protocol.StepCompleted {
		t.Fatalf("child: %+v", c)
	}
	if tk := d.tasksOf("work")[3].task; tk.MsgID != "run1/each#0/2/1/1" {
		t.Fatalf("the child of activation 2 has msg id %s", tk.MsgID)
	}
}

func TestLabelsOfParallelAndCall(t *testing.T) {
	src := `
name = "labels"

[[steps]]
id = "fan"
type = "parallel"
branches = ["a", "b"]
branch = "0.kind"

[[steps]]
id = "a"
type = "task"
handler = "h"

[[steps]]
id = "b"
type = "task"
handler = "h"

[[steps]]
id = "sub"
type = "call"
workflow = "child.toml"
branch = "status"

[[steps]]
id = "good"
type = "terminate"

[[steps]]
id = "bad"
type = "fail"
message = "sub-run said {{sub.output.status}}"

[[edges]]
from = "fan"
to = "sub"
when = "go"

[[edges]]
from = "sub"
to = "good"
when = "ok"

[[edges]]
from = "sub"
to = "bad"
when = "ko"
`
	def := load(t, src, map[string]string{"child.toml": childFile})
	d := drive(t, def, `{}`, script{
		"a":          {done(`{"kind":"go"}`)},
		"b":          {done(`2`)},
		"child.toml": {done(`{"status":"ko"}`)},
	})
	d.expect(protocol.RunFailed, protocol.CodeFail)
	d.expectErrorContains("sub-run said ko")
	d.expectPath("fan", "sub", "bad")

	d = drive(t, def, `{}`, script{
		"a":          {done(`{"kind":"go"}`)},
		"b":          {done(`2`)},
		"child.toml": {doneAs(`{"status":"ko"}`, "ok")},
	})
	d.expect(protocol.RunCompleted, "")
	d.expectOutput(`{"status":"ko"}`)

	d = drive(t, def, `{}`, script{
		"a": {done(`{"other":1}`)},
		"b": {done(`2`)},
	})
	d.expect(protocol.RunFailed, protocol.CodeStepFailed)
	d.expectErrorContains(`branch: 0.kind: output.0 has no key "kind"`)
}

// TestStaleChildEvents: events for children of an earlier activation of their parent, or for
// an index the parent does not have, change nothing.
func TestStaleChildEvents(t *testing.T) {
	d := newDriver(t, parallelWorkflow(t, 0, false), `{"topic":"x"}`, script{"a": {hangs()}, "b": {hangs()}, "c": {hangs()}})
	for _, ev := range []protocol.Event{
		{Type: protocol.EvCompleted, Step: "research", Item: 7, Activation: 1, Iteration: 1, Attempt: 1},
		{Type: protocol.EvCompleted, Step: "research", Item: 0, Activation: 2, Iteration: 1, Attempt: 1},
		{Type: protocol.EvCompleted, Step: "research", Item: -1, Activation: 1, Iteration: 1, Attempt: 1},
		{Type: protocol.EvChildFinished, Step: "research", Item: 0, Activation: 1},
		{Type: protocol.EvTick, Step: "research", Item: -1, Activation: 1},
	} {
		ev.At = t0.Add(time.Second)
		next, cmds, err := engine.Decide(d.def, d.run, ev)
		if err != nil || len(cmds) != 0 || string(mustJSON(t, next)) != string(mustJSON(t, d.run)) {
			t.Fatalf("%+v changed the run: %v %+v", ev, err, cmds)
		}
	}
}
