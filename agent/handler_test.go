package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/reins-run/reins/agent"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// fakeTask is a worker.TaskContext in memory: the handler's answers and checkpoint appends are
// recorded, the checkpoint is what earlier tasks appended.
type fakeTask struct {
	context.Context
	task      *protocol.Task
	items     []json.RawMessage // the checkpoint: appended items
	answer    string
	output    any
	outcome   worker.Outcome
	err       error
	permanent bool
}

func newFakeTask(iteration int, input string, items []json.RawMessage) *fakeTask {
	return &fakeTask{Context: context.Background(), items: items, task: &protocol.Task{
		RunID: "run", Step: "compose", Body: "compose", Item: -1, Activation: 1, Iteration: iteration, Attempt: 1,
		Input: json.RawMessage(input)}}
}

func (f *fakeTask) Task() *protocol.Task   { return f.task }
func (f *fakeTask) Input() json.RawMessage { return f.task.Input }
func (f *fakeTask) RunID() string          { return f.task.RunID }
func (f *fakeTask) StepID() string         { return f.task.Step }
func (f *fakeTask) Item() int              { return f.task.Item }
func (f *fakeTask) Iteration() int         { return f.task.Iteration }
func (f *fakeTask) Attempt() int           { return f.task.Attempt }
func (f *fakeTask) Heartbeat() error       { return nil }
func (f *fakeTask) Effect(string, func(context.Context, string) (any, error)) (json.RawMessage, error) {
	return nil, errors.New("fakeTask: no side effects here")
}
func (f *fakeTask) AddUsage(protocol.Usage) {}
func (f *fakeTask) Record(trace.Iteration)  {}
func (f *fakeTask) KeepText(string) (string, error) {
	return "", errors.New("fakeTask: no values here")
}
func (f *fakeTask) ReadText(string) (string, error) {
	return "", errors.New("fakeTask: no values here")
}
func (f *fakeTask) Bundle() (*workflow.Bundle, error) { return nil, errors.New("no bundle") }
func (f *fakeTask) Wait([]protocol.PendingCall) error {
	return errors.New("a composition never waits")
}
func (f *fakeTask) Continue(out any) error { f.answer, f.output = "continue", out; return nil }
func (f *fakeTask) Complete(out any) error { f.answer, f.output = "complete", out; return nil }
func (f *fakeTask) CompleteWith(out any, o worker.Outcome) error {
	f.answer, f.output, f.outcome = "complete", out, o
	return nil
}
func (f *fakeTask) Fail(err error) error { f.answer, f.err = "fail", err; return nil }
func (f *fakeTask) FailPermanent(err error) error {
	f.answer, f.err, f.permanent = "fail", err, true
	return nil
}
func (f *fakeTask) Checkpoint(any) error { return errors.New("a composition only appends") }
func (f *fakeTask) AppendCheckpoint(items ...any) error {
	for _, it := range items {
		raw, err := json.Marshal(it)
		if err != nil {
			return err
		}
		f.items = append(f.items, raw)
	}
	return nil
}
func (f *fakeTask) LoadCheckpoint() (json.RawMessage, error) {
	if f.items == nil {
		return nil, nil
	}
	return json.Marshal(f.items)
}

// drive runs h task after task, as the engine would, until it stops continuing, and returns the
// last task.
func drive(t *testing.T, h worker.Handler, input string) *fakeTask {
	t.Helper()
	var items []json.RawMessage
	for i := 1; i < 100; i++ {
		ft := newFakeTask(i, input, items)
		if err := h(ft); err != nil {
			t.Fatal(err)
		}
		if ft.answer != "continue" {
			return ft
		}
		items = ft.items
	}
	t.Fatal("the handler never stopped continuing")
	return nil
}

// TestHandlerInput maps the first task's input to the initial state.
func TestHandlerInput(t *testing.T) {
	read := agent.Func("read", func(_ context.Context, t *agent.Turn) error {
		return t.Set("keys", t.Session().Keys())
	})
	cases := map[string]string{
		`{"topic":"x","n":1}`: `["n","topic"]`,
		`"just text"`:         `["input"]`,
		`null`:                `null`,
		``:                    `null`,
	}
	for input, want := range cases {
		ft := drive(t, agent.Handler(read, agent.Config{}), input)
		res, ok := ft.output.(agent.Result)
		if ft.answer != "complete" || !ok || string(res.State["keys"]) != want {
			t.Errorf("input %q: answer %s %+v (%v), want keys %s", input, ft.answer, ft.output, ft.err, want)
		}
		if ft.outcome.Label != "completed" || ft.outcome.StopReason != "completed" {
			t.Errorf("input %q: outcome %+v", input, ft.outcome)
		}
	}
}

// TestHandlerChangedComposition: a checkpoint written by another composition fails the step
// for good, naming what does not match.
func TestHandlerChangedComposition(t *testing.T) {
	old := agent.NewLoop("refine", 0, agent.NewSequential("draft", counter("writer", "n"), counter("polish", "p")), counter("critic", "m"))
	ft := newFakeTask(1, `{}`, nil)
	if err := agent.Handler(old, agent.Config{})(ft); err != nil || ft.answer != "continue" {
		t.Fatalf("first task: %s %v", ft.answer, ft.err)
	}
	// The second task goes on inside refine/draft (at polish); the new composition has no draft.
	next := agent.NewLoop("refine", 0, counter("writer", "n"), counter("critic", "m"))
	ft2 := newFakeTask(2, `{}`, ft.items)
	if err := agent.Handler(next, agent.Config{})(ft2); err != nil {
		t.Fatal(err)
	}
	if !ft2.permanent || !errors.Is(ft2.err, agent.ErrComposition) || !strings.Contains(ft2.err.Error(), `the checkpoint does not match the composition`) {
		t.Errorf("answer %s permanent=%v: %v", ft2.answer, ft2.permanent, ft2.err)
	}
}

// TestHandlerErrors: a leaf's error fails the attempt (a retry runs the turn again); a broken
// rule of the composition, or an invalid composition, fails the step for good; a task with no
// checkpoint after the first fails for good.
func TestHandlerErrors(t *testing.T) {
	flaky := agent.NewLoop("loop", 0, agent.Func("flaky", func(context.Context, *agent.Turn) error { return errors.New("down") }))
	ft := drive(t, agent.Handler(flaky, agent.Config{}), `{}`)
	if ft.answer != "fail" || ft.permanent || !strings.Contains(ft.err.Error(), `agent "loop/flaky" failed: down`) {
		t.Errorf("leaf error: %s permanent=%v %v", ft.answer, ft.permanent, ft.err)
	}
	bad := agent.NewLoop("loop", 0, escalateAt("critic", "nowhere", 1))
	ft = drive(t, agent.Handler(bad, agent.Config{}), `{}`)
	if ft.answer != "fail" || !ft.permanent {
		t.Errorf("bad escalation: %s permanent=%v %v", ft.answer, ft.permanent, ft.err)
	}
	ft = drive(t, agent.Handler(agent.NewLoop("empty", 0), agent.Config{}), `{}`)
	if ft.answer != "fail" || !ft.permanent || !strings.Contains(ft.err.Error(), "has no sub-agents") {
		t.Errorf("invalid composition: %s permanent=%v %v", ft.answer, ft.permanent, ft.err)
	}
	ft = newFakeTask(3, `{}`, nil)
	if err := agent.Handler(counter("a", "n"), agent.Config{})(ft); err != nil || !ft.permanent || !strings.Contains(ft.err.Error(), "turn 3 found no checkpoint") {
		t.Errorf("missing checkpoint: %s permanent=%v %v", ft.answer, ft.permanent, ft.err)
	}
}

// TestHandlerInterrupted: a task whose context ends during its turn writes nothing and fails the
// attempt, so that the turn runs again.
func TestHandlerInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stop := agent.Func("stop", func(ctx context.Context, _ *agent.Turn) error {
		cancel()
		return ctx.Err()
	})
	ft := newFakeTask(1, `{}`, nil)
	ft.Context = ctx
	if err := agent.Handler(agent.NewLoop("loop", 0, stop), agent.Config{})(ft); err != nil {
		t.Fatal(err)
	}
	if ft.answer != "fail" || ft.permanent || len(ft.items) != 0 || !strings.Contains(ft.err.Error(), "was interrupted and will run again") {
		t.Errorf("%s permanent=%v items=%d %v", ft.answer, ft.permanent, len(ft.items), ft.err)
	}
}
