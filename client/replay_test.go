package client_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// replayed replays run id with def (nil: its own) and returns the report.
func (v *env) replayed(id string, def *workflow.Definition) *client.ReplayReport {
	v.T.Helper()
	rep, err := v.Client.Replay(v.Ctx, id, def)
	if err != nil {
		v.T.Fatalf("Replay %s: %v", id, err)
	}
	return rep
}

// assertSame checks that the replay of run id reports the same, with the very result of the
// run (output and usage included), and that it decided events.
func assertSame(t *testing.T, rep *client.ReplayReport) {
	t.Helper()
	if !rep.Same || rep.Difference != "" || rep.Step != "" || rep.Changed {
		t.Fatalf("replay of %s: same %v, changed %v, difference %q (step %q)", rep.RunID, rep.Same, rep.Changed, rep.Difference, rep.Step)
	}
	orig, _ := json.Marshal(rep.Original)
	got, _ := json.Marshal(rep.Replay)
	if string(orig) != string(got) {
		t.Errorf("replayed result:\n got %s\nwant %s", got, orig)
	}
	if rep.Decided < 2 || rep.Decided > rep.Events {
		t.Errorf("decided %d of %d events", rep.Decided, rep.Events)
	}
}

func TestReplaySame(t *testing.T) {
	v := newEnv(t)
	t.Run("tasks", func(t *testing.T) {
		wf := workflow.New("greet")
		wf.Task("hello", "hello")
		wf.Task("shout", "shout")
		wf.Edge("hello", "shout")
		_, bs := runtest.Bundles(t, wf)
		v.Worker("hello").Serve(func(task *protocol.Task) *protocol.Event {
			ev := runtest.Completed(task, `"hello"`)
			ev.Usage = &protocol.Usage{ModelCalls: 1, InputTokens: 10}
			return ev
		})
		v.Worker("shout").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `"HELLO"`) })
		id := v.Start(bs, `{"name":"Ada"}`, "")
		v.Wait(id)
		rep := v.replayed(id, nil)
		assertSame(t, rep)
		if rep.Events != 3 || rep.Decided != 3 || rep.Workflow != "greet" || rep.Hash != bs.Root {
			t.Errorf("report %+v: want 3 events decided, workflow greet, hash %s", rep, bs.Root)
		}
	})
	t.Run("agent_loop", func(t *testing.T) {
		v.ServeThink(4)
		id := v.Start(runtest.LoopWorkflow(t, 10), `{"n":0}`, "")
		if rec := v.Wait(id); rec.Run.Steps["think"].Iteration != 4 {
			t.Fatalf("the run did not iterate 4 times: %+v", rec.Run.Steps["think"])
		}
		rep := v.replayed(id, nil)
		assertSame(t, rep)
		if rep.Replay.Steps[0].Iterations != 4 || rep.Replay.Steps[0].Attempts != 4 {
			t.Errorf("replayed step %+v", rep.Replay.Steps[0])
		}
	})
	t.Run("parallel and map", func(t *testing.T) {
		bs := v.ServeFan()
		id := v.Start(bs, `{"items":[1,2,3,4,5]}`, "")
		if rec := v.Wait(id); string(rec.Run.Output) != "[2,4,6,8,10]" {
			t.Fatalf("output %s", rec.Run.Output)
		}
		assertSame(t, v.replayed(id, nil))
	})
	t.Run("retried step", func(t *testing.T) {
		_, bs := runtest.Bundles(t, flakyWorkflow(3))
		v.Worker("flaky").Serve(func(task *protocol.Task) *protocol.Event {
			if task.Attempt < 3 {
				return runtest.Failed(task, "connection reset", false)
			}
			return runtest.Completed(task, `"ok"`)
		})
		id := v.Start(bs, "", "")
		if rec := v.Wait(id); rec.Run.Steps["call"].Attempts != 3 {
			t.Fatalf("step %+v: want 3 attempts", rec.Run.Steps["call"])
		}
		assertSame(t, v.replayed(id, nil))
	})
	t.Run("cancelled with a task in flight", func(t *testing.T) {
		wf := workflow.New("stuck")
		wf.Task("wait", "nobody-serves-this")
		_, bs := runtest.Bundles(t, wf)
		id := v.Start(bs, "", "")
		v.WaitFor(id, func(r *client.Record) bool { return r.Run.Steps["wait"].Status == protocol.StepRunning })
		if err := v.Client.Cancel(v.Ctx, id, "enough"); err != nil {
			t.Fatal(err)
		}
		if rec := v.Wait(id); rec.Run.Status != protocol.RunCancelled {
			t.Fatalf("status %s", rec.Run.Status)
		}
		assertSame(t, v.replayed(id, nil))
	})
	t.Run("call step", func(t *testing.T) {
		bs := runtest.LoadBundles(t, "testdata/parent.toml")
		v.Worker("prep").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `{"topic":"nats"}`) })
		v.Worker("child-work").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `{"summary":"done"}`) })
		id := v.Start(bs, `{}`, "")
		if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("status %s: %v", rec.Run.Status, rec.Run.Error)
		}
		assertSame(t, v.replayed(id, nil))
		assertSame(t, v.replayed(id+"/sub/1", nil)) // the sub-run has events of its own
	})
}

func flakyWorkflow(attempts int) *workflow.Builder {
	wf := workflow.New("flaky")
	t := wf.Task("call", "flaky")
	if attempts > 1 {
		t.WithRetry(workflow.Retry{MaxAttempts: attempts, Backoff: "fixed", InitialDelay: 10e6})
	}
	return wf
}

func loopDefinition(t *testing.T, max int) *workflow.Definition {
	wf := workflow.New("looping")
	wf.AgentLoop("think", "think").WithMaxIterations(max)
	def, _ := runtest.Bundles(t, wf)
	return def
}

// routeWorkflow runs check, then ship on label ok and hold on label bad (swapped: the other way).
func routeWorkflow(t *testing.T, swapped bool) (*workflow.Definition, *workflow.Bundles) {
	wf := workflow.New("route")
	wf.Task("check", "check")
	wf.Task("ship", "ship")
	wf.Task("hold", "hold")
	ok, bad := "ok", "bad"
	if swapped {
		ok, bad = bad, ok
	}
	wf.Edge("check", "ship").When(ok)
	wf.Edge("check", "hold").When(bad)
	return runtest.Bundles(t, wf)
}

func TestReplayChangedDefinition(t *testing.T) {
	v := newEnv(t)
	v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event {
		if string(task.Input) == `{"stop":4}` && task.Iteration == 4 {
			return runtest.Completed(task, `{"done":true}`)
		}
		return runtest.Continued(task, string(task.Input))
	})
	v.Worker("flaky").Serve(func(task *protocol.Task) *protocol.Event {
		if task.Attempt == 1 {
			return runtest.Failed(task, "connection reset", false)
		}
		return runtest.Completed(task, `"ok"`)
	})
	v.Worker("check").Serve(func(task *protocol.Task) *protocol.Event {
		ev := runtest.Completed(task, `{}`)
		ev.Label = "ok"
		return ev
	})
	for _, h := range []string{"ship", "hold"} {
		v.Worker(h).Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, strconv.Quote(h)) })
	}

	// Four iterations, then completed.
	fourIDs := v.Start(runtest.LoopWorkflow(t, 10), `{"stop":4}`, "")
	v.Wait(fourIDs)
	// Three iterations, stopped at its bound.
	threeIDs := v.Start(runtest.LoopWorkflow(t, 3), `{"stop":0}`, "")
	v.Wait(threeIDs)
	_, flaky := runtest.Bundles(t, flakyWorkflow(3))
	flakyID := v.Start(flaky, "", "")
	v.Wait(flakyID)
	_, route := routeWorkflow(t, false)
	routeID := v.Start(route, "", "")
	if rec := v.Wait(routeID); strings.Join(rec.Run.Path, " ") != "check ship" {
		t.Fatalf("path %v", rec.Run.Path)
	}
	swapped, _ := routeWorkflow(t, true)

	for _, tc := range []struct {
		name, run string
		def       *workflow.Definition
		want      string
		step      string
		iteration int
		status    protocol.RunStatus
	}{
		{"fewer iterations", fourIDs, loopDefinition(t, 2),
			`step "think" iteration 3: the original run dispatched a task the replay did not`, "think", 3, protocol.RunCompleted},
		{"more iterations", threeIDs, loopDefinition(t, 5),
			`step "think" iteration 4: the replay dispatched a task the original run did not`, "think", 4, protocol.RunRunning},
		{"no retry", flakyID, func() *workflow.Definition { d, _ := runtest.Bundles(t, flakyWorkflow(1)); return d }(),
			`step "call" iteration 1 attempt 2: the original run dispatched a task the replay did not`, "call", 1, protocol.RunFailed},
		{"routing", routeID, swapped,
			`step "hold" iteration 1: the replay dispatched a task the original run did not`, "hold", 1, protocol.RunRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := v.replayed(tc.run, tc.def)
			if rep.Same || !rep.Changed {
				t.Fatalf("same %v, changed %v: want a difference", rep.Same, rep.Changed)
			}
			if rep.Difference != tc.want || rep.Step != tc.step || rep.Iteration != tc.iteration {
				t.Errorf("difference %q (step %q iteration %d)\nwant %q (step %q iteration %d)", rep.Difference, rep.Step, rep.Iteration, tc.want, tc.step, tc.iteration)
			}
			if rep.Replay.Status != tc.status {
				t.Errorf("replay status %s, want %s", rep.Replay.Status, tc.status)
			}
			if h, _ := tc.def.Hash(); rep.Hash != h {
				t.Errorf("hash %s, want the given definition's %s", rep.Hash, h)
			}
		})
	}

	t.Run("the same definition given", func(t *testing.T) {
		def, _ := routeWorkflow(t, false)
		rep := v.replayed(routeID, def)
		assertSame(t, rep)
	})
	// A change that does not touch the path is the same.
	t.Run("a higher bound not reached", func(t *testing.T) {
		rep := v.replayed(fourIDs, loopDefinition(t, 6))
		if !rep.Same || !rep.Changed || rep.Difference != "" {
			t.Fatalf("same %v, changed %v, difference %q: want the same path", rep.Same, rep.Changed, rep.Difference)
		}
	})
}

func TestReplayRefuses(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("stuck")
	wf.Task("wait", "nobody-serves-this")
	_, bs := runtest.Bundles(t, wf)
	id := v.Start(bs, "", "")
	v.WaitFor(id, func(r *client.Record) bool { return r.Run.Steps != nil })
	_, err := v.Client.Replay(v.Ctx, id, nil)
	if !errors.Is(err, client.ErrNotFinished) || err.Error() != "client: run "+id+" is running: only a run that has ended can be replayed: the run has not finished" {
		t.Errorf("replay of a running run: %v", err)
	}
	if _, err := v.Client.Replay(v.Ctx, "r-nope", nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("replay of an unknown run: %v", err)
	}
}

// TestReplayRecord replays recorded events changed by hand, without a server.
func TestReplayRecord(t *testing.T) {
	v := newEnv(t)
	v.ServeThink(4)
	id := v.Start(runtest.LoopWorkflow(t, 10), `{"n":0}`, "")
	rec := v.Wait(id)
	def, err := v.Client.Definition(v.Ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := v.Client.Events(v.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 5 || evs[0].Type != protocol.EvStart || evs[4].Type != protocol.EvCompleted {
		t.Fatalf("events %+v: want start, 3 continued, completed", evs)
	}
	replay := func(evs []protocol.Event) *client.ReplayReport {
		t.Helper()
		rep, err := client.ReplayRecord(rec, def, evs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}

	t.Run("as recorded", func(t *testing.T) { assertSame(t, replay(evs)) })

	// Answers recorded before the state that dispatched their tasks (an engine that crashed
	// between publishing and saving) are held back until the replay dispatches them.
	t.Run("answers ahead", func(t *testing.T) {
		moved := []protocol.Event{evs[4], evs[3], evs[0], evs[2], evs[1]}
		assertSame(t, replay(moved))
	})

	t.Run("duplicates", func(t *testing.T) {
		dup := slices.Clone(evs)
		again := evs[2]
		again.Nonce = "other"
		dup = slices.Insert(dup, 3, again, evs[0])
		dup = append(dup, evs[4])
		rep := replay(dup)
		assertSame(t, rep)
		if rep.Decided != 5 || rep.Events != 8 {
			t.Errorf("decided %d of %d events, want 5 of 8", rep.Decided, rep.Events)
		}
	})

	t.Run("an answer missing", func(t *testing.T) {
		rep := replay(evs[:4])
		if rep.Same || rep.Difference != `step "think" iteration 4: the replay waits for the answer to a task that the recorded events do not hold` ||
			rep.Step != "think" || rep.Iteration != 4 || rep.Replay.Status != protocol.RunRunning {
			t.Errorf("same %v, difference %q (step %q iteration %d), status %s", rep.Same, rep.Difference, rep.Step, rep.Iteration, rep.Replay.Status)
		}
	})

	t.Run("a different answer", func(t *testing.T) {
		changed := slices.Clone(evs)
		changed[4].Label = "shortcut"
		rep := replay(changed)
		if rep.Same || rep.Difference != `step "think" iteration 4: the replay ended it with label "shortcut", the original run with label "completed"` {
			t.Errorf("same %v, difference %q", rep.Same, rep.Difference)
		}
	})

	t.Run("no start", func(t *testing.T) {
		if _, err := client.ReplayRecord(rec, def, evs[1:], nil); !errors.Is(err, client.ErrNoStart) {
			t.Errorf("err %v, want ErrNoStart", err)
		}
	})
}
