package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

func TestTaskWorkflow(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("greet")
	wf.Task("hello", "hello")
	wf.Task("shout", "shout")
	wf.Edge("hello", "shout")
	_, bs := runtest.Bundles(t, wf)
	v.Worker("hello").Serve(func(task *protocol.Task) *protocol.Event {
		var in struct{ Name string }
		_ = json.Unmarshal(task.Input, &in)
		ev := runtest.Completed(task, strconv.Quote("hello, "+in.Name))
		ev.Usage = &protocol.Usage{ModelCalls: 1, InputTokens: 10}
		return ev
	})
	v.Worker("shout").Serve(func(task *protocol.Task) *protocol.Event {
		var s string
		_ = json.Unmarshal(task.Input, &s)
		return runtest.Completed(task, strconv.Quote(strings.ToUpper(s)))
	})
	id := v.Start(bs, `{"name":"Ada"}`, "greet-1")
	want := `{"run_id":"greet-1","status":"completed","output":"HELLO, ADA","error":null,"steps":[` +
		`{"id":"hello","status":"completed","stop_reason":"","iterations":1,"label":"","attempts":1,"usage":{"model_calls":1,"input_tokens":10}},` +
		`{"id":"shout","status":"completed","stop_reason":"","iterations":1,"label":"","attempts":1}],"path":["hello","shout"]}`
	if got := v.ResultJSON(id); got != want {
		t.Fatalf("result:\n got %s\nwant %s", got, want)
	}
}

func TestAgentLoop(t *testing.T) {
	t.Run("completes after N iterations", func(t *testing.T) {
		v := newEnv(t)
		v.ServeThink(4)
		id := v.Start(runtest.LoopWorkflow(t, 10), `{"n":0}`, "")
		want := `{"run_id":"` + id + `","status":"completed","output":{"done":true},"error":null,"steps":[` +
			`{"id":"think","status":"completed","stop_reason":"completed","iterations":4,"label":"completed","attempts":4}],"path":["think"]}`
		if got := v.ResultJSON(id); got != want {
			t.Fatalf("result:\n got %s\nwant %s", got, want)
		}
	})
	t.Run("stops at max_iterations", func(t *testing.T) {
		v := newEnv(t)
		var inputs []string
		v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event {
			inputs = append(inputs, string(task.Input))
			return runtest.Continued(task, fmt.Sprintf(`{"n":%d}`, task.Iteration))
		})
		id := v.Start(runtest.LoopWorkflow(t, 3), `{"n":0}`, "")
		want := `{"run_id":"` + id + `","status":"completed","output":{"n":3},"error":null,"steps":[` +
			`{"id":"think","status":"completed","stop_reason":"max_iterations","stop_detail":"the step reached its max_iterations (3)","iterations":3,"label":"max_iterations","attempts":3}],"path":["think"]}`
		if got := v.ResultJSON(id); got != want {
			t.Fatalf("result:\n got %s\nwant %s", got, want)
		}
		if got := strings.Join(inputs, " "); got != `{"n":0} {"n":1} {"n":2}` {
			t.Fatalf("iteration inputs %s: want each iteration's input to be the previous output", got)
		}
	})
}

// TestKeeperRenewed runs a loop of 300 iterations: the engine renews the keeper message of
// the task stream as it publishes tasks (natsbox.Keeper), so the one keeper left comes after
// most of the tasks.
func TestKeeperRenewed(t *testing.T) {
	const iterations = 300
	v := newEnv(t)
	v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event {
		return runtest.Continued(task, "null")
	})
	v.Wait(v.Start(runtest.LoopWorkflow(t, iterations), "", ""))
	s, err := v.Box.JetStream().Stream(v.Ctx, natsbox.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(v.Ctx, jetstream.WithSubjectFilter(natsbox.KeeperSubject))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[natsbox.KeeperSubject]; n != 1 {
		t.Fatalf("%d keeper messages in %s, want 1", n, natsbox.TasksStream)
	}
	keeper, err := s.GetLastMsgForSubject(v.Ctx, natsbox.KeeperSubject)
	if err != nil {
		t.Fatal(err)
	}
	// Renewed every 128 tasks: the last renewal follows the 256th task.
	if keeper.Sequence <= 256 {
		t.Errorf("the keeper message has sequence %d, of %d in the stream: want it renewed after most of the %d tasks",
			keeper.Sequence, info.State.LastSeq, iterations)
	}
}

func TestRetryThenSuccess(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("flaky")
	wf.Task("call", "flaky").WithRetry(workflow.Retry{MaxAttempts: 3, Backoff: "fixed", InitialDelay: 10e6})
	_, bs := runtest.Bundles(t, wf)
	v.Worker("flaky").Serve(func(task *protocol.Task) *protocol.Event {
		if task.Attempt == 1 {
			return runtest.Failed(task, "connection reset", false)
		}
		return runtest.Completed(task, `"ok"`)
	})
	id := v.Start(bs, "", "")
	want := `{"run_id":"` + id + `","status":"completed","output":"ok","error":null,"steps":[` +
		`{"id":"call","status":"completed","stop_reason":"","iterations":1,"label":"","attempts":2}],"path":["call"]}`
	if got := v.ResultJSON(id); got != want {
		t.Fatalf("result:\n got %s\nwant %s", got, want)
	}
}

func TestStepFailsForGood(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("broken")
	wf.Task("burn", "broken").WithRetry(workflow.Retry{MaxAttempts: 2, Backoff: "fixed", InitialDelay: 10e6})
	_, bs := runtest.Bundles(t, wf)
	v.Worker("broken").Serve(func(task *protocol.Task) *protocol.Event {
		return runtest.Failed(task, "disk on\nfire", false)
	})
	id := v.Start(bs, `{"x":1}`, "")
	rec := v.Wait(id)
	res := client.NewResult(nil, rec)
	if res.Status != protocol.RunFailed || res.Error == nil || res.Error.Code != protocol.CodeStepFailed || res.Error.Step != "burn" {
		t.Fatalf("result %+v, error %+v: want failed with E_STEP_FAILED on burn", res, res.Error)
	}
	if s := res.Steps[0]; s.Attempts != 2 || s.Status != protocol.StepFailed || s.Label != "error" || s.Error != "disk on\nfire" {
		t.Fatalf("step %+v", s)
	}
	s, err := v.Box.JetStream().Stream(v.Ctx, natsbox.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(v.Ctx, "reins.dlq.broken")
	if err != nil {
		t.Fatalf("no dead task in %s: %v", natsbox.DLQStream, err)
	}
	if got := m.Header.Get(ReasonHeader); got != "disk on fire" {
		t.Errorf("%s = %q, want the last error on one line", ReasonHeader, got)
	}
	task, err := wire.DecodeTask(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if task.RunID != id || task.Attempt != 2 || task.MsgID != id+"/burn/1/1/2" || m.Header.Get(jetstream.MsgIDHeader) != task.MsgID {
		t.Errorf("dead task %+v, msg id %q", task, m.Header.Get(jetstream.MsgIDHeader))
	}
}

func TestParallelAndMap(t *testing.T) {
	v := newEnv(t)
	bs := v.ServeFan()
	id := v.Start(bs, `{"items":[1,2,3]}`, "")
	rec := v.Wait(id)
	res := client.NewResult(bs.All[bs.Root].Definition, rec)
	if res.Status != protocol.RunCompleted || string(res.Output) != "[2,4,6]" {
		t.Fatalf("status %s, output %s", res.Status, res.Output)
	}
	if out := string(rec.Run.Steps["both"].Output); out != `["L","R"]` {
		t.Errorf("parallel output %s", out)
	}
	var ids []string
	for _, s := range res.Steps {
		ids = append(ids, s.ID)
	}
	if got := strings.Join(ids, " "); got != "both both#0 both#1 each each#0 each#1 each#2" {
		t.Errorf("steps %s: want definition order, children after their parent", got)
	}
}

func TestCallStep(t *testing.T) {
	v := newEnv(t)
	bs := runtest.LoadBundles(t, "testdata/parent.toml")
	v.Worker("prep").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `{"topic":"nats"}`) })
	v.Worker("child-work").Serve(func(task *protocol.Task) *protocol.Event {
		if string(task.Input) != `{"topic":"nats"}` {
			t.Errorf("the sub-run's task got %s, want the call step's input", task.Input)
		}
		return runtest.Completed(task, `{"summary":"done"}`)
	})
	id := v.Start(bs, `{}`, "call-1")
	rec := v.Wait(id)
	if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != `{"summary":"done"}` {
		t.Fatalf("status %s, output %s, error %v", rec.Run.Status, rec.Run.Output, rec.Run.Error)
	}
	child, err := v.Client.Get(v.Ctx, "call-1/sub/1")
	if err != nil {
		t.Fatal(err)
	}
	if child.Run.Status != protocol.RunCompleted || child.Parent == nil ||
		*child.Parent != (protocol.Parent{RunID: "call-1", Step: "sub", Item: -1, Activation: 1}) {
		t.Fatalf("sub-run %+v, parent %+v", child.Run, child.Parent)
	}
	if child.Run.Hash != bs.All[bs.Root].Workflows["child.toml"] {
		t.Errorf("the sub-run runs %s, not the child workflow", child.Run.Hash)
	}
	list, err := v.Client.List(v.Ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Run.ID != "call-1" {
		t.Fatalf("List: %d runs, want only the top-level run", len(list))
	}
}

func TestCancel(t *testing.T) {
	v := newEnv(t)
	bs := runtest.LoadBundles(t, "testdata/parent.toml")
	v.Worker("prep").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `1`) })
	work := v.Worker("child-work") // takes the sub-run's task and never answers

	cancels, err := v.Box.Conn().SubscribeSync(natsbox.CancelSubjects)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cancels.Unsubscribe() }()

	id := v.Start(bs, `{}`, "cancel-1")
	task := work.Next()
	if task.RunID != "cancel-1/sub/1" {
		t.Fatalf("task of run %s", task.RunID)
	}
	if err := v.Client.Cancel(v.Ctx, id, "the user changed their mind"); err != nil {
		t.Fatal(err)
	}
	rec := v.Wait(id)
	if rec.Run.Status != protocol.RunCancelled || rec.Run.Error.Code != protocol.CodeCancelled || rec.Run.Error.Message != "the user changed their mind" {
		t.Fatalf("status %s, error %+v", rec.Run.Status, rec.Run.Error)
	}
	// The sub-run in flight is cancelled too, and workers hear of both ends.
	child := v.Wait("cancel-1/sub/1")
	if child.Run.Status != protocol.RunCancelled {
		t.Fatalf("sub-run %s: want cancelled with its parent", child.Run.Status)
	}
	heard := map[string]bool{}
	for len(heard) < 2 {
		m, err := cancels.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("cancel announcements %v: %v", heard, err)
		}
		if m.Subject != "reins.cancel."+string(m.Data) {
			t.Errorf("announcement %q on %s", m.Data, m.Subject)
		}
		heard[string(m.Data)] = true
	}
	if !heard["cancel-1"] || !heard["cancel-1/sub/1"] {
		t.Fatalf("announced %v", heard)
	}
	if err := v.Client.Cancel(v.Ctx, id, ""); !errors.Is(err, client.ErrFinished) {
		t.Fatalf("Cancel of a finished run: %v, want ErrFinished", err)
	}
	if err := v.Client.Cancel(v.Ctx, "nope", ""); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Cancel of no run: %v, want ErrNotFound", err)
	}
}

func TestDuplicateEvents(t *testing.T) {
	v, obs := newObservedEnv(t)
	w := v.Worker("think")
	id := v.Start(runtest.LoopWorkflow(t, 5), `0`, "dup-1")
	t1 := w.Next()
	ans := runtest.Continued(t1, `1`)
	v.Publish(ans, "")
	v.Publish(ans, "")                 // the same message id: JetStream stores it once
	v.Publish(ans, "another-id-dup-1") // stored, decided, changes nothing
	obs.await(t, v.Ctx, ack, func(ev *protocol.Event) bool { return ev.RunID == id && ev.Iteration == 1 })
	after := v.WaitFor(id, func(r *client.Record) bool { return r.Run.Steps["think"].Iteration == 2 })
	obs.await(t, v.Ctx, ack, func(ev *protocol.Event) bool { return ev.RunID == id && ev.Iteration == 1 })
	t2 := w.Next()
	if t2.Iteration != 2 {
		t.Fatalf("task of iteration %d, want 2", t2.Iteration)
	}
	if rec, _ := v.Client.Get(v.Ctx, id); rec.Revision != after.Revision {
		t.Fatalf("the duplicate changed the record (revision %d → %d)", after.Revision, rec.Revision)
	}
	v.Publish(runtest.Completed(t2, `2`), "")
	res := client.NewResult(nil, v.Wait(id))
	if res.Steps[0].Iterations != 2 || res.Steps[0].Attempts != 2 || string(res.Output) != "2" {
		t.Fatalf("result %+v", res.Steps[0])
	}
	evs, err := v.Client.Events(v.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, string(ev.Type))
	}
	if got := strings.Join(types, " "); got != "start continued continued completed" {
		t.Fatalf("stored events: %s", got)
	}
}

func TestAnswerAheadOfState(t *testing.T) {
	v, obs := newObservedEnv(t)
	w := v.Worker("think")
	id := v.Start(runtest.LoopWorkflow(t, 5), `0`, "ahead-1")
	t1 := w.Next()
	// The answer to iteration 2 comes before iteration 1 is even answered (as when an engine
	// published iteration 2's task, then died before saving): it is held back, not lost.
	t2 := *t1
	t2.Iteration, t2.MsgID = 2, id+"/think/1/2/1"
	v.Publish(runtest.Continued(&t2, `"from iteration 2"`), "")
	obs.await(t, v.Ctx, hold, func(ev *protocol.Event) bool { return ev.Iteration == 2 })
	v.Publish(runtest.Continued(t1, `"from iteration 1"`), "")
	t3 := w.Next()
	if t3.Iteration != 2 {
		t.Fatalf("task of iteration %d, want 2", t3.Iteration)
	}
	t3 = w.Next()
	if t3.Iteration != 3 || string(t3.Input) != `"from iteration 2"` {
		t.Fatalf("task of iteration %d with input %s: want iteration 3 fed by the held answer", t3.Iteration, t3.Input)
	}
	v.Publish(runtest.Completed(t3, `"end"`), "")
	if rec := v.Wait(id); rec.Run.Steps["think"].Iteration != 3 || rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s at iteration %d", rec.Run.Status, rec.Run.Steps["think"].Iteration)
	}
}

func TestDeadline(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("slow").Deadline(300 * time.Millisecond)
	wf.AgentLoop("think", "nobody").WithMaxIterations(5)
	_, bs := runtest.Bundles(t, wf)
	id := v.Start(bs, "", "")
	rec := v.Wait(id)
	if rec.Run.Status != protocol.RunTimedOut || rec.Run.Error.Code != protocol.CodeDeadline {
		t.Fatalf("status %s, error %+v: want timed_out by the deadline", rec.Run.Status, rec.Run.Error)
	}
}

func TestRestart(t *testing.T) {
	v := newEnv(t)
	w := v.Worker("think")
	slow := workflow.New("slow").Deadline(3 * time.Second)
	slow.Task("wait", "nobody")
	_, slowBS := runtest.Bundles(t, slow)

	id := v.Start(runtest.LoopWorkflow(t, 5), `0`, "restart-1")
	timed := v.Start(slowBS, "", "restart-timed")
	t1 := w.Next()
	v.Publish(runtest.Continued(t1, `1`), "")
	t2 := w.Next()
	v.stop() // the first engine stops with the run in flight

	v.Publish(runtest.Continued(t2, `2`), "")
	eng2, _ := v.startEngine(nil)
	if rec, err := v.Client.Get(v.Ctx, timed); err == nil && !rec.Finished() && armed(eng2, timed) == 0 {
		t.Error("the restarted engine did not arm the deadline of the running run")
	}
	t3 := w.Next()
	if t3.Iteration != 3 || string(t3.Input) != "2" {
		t.Fatalf("task of iteration %d with input %s", t3.Iteration, t3.Input)
	}
	v.Publish(runtest.Completed(t3, `3`), "")
	if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["think"].Iteration != 3 {
		t.Fatalf("run %s at iteration %d", rec.Run.Status, rec.Run.Steps["think"].Iteration)
	}
	if rec := v.Wait(timed); rec.Run.Status != protocol.RunTimedOut {
		t.Fatalf("run %s: %s, want timed_out by the timer the new engine armed", timed, rec.Run.Status)
	}
}

func TestMalformedEvents(t *testing.T) {
	v, obs := newObservedEnv(t)
	js := v.Box.JetStream()
	subj, err := natsbox.EventSubject("junk")
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`not json`, `{"run_id":"junk"}`, `{"run_id":"other","type":"tick","item":-1}`} {
		if _, err := js.Publish(v.Ctx, subj, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		obs.await(t, v.Ctx, drop, nil)
	}
	// The engine keeps going.
	v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `"fine"`) })
	id := v.Start(runtest.LoopWorkflow(t, 2), "", "")
	if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s", rec.Run.Status)
	}
	// The client leaves out what is not an event.
	evs, err := v.Client.Events(v.Ctx, "junk")
	if err != nil || len(evs) != 0 {
		t.Fatalf("Events of junk: %v, %v", evs, err)
	}
}

func TestCompareAndSetConflict(t *testing.T) {
	v := newEnv(t)
	w := v.Worker("think")
	id := v.Start(runtest.LoopWorkflow(t, 5), `0`, "cas-1")
	t1 := w.Next()
	rec := v.WaitFor(id, func(*client.Record) bool { return true })
	// Someone else writes the record: the engine's cached revision is stale.
	kv, err := v.Box.JetStream().KeyValue(v.Ctx, natsbox.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(rec)
	if _, err := kv.Put(v.Ctx, id, data); err != nil {
		t.Fatal(err)
	}
	v.Publish(runtest.Continued(t1, `1`), "")
	t2 := w.Next()
	v.Publish(runtest.Completed(t2, `2`), "")
	if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["think"].Iteration != 2 {
		t.Fatalf("run %s at iteration %d", rec.Run.Status, rec.Run.Steps["think"].Iteration)
	}
	if v.eng.stats.conflicts.Load() == 0 {
		t.Fatal("no compare-and-set conflict was seen")
	}
}

func TestUndeliverableTask(t *testing.T) {
	t.Run("a handler that cannot name a subject", func(t *testing.T) {
		v := newEnv(t)
		wf := workflow.New("long")
		// The validator lets it through; natsbox.TaskSubject refuses a part longer than a token.
		wf.Task("read", "orders."+strings.Repeat("x", natsbox.MaxTokenLen+1))
		_, bs := runtest.Bundles(t, wf)
		rec := v.Wait(v.Start(bs, "", ""))
		if rec.Run.Status != protocol.RunFailed || !strings.Contains(rec.Run.Error.Message, "the task for step read cannot be sent") {
			t.Fatalf("status %s, error %+v", rec.Run.Status, rec.Run.Error)
		}
	})
	t.Run("a task larger than the max payload", func(t *testing.T) {
		v := newEnv(t)
		w := v.Worker("big")
		wf := workflow.New("big")
		wf.Task("load", "big")
		_, bs := runtest.Bundles(t, wf)
		id := v.Start(bs, `{}`, "big-1")
		task := w.Next()
		rec := v.WaitFor(id, func(*client.Record) bool { return true })
		// Carry out the dispatch of the same task with a prompt too large for a message (values
		// go by reference; rendered texts travel inline).
		task.Prompt = strings.Repeat("x", int(v.Box.MaxPayload()))
		ent := &entry{rec: rec, bundle: bs.All[bs.Root]}
		if err := v.eng.carryOut(v.Ctx, time.Now(), ent, []engine.Command{{Type: engine.CmdDispatch, Task: task}}); err != nil {
			t.Fatal(err)
		}
		rec = v.Wait(id)
		msg := rec.Run.Steps["load"].Error
		var n, limit int
		if _, err := fmt.Sscanf(msg, "the task for step load is %d bytes, more than the message limit of %d bytes", &n, &limit); err != nil ||
			limit != int(v.Box.MaxPayload()) || n <= limit || rec.Run.Status != protocol.RunFailed {
			t.Fatalf("status %s, step error %q", rec.Run.Status, msg)
		}
		s, _ := v.Box.JetStream().Stream(v.Ctx, natsbox.DLQStream)
		m, err := s.GetLastMsgForSubject(v.Ctx, "reins.dlq.big")
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(ReasonHeader) != msg {
			t.Fatalf("dead task headers %v", m.Header)
		}
	})
	t.Run("a dead task too large to store whole", func(t *testing.T) {
		e := &Engine{maxPayload: 1000}
		task := &protocol.Task{RunID: "r", Step: "s", Item: -1, Handler: "h", MsgID: "r/s/1/1/1", Activation: 1, Iteration: 1, Attempt: 1,
			Input: json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`), Prompt: "p"}
		m := e.deadLetterMsg(task, "too\r\nbig")
		if outbox.MsgSize(m) > 1000 || m.Header.Get(OmittedHeader) == "" || m.Header.Get(ReasonHeader) != "too big" {
			t.Fatalf("%d bytes, headers %v", outbox.MsgSize(m), m.Header)
		}
		got, err := wire.DecodeTask(m.Data)
		if err != nil || string(got.Input) != "null" || got.Prompt != "" || got.MsgID != task.MsgID {
			t.Fatalf("dead task %+v, %v", got, err)
		}
	})
}

func TestSubRunCannotStart(t *testing.T) {
	v := newEnv(t)
	bs := runtest.LoadBundles(t, "testdata/parent.toml")
	prep := v.Worker("prep")
	id := v.Start(bs, `{}`, "nostart-1")
	task := prep.Next()
	// The sub-workflow's bundle disappears before the sub-run starts.
	kv, err := v.Box.JetStream().KeyValue(v.Ctx, natsbox.WorkflowsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(v.Ctx, bs.All[bs.Root].Workflows["child.toml"]); err != nil {
		t.Fatal(err)
	}
	v.Publish(runtest.Completed(task, `1`), "")
	rec := v.Wait(id)
	if rec.Run.Status != protocol.RunFailed || !strings.Contains(rec.Run.Error.Message, "sub-run nostart-1/sub/1 failed: the sub-run could not start: its workflow") {
		t.Fatalf("status %s, error %+v", rec.Run.Status, rec.Run.Error)
	}
}

// An event of a finished run delivered again (after a crash between the save and the end's
// notifications, or a failure to publish them) sends the notifications again.
func TestFinishedRunNotifiesAgain(t *testing.T) {
	v := newEnv(t)
	bs := runtest.LoadBundles(t, "testdata/parent.toml")
	childHash := bs.All[bs.Root].Workflows["child.toml"]
	def := *bs.All[childHash].Definition
	def.Normalize()
	runs, err := v.Box.JetStream().KeyValue(v.Ctx, natsbox.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	wfs, err := v.Box.JetStream().KeyValue(v.Ctx, natsbox.WorkflowsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := runstore.PutBundles(v.Ctx, wfs, bs); err != nil {
		t.Fatal(err)
	}
	const id = "p-1/sub/1"
	now := time.Now().UTC()
	run, _, err := engine.Start(&def, id, json.RawMessage(`1`), now)
	if err != nil {
		t.Fatal(err)
	}
	if run, _, err = engine.Decide(&def, run, protocol.Event{Type: protocol.EvCancel, At: now, Item: -1}); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(&client.Record{Run: run, Parent: &protocol.Parent{RunID: "p-1", Step: "sub", Item: -1, Activation: 1}})
	if _, err := runs.Create(v.Ctx, id, data); err != nil {
		t.Fatal(err)
	}
	tick := &protocol.Event{RunID: id, Type: protocol.EvTick, At: now, Item: -1}
	sh := &shard{cache: newRunCache(nil), single: map[string]bool{}}
	if out, err := v.eng.process(v.Ctx, sh, tick, nil, 1); out != ack || err != nil {
		t.Fatalf("first delivery: %v, %v", out, err)
	}
	if _, err := v.Client.Events(v.Ctx, "p-1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a first delivery notified the parent: %v", err)
	}
	if out, err := v.eng.process(v.Ctx, sh, tick, nil, 2); out != ack || err != nil {
		t.Fatalf("second delivery: %v, %v", out, err)
	}
	evs, err := v.Client.Events(v.Ctx, "p-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Type != protocol.EvChildFinished || evs[0].Status != protocol.RunCancelled || evs[0].Step != "sub" || evs[0].Activation != 1 {
		t.Fatalf("events of the parent: %+v", evs)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a Box: no error")
	}
	v := newEnv(t)
	if _, err := New(Config{Conn: (*conn.Conn)(v.Box), AckWait: -time.Second}); err == nil {
		t.Error("New with a negative AckWait: no error")
	}
	if err := v.eng.Run(v.Ctx); err == nil {
		t.Error("a second Run of the same engine: no error")
	}
}

// The engine keeps at most CachedRuns runs decoded: waiting runs beyond it are let go (what
// waited for a save saved first) and read back from the bucket when their decision comes, and
// every run ends as it would have.
func TestCachedRunsBound(t *testing.T) {
	v := newEnv(t)
	v.stop()
	const shards, perShard, runs = 2, 1, 6
	// The bound holds between events: a shard caches the run it decides, then trims. A run is
	// seen waiting before its shard trimmed, so the test reads each shard's size after its trims.
	var most atomic.Int64
	v.eng, v.stop = v.startEngine(func(e *Engine) {
		e.shards, e.cachedPerShard = shards, perShard
		e.trimmed = func(sh *shard) {
			for n := int64(sh.cache.len()); ; {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
		}
	})
	wf := workflow.New("gate")
	wf.Approval("ask", "Ship?")
	wf.Terminate("end")
	wf.Edge("ask", "end").When("approved")
	_, bs := runtest.Bundles(t, wf)
	var ids []string
	for i := range runs {
		id := v.Start(bs, "", fmt.Sprint("gate-", i))
		v.WaitFor(id, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
		ids = append(ids, id)
	}
	if n := most.Load(); n > perShard {
		t.Errorf("a shard cached %d runs after its trim, want at most %d", n, perShard)
	}
	if v.eng.stats.evicted.Load() == 0 {
		t.Error("no run was let go: the bound was not reached")
	}
	for _, id := range ids {
		if _, err := v.Client.Decide(v.Ctx, id, "ask", true, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
			t.Errorf("run %s ended %s, want completed", id, rec.Run.Status)
		}
	}
	v.stop() // the shards are done: a run leaves the cache right after its last save
	if n := v.eng.stats.cached.Load(); n != 0 {
		t.Errorf("%d runs cached after every run ended, want 0", n)
	}
}
