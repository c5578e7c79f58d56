package engine_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// fuzzWorkflow uses every kind of step the engine supports: an agent_loop with retries and
// bounds, a loop edge with its way out, an error edge to a call, a parallel (with a wait_event
// branch) and a map with bounded concurrency, a switch and a join, then an agent that waits for
// approvals and for the sub-runs of its agent tool and pauses on needs_human, an approval, a
// sleep and a wait_event; max_steps is small enough to be reached.
const fuzzWorkflow = `
name = "fuzzed"
deadline = "1h"
max_steps = 14
start = "gen"

[models.m]
provider = "scripted"
script = [{ text = "x" }]

[tools.ask]
agent = "helper"

[[steps]]
id = "gen"
type = "agent_loop"
handler = "h.gen"
max_iterations = 3
max_duration = "2m"
loop_delay = "1s"
retry = { max_attempts = 2, backoff = "exponential" }

[[steps]]
id = "eval"
type = "task"
handler = "h.eval"
branch = "verdict"

[[steps]]
id = "fan"
type = "parallel"
branches = ["b1", "b2", { workflow = "child.toml" }, "hold"]
max_concurrent = 2
timeout = "10m"

[[steps]]
id = "b1"
type = "task"
handler = "h.b"

[[steps]]
id = "b2"
type = "task"
handler = "h.b"
retry = { max_attempts = 3, backoff = "linear", max_delay = "2s" }

[[steps]]
id = "hold"
type = "wait_event"
event = "go"
timeout = "3m"

[[steps]]
id = "each"
type = "map"
items = "input.xs"
step = "item"
max_items = 3
max_concurrent = 2

[[steps]]
id = "item"
type = "task"
handler = "h.item"

[[steps]]
id = "sub"
type = "call"
workflow = "child.toml"
timeout = "5m"

[[steps]]
id = "sw"
type = "switch"
expr = "eval.output.verdict"

[[steps]]
id = "fin"
type = "task"
handler = "h.fin"

[[steps]]
id = "ag"
type = "agent"
model = "m"
goal = "Go on from {{fin.output}}"
on_needs_human = "pause"
approval_timeout = "2m"
budget = { max_iterations = 3, max_duration = "1m" }
retry = { max_attempts = 2 }
tools = ["ask"]

[[steps]]
id = "helper"
type = "agent"
model = "m"
goal = "Help with {{input.q ?? \"x\"}}"

[[steps]]
id = "gate"
type = "approval"
prompt = "Accept {{ag.output}}?"
timeout = "10m"
on_timeout = "fail"

[[steps]]
id = "nap"
type = "sleep"
duration = "30s"

[[steps]]
id = "wt"
type = "wait_event"
event = "go"
timeout = "5m"

[[edges]]
from = "gen"
to = "eval"

[[edges]]
from = "eval"
to = "gen"
when = "retry"
max_iterations = 2

[[edges]]
from = "eval"
to = "fan"
when = "retry"

[[edges]]
from = "eval"
to = "each"
when = "ok"

[[edges]]
from = "eval"
to = "sub"
when = "error"

[[edges]]
from = "fan"
to = "fin"

[[edges]]
from = "each"
to = "sw"

[[edges]]
from = "sw"
to = "fin"
when = "ok"

[[edges]]
from = "sub"
to = "fin"

[[edges]]
from = "fin"
to = "ag"

[[edges]]
from = "ag"
to = "gate"

[[edges]]
from = "gate"
to = "nap"
when = "approved"

[[edges]]
from = "gate"
to = "wt"
when = "denied"
`

var fuzzOutputs = []string{
	`{"verdict":"retry"}`, `{"verdict":"ok"}`, `{"verdict":5}`, `{}`, `[1,2]`, `null`, `{nope`,
	`"<\u00e9>"`, `{"verdict":"ok","xs":[1]}`, "", `{"verdict":"error"}`, "\"\xff\"",
}

var fuzzInputs = []string{`{"xs":[1,2]}`, `{"xs":[1,2,3,4]}`, `{"xs":[]}`, `{}`, `{"xs":"no"}`}

func loadFuzzWorkflow(f *testing.F) *workflow.Definition {
	dir := f.TempDir()
	for name, body := range map[string]string{"main.toml": fuzzWorkflow, "child.toml": childFile} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	def, ps := workflow.LoadAndValidate(filepath.Join(dir, "main.toml"), workflow.Options{})
	if len(ps) > 0 {
		f.Fatalf("invalid fuzz workflow: %v", ps)
	}
	return def
}

// FuzzDecide feeds random sequences of events, most of them answers to what the engine asked
// for or human decisions, answers and signals for what waits, some stale or made up, to Decide.
// It must never panic or fail, never exceed max_steps by more than the one activation it
// refuses, never change its input, decide the same from its state decoded from JSON, ignore a
// repeated event, finish at most once, wait exactly when a step waits, and keep InFlight and
// Timers to what it dispatched and scheduled.
func FuzzDecide(f *testing.F) {
	def := loadFuzzWorkflow(f)
	// Seeds: the first byte picks the run input; then each event reads a time step, an
	// operation and its arguments (see below). Index 0 is the newest task, sub-run or timer, or
	// the first waiting step.
	answer := func(idx, typ, out int) []byte { return []byte{1, 0, byte(idx), byte(typ), byte(out), 1, 1} }
	permanent := func(idx int) []byte { return []byte{1, 0, byte(idx), 2, 3, 0, 1} }
	needsHuman := func(idx int) []byte { return []byte{1, 0, byte(idx), 0, 3, 1, 2} }
	waitOn := func(idx, calls int) []byte { return []byte{1, 0, byte(idx), 4, 3, 1, 1, byte(calls)} }
	child := func(idx int, ok bool, out int) []byte {
		if ok {
			return []byte{1, 4, byte(idx), 1, byte(out)}
		}
		return []byte{1, 4, byte(idx), 0}
	}
	// A decision for waiting step idx: call id "", c1, c2 or c9; approve; addressed in full.
	decide := func(idx, call int, approve bool, full bool) []byte {
		b := []byte{1, 8, byte(idx), byte(call), 0, 1}
		if approve {
			b[4] = 1
		}
		if full {
			b[5] = 0
		}
		return b
	}
	answerHuman := func(idx, out int) []byte { return []byte{1, 9, byte(idx), byte(out)} }
	sendSignal := func(name, out, id int) []byte { return []byte{1, 10, byte(name), byte(out), byte(id)} }
	timer := func(idx int) []byte { return []byte{1, 5, byte(idx), 0} }
	const completed, continued, timedOut = 0, 1, 3
	const retry, ok, empty = 0, 1, 3
	seed := func(input byte, events ...[]byte) []byte {
		b := []byte{input}
		for _, e := range events {
			b = append(b, e...)
		}
		return b
	}
	// The map path: gen, eval ok, two items, the switch, fin; then the agent waits on two calls,
	// one decision resumes it, it completes, the gate is approved and the sleep ends.
	mapPath := [][]byte{answer(0, completed, ok), answer(0, completed, ok), answer(0, completed, empty), answer(1, completed, empty), answer(0, completed, empty)}
	f.Add(seed(0, append(slices.Clone(mapPath), waitOn(0, 2), decide(0, 0, true, false), answer(0, completed, empty), decide(0, 0, true, true), timer(0))...))
	// The agent decided call by call (an unknown call first), then paused on needs_human and
	// answered; the gate denied, and the wait_event takes a signal sent before.
	f.Add(seed(0, append(slices.Clone(mapPath), sendSignal(0, 1, 1), waitOn(0, 2), decide(0, 3, true, false), decide(0, 1, true, false), decide(0, 2, false, true),
		needsHuman(0), answerHuman(0, 1), answer(0, completed, empty), decide(0, 0, false, false))...))
	// The agent waits for the sub-run of its agent tool's call, which ends; it completes.
	spawn := func(idx int) []byte { return []byte{1, 0, byte(idx), 4, 3, 0, 0, 1} }
	f.Add(seed(0, append(slices.Clone(mapPath), spawn(0), child(0, true, empty), answer(0, completed, empty), decide(0, 0, true, false))...))
	// The agent's approval timeout, then its retry, the gate's timeout.
	f.Add(seed(0, append(slices.Clone(mapPath), waitOn(0, 1), timer(0), answer(0, 2, empty), answer(0, completed, empty), timer(0))...))
	// The loop edge twice, its way out to the parallel (two tasks, a sub-run and a wait_event
	// that takes a signal, sent twice), then fin.
	f.Add(seed(0, answer(0, completed, retry), answer(0, completed, retry), answer(0, completed, retry), answer(0, completed, retry),
		answer(0, completed, retry), answer(0, completed, retry), answer(0, completed, empty), answer(1, completed, empty),
		child(0, true, empty), sendSignal(0, 2, 3), sendSignal(0, 2, 3), answer(0, completed, empty)))
	// The agent_loop continues to its bound through a timeout; eval fails for good, the error
	// edge starts the call, whose sub-run fails.
	f.Add(seed(0, answer(0, continued, empty), answer(0, timedOut, empty), answer(0, continued, empty), answer(0, continued, empty),
		permanent(0), child(0, false, 0)))
	// Too many items for the map.
	f.Add(seed(1, answer(0, completed, ok), answer(0, completed, ok)))
	// The deadline timer fires; a cancel; made-up events.
	f.Add(seed(0, answer(0, completed, ok), []byte{1, 5, 0, 0}))
	f.Add(seed(2, answer(0, continued, 7), []byte{1, 7, 255}, answer(0, completed, ok)))
	f.Add(seed(3, []byte{1, 6, 0, 0, 0, 1, 1, 1, 0, 0}, []byte{1, 6, 2, 1, 0, 1, 1, 1, 2, 1}, answer(0, completed, 6)))
	f.Add(bytes.Repeat([]byte{0, 0, 0, 1}, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(b)
		}
		input := fuzzInputs[next()%len(fuzzInputs)]
		now := t0
		// Half the runs are bounded by a server's limits, as a shell gives them at the start.
		var lim *engine.Limits
		if next()%2 == 0 {
			lim = &engine.Limits{MaxSteps: 1 + next()%40, MaxSignals: next() % 4, MaxEvents: 1 + next()%60}
		}
		run, cmds, err := engine.Decide(def, &engine.Run{ID: "fz", Limits: lim}, protocol.Event{Type: protocol.EvStart, At: now, Input: json.RawMessage(input), Item: -1, By: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		var tasks []*protocol.Task
		var children []*engine.ChildRun
		var timers []engine.Command
		sent := map[string][]byte{}    // every task dispatched, by MsgID
		scheduled := map[string]bool{} // every schedule command, as JSON
		finishes := 0
		record := func(cmds []engine.Command) {
			for _, c := range cmds {
				switch c.Type {
				case engine.CmdDispatch:
					tasks = append(tasks, c.Task)
					sent[c.Task.MsgID] = mustJSON(t, c.Task)
				case engine.CmdStartChild:
					children = append(children, c.Child)
				case engine.CmdSchedule:
					timers = append(timers, c)
					scheduled[string(mustJSON(t, c))] = true
				case engine.CmdFinish:
					finishes++
				}
			}
		}
		record(cmds)
		steps := []string{"gen", "eval", "fan", "b1", "each", "item", "sub", "sw", "fin", "ag", "gate", "nap", "wt", "hold", "nope"}
		types := []protocol.EventType{protocol.EvCompleted, protocol.EvContinued, protocol.EvFailed, protocol.EvTimedOut,
			protocol.EvTick, protocol.EvChildFinished, protocol.EvStart, protocol.EvCancel,
			protocol.EvWaiting, protocol.EvDecision, protocol.EvResume, protocol.EvSignal, protocol.EvGranted}
		signalNames := []string{"go", "other", ""}
		callIDs := []string{"", "c1", "c2", "c9"}
		for n := 0; n < 200 && len(data) > 0; n++ {
			now = now.Add(time.Duration(next()) * 7 * time.Second)
			ev := protocol.Event{At: now, Item: -1}
			// The waiting steps, in key order, to address human events to.
			var waiting []string
			for _, key := range slices.Sorted(maps.Keys(run.Steps)) {
				if run.Steps[key].Status == protocol.StepWaiting {
					waiting = append(waiting, key)
				}
			}
			addressWaiting := func() *engine.StepRun {
				if len(waiting) == 0 {
					ev.Step = steps[next()%len(steps)]
					return nil
				}
				key := waiting[next()%len(waiting)]
				sr := run.Steps[key]
				ev.Step = key
				if sr.Parent != "" {
					ev.Step, ev.Item = sr.Parent, sr.Item
				}
				return sr
			}
			switch op := next() % 11; {
			case op <= 3 && len(tasks) > 0:
				tk := tasks[len(tasks)-1-next()%len(tasks)]
				ev.Step, ev.Item, ev.Activation, ev.Iteration, ev.Attempt, ev.Resume = tk.Step, tk.Item, tk.Activation, tk.Iteration, tk.Attempt, tk.Resume
				ev.Type = []protocol.EventType{protocol.EvCompleted, protocol.EvContinued, protocol.EvFailed, protocol.EvTimedOut, protocol.EvWaiting}[next()%5]
				ev.Output = json.RawMessage(fuzzOutputs[next()%len(fuzzOutputs)])
				ev.Permanent = next()%3 == 0
				ev.Error = "boom"
				switch next() % 4 {
				case 0:
					ev.Label = "retry"
				case 2:
					ev.StopReason = "needs_human"
				}
				if ev.Type == protocol.EvWaiting {
					for i := range next() % 3 {
						pc := protocol.PendingCall{CallID: callIDs[1+i], Tool: "pay", Arguments: ev.Output}
						// What a waiting answer does not read tells which calls run the agent tool.
						if i == 0 && ev.Label == "retry" || i == 1 && ev.Permanent {
							pc.Tool, pc.Child = "ask", &protocol.ChildCall{Agent: "helper"}
						}
						ev.Pending = append(ev.Pending, pc)
					}
				}
			case op == 4 && len(children) > 0:
				c := children[len(children)-1-next()%len(children)]
				ev.Type, ev.Step, ev.Item, ev.Activation = protocol.EvChildFinished, c.Step, c.Item, c.Activation
				ev.Iteration, ev.CallID, ev.Child = c.Iteration, c.CallID, c.RunID
				if next()%3 == 0 {
					ev.Error, ev.Status = "child failed", protocol.RunFailed
				} else {
					ev.Output = json.RawMessage(fuzzOutputs[next()%len(fuzzOutputs)])
				}
			case op == 5 && len(timers) > 0:
				c := timers[len(timers)-1-next()%len(timers)]
				ev.Type, ev.Step, ev.Item, ev.Activation = protocol.EvTick, c.Step, c.Item, c.Activation
				if now.Before(c.At) && next()%2 == 0 {
					ev.At, now = c.At, c.At
				}
			case op == 7 && next() > 250:
				ev.Type, ev.Reason = protocol.EvCancel, "fuzz"
			case op == 8:
				ev.Type = protocol.EvDecision
				sr := addressWaiting()
				ev.CallID = callIDs[next()%len(callIDs)]
				ev.Approve = next()%2 == 1
				ev.Message, ev.By = "because", "fuzz"
				if next()%3 == 0 && sr != nil {
					ev.Activation, ev.Iteration, ev.Attempt, ev.Resume = sr.Activation, sr.Iteration, sr.Attempt, sr.Resume
				}
			case op == 9:
				ev.Type = protocol.EvResume
				addressWaiting()
				ev.Output = json.RawMessage(fuzzOutputs[next()%len(fuzzOutputs)])
				ev.By, ev.Roles = person(next())
			case op == 10:
				ev.Type = protocol.EvSignal
				ev.Name = signalNames[next()%len(signalNames)]
				ev.Output = json.RawMessage(fuzzOutputs[next()%len(fuzzOutputs)])
				ev.ID = "s" + strconv.Itoa(next()%8)
				ev.By, ev.Roles = person(next())
			default:
				ev.Type = types[next()%len(types)]
				ev.Step = steps[next()%len(steps)]
				ev.Item = next()%5 - 1
				ev.Activation, ev.Iteration, ev.Attempt, ev.Resume = next()%4, next()%4, next()%4, next()%3
				ev.Output = json.RawMessage(fuzzOutputs[next()%len(fuzzOutputs)])
				ev.Status = []protocol.RunStatus{"", protocol.RunCompleted, protocol.RunFailed}[next()%3]
				ev.Name, ev.ID, ev.CallID = signalNames[next()%len(signalNames)], "m"+strconv.Itoa(next()%4), callIDs[next()%len(callIDs)]
			}

			before := mustJSON(t, run)
			wasActive := !run.Finished()
			nextRun, cmds, err := engine.Decide(def, run, ev)
			if err != nil {
				t.Fatalf("Decide(%+v): %v", ev, err)
			}
			if !bytes.Equal(before, mustJSON(t, run)) {
				t.Fatal("Decide changed its input")
			}
			if nextRun.Executed > def.MaxSteps+1 {
				t.Fatalf("executed %d steps, max_steps %d", nextRun.Executed, def.MaxSteps)
			}
			if lim != nil {
				switch {
				case nextRun.Executed > lim.MaxSteps+1:
					t.Fatalf("executed %d steps, the limit's max_steps %d", nextRun.Executed, lim.MaxSteps)
				case nextRun.Events > lim.MaxEvents:
					t.Fatalf("took %d events, the limit %d", nextRun.Events, lim.MaxEvents)
				case lim.MaxSignals > 0 && len(nextRun.SignalIDs) > lim.MaxSignals:
					t.Fatalf("took %d signals, the limit %d", len(nextRun.SignalIDs), lim.MaxSignals)
				case nextRun.Events == lim.MaxEvents && !nextRun.Finished():
					t.Fatalf("a run that took its %d events goes on", nextRun.Events)
				}
			}
			if refused := len(slices.DeleteFunc(slices.Clone(nextRun.Acts), func(a engine.Act) bool { return a.Refused == "" })); refused > engine.MaxRefusedActs {
				t.Fatalf("%d refused acts kept, more than %d", refused, engine.MaxRefusedActs)
			}
			if !wasActive && (len(cmds) > 0 || !bytes.Equal(before, mustJSON(t, nextRun))) {
				t.Fatalf("a finished run changed on %s", ev.Type)
			}
			after := mustJSON(t, nextRun)
			var decoded engine.Run
			if err := json.Unmarshal(after, &decoded); err != nil {
				t.Fatal(err)
			}
			if again := mustJSON(t, &decoded); !bytes.Equal(after, again) {
				t.Fatalf("the state does not round-trip:\n%s\n%s", after, again)
			}
			var saved engine.Run
			if err := json.Unmarshal(before, &saved); err != nil {
				t.Fatal(err)
			}
			restarted, cmds2, err := engine.Decide(def, &saved, ev)
			if err != nil || !bytes.Equal(after, mustJSON(t, restarted)) || !bytes.Equal(mustJSON(t, cmds), mustJSON(t, cmds2)) {
				t.Fatalf("the decoded state decides differently (err %v)", err)
			}
			dup, cmds3, err := engine.Decide(def, nextRun, ev)
			if err != nil || len(cmds3) != 0 || !bytes.Equal(after, mustJSON(t, dup)) {
				t.Fatalf("a repeated %s event changed the run (err %v, commands %d)", ev.Type, err, len(cmds3))
			}
			for _, c := range cmds {
				if c.Type == engine.CmdDispatch && c.Task.Timeout < 0 {
					t.Fatal("negative timeout")
				}
			}
			record(cmds)
			if finishes > 1 {
				t.Fatal("the run finished twice")
			}
			if nextRun.Finished() != (finishes == 1) {
				t.Fatalf("status %s after %d finish commands", nextRun.Status, finishes)
			}
			stepWaits := false
			for key, sr := range nextRun.Steps {
				stepWaits = stepWaits || sr.Status == protocol.StepWaiting
				if nextRun.Finished() && (sr.Status == protocol.StepWaiting || sr.Status == protocol.StepRunning || sr.Status == protocol.StepPending) {
					t.Fatalf("step %s is %s in a finished run", key, sr.Status)
				}
			}
			if !nextRun.Finished() && stepWaits != (nextRun.Status == protocol.RunWaiting) {
				t.Fatalf("run %s, a step waits: %v", nextRun.Status, stepWaits)
			}
			for _, tk := range engine.InFlight(def, nextRun) {
				if !bytes.Equal(mustJSON(t, tk), sent[tk.MsgID]) {
					t.Fatalf("InFlight has %s, dispatched %s", mustJSON(t, tk), sent[tk.MsgID])
				}
				if sr := nextRun.Steps[tk.Body]; tk.Item < 0 && sr.Status != protocol.StepRunning {
					t.Fatalf("task %s in flight for a step %s", tk.MsgID, sr.Status)
				}
			}
			for _, c := range engine.Timers(def, nextRun) {
				if !scheduled[string(mustJSON(t, c))] {
					t.Fatalf("Timers has %+v, which Decide never scheduled", c)
				}
			}
			for _, c := range engine.SubRuns(def, nextRun) {
				if !slices.ContainsFunc(children, func(s *engine.ChildRun) bool { return s.RunID == c.RunID }) {
					t.Fatalf("SubRuns has %s, which Decide never started", c.RunID)
				}
			}
			run = nextRun
		}
	})
}

// person is who sends a fuzzed signal or resume: an admin, who may, or a stranger, who may
// not (refused, recorded).
func person(n int) (string, []string) {
	if n%4 == 0 {
		return "mallory", []string{"approver"}
	}
	return "admin", []string{"admin"}
}
