package engine_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// toolWorkflow is an agent step "act" with a tool "pay" (approvals come from its worker) and an
// agent tool "ask" that runs the agent step "helper" as a sub-run; "after" follows, "fallback"
// takes its errors.
func toolWorkflow(t *testing.T, configure func(*workflow.AgentStep)) *workflow.Definition {
	wf := workflow.New("agenttools").Deadline(24 * time.Hour)
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	wf.Tool("pay", workflow.ToolDef{Handler: "pay"})
	wf.Tool("ask", workflow.ToolDef{Description: "Ask the helper.", Agent: "helper"})
	s := wf.Agent("act", "m").WithGoal("Refund {{input.order}}").WithTools("pay", "ask").WithBudget(workflow.Budget{MaxIterations: 3})
	if configure != nil {
		configure(s)
	}
	wf.Agent("helper", "m").WithGoal("Help with {{input.question}}")
	wf.Task("after", "h")
	wf.Task("fallback", "h")
	wf.Edge("act", "after")
	wf.Edge("act", "fallback").When("error")
	return build(t, wf)
}

// childDone is the end of a helper sub-run: its agent's output, stop reason and usage.
func childDone(answer string, tokens int) reply {
	r := stopped(`{"stop_reason":"completed","detail":"d","answer":"`+answer+`"}`, "completed")
	r.usage = &protocol.Usage{ModelCalls: 1, InputTokens: tokens, OutputTokens: tokens / 10, CostUSD: 0.01}
	return r
}

func TestAgentToolChildren(t *testing.T) {
	ok := func(id, answer string, tokens int) protocol.ChildResult {
		return protocol.ChildResult{CallID: id, RunID: "run1/act/1/1/" + id, Status: protocol.RunCompleted,
			Output:     json.RawMessage(`{"stop_reason":"completed","detail":"d","answer":"` + answer + `"}`),
			StopReason: "completed", Usage: &protocol.Usage{ModelCalls: 1, InputTokens: tokens, OutputTokens: tokens / 10, CostUSD: 0.01}}
	}
	type resumed struct {
		msgID     string
		decisions []protocol.Decision
		results   []protocol.ChildResult
	}
	for _, tc := range []struct {
		name      string
		configure func(*workflow.AgentStep)
		act       []reply
		helper    []reply
		humans    []protocol.Event // once act waits for humans
		tasks     []resumed
		waited    time.Duration // act's Waited at the end
	}{
		{name: "one child: the iteration goes on with its result",
			act:    []reply{reply{}.spawns("k1"), done(`"refunded"`)},
			helper: []reply{childDone("yes", 100).after(5 * time.Minute)},
			tasks:  []resumed{{"run1/act/1/1/1", nil, nil}, {"run1/act/1/1/1/r1", nil, []protocol.ChildResult{ok("k1", "yes", 100)}}},
			waited: 5 * time.Minute},
		{name: "two children: the results in the order of the calls, once both ended",
			act:    []reply{reply{}.spawns("k1", "k2"), done(`"refunded"`)},
			helper: []reply{childDone("slow", 100).after(3 * time.Second), childDone("fast", 200)},
			tasks:  []resumed{{"run1/act/1/1/1", nil, nil}, {"run1/act/1/1/1/r1", nil, []protocol.ChildResult{ok("k1", "slow", 100), ok("k2", "fast", 200)}}},
			waited: 3 * time.Second},
		{name: "a child that fails: its result says so, the step goes on",
			act:    []reply{reply{}.spawns("k1"), done(`"refunded"`)},
			helper: []reply{{kind: "fail", err: "E_DEADLINE: too slow", status: protocol.RunTimedOut}},
			tasks: []resumed{{"run1/act/1/1/1", nil, nil}, {"run1/act/1/1/1/r1", nil, []protocol.ChildResult{
				{CallID: "k1", RunID: "run1/act/1/1/k1", Status: protocol.RunTimedOut, Error: "E_DEADLINE: too slow"}}}},
			waited: time.Second},
		{name: "a call needing approval and a child: the child runs while humans decide",
			act:    []reply{waits("c1").spawns("k1"), done(`"refunded"`)},
			helper: []reply{childDone("yes", 100).after(10 * time.Minute)},
			humans: []protocol.Event{decision("act", "c1", true, "")},
			tasks: []resumed{{"run1/act/1/1/1", nil, nil},
				{"run1/act/1/1/1/r1", []protocol.Decision{{CallID: "c1", Approve: true}}, []protocol.ChildResult{ok("k1", "yes", 100)}}},
			waited: 10 * time.Minute},
		{name: "a child that ends before the humans decide",
			act:    []reply{waits("c1").spawns("k1"), done(`"refunded"`)},
			helper: []reply{childDone("yes", 100)},
			humans: []protocol.Event{decision("act", "", false, "no")},
			tasks: []resumed{{"run1/act/1/1/1", nil, nil},
				{"run1/act/1/1/1/r1", []protocol.Decision{{CallID: "c1", Message: "no"}}, []protocol.ChildResult{ok("k1", "yes", 100)}}},
			waited: time.Minute},
		{name: "decisions first, then a child: two rounds in one iteration",
			act:    []reply{waits("c1"), reply{}.spawns("k1"), done(`"refunded"`)},
			helper: []reply{childDone("yes", 100)},
			humans: []protocol.Event{decision("act", "c1", true, "")},
			tasks: []resumed{{"run1/act/1/1/1", nil, nil},
				{"run1/act/1/1/1/r1", []protocol.Decision{{CallID: "c1", Approve: true}}, nil},
				{"run1/act/1/1/1/r2", nil, []protocol.ChildResult{ok("k1", "yes", 100)}}},
			waited: time.Minute + time.Second},
		{name: "children in two iterations have ids of their own",
			act:    []reply{reply{}.spawns("k1"), cont(`"more"`), reply{}.spawns("k1"), done(`"refunded"`)},
			helper: []reply{childDone("one", 100), childDone("two", 100)},
			tasks: []resumed{{"run1/act/1/1/1", nil, nil}, {"run1/act/1/1/1/r1", nil, []protocol.ChildResult{ok("k1", "one", 100)}},
				{"run1/act/1/2/1", nil, nil}, {"run1/act/1/2/1/r1", nil, []protocol.ChildResult{func() protocol.ChildResult {
					r := ok("k1", "two", 100)
					r.RunID = "run1/act/1/2/k1"
					return r
				}()}}},
			waited: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := toolWorkflow(t, tc.configure)
			d := newDriver(t, def, `{"order":"O-1"}`, script{"act": tc.act, "agent:helper": tc.helper, "after": {done(`"after"`)}})
			checked := func(cond func(*engine.Run) bool) func(*engine.Run) bool {
				return func(r *engine.Run) bool { d.expectChildren(); return cond(r) }
			}
			for _, ev := range tc.humans {
				d.runUntil("act waits", checked(waiting("act")))
				d.human(time.Minute, ev)
			}
			d.runUntil("the run ends", checked(func(*engine.Run) bool { return d.finish != nil || len(d.queue) == 0 }))
			d.expect(protocol.RunCompleted, "")
			d.expectPath("act", "after")
			var got []resumed
			for _, x := range d.tasksOf("act") {
				got = append(got, resumed{x.task.MsgID, x.task.Decisions, x.task.ChildResults})
			}
			if !reflect.DeepEqual(got, tc.tasks) {
				t.Fatalf("tasks of act:\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, tc.tasks))
			}
			for _, c := range d.started {
				if c.Agent != "helper" || c.Workflow != "" || !strings.HasPrefix(string(c.Input), `{"question":`) {
					t.Errorf("started %+v", c)
				}
			}
			if sr := d.stepRun("act"); sr.Waited != tc.waited {
				t.Errorf("act waited %s, want %s (for humans and children, not its own work)", sr.Waited, tc.waited)
			}
			if len(d.cancelled) > 0 {
				t.Errorf("cancelled %+v", d.cancelled)
			}
		})
	}
}

// expectChildren checks, while act has sub-runs in flight, what the state says of them: act
// runs with nothing in flight but its sub-runs when no human has to decide (the run does not
// wait for a human), SubRuns lists them, and no timer watches act.
func (d *driver) expectChildren() {
	d.t.Helper()
	sr := d.stepRun("act")
	subs := engine.SubRuns(d.def, d.run)
	if sr.Status == protocol.StepWaiting {
		if sr.Wait != protocol.WaitApproval || d.run.Status != protocol.RunWaiting {
			d.t.Fatalf("act: %s for %q in a %s run; want waiting for approval", sr.Status, sr.Wait, d.run.Status)
		}
	} else if len(subs) > 0 && (sr.Status != protocol.StepRunning || sr.Wait != protocol.WaitChildren || d.run.Status != protocol.RunRunning) {
		d.t.Fatalf("act: %s for %q in a %s run; want running for its children", sr.Status, sr.Wait, d.run.Status)
	}
	for _, c := range subs {
		if c.Step != "act" || c.Agent != "helper" || c.CallID == "" || c.Iteration != sr.Iteration || c.RunID != "run1/act/1/"+itoa(sr.Iteration)+"/"+c.CallID {
			d.t.Fatalf("sub-run %+v", c)
		}
	}
	if sr.Wait == protocol.WaitChildren {
		if tasks := engine.InFlight(d.def, d.run); len(tasks) > 0 {
			d.t.Fatalf("tasks in flight while act waits for its children: %s", mustJSON(d.t, tasks))
		}
		if slices.ContainsFunc(engine.Timers(d.def, d.run), func(c engine.Command) bool { return c.Step == "act" }) {
			d.t.Fatalf("a timer for act while it waits for its children")
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// While act waits for its child k1, these events change nothing.
func TestToolChildEventsThatDoNotApply(t *testing.T) {
	def := toolWorkflow(t, nil)
	d := newDriver(t, def, `{"order":"O-1"}`, script{"act": {reply{}.spawns("k1"), hangs()}, "agent:helper": {hangs()}})
	d.runUntil("the child starts", func(*engine.Run) bool { return len(d.started) == 1 })
	child := func(f func(*protocol.Event)) protocol.Event {
		ev := protocol.Event{Type: protocol.EvChildFinished, Step: "act", Item: -1, Activation: 1, Iteration: 1, CallID: "k1", Child: "run1/act/1/1/k1",
			Status: protocol.RunCompleted, Output: json.RawMessage(`{"answer":"x"}`)}
		f(&ev)
		return ev
	}
	for _, tc := range []struct {
		name string
		ev   protocol.Event
	}{
		{"another call", child(func(ev *protocol.Event) { ev.CallID = "k9" })},
		{"another call's sub-run", child(func(ev *protocol.Event) { ev.Child = "run1/act/1/1/k9" })},
		{"another run's sub-run", child(func(ev *protocol.Event) { ev.Child = "mallory-1" })},
		{"no sub-run named", child(func(ev *protocol.Event) { ev.Child = "" })},
		{"another iteration", child(func(ev *protocol.Event) { ev.Iteration = 2 })},
		{"another activation", child(func(ev *protocol.Event) { ev.Activation = 2 })},
		{"another step", child(func(ev *protocol.Event) { ev.Step = "after" })},
		{"the waiting answer again", protocol.Event{Type: protocol.EvWaiting, Step: "act", Item: -1, Activation: 1, Iteration: 1, Attempt: 1,
			Pending: []protocol.PendingCall{{CallID: "k2", Tool: "ask", Arguments: json.RawMessage(`{}`), Child: &protocol.ChildCall{Agent: "helper"}}}}},
		{"a late answer of the task", protocol.Event{Type: protocol.EvCompleted, Step: "act", Item: -1, Activation: 1, Iteration: 1, Attempt: 1, Output: json.RawMessage(`"x"`)}},
		{"a decision: no call waits for one", decision("act", "", true, "")},
		{"a tick long after: no watch while children run", protocol.Event{Type: protocol.EvTick, At: t0.Add(20 * time.Hour), Step: "act", Item: -1, Activation: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) { d.unchanged(tc.name, tc.ev) })
	}
	// The child's end counts once.
	d.apply(child(func(*protocol.Event) {}))
	if sr := d.stepRun("act"); sr.Status != protocol.StepRunning || sr.Wait != "" || sr.Resume != 1 {
		t.Fatalf("act: %s wait %q resume %d; want its iteration dispatched again", sr.Status, sr.Wait, sr.Resume)
	}
	d.unchanged("the child's end again", child(func(*protocol.Event) {}))
}

// The engine gives up on a step whose children run: they are cancelled (the run's end through
// SubRuns, a failing approval wait through cancel_child).
func TestToolChildrenCancelled(t *testing.T) {
	t.Run("the run is cancelled", func(t *testing.T) {
		def := toolWorkflow(t, nil)
		d := newDriver(t, def, `{"order":"O-1"}`, script{"act": {reply{}.spawns("k1", "k2")}, "agent:helper": {childDone("a", 1), hangs()}})
		d.runUntil("k1 ended", func(r *engine.Run) bool { return len(r.Steps["act"].ChildResults) == 1 })
		d.human(time.Minute, protocol.Event{Type: protocol.EvCancel, Item: -1, Reason: "enough"})
		d.expect(protocol.RunCancelled, protocol.CodeCancelled)
		subs := engine.SubRuns(def, d.run)
		if len(subs) != 1 || subs[0].RunID != "run1/act/1/1/k2" || subs[0].CallID != "k2" {
			t.Fatalf("sub-runs to cancel: %+v; want k2's only", subs)
		}
	})
	t.Run("the approval wait fails the step", func(t *testing.T) {
		def := toolWorkflow(t, func(s *workflow.AgentStep) { s.WithApprovalTimeout(time.Hour).WithOnTimeout("fail") })
		d := drive(t, def, `{"order":"O-1"}`, script{"act": {waits("c1").spawns("k1")}, "agent:helper": {hangs()}, "fallback": {done(`"fb"`)}})
		d.expect(protocol.RunCompleted, "")
		d.expectPath("act", "fallback")
		if len(d.cancelled) != 1 || d.cancelled[0].RunID != "run1/act/1/1/k1" || d.cancelled[0].Agent != "helper" {
			t.Fatalf("cancelled %+v; want k1's sub-run", d.cancelled)
		}
	})
}

// A waiting answer whose calls ask for sub-runs the workflow does not run fails the attempt for
// good.
func TestInvalidChildCalls(t *testing.T) {
	for _, tc := range []struct {
		name  string
		call  protocol.PendingCall
		words string
	}{
		{"a tool that runs no child", protocol.PendingCall{CallID: "k1", Tool: "pay", Arguments: json.RawMessage(`{}`), Child: &protocol.ChildCall{Agent: "helper"}},
			"the workflow's tool pay runs none"},
		{"another agent", protocol.PendingCall{CallID: "k1", Tool: "ask", Arguments: json.RawMessage(`{}`), Child: &protocol.ChildCall{Agent: "act"}},
			`but tool ask runs agent "helper"`},
		{"an unknown tool", protocol.PendingCall{CallID: "k1", Tool: "nope", Arguments: json.RawMessage(`{}`), Child: &protocol.ChildCall{Workflow: "x.toml"}},
			"runs none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := toolWorkflow(t, nil)
			d := newDriver(t, def, `{"order":"O-1"}`, script{"act": {hangs()}, "fallback": {done(`"fb"`)}})
			d.apply(protocol.Event{Type: protocol.EvWaiting, At: t0.Add(time.Second), Step: "act", Item: -1, Activation: 1, Iteration: 1, Attempt: 1,
				Pending: []protocol.PendingCall{tc.call}})
			d.runToEnd()
			d.expectPath("act", "fallback")
			if sr := d.stepRun("act"); !strings.Contains(sr.Error, tc.words) || len(d.started) > 0 {
				t.Fatalf("act: error %q, started %+v; want %q", sr.Error, d.started, tc.words)
			}
		})
	}
}

// A sub-run's end that comes before the state that started it was saved is ahead: the shell
// holds it.
func TestAheadToolChild(t *testing.T) {
	def := toolWorkflow(t, nil)
	d := newDriver(t, def, `{"order":"O-1"}`, script{"act": {hangs()}, "agent:helper": {hangs()}})
	ev := protocol.Event{Type: protocol.EvChildFinished, Step: "act", Item: -1, Activation: 1, Iteration: 1, CallID: "k1", Status: protocol.RunCompleted}
	if !engine.Ahead(def, d.run, ev) {
		t.Errorf("the end of a sub-run the state has not started is not ahead")
	}
	later := ev
	later.Iteration = 2
	if !engine.Ahead(def, d.run, later) {
		t.Errorf("the end of a sub-run of a later iteration is not ahead")
	}
	d.apply(protocol.Event{Type: protocol.EvWaiting, At: t0.Add(time.Second), Step: "act", Item: -1, Activation: 1, Iteration: 1, Attempt: 1,
		Pending: []protocol.PendingCall{{CallID: "k1", Tool: "ask", Arguments: json.RawMessage(`{}`), Child: &protocol.ChildCall{Agent: "helper"}}}})
	if engine.Ahead(def, d.run, ev) {
		t.Errorf("the end of a sub-run the state waits for is ahead")
	}
	other := ev
	other.CallID = "k2"
	if !engine.Ahead(def, d.run, other) {
		t.Errorf("the end of a call's sub-run not pending yet (same iteration) is not ahead")
	}
}

// A call step's usage is its sub-run's, as the child_finished event reports it.
func TestCallStepUsage(t *testing.T) {
	def := load(t, "name = \"p\"\n\n[[steps]]\nid = \"sub\"\ntype = \"call\"\nworkflow = \"c.toml\"\n",
		map[string]string{"c.toml": "name = \"c\"\n\n[[steps]]\nid = \"end\"\ntype = \"terminate\"\n"})
	r := done(`{"ok":true}`)
	r.usage = &protocol.Usage{ModelCalls: 2, InputTokens: 300, CostUSD: 0.5}
	d := drive(t, def, `{}`, script{"c.toml": {r}})
	d.expect(protocol.RunCompleted, "")
	if got := d.stepRun("sub").Usage; got != *r.usage {
		t.Errorf("usage %+v, want the sub-run's %+v", got, *r.usage)
	}
	if got := d.run.Usage(); got != *r.usage {
		t.Errorf("run usage %+v", got)
	}
}

func TestCallToken(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"call_1", "call_1"},
		{"toolu_01-ABC", "toolu_01-ABC"},
		{"a.b", "h"},
		{"", "h"},
		{strings.Repeat("x", 41), "h"},
	} {
		got := engine.CallToken(tc.id)
		if tc.want == "h" {
			if len(got) != 17 || got[0] != 'h' || got == engine.CallToken(tc.id+"x") {
				t.Errorf("CallToken(%q) = %q; want h and 16 hex digits of its own", tc.id, got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("CallToken(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
}

// An agent that runs as a parallel branch: its calls' sub-runs are addressed by the parallel
// step and the branch's index, and its iteration goes on with their results.
func TestAgentToolChildrenOfABranch(t *testing.T) {
	wf := workflow.New("branchtools").Deadline(time.Hour)
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	wf.Tool("ask", workflow.ToolDef{Agent: "helper"})
	wf.Parallel("fan", "act", "other")
	wf.Agent("act", "m").WithGoal("g").WithTools("ask")
	wf.Task("other", "h")
	wf.Agent("helper", "m").WithGoal("help with {{input.question}}")
	def := build(t, wf)
	d := drive(t, def, `{}`, script{"act": {reply{}.spawns("k1"), done(`"a"`)}, "other": {done(`"b"`)}, "agent:helper": {childDone("yes", 10)}})
	d.expect(protocol.RunCompleted, "")
	d.expectOutput(`["a","b"]`)
	if len(d.started) != 1 || d.started[0].RunID != "run1/fan/1/0/1/k1" || d.started[0].Step != "fan" || d.started[0].Item != 0 {
		t.Fatalf("started %+v; want k1's sub-run addressed by fan#0", d.started)
	}
	ts := d.tasksOf("act")
	if len(ts) != 2 || len(ts[1].task.ChildResults) != 1 || ts[1].task.ChildResults[0].RunID != "run1/fan/1/0/1/k1" {
		t.Fatalf("tasks of act: %s", mustJSON(t, ts))
	}
}
