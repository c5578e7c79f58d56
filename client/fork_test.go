package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	rworker "github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// startWorker runs a worker of package worker on the box with the handlers register adds, until
// the test ends.
func (v *env) startWorker(register func(*rworker.Worker)) {
	v.T.Helper()
	w, err := rworker.New((*conn.Conn)(v.Box), rworker.Options{AckWait: runtest.AckWait})
	if err != nil {
		v.T.Fatal(err)
	}
	register(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	v.T.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			v.T.Errorf("worker: %v", err)
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		v.T.Fatalf("the worker stopped before it was ready: %v", err)
	}
}

// checkpointKeys lists the checkpoint keys of run id.
func (v *env) checkpointKeys(id string) []string {
	v.T.Helper()
	kv, err := v.Box.JetStream().KeyValue(v.Ctx, natsbox.CheckpointsBucket)
	if err != nil {
		v.T.Fatal(err)
	}
	lister, err := kv.ListKeys(v.Ctx)
	if err != nil {
		v.T.Fatal(err)
	}
	defer func() { _ = lister.Stop() }()
	var keys []string
	for k := range lister.Keys() {
		if strings.HasPrefix(k, id+"/") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// historyWorker serves agent_loop handler "think": each iteration appends its number to the
// checkpoint; the fourth completes with the history it loaded and its input. It records the
// input of every task by run and iteration.
type historyWorker struct {
	mu     sync.Mutex
	inputs map[string]string
}

func (h *historyWorker) register(w *rworker.Worker) {
	w.Handle("think", func(tc rworker.TaskContext) error {
		h.mu.Lock()
		h.inputs[fmt.Sprintf("%s/%d", tc.RunID(), tc.Iteration())] = string(tc.Input())
		h.mu.Unlock()
		if err := tc.AppendCheckpoint(tc.Iteration()); err != nil {
			return err
		}
		history, err := tc.LoadCheckpoint()
		if err != nil {
			return err
		}
		if tc.Iteration() == 4 {
			return tc.Complete(map[string]json.RawMessage{"history": history, "input": tc.Input()})
		}
		return tc.Continue(map[string]int{"n": tc.Iteration()})
	})
}

func (h *historyWorker) input(run string, iteration int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inputs[fmt.Sprintf("%s/%d", run, iteration)]
}

func TestFork(t *testing.T) {
	v := newEnv(t)
	hw := &historyWorker{inputs: map[string]string{}}
	v.startWorker(hw.register)
	bs := runtest.LoopWorkflow(t, 10)
	const orig = "orig"
	v.Start(bs, `{"n":0}`, orig)
	done := v.Wait(orig)
	const wantOut = `{"history":[1,2,3,4],"input":{"n":3}}`
	if done.Run.Status != protocol.RunCompleted || string(done.Run.Output) != wantOut {
		t.Fatalf("the original run: %s, output %s", done.Run.Status, done.Run.Output)
	}
	origEvents, err := v.Client.Events(v.Ctx, orig)
	if err != nil {
		t.Fatal(err)
	}
	origKeys := v.checkpointKeys(orig)
	if len(origKeys) != 4 {
		t.Fatalf("checkpoint keys of the original run: %v", origKeys)
	}

	t.Run("from an iteration", func(t *testing.T) {
		f, err := v.Client.Fork(v.Ctx, orig, client.ForkOptions{From: "think", Iteration: 3})
		if err != nil {
			t.Fatal(err)
		}
		if f.RunID != "orig-fork-1" || f.Step != "think" || f.Iteration != 3 || f.Tasks != 1 || f.Checkpoints != 2 || f.Hash != bs.Root {
			t.Errorf("forked %+v: want orig-fork-1 at think iteration 3, 1 task, 2 checkpoint keys, the run's own definition", f)
		}
		rec := v.Wait(f.RunID)
		if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != wantOut {
			t.Fatalf("the fork: %s, output %s, error %v", rec.Run.Status, rec.Run.Output, rec.Run.Error)
		}
		if sr := rec.Run.Steps["think"]; sr.Iteration != 4 || sr.Attempts != 4 || sr.StopReason != "completed" {
			t.Errorf("step think of the fork %+v", sr)
		}
		if got := hw.input(f.RunID, 3); got != `{"n":2}` {
			t.Errorf("the fork's iteration 3 got %s, want the output of iteration 2", got)
		}
		if got := hw.input(f.RunID, 1) + hw.input(f.RunID, 2); got != "" {
			t.Errorf("the fork ran iterations 1 or 2 again: %s", got)
		}
		if keys := v.checkpointKeys(f.RunID); len(keys) != 4 {
			t.Errorf("checkpoint keys of the fork: %v", keys)
		}
		if rec.Parent != nil {
			t.Errorf("the fork has a parent: %+v", rec.Parent)
		}
	})

	t.Run("with an input", func(t *testing.T) {
		f, err := v.Client.Fork(v.Ctx, orig, client.ForkOptions{From: "think", Iteration: 3, Input: json.RawMessage(`{ "n" : 100 }`), RunID: "custom"})
		if err != nil {
			t.Fatal(err)
		}
		rec := v.Wait(f.RunID)
		if f.RunID != "custom" || rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != wantOut {
			t.Fatalf("fork %s: %s, output %s", f.RunID, rec.Run.Status, rec.Run.Output)
		}
		if got := hw.input("custom", 3); got != `{"n":100}` {
			t.Errorf("the fork's iteration 3 got %s, want the --input", got)
		}
	})

	t.Run("from the start", func(t *testing.T) {
		f, err := v.Client.Fork(v.Ctx, orig, client.ForkOptions{From: "think"})
		if err != nil {
			t.Fatal(err)
		}
		rec := v.Wait(f.RunID)
		if f.RunID != "orig-fork-2" || f.Checkpoints != 0 || rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != wantOut {
			t.Fatalf("fork %+v: %s, output %s", f, rec.Run.Status, rec.Run.Output)
		}
		if got := hw.input(f.RunID, 1); got != `{"n":0}` {
			t.Errorf("iteration 1 of the fork got %s, want the run input", got)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			from string
			it   int
			id   string
			is   error
			want string
		}{
			{"nope", 1, "", client.ErrUnknownStep, `client: workflow looping has no step "nope": no such step`},
			{"think", 9, "", client.ErrUnknownStep, "client: run orig never dispatched iteration 9 of step think (it reached iteration 4): no such step"},
			{"think#1", 1, "", client.ErrUnknownStep, `client: workflow looping has no step "think#1": only a parallel or map step has children step#N: no such step`},
			{"think", 1, "custom", client.ErrExists, "client: fork run orig into custom: a run with this id already exists"},
		} {
			_, err := v.Client.Fork(v.Ctx, orig, client.ForkOptions{From: tc.from, Iteration: tc.it, RunID: tc.id})
			if !errors.Is(err, tc.is) || err.Error() != tc.want {
				t.Errorf("--from %s:%d: %v\nwant %s", tc.from, tc.it, err, tc.want)
			}
		}
		if _, err := v.Client.Fork(v.Ctx, "r-nope", client.ForkOptions{From: "think"}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("fork of an unknown run: %v", err)
		}
	})

	// The original run is as it was: record, events, checkpoints.
	after, err := v.Client.Get(v.Ctx, orig)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision != done.Revision || !reflect.DeepEqual(after.Run, done.Run) {
		t.Errorf("the original record changed: revision %d → %d", done.Revision, after.Revision)
	}
	evs, err := v.Client.Events(v.Ctx, orig)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(evs, origEvents) {
		t.Errorf("the original run's events changed: %d → %d events", len(origEvents), len(evs))
	}
	if keys := v.checkpointKeys(orig); !slices.Equal(keys, origKeys) {
		t.Errorf("the original checkpoint keys changed: %v → %v", origKeys, keys)
	}
	// The fork replays like any run? It has no start event: replay refuses it in one sentence.
	if _, err := v.Client.Replay(v.Ctx, "orig-fork-1", nil); !errors.Is(err, client.ErrNoStart) {
		t.Errorf("replay of a fork: %v", err)
	}
}

// TestForkModel forks a run onto another model: the fork's llm task names it, and its
// definition is stored by its new hash.
func TestForkModel(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("asker")
	wf.Model("small", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"hi"}]`)})
	wf.Model("large", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"HI"}]`)})
	wf.LLM("ask", "small").WithPrompt("Say hi.")
	wf.Task("after", "after")
	wf.Edge("ask", "after")
	_, bs := runtest.Bundles(t, wf)
	v.Worker(protocol.HandlerLLM).Serve(func(task *protocol.Task) *protocol.Event {
		return runtest.Completed(task, fmt.Sprintf(`{"model":%q,"workflow":%q}`, task.Model, task.Workflow))
	})
	v.Worker("after").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, string(task.Input)) })
	v.Start(bs, "", "ask-1")
	if rec := v.Wait("ask-1"); string(rec.Run.Output) != `{"model":"small","workflow":"`+bs.Root+`"}` {
		t.Fatalf("output %s", rec.Run.Output)
	}

	for _, tc := range []struct {
		name  string
		model string
		add   *workflow.ModelDef
	}{
		{"declared", "large", nil},
		{"added", "openai:gpt-test", &workflow.ModelDef{Provider: "openai", Model: "gpt-test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := v.Client.Fork(v.Ctx, "ask-1", client.ForkOptions{From: "ask", Model: tc.model, AddModel: tc.add})
			if err != nil {
				t.Fatal(err)
			}
			if f.Hash == bs.Root {
				t.Fatalf("the fork runs the original definition")
			}
			rec := v.Wait(f.RunID)
			if want := `{"model":"` + tc.model + `","workflow":"` + f.Hash + `"}`; string(rec.Run.Output) != want {
				t.Errorf("output %s, want %s", rec.Run.Output, want)
			}
			def, err := v.Client.Definition(v.Ctx, rec)
			if err != nil {
				t.Fatal(err)
			}
			if def.StepByID("ask").Model != tc.model || def.Models[tc.model].Provider == "" {
				t.Errorf("the stored definition: step ask uses %q, models %v", def.StepByID("ask").Model, def.Models)
			}
		})
	}
	_, err := v.Client.Fork(v.Ctx, "ask-1", client.ForkOptions{From: "ask", Model: "huge"})
	if err == nil || err.Error() != `client: fork run ask-1: workflow asker declares no model "huge" in [models] (it declares: large, small)` {
		t.Errorf("an unknown model: %v", err)
	}
	_, err = v.Client.Fork(v.Ctx, "ask-1", client.ForkOptions{From: "after", Input: json.RawMessage(`{`)})
	if err == nil || err.Error() != "client: fork run ask-1: the input of step after is not valid JSON" {
		t.Errorf("an input that is not JSON: %v", err)
	}
}

// TestForkParallelChild forks from one child of a parallel step: its sibling in flight at that
// moment is dispatched again too.
func TestForkParallelChild(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("fan")
	wf.Parallel("both", "left", "right")
	wf.Task("left", "left")
	wf.Task("right", "right")
	_, bs := runtest.Bundles(t, wf)
	var mu sync.Mutex
	seen := map[string]string{}
	for _, h := range []string{"left", "right"} {
		v.Worker(h).Serve(func(task *protocol.Task) *protocol.Event {
			mu.Lock()
			seen[task.RunID+"/"+wire.TaskKey(task)] = string(task.Input)
			mu.Unlock()
			return runtest.Completed(task, fmt.Sprintf(`{"%s":%s}`, h, task.Input))
		})
	}
	v.Start(bs, `1`, "fan-1")
	v.Wait("fan-1")
	f, err := v.Client.Fork(v.Ctx, "fan-1", client.ForkOptions{From: "both#1", Input: json.RawMessage(`2`)})
	if err != nil {
		t.Fatal(err)
	}
	rec := v.Wait(f.RunID)
	if f.Tasks != 2 || string(rec.Run.Output) != `[{"left":1},{"right":2}]` {
		t.Errorf("fork %+v: output %s", f, rec.Run.Output)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[f.RunID+"/both#0"] != "1" || seen[f.RunID+"/both#1"] != "2" {
		t.Errorf("tasks of the fork: %v", seen)
	}
}

// TestForkSavesAsTheEngine forks a run whose state at the fork's step is larger than a message
// inline (48 outputs of 30 KiB, each under the inline bound): the fork's record is written as
// the engine writes its own, values moved out until it fits, byte for byte what the engine
// would save of that state, and an engine started afterwards takes it and finishes the run.
func TestForkSavesAsTheEngine(t *testing.T) {
	v := newEnv(t)
	const n, size = 48, 30 << 10
	if total := n * size; int64(total) < v.Box.MaxPayload() {
		t.Fatalf("the outputs' %d bytes fit in a message of %d: the test proves nothing", total, v.Box.MaxPayload())
	}
	wf := workflow.New("wide")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("part%d", i)
		wf.Task(ids[i], "part")
	}
	wf.Parallel("fan", ids...)
	wf.Task("last", "last")
	wf.Edge("fan", "last")
	_, bs := runtest.Bundles(t, wf)
	v.Worker("part").Serve(func(task *protocol.Task) *protocol.Event {
		return runtest.Completed(task, `"`+strings.Repeat("x", size)+`"`)
	})
	v.Worker("last").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `"done"`) })
	v.Start(bs, `null`, "wide-1")
	if rec := v.Wait("wide-1"); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("the original run %s: %+v", rec.Run.Status, rec.Run.Error)
	}

	v.stop() // no engine saves the fork's record after it
	f, err := v.Client.Fork(v.Ctx, "wide-1", client.ForkOptions{From: "last"})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := v.Box.JetStream().KeyValue(v.Ctx, v.Box.Names().RunsBucket())
	if err != nil {
		t.Fatal(err)
	}
	kve, err := runs.Get(v.Ctx, f.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(kve.Value())) > v.Box.MaxPayload() {
		t.Fatalf("the fork's record is %d bytes, more than a message", len(kve.Value()))
	}
	rec, err := runstore.DecodeRecord(kve)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := natsbox.OpenValues(v.Ctx, v.Box.JetStream(), v.Box.Names())
	if err != nil {
		t.Fatal(err)
	}
	values := wire.NewValues(objects, 0, 0)
	saver := &runstore.Saver{JS: v.Box.JetStream(), Names: v.Box.Names(), Runs: runs, Values: values, MaxPayload: int(v.Box.MaxPayload())}
	if err := runstore.InRun(v.Ctx, values, rec.Run); err != nil {
		t.Fatal(err)
	}
	want, err := saver.Encode(v.Ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	if string(kve.Value()) != string(want) {
		t.Errorf("the fork's record differs from what the engine saves of its state:\n got %.300s\nwant %.300s", kve.Value(), want)
	}

	v.eng, v.stop = v.startEngine()
	if done := v.Wait(f.RunID); done.Run.Status != protocol.RunCompleted || string(done.Run.Output) != `"done"` {
		t.Errorf("the fork %s, output %s", done.Run.Status, done.Run.Output)
	}
}
