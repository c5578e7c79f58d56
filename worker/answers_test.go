package worker

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

func TestAnswers(t *testing.T) {
	usage := protocol.Usage{ModelCalls: 1, InputTokens: 10, CostUSD: 0.5}
	cases := []struct {
		name    string
		h       Handler
		typ     protocol.EventType
		output  string
		label   string
		stop    string
		errText string
		perm    bool
		usage   bool
	}{
		{name: "complete", h: func(tc TaskContext) error { return tc.Complete(map[string]int{"x": 1}) },
			typ: protocol.EvCompleted, output: `{"x":1}`},
		{name: "complete_with", h: func(tc TaskContext) error {
			tc.AddUsage(usage)
			return tc.CompleteWith("done", Outcome{Label: "ok", StopReason: "goal"})
		}, typ: protocol.EvCompleted, output: `"done"`, label: "ok", stop: "goal", usage: true},
		{name: "raw_output", h: func(tc TaskContext) error { return tc.Complete(tc.Input()) },
			typ: protocol.EvCompleted, output: `{"n":1}`},
		{name: "continue", h: func(tc TaskContext) error { return tc.Continue([]int{1}) },
			typ: protocol.EvContinued, output: `[1]`},
		{name: "fail", h: func(tc TaskContext) error { return tc.Fail(errors.New("flaky")) },
			typ: protocol.EvFailed, errText: "flaky"},
		{name: "fail_permanent", h: func(tc TaskContext) error {
			tc.AddUsage(usage)
			return tc.FailPermanent(errors.New("bad input"))
		}, typ: protocol.EvFailed, errText: "bad input", perm: true, usage: true},
		{name: "return_error", h: func(tc TaskContext) error { return errors.New("returned") },
			typ: protocol.EvFailed, errText: "returned"},
		{name: "return_nil", h: func(tc TaskContext) error { return nil },
			typ: protocol.EvCompleted, output: `null`},
		{name: "panic", h: func(tc TaskContext) error { panic("boom") },
			typ: protocol.EvFailed, errText: "handler h panicked: boom"},
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	e := newEnv(t)
	// One handler dispatching on the run id keeps one worker for every case.
	byRun := map[string]Handler{}
	for _, c := range cases {
		byRun[c.name] = c.h
	}
	e.start(Options{Now: func() time.Time { return at }}, map[string]Handler{
		"h": func(tc TaskContext) error { return byRun[tc.RunID()](tc) },
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := task(c.name, "s", "h", 1, 1)
			e.publish(tk)
			ev := e.event()
			wantEvent(t, ev, c.typ, tk)
			if c.output != "" && string(ev.Output) != c.output {
				t.Errorf("output = %s, want %s", ev.Output, c.output)
			}
			if ev.Label != c.label || ev.StopReason != c.stop || ev.Error != c.errText || ev.Permanent != c.perm {
				t.Errorf("label %q stop %q error %q permanent %v; want %q %q %q %v", ev.Label, ev.StopReason, ev.Error, ev.Permanent, c.label, c.stop, c.errText, c.perm)
			}
			if (ev.Usage != nil) != c.usage || c.usage && *ev.Usage != usage {
				t.Errorf("usage = %+v, want %+v (%v)", ev.Usage, usage, c.usage)
			}
			if !ev.At.Equal(at) {
				t.Errorf("at = %s, want the worker's clock %s", ev.At, at)
			}
			if c.typ == protocol.EvContinued && ev.Nonce == "" {
				t.Error("a continued event has no nonce")
			}
			if how := e.waitSettled(tk.MsgID); how != string(c.typ) {
				t.Errorf("settled as %s", how)
			}
		})
	}
	if n, ok := e.drained(natsbox.TasksStream); !ok {
		t.Errorf("%d tasks left in %s: every task is acknowledged once answered", n, natsbox.TasksStream)
	}
}

func TestOnlyTheFirstAnswerCounts(t *testing.T) {
	e := newEnv(t)
	errs := make(chan []error, 1)
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		first := tc.Complete("first")
		errs <- []error{first, tc.Complete("second"), tc.Continue(1), tc.Fail(errors.New("x")),
			tc.FailPermanent(nil), tc.CompleteWith(1, Outcome{Label: "l"}), tc.Checkpoint(1)}
		return errors.New("returned after answering")
	}})
	tk := task("r", "s", "h", 1, 1)
	e.publish(tk)
	got := recv(t, errs)
	if got[0] != nil {
		t.Fatalf("first Complete: %v", got[0])
	}
	for i, err := range got[1:] {
		if !isAnswered(err) {
			t.Errorf("answer %d after the first returned %v, want ErrAnswered", i+2, err)
		}
	}
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	if string(ev.Output) != `"first"` {
		t.Errorf("output = %s", ev.Output)
	}
	// A second task proves nothing else was published for the first.
	tk2 := task("r2", "s", "h", 1, 1)
	e.publish(tk2)
	recv(t, errs)
	wantEvent(t, e.event(), protocol.EvCompleted, tk2)
}

// A handler that runs an iteration again (its worker crashed after continuing, before
// acknowledging the task) must not be swallowed by the duplicate window: the nonce differs.
// The iteration runs again on another worker, as after a crash: the worker that answered does
// not run a copy that comes while the first delivery's handler has not returned
// (TestACopyOfATaskRunningHereIsNotRunAgain). The first handler is held past its answer until
// the end, so that the copy comes in that window every time.
func TestContinueTwiceIsStoredTwice(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // a frozen clock: the nonce is not only the time
	cfg := Options{Now: func() time.Time { return at }}
	hold := make(chan struct{})
	defer close(hold)
	crashed := e.start(cfg, map[string]Handler{"h": func(tc TaskContext) error {
		err := tc.Continue("next")
		<-hold
		return err
	}})
	tk := task("r", "s", "h", 3, 1)
	e.publishAs(tk, "")
	first := e.event()
	crashed.stop()
	e.start(cfg, map[string]Handler{"h": func(tc TaskContext) error { return tc.Continue("next") }})
	e.publishAs(tk, "") // the same task again, as a redelivery would bring it
	second := e.event()
	wantEvent(t, first, protocol.EvContinued, tk)
	wantEvent(t, second, protocol.EvContinued, tk)
	if first.Nonce == second.Nonce {
		t.Fatalf("both continued events have the nonce %q", first.Nonce)
	}
	if wire.EventMsgID(first, "") == wire.EventMsgID(second, "") {
		t.Fatal("both continued events have the same message id")
	}
	if n := e.streamMsgs(natsbox.EventsStream); n != 2 {
		t.Fatalf("%s holds %d events, want 2", natsbox.EventsStream, n)
	}
}

// A copy of a task that comes while the handler of a delivery of it still runs in this worker,
// even after that one answered, is handed back until the handler returned, then acknowledged
// without running: the first answer is the task's, and running the copy could discard the
// checkpoint writes the next iteration reads.
func TestACopyOfATaskRunningHereIsNotRunAgain(t *testing.T) {
	e := newEnv(t)
	hold := make(chan struct{})
	runs := make(chan struct{}, 2)
	e.start(Options{AckWait: 300 * time.Millisecond}, map[string]Handler{"h": func(tc TaskContext) error {
		runs <- struct{}{}
		err := tc.Continue("next")
		<-hold
		return err
	}})
	tk := task("r", "s", "h", 3, 1)
	e.publishAs(tk, "")
	wantEvent(t, e.event(), protocol.EvContinued, tk)
	e.publishAs(tk, "") // while the first handler, answered, has not returned
	// How the first delivery and the copy were settled; the first's may be reported last.
	seen := map[string]int{}
	for seen["running_here"] == 0 || seen[string(protocol.EvContinued)] == 0 {
		seen[e.waitSettled(tk.MsgID)]++
	}
	close(hold)
	how := e.waitSettled(tk.MsgID)
	for how == "running_here" { // handed back again: the first handler had not returned yet
		how = e.waitSettled(tk.MsgID)
	}
	if how != "answered_before" || len(runs) != 1 {
		t.Fatalf("the copy was settled as %s and the handler ran %d times: want answered_before, once", how, len(runs))
	}
	if n, ok := e.drained(natsbox.TasksStream); !ok {
		t.Errorf("%d tasks left in %s", n, natsbox.TasksStream)
	}
	if n := e.streamMsgs(natsbox.EventsStream); n != 1 {
		t.Fatalf("%s holds %d events, want 1", natsbox.EventsStream, n)
	}
}

func TestPanicFailsTheAttemptAndTheWorkerLivesOn(t *testing.T) {
	e := newEnv(t)
	e.start(Options{}, map[string]Handler{"p": func(tc TaskContext) error {
		if tc.RunID() == "boom" {
			var m map[string]int
			m["x"] = 1 // a runtime panic
		}
		return tc.Complete("fine")
	}})
	tk := task("boom", "s", "p", 1, 2)
	e.publish(tk)
	ev := e.event()
	wantEvent(t, ev, protocol.EvFailed, tk)
	if ev.Permanent || !strings.HasPrefix(ev.Error, "handler p panicked: ") || !strings.Contains(ev.Error, "nil map") {
		t.Fatalf("error %q (permanent %v), want a retryable failure naming the handler and the panic", ev.Error, ev.Permanent)
	}
	tk2 := task("after", "s", "p", 1, 1)
	e.publish(tk2)
	wantEvent(t, e.event(), protocol.EvCompleted, tk2)
}

func TestLargeAnswers(t *testing.T) {
	e := newEnv(t)
	limit := e.box.MaxPayload()
	errs := make(chan error, 1)
	huge := strings.Repeat("x", int(limit)+10)
	e.start(Options{}, map[string]Handler{"big": func(tc TaskContext) error {
		var err error
		switch tc.RunID() {
		case "huge": // larger than a message: by reference
			err = tc.Complete(huge)
		case "edge": // the output alone fits; with the rest of the event it would not
			err = tc.Continue(json.RawMessage(`"` + huge[:limit-100] + `"`))
		case "label": // texts travel inline: an answer too large for a message fails its step
			err = tc.CompleteWith(1, Outcome{Label: huge})
		case "chan":
			err = tc.Complete(make(chan int))
		}
		errs <- err
		return err
	}})
	for _, c := range []struct {
		run  string
		typ  protocol.EventType
		want string // the error, or the output read back
	}{
		{"huge", protocol.EvCompleted, `"` + huge + `"`},
		{"edge", protocol.EvContinued, `"` + huge[:limit-100] + `"`},
		{"label", protocol.EvFailed, "the answer to step s is "},
		{"chan", protocol.EvFailed, "the output of step s cannot be encoded as JSON"},
	} {
		tk := task(c.run, "s", "big", 1, 1)
		e.publish(tk)
		err := recv(t, errs)
		ev := e.event()
		wantEvent(t, ev, c.typ, tk)
		if c.typ != protocol.EvFailed {
			out, rerr := e.values(t).In(testCtx(t), c.run, ev.Output)
			if err != nil || !wire.IsRef(ev.Output) || rerr != nil || string(out) != c.want {
				t.Errorf("%s: returned %v; output %.80s read back as %d bytes (%v), want the %d bytes by reference", c.run, err, ev.Output, len(out), rerr, len(c.want))
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: the answering call returned %v, want %q", c.run, err, c.want)
		}
		if !ev.Permanent || !strings.HasPrefix(ev.Error, c.want) {
			t.Errorf("%s: error %q (permanent %v), want a permanent failure starting %q", c.run, ev.Error, ev.Permanent, c.want)
		}
		if c.run == "label" && !strings.HasSuffix(ev.Error, "more than the message limit of "+strconv.FormatInt(limit, 10)+" bytes") {
			t.Errorf("%s: error %q does not name the limit", c.run, ev.Error)
		}
	}
}

func TestMalformedTaskIsTerminated(t *testing.T) {
	e := newEnv(t)
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error { return tc.Complete(1) }})
	subject, _ := natsbox.TaskSubject("h")
	for _, body := range []string{"not json", `{"run_id":"r"}`} {
		if _, err := e.js.Publish(testCtx(t), subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	tk := task("r", "s", "h", 1, 1)
	e.publish(tk)
	wantEvent(t, e.event(), protocol.EvCompleted, tk)
	e.waitSettled(tk.MsgID)
	info := e.acked("h")
	if info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Fatalf("ack pending %d, redelivered %d: malformed tasks must be terminated", info.NumAckPending, info.NumRedelivered)
	}
	if n := e.streamMsgs(natsbox.EventsStream); n != 1 {
		t.Fatalf("%d events, want only the answer to the good task", n)
	}
}

// TestWorkflowsBucket: a worker's workflows bucket, opened on first use (before Run), holds the
// bundles stored through another worker's, for the built-in handlers to read by a task's
// Workflow.
func TestWorkflowsBucket(t *testing.T) {
	e := newEnv(t)
	b := workflow.New("bundled")
	b.Task("s", "h")
	def, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := New((*conn.Conn)(e.box), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := runstore.OpenStore(w.WorkflowsBucket).Put(testCtx(t), bs); err != nil {
		t.Fatal(err)
	}
	other, err := New((*conn.Conn)(e.box), Options{}) // a fresh worker reads the bucket
	if err != nil {
		t.Fatal(err)
	}
	if got, err := runstore.OpenStore(other.WorkflowsBucket).Get(testCtx(t), bs.Root); err != nil || got.Definition.Name != "bundled" {
		t.Fatalf("Get: %v, %v", got, err)
	}
}

func TestHandlePanics(t *testing.T) {
	e := newEnv(t)
	w, err := New((*conn.Conn)(e.box), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(TaskContext) error { return nil }
	w.Handle("good", ok)
	w.Handle(protocol.HandlerLLM, ok) // built-in names are allowed
	for _, c := range []struct {
		name string
		h    Handler
	}{{"", ok}, {"a..b", ok}, {"a.", ok}, {"a b", ok}, {"a>", ok}, {"a/b", ok}, {"good", ok}, {"nil", nil}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Handle(%q) did not panic", c.name)
				}
			}()
			w.Handle(c.name, c.h)
		}()
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New without a connection succeeded")
	}
	if _, err := New((*conn.Conn)(e.box), Options{AckWait: -1}); err == nil {
		t.Error("New with a negative AckWait succeeded")
	}
	r := e.start(Options{}, map[string]Handler{"x": ok})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Handle after Run did not panic")
			}
		}()
		r.Handle("late", ok)
	}()
	if err := r.Run(testCtx(t)); err == nil {
		t.Error("a second Run succeeded")
	}
}

func TestTaskContextAccessors(t *testing.T) {
	e := newEnv(t)
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		if err := tc.Heartbeat(); err != nil {
			return tc.FailPermanent(err)
		}
		return tc.Complete(map[string]any{
			"msg_id": tc.Task().MsgID, "run": tc.RunID(), "step": tc.StepID(), "item": tc.Item(),
			"iteration": tc.Iteration(), "attempt": tc.Attempt(), "input": tc.Input(),
		})
	}})
	tk := task("r", "par", "h", 2, 3)
	tk.Item = 4
	tk.MsgID = "r/par#4/1/2/3"
	e.publish(tk)
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	want := `{"attempt":3,"input":{"n":2},"item":4,"iteration":2,"msg_id":"r/par#4/1/2/3","run":"r","step":"par"}`
	if string(ev.Output) != want {
		t.Fatalf("output %s\nwant   %s", ev.Output, want)
	}
}
