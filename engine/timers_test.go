package engine_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
)

const timersFile = `
name = "timers"
deadline = "10m"

[[steps]]
id = "prep"
type = "task"
handler = "h.prep"
timeout = "5s"

[[steps]]
id = "sub"
type = "call"
workflow = "child.toml"
timeout = "1m"

[[steps]]
id = "fan"
type = "parallel"
branches = ["a", { workflow = "child.toml" }, "c"]
timeout = "2m"

[[steps]]
id = "a"
type = "task"
handler = "h.a"
timeout = "30s"

[[steps]]
id = "c"
type = "call"
workflow = "child.toml"
timeout = "45s"

[[steps]]
id = "each"
type = "map"
items = "input.list"
step = "a"
max_items = 10
timeout = "3m"

[[steps]]
id = "plain"
type = "call"
workflow = "child.toml"

[[edges]]
from = "prep"
to = "sub"

[[edges]]
from = "prep"
to = "fan"

[[edges]]
from = "prep"
to = "each"

[[edges]]
from = "prep"
to = "plain"
`

func TestTimersAndSubRuns(t *testing.T) {
	def := load(t, timersFile, map[string]string{"child.toml": childFile})
	t1 := t0.Add(5 * time.Second)
	prepDone := protocol.Event{Type: protocol.EvCompleted, At: t1, Step: "prep", Item: -1, Activation: 1, Iteration: 1, Attempt: 1, Output: json.RawMessage(`1`)}
	subDone := protocol.Event{Type: protocol.EvChildFinished, At: t1.Add(time.Second), Step: "sub", Item: -1, Activation: 1, Child: "run1/sub/1", Status: protocol.RunCompleted, Output: json.RawMessage(`2`)}
	cancel := protocol.Event{Type: protocol.EvCancel, At: t1.Add(2 * time.Second), Item: -1}

	deadline := engine.Command{Type: engine.CmdSchedule, At: t0.Add(10 * time.Minute), Item: -1}
	timer := func(step string, item int, after time.Duration) engine.Command {
		return engine.Command{Type: engine.CmdSchedule, At: t1.Add(after), Step: step, Item: item, Activation: 1}
	}
	// A watch says when its attempt was dispatched: t0 for the first step, t1 for the others.
	watch := func(step string, item int, after time.Duration) engine.Command {
		c := timer(step, item, after)
		c.Watch, c.Dispatched = true, t1
		if step == "prep" {
			c.Dispatched = t0
		}
		return c
	}
	sub := func(id, step string, item int) engine.ChildRun {
		return engine.ChildRun{RunID: "run1/" + id, Workflow: "child.toml", Input: json.RawMessage(`1`), Step: step, Item: item, Activation: 1}
	}
	fanOut := []engine.ChildRun{sub("fan/1/1", "fan", 1), sub("fan/1/2", "fan", 2), sub("plain/1", "plain", -1), sub("sub/1", "sub", -1)}

	tests := []struct {
		name      string
		events    []protocol.Event
		wantTimer []engine.Command
		wantSubs  []engine.ChildRun
	}{
		// A task's watch is its timeout plus the grace (30s at least) after it was dispatched.
		{"started: the deadline, and the watch of the first task", nil, []engine.Command{deadline, watch("prep", -1, 30*time.Second)}, nil},
		{"fan-out: every timed parallel, map and call step, a call branch included, and every task's watch",
			[]protocol.Event{prepDone},
			[]engine.Command{deadline, timer("each", -1, 3*time.Minute), watch("each", 0, time.Minute), watch("each", 1, time.Minute),
				timer("fan", -1, 2*time.Minute), watch("fan", 0, time.Minute), timer("fan", 2, 45*time.Second), timer("sub", -1, time.Minute)},
			fanOut},
		{"a step that ended waits no more",
			[]protocol.Event{prepDone, subDone},
			[]engine.Command{deadline, timer("each", -1, 3*time.Minute), watch("each", 0, time.Minute), watch("each", 1, time.Minute),
				timer("fan", -1, 2*time.Minute), watch("fan", 0, time.Minute), timer("fan", 2, 45*time.Second)},
			fanOut[:3]},
		{"finished: no timers, and the sub-runs still to cancel",
			[]protocol.Event{prepDone, subDone, cancel}, nil, fanOut[:3]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run, cmds, err := engine.Start(def, "run1", json.RawMessage(`{"list":[1,2]}`), t0)
			if err != nil {
				t.Fatal(err)
			}
			scheduled := schedules(cmds)
			for _, ev := range tc.events {
				if run, cmds, err = engine.Decide(def, run, ev); err != nil {
					t.Fatal(err)
				}
				scheduled = append(scheduled, schedules(cmds)...)
			}
			got := engine.Timers(def, run)
			if !reflect.DeepEqual(got, tc.wantTimer) {
				t.Errorf("Timers:\n got %+v\nwant %+v", got, tc.wantTimer)
			}
			// Every timer Timers re-arms is one Decide asked for.
			for _, c := range got {
				if !slices.ContainsFunc(scheduled, func(s engine.Command) bool { return reflect.DeepEqual(s, c) }) {
					t.Errorf("Timers returned %+v, which Decide never scheduled (%+v)", c, scheduled)
				}
			}
			if subs := engine.SubRuns(def, run); !reflect.DeepEqual(subs, tc.wantSubs) {
				t.Errorf("SubRuns:\n got %+v\nwant %+v", subs, tc.wantSubs)
			}
		})
	}
	if engine.Timers(nil, nil) != nil || engine.SubRuns(nil, nil) != nil {
		t.Error("nil definition and run: want nil")
	}
}

func schedules(cmds []engine.Command) []engine.Command {
	var out []engine.Command
	for _, c := range cmds {
		if c.Type == engine.CmdSchedule {
			out = append(out, c)
		}
	}
	return out
}
