package worker

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// resumed is task dispatched again, for the resume-th time, after humans decided its calls.
func resumed(tk *protocol.Task, resume int, decisions ...protocol.Decision) *protocol.Task {
	r := *tk
	r.Resume, r.Decisions = resume, decisions
	r.MsgID = tk.MsgID + "/r" + strconv.Itoa(resume)
	return &r
}

var refundCall = protocol.PendingCall{CallID: "call_1", Tool: "refund", Arguments: json.RawMessage(`{"order_id":"O-1"}`)}

func TestWait(t *testing.T) {
	e := newEnv(t)
	errs := make(chan error, 4)
	e.start(Options{}, map[string]Handler{"agent": func(tc TaskContext) error {
		switch tc.RunID() {
		case "empty":
			err := tc.Wait(nil)
			errs <- err
			if err == nil {
				return nil
			}
			return tc.Complete("answered after the refused Wait") // nothing was answered
		case "huge":
			big := protocol.PendingCall{CallID: "c", Tool: "t", Arguments: json.RawMessage(`"` + strings.Repeat("x", int(e.box.MaxPayload())) + `"`)}
			err := tc.Wait([]protocol.PendingCall{big})
			errs <- err
			return err
		}
		err := tc.Wait([]protocol.PendingCall{refundCall})
		errs <- errors.Join(err, tc.Complete("late"))
		return nil
	}})

	tk := task("r", "s", "agent", 2, 1)
	e.publish(tk)
	err := recv(t, errs)
	if !isAnswered(err) || strings.Contains(err.Error(), "Wait") {
		t.Fatalf("Wait then Complete returned %v, want only the second to fail with ErrAnswered", err)
	}
	ev := e.event()
	wantEvent(t, ev, protocol.EvWaiting, tk)
	if len(ev.Pending) != 1 || ev.Pending[0].CallID != "call_1" || ev.Pending[0].Tool != "refund" || string(ev.Pending[0].Arguments) != `{"order_id":"O-1"}` {
		t.Errorf("pending %+v, want the refund call", ev.Pending)
	}
	if got, want := wire.EventMsgID(ev, ""), tk.MsgID+"/waiting"; got != want {
		t.Errorf("message id %q, want %q", got, want)
	}
	if how := e.waitSettled(tk.MsgID); how != string(protocol.EvWaiting) {
		t.Errorf("settled as %s", how)
	}

	empty := task("empty", "s", "agent", 1, 1)
	e.publish(empty)
	if err := recv(t, errs); err == nil || err.Error() != "worker: Wait of task empty/s/1/1/1: no pending call: a task waits for decisions on one call or more" {
		t.Errorf("Wait(nil) returned %v", err)
	}
	ev = e.event()
	wantEvent(t, ev, protocol.EvCompleted, empty)

	// A call's arguments larger than a message travel by reference (wire.Values).
	huge := task("huge", "s", "agent", 1, 1)
	e.publish(huge)
	if err := recv(t, errs); err != nil {
		t.Errorf("Wait with pending calls over the message limit returned %v", err)
	}
	ev = e.event()
	wantEvent(t, ev, protocol.EvWaiting, huge)
	if len(ev.Pending) != 1 || !wire.IsRef(ev.Pending[0].Arguments) {
		t.Fatalf("pending %.200v: want the arguments by reference", ev.Pending)
	}
	args, err := e.values(t).In(testCtx(t), "huge", ev.Pending[0].Arguments)
	if err != nil || len(args) != int(e.box.MaxPayload())+2 {
		t.Errorf("the arguments read back are %d bytes (%v), want %d", len(args), err, e.box.MaxPayload()+2)
	}
}

// The answers of a resumed task carry its Resume and have message ids of their own: the
// waiting answer of the task that paused and the answers of two resumes of the same iteration
// and attempt are all stored.
func TestResumedTaskAnswers(t *testing.T) {
	e := newEnv(t)
	e.start(Options{}, map[string]Handler{"agent": func(tc TaskContext) error {
		if tc.Task().Resume == 0 {
			return tc.Wait([]protocol.PendingCall{refundCall})
		}
		return tc.Complete(tc.Task().Decisions)
	}})
	tk := task("r", "s", "agent", 2, 1)
	tasks := []*protocol.Task{tk, resumed(tk, 1, protocol.Decision{CallID: "call_1", Approve: true}), resumed(tk, 2, protocol.Decision{CallID: "call_1"})}
	ids := map[string]bool{}
	for i, want := range tasks {
		e.publish(want)
		ev := e.event()
		typ := protocol.EvCompleted
		if i == 0 {
			typ = protocol.EvWaiting
		}
		wantEvent(t, ev, typ, want)
		if ev.Resume != want.Resume {
			t.Errorf("the answer to %s has resume %d, want %d", want.MsgID, ev.Resume, want.Resume)
		}
		id := wire.EventMsgID(ev, "")
		if want := want.MsgID + "/" + string(typ); id != want {
			t.Errorf("message id %q, want %q", id, want)
		}
		ids[id] = true
		if i > 0 {
			var got []protocol.Decision
			if err := json.Unmarshal(ev.Output, &got); err != nil || len(got) != 1 || got[0] != want.Decisions[0] {
				t.Errorf("the resumed handler saw decisions %s, want %+v", ev.Output, want.Decisions)
			}
		}
	}
	if n := e.streamMsgs(natsbox.EventsStream); n != 3 || len(ids) != 3 {
		t.Fatalf("%d events stored under %d ids, want 3 and 3", n, len(ids))
	}
}

// A resumed task goes on from its iteration's writes, keeps (never purges) what an interrupted
// delivery of itself wrote, numbers its writes after them, and the next iteration folds them
// all in order.
func TestResumedTaskCheckpoints(t *testing.T) {
	e := newEnv(t)
	loaded := make(chan string, 8)
	wrote := make(chan struct{}, 1)
	load := func(tc TaskContext) error {
		cp, err := tc.LoadCheckpoint()
		if err != nil {
			return err
		}
		loaded <- string(cp)
		return nil
	}
	// The first worker: iteration 1 appends 1; iteration 2 appends 2 and waits; the resumed
	// iteration 2 appends 3 and is interrupted before answering (the worker stops).
	first := e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		if err := load(tc); err != nil {
			return tc.FailPermanent(err)
		}
		switch {
		case tc.Iteration() == 1:
			_ = tc.AppendCheckpoint(1)
			return tc.Continue(nil)
		case tc.Task().Resume == 0:
			_ = tc.AppendCheckpoint(2)
			return tc.Wait([]protocol.PendingCall{refundCall})
		}
		_ = tc.AppendCheckpoint(3)
		wrote <- struct{}{}
		<-tc.Done()
		return tc.Err()
	}})
	tk1 := task("r", "loop", "h", 1, 1)
	e.publish(tk1)
	wantEvent(t, e.event(), protocol.EvContinued, tk1)
	tk2 := task("r", "loop", "h", 2, 1)
	e.publish(tk2)
	wantEvent(t, e.event(), protocol.EvWaiting, tk2)
	r1 := resumed(tk2, 1, protocol.Decision{CallID: "call_1", Approve: true})
	e.publish(r1)
	recv(t, wrote)
	first.stop()
	if how := e.waitSettled(r1.MsgID); how != "stopped" {
		t.Fatalf("the interrupted resumed task was settled as %s", how)
	}

	// The second worker gets the resumed task again (delivered twice): it finds the
	// interrupted delivery's write, appends 4 and continues; iteration 3 reads everything.
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		if err := load(tc); err != nil {
			return tc.FailPermanent(err)
		}
		if tc.Iteration() == 2 {
			_ = tc.AppendCheckpoint(4)
			return tc.Continue(nil)
		}
		cp, _ := tc.LoadCheckpoint()
		return tc.Complete(cp)
	}})
	ev := e.event()
	wantEvent(t, ev, protocol.EvContinued, r1)
	tk3 := task("r", "loop", "h", 3, 1)
	e.publish(tk3)
	ev = e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk3)
	jsonEq(t, ev.Output, `[1,2,3,4]`)
	want := []string{``, `[1]`, `[1,2]`, `[1,2,3]`, `[1,2,3,4]`}
	for i, w := range want {
		if got := recv(t, loaded); got != w {
			t.Errorf("load %d returned %q, want %q", i+1, got, w)
		}
	}
	scope := wire.CheckpointScope("r", "loop", -1, 1)
	vals := e.checkpointValues(scope)
	for key, value := range map[string]string{
		scope + ".1.0": `{"append":[1]}`, scope + ".2.0": `{"append":[2]}`,
		scope + ".2.r1.0": `{"append":[3]}`, scope + ".2.r1.1": `{"append":[4]}`,
	} {
		if string(vals[key]) != value {
			t.Errorf("key %s holds %s, want %s", key, vals[key], value)
		}
	}
	if len(vals) != 4 {
		t.Errorf("keys %q, want 4", vals)
	}
}

// A first task of an iteration delivered again purges its own iteration's writes, never those
// of a resume of it.
func TestRedeliveryKeepsResumedWrites(t *testing.T) {
	e := newEnv(t)
	scope := wire.CheckpointScope("r", "loop", -1, 1)
	kv, err := e.js.KeyValue(testCtx(t), natsbox.CheckpointsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{
		scope + ".1.0": `{"set":"one"}`, scope + ".2.0": `{"set":"paused"}`, scope + ".2.r1.0": `{"set":"acted"}`,
	} {
		if _, err := kv.Put(testCtx(t), key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		cp, err := tc.LoadCheckpoint()
		if err != nil {
			return tc.FailPermanent(err)
		}
		return tc.Complete(cp)
	}})
	tk := task("r", "loop", "h", 2, 2) // a retry: it may follow an attempt that wrote
	e.publish(tk)
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	jsonEq(t, ev.Output, `"one"`)
	vals := e.checkpointValues(scope)
	if vals[scope+".2.0"] != nil || string(vals[scope+".2.r1.0"]) != `{"set":"acted"}` || len(vals) != 2 {
		t.Errorf("keys after the retry %q: want iteration 2's first write purged and its resumed write kept", vals)
	}
}
