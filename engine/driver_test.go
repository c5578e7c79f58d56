package engine_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// t0 is when every test run starts.
var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// reply is a scripted answer to one task (by its Body step) or one sub-run (by its workflow
// file): complete, continue, fail, fail permanently, time out, or never answer. took is how long
// the work takes once it may start (default one second).
type reply struct {
	kind   string // complete | continue | fail | permanent | timeout | wait | hang
	out    string
	label  string
	stop   string
	err    string
	took   time.Duration
	status protocol.RunStatus // sub-runs: the child's status when it failed
	calls  []string           // wait: the ids of the calls pending approval
	kids   []string           // wait: the ids of the calls that run agent tool "ask" (agent "helper")
	usage  *protocol.Usage    // sub-runs: what the child spent
}

func done(out string) reply          { return reply{kind: "complete", out: out} }
func doneAs(out, label string) reply { return reply{kind: "complete", out: out, label: label} }
func stopped(out, stopReason string) reply {
	return reply{kind: "complete", out: out, stop: stopReason}
}
func cont(out string) reply         { return reply{kind: "continue", out: out} }
func fails(err string) reply        { return reply{kind: "fail", err: err} }
func failsForGood(err string) reply { return reply{kind: "permanent", err: err} }
func timesOut() reply               { return reply{kind: "timeout"} }
func hangs() reply                  { return reply{kind: "hang"} }

// waits answers that the iteration stopped on calls that need approval.
func waits(callIDs ...string) reply { return reply{kind: "wait", calls: callIDs} }

// spawns answers that the iteration stopped on calls of the agent tool "ask", which runs the
// agent step "helper" as a sub-run (after the calls of waits r, if any).
func (r reply) spawns(callIDs ...string) reply {
	if r.kind == "" {
		r.kind = "wait"
	}
	r.kids = callIDs
	return r
}

func (r reply) after(d time.Duration) reply { r.took = d; return r }

// script maps a step id (Task.Body), a workflow file (ChildRun.Workflow) or "agent:" and an
// agent tool's step (ChildRun.Agent) to its answers, in order.
type script map[string][]reply

// pending is something the simulated world will answer at due: a task, a sub-run or a timer.
type pending struct {
	due   time.Time
	seq   int
	task  *protocol.Task
	child *engine.ChildRun
	timer *engine.Command
	grant bool // the granted event of an acquire command
	reply reply
}

// dispatched records one dispatch command and the time of the event that caused it.
type dispatched struct {
	task  *protocol.Task
	cause time.Time
}

// driver runs a definition to its end in a simulated world: workers answer tasks from a script
// after their latency, sub-runs likewise, and timers fire at their time; the earliest answer is
// delivered first. Every event is also checked for the engine's promises: Decide does not
// change its input, decides the same from the state decoded from JSON (a restarted engine),
// and the same event delivered again changes nothing.
type driver struct {
	t      *testing.T
	def    *workflow.Definition
	run    *engine.Run
	now    time.Time
	script script
	used   map[string]int
	queue  []*pending
	seq    int

	cmds        []engine.Command
	dispatches  []dispatched
	deadLetters []engine.Command
	started     []*engine.ChildRun
	cancelled   []*engine.ChildRun
	finish      *engine.Command
	events      []protocol.Event
	// acquired lists the acquire commands, released counts the release commands; holdGrants
	// keeps the slots of acquire commands for the test to grant (else granted at once).
	acquired   []engine.Command
	released   int
	holdGrants bool
	// maxInFlight is the most tasks and sub-runs in flight at once per Task.Step / ChildRun.Step.
	maxInFlight map[string]int
	// reload makes every event be decided on the state saved to JSON and loaded back, as a
	// restarted engine would.
	reload bool
}

// drive runs def with input under sc until the run finishes.
func drive(t *testing.T, def *workflow.Definition, input string, sc script) *driver {
	t.Helper()
	d := newDriver(t, def, input, sc)
	d.runToEnd()
	return d
}

func newDriver(t *testing.T, def *workflow.Definition, input string, sc script) *driver {
	t.Helper()
	d := &driver{t: t, def: def, now: t0, script: sc, used: map[string]int{}, maxInFlight: map[string]int{}}
	run, cmds, err := engine.Start(def, "run1", json.RawMessage(input), t0)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	d.run = run
	d.take(cmds)
	return d
}

func (d *driver) runToEnd() {
	d.t.Helper()
	for n := 0; d.finish == nil; n++ {
		if n > 10000 {
			d.t.Fatalf("the run did not finish after %d events", n)
		}
		if !d.step() {
			d.t.Fatalf("the run is stuck: nothing in flight and no finish; state:\n%s", d.state())
		}
	}
}

// step delivers the earliest answer; it reports false when there is none.
func (d *driver) step() bool {
	d.t.Helper()
	if len(d.queue) == 0 {
		return false
	}
	k := 0
	for i, p := range d.queue {
		if p.due.Before(d.queue[k].due) || p.due.Equal(d.queue[k].due) && p.seq < d.queue[k].seq {
			k = i
		}
	}
	p := d.queue[k]
	d.queue = slices.Delete(d.queue, k, k+1)
	if p.due.After(d.now) {
		d.now = p.due
	}
	switch {
	case p.grant:
		d.apply(protocol.Event{Type: protocol.EvGranted, At: d.now, Item: -1})
	case p.timer != nil:
		d.apply(protocol.Event{Type: protocol.EvTick, At: d.now, Step: p.timer.Step, Item: p.timer.Item, Activation: p.timer.Activation})
	case p.child != nil:
		ev := protocol.Event{Type: protocol.EvChildFinished, At: d.now, Step: p.child.Step, Item: p.child.Item, Activation: p.child.Activation,
			Iteration: p.child.Iteration, CallID: p.child.CallID, Child: p.child.RunID, Usage: p.reply.usage}
		switch p.reply.kind {
		case "complete":
			ev.Output, ev.Label, ev.StopReason = json.RawMessage(p.reply.out), p.reply.label, p.reply.stop
		default:
			ev.Error, ev.Status = p.reply.err, p.reply.status
			if ev.Status == "" {
				ev.Status = protocol.RunFailed
			}
		}
		d.apply(ev)
	default:
		tk := p.task
		ev := protocol.Event{At: d.now, Step: tk.Step, Item: tk.Item, Activation: tk.Activation, Iteration: tk.Iteration, Attempt: tk.Attempt, Resume: tk.Resume}
		switch p.reply.kind {
		case "complete":
			ev.Type, ev.Output, ev.Label, ev.StopReason = protocol.EvCompleted, json.RawMessage(p.reply.out), p.reply.label, p.reply.stop
		case "continue":
			ev.Type, ev.Output = protocol.EvContinued, json.RawMessage(p.reply.out)
		case "fail":
			ev.Type, ev.Error = protocol.EvFailed, p.reply.err
		case "permanent":
			ev.Type, ev.Error, ev.Permanent, ev.StopReason = protocol.EvFailed, p.reply.err, true, p.reply.stop
		case "timeout":
			ev.Type = protocol.EvTimedOut
		case "wait":
			ev.Type = protocol.EvWaiting
			for _, id := range p.reply.calls {
				ev.Pending = append(ev.Pending, protocol.PendingCall{CallID: id, Tool: "pay", Arguments: json.RawMessage(`{"call":"` + id + `"}`)})
			}
			for _, id := range p.reply.kids {
				ev.Pending = append(ev.Pending, protocol.PendingCall{CallID: id, Tool: "ask", Arguments: json.RawMessage(`{"question":"` + id + `"}`),
					Child: &protocol.ChildCall{Agent: "helper"}})
			}
		default:
			d.t.Fatalf("unknown reply kind %q", p.reply.kind)
		}
		d.apply(ev)
	}
	return true
}

// apply delivers one event and checks purity, restart and idempotence.
func (d *driver) apply(ev protocol.Event) {
	d.t.Helper()
	d.events = append(d.events, ev)
	if d.reload {
		var loaded engine.Run
		if err := json.Unmarshal(mustJSON(d.t, d.run), &loaded); err != nil {
			d.t.Fatal(err)
		}
		d.run = &loaded
	}
	before := mustJSON(d.t, d.run)
	next, cmds, err := engine.Decide(d.def, d.run, ev)
	if err != nil {
		d.t.Fatalf("Decide(%+v): %v", ev, err)
	}
	if after := mustJSON(d.t, d.run); !bytes.Equal(before, after) {
		d.t.Fatalf("Decide changed its input run:\nbefore %s\nafter  %s", before, after)
	}
	// A restarted engine: the state as saved, decoded, decides the same.
	var saved engine.Run
	if err := json.Unmarshal(before, &saved); err != nil {
		d.t.Fatal(err)
	}
	next2, cmds2, err := engine.Decide(d.def, &saved, ev)
	if err != nil {
		d.t.Fatalf("Decide on the decoded state: %v", err)
	}
	if a, b := mustJSON(d.t, next), mustJSON(d.t, next2); !bytes.Equal(a, b) {
		d.t.Fatalf("the decoded state decides differently:\n%s\n%s", a, b)
	}
	if a, b := mustJSON(d.t, cmds), mustJSON(d.t, cmds2); !bytes.Equal(a, b) {
		d.t.Fatalf("the decoded state commands differently:\n%s\n%s", a, b)
	}
	// The same event again changes nothing.
	again, cmds3, err := engine.Decide(d.def, next, ev)
	if err != nil {
		d.t.Fatalf("Decide on a repeated event: %v", err)
	}
	if len(cmds3) != 0 {
		d.t.Fatalf("a repeated %s event gave commands: %s", ev.Type, mustJSON(d.t, cmds3))
	}
	if a, b := mustJSON(d.t, next), mustJSON(d.t, again); !bytes.Equal(a, b) {
		d.t.Fatalf("a repeated %s event changed the state:\n%s\n%s", ev.Type, a, b)
	}
	d.run = next
	d.take(cmds)
}

// take records commands and puts what they ask for in the world.
func (d *driver) take(cmds []engine.Command) {
	d.t.Helper()
	for _, c := range cmds {
		d.cmds = append(d.cmds, c)
		if d.finish != nil && c.Type != engine.CmdRelease {
			d.t.Fatalf("a command after finish: %+v", c)
		}
		switch c.Type {
		case engine.CmdDispatch:
			d.dispatches = append(d.dispatches, dispatched{task: c.Task, cause: d.now})
			r := d.next(c.Task.Body)
			if r.kind == "hang" {
				continue
			}
			start := d.now
			if c.Task.NotBefore.After(start) {
				start = c.Task.NotBefore
			}
			d.push(&pending{due: start.Add(r.took), task: c.Task, reply: r})
		case engine.CmdSchedule:
			c := c
			d.push(&pending{due: c.At, timer: &c})
		case engine.CmdStartChild:
			d.started = append(d.started, c.Child)
			name := c.Child.Workflow
			if c.Child.Agent != "" {
				name = "agent:" + c.Child.Agent
			}
			r := d.next(name)
			if r.kind == "hang" {
				continue
			}
			d.push(&pending{due: d.now.Add(r.took), child: c.Child, reply: r})
		case engine.CmdCancelChild:
			d.cancelled = append(d.cancelled, c.Child)
		case engine.CmdDeadLetter:
			d.deadLetters = append(d.deadLetters, c)
		case engine.CmdFinish:
			c := c
			d.finish = &c
		case engine.CmdAcquire:
			d.acquired = append(d.acquired, c)
			if !d.holdGrants {
				d.push(&pending{due: d.now, grant: true})
			}
		case engine.CmdRelease:
			if d.finish == nil {
				d.t.Fatalf("a release before the finish: %+v", c)
			}
			d.released++
		default:
			d.t.Fatalf("unknown command %q", c.Type)
		}
	}
	// Record how many tasks and sub-runs each step has in flight.
	count := map[string]int{}
	for _, p := range d.queue {
		switch {
		case p.task != nil && d.current(p.task):
			count[p.task.Step]++
		case p.child != nil:
			count[p.child.Step]++
		}
	}
	for k, n := range count {
		d.maxInFlight[k] = max(d.maxInFlight[k], n)
	}
}

// current reports whether the run still waits for task (a task abandoned by a loop or a failed
// parent does not count as in flight).
func (d *driver) current(task *protocol.Task) bool {
	key := task.Step
	if task.Item >= 0 {
		key = task.Step + "#" + strconv.Itoa(task.Item)
	}
	sr := d.run.Steps[key]
	return sr != nil && sr.Status == protocol.StepRunning && sr.Activation == task.Activation &&
		sr.Iteration == task.Iteration && sr.Attempt == task.Attempt && sr.Resume == task.Resume
}

// runUntil delivers answers, earliest first, until cond holds; it fails the test when the run
// finishes or nothing is left to deliver first.
func (d *driver) runUntil(what string, cond func(*engine.Run) bool) {
	d.t.Helper()
	for !cond(d.run) {
		if d.finish != nil {
			d.t.Fatalf("the run finished (%s) before %s; state:\n%s", d.finish.Status, what, d.state())
		}
		if !d.step() {
			d.t.Fatalf("nothing left to deliver before %s; state:\n%s", what, d.state())
		}
	}
}

// waiting is a condition of runUntil: the step with this key waits.
func waiting(key string) func(*engine.Run) bool {
	return func(r *engine.Run) bool { sr := r.Steps[key]; return sr != nil && sr.Status == protocol.StepWaiting }
}

// human delivers ev (a decision, a resume or a signal) after a delay: everything due before it
// is delivered first, then ev, at now + after.
func (d *driver) human(after time.Duration, ev protocol.Event) {
	d.t.Helper()
	at := d.now.Add(after)
	for d.finish == nil && slices.ContainsFunc(d.queue, func(p *pending) bool { return p.due.Before(at) }) {
		d.step()
	}
	if d.finish != nil {
		d.t.Fatalf("the run finished (%s) before the %s event; state:\n%s", d.finish.Status, ev.Type, d.state())
	}
	d.now = at
	ev.At = at
	d.apply(ev)
}

func (d *driver) push(p *pending) {
	d.seq++
	p.seq = d.seq
	d.queue = append(d.queue, p)
}

// next pops the next scripted reply for a step or file; a missing script is a test failure.
func (d *driver) next(name string) reply {
	d.t.Helper()
	rs := d.script[name]
	i := d.used[name]
	if i >= len(rs) {
		d.t.Fatalf("no scripted reply left for %s (used %d)", name, i)
	}
	d.used[name] = i + 1
	r := rs[i]
	if r.took == 0 {
		r.took = time.Second
	}
	return r
}

// dispatchCount counts the tasks dispatched for a body step.
func (d *driver) dispatchCount(body string) int {
	n := 0
	for _, x := range d.dispatches {
		if x.task.Body == body {
			n++
		}
	}
	return n
}

// tasksOf lists the tasks dispatched for a body step, in order.
func (d *driver) tasksOf(body string) []dispatched {
	var out []dispatched
	for _, x := range d.dispatches {
		if x.task.Body == body {
			out = append(out, x)
		}
	}
	return out
}

func (d *driver) state() string { return string(mustJSON(d.t, d.run)) }

// expectStatus checks the finish command and the state agree on status and error code.
func (d *driver) expect(status protocol.RunStatus, code string) {
	d.t.Helper()
	if d.finish == nil {
		d.t.Fatalf("the run did not finish")
	}
	if d.finish.Status != status || d.run.Status != status {
		d.t.Fatalf("status %s (state %s), want %s; error %v", d.finish.Status, d.run.Status, status, d.finish.Error)
	}
	gotCode := ""
	if d.finish.Error != nil {
		gotCode = d.finish.Error.Code
	}
	if gotCode != code {
		d.t.Fatalf("error code %q, want %q (%v)", gotCode, code, d.finish.Error)
	}
	if (d.run.Error == nil) != (d.finish.Error == nil) || d.run.Error != nil && *d.run.Error != *d.finish.Error {
		d.t.Fatalf("the state's error %v differs from the finish command's %v", d.run.Error, d.finish.Error)
	}
	if !bytes.Equal(d.run.Output, d.finish.Output) {
		d.t.Fatalf("the state's output %s differs from the finish command's %s", d.run.Output, d.finish.Output)
	}
	// Every step dispatch that is a first attempt of a first iteration belongs to a distinct
	// activation: no step ran twice to completion in one activation.
	seen := map[string]bool{}
	for _, x := range d.dispatches {
		if seen[x.task.MsgID] {
			d.t.Fatalf("task %s dispatched twice", x.task.MsgID)
		}
		seen[x.task.MsgID] = true
	}
}

func (d *driver) expectOutput(want string) {
	d.t.Helper()
	if !jsonEqual(d.t, d.run.Output, []byte(want)) {
		d.t.Fatalf("output %s, want %s", d.run.Output, want)
	}
}

func (d *driver) expectPath(want ...string) {
	d.t.Helper()
	if !slices.Equal(d.run.Path, want) {
		d.t.Fatalf("path %v, want %v", d.run.Path, want)
	}
}

func (d *driver) expectErrorContains(parts ...string) {
	d.t.Helper()
	if len(parts) == 0 {
		return
	}
	if d.run.Error == nil {
		d.t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(d.run.Error.Message, p) {
			d.t.Fatalf("error %q does not contain %q", d.run.Error.Message, p)
		}
	}
}

func (d *driver) stepRun(key string) *engine.StepRun {
	d.t.Helper()
	sr := d.run.Steps[key]
	if sr == nil {
		d.t.Fatalf("no step %s in the run; state:\n%s", key, d.state())
	}
	return sr
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return bytes.Equal(mustJSON(t, x), mustJSON(t, y))
}

// build builds a definition with the builder and fails the test on problems.
func build(t *testing.T, b *workflow.Builder) *workflow.Definition {
	t.Helper()
	def, err := b.Build()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return def
}

// load writes a workflow file (and the sub-workflow files it names) to a temporary directory,
// then loads, validates and normalizes it.
func load(t *testing.T, src string, files map[string]string) *workflow.Definition {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "main.toml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	def, ps := workflow.LoadAndValidate(path, workflow.Options{})
	if len(ps) > 0 {
		t.Fatalf("invalid workflow: %v", ps)
	}
	return def
}

// loadExample loads the workflow of an example: examples/DIR/workflow.toml.
func loadExample(t *testing.T, dir string) *workflow.Definition {
	t.Helper()
	def, ps := workflow.LoadAndValidate(filepath.Join("..", "examples", dir, "workflow.toml"), workflow.Options{})
	if len(ps) > 0 {
		t.Fatalf("invalid example %s: %v", dir, ps)
	}
	return def
}
