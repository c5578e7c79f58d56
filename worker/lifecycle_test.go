package worker

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
)

func TestTimeoutAnswersWithoutWaitingForTheHandler(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	late := make(chan error, 1)
	ctxErr := make(chan error, 1)
	e.start(Options{}, map[string]Handler{"slow": func(tc TaskContext) error {
		<-tc.Done()
		ctxErr <- context.Cause(tc)
		<-release // blocks until the test has seen timed_out: the worker must not wait for it
		late <- tc.Complete("too late")
		return nil
	}})
	defer close(release)
	tk := task("r", "s", "slow", 1, 1)
	tk.Timeout = 200 * time.Millisecond
	e.publish(tk)
	ev := e.event()
	wantEvent(t, ev, protocol.EvTimedOut, tk)
	if ev.Error != "the handler did not answer within 200ms" {
		t.Errorf("error %q", ev.Error)
	}
	if how := e.waitSettled(tk.MsgID); how != string(protocol.EvTimedOut) {
		t.Errorf("settled as %s", how)
	}
	if n, ok := e.drained(natsbox.TasksStream); !ok {
		t.Errorf("the timed-out task is still in %s (%d)", natsbox.TasksStream, n)
	}
	if err := recv(t, ctxErr); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the handler's context ended with %v, want a deadline", err)
	}
	release <- struct{}{}
	if err := recv(t, late); !isAnswered(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the late answer returned %v, want ErrAnswered and DeadlineExceeded", err)
	}
	if n := e.streamMsgs(natsbox.EventsStream); n != 1 {
		t.Errorf("%d events, want only timed_out", n)
	}
}

// Whatever ends a task's context while its handler runs (its run's end, the worker stopping,
// its timeout), the worker settles the task at once, without waiting for a handler that does
// not look at its context, and frees its slot: a stopping worker returns.
func TestContextEndsSettleWithoutTheHandler(t *testing.T) {
	for _, tc := range []struct {
		name, how string
		timeout   time.Duration
		end       func(e *env, w *running)
	}{
		{name: "run ended", how: "run_ended", end: func(e *env, _ *running) {
			subject, err := natsbox.CancelSubject("r")
			if err != nil {
				t.Fatal(err)
			}
			if err := e.box.Conn().Publish(subject, nil); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "worker stops", how: "stopped", end: func(_ *env, w *running) { w.stop() }},
		{name: "timeout", how: string(protocol.EvTimedOut), timeout: 100 * time.Millisecond, end: func(*env, *running) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			started, release := make(chan struct{}, 1), make(chan struct{})
			defer close(release)
			w := e.start(Options{}, map[string]Handler{"deaf": func(TaskContext) error {
				started <- struct{}{}
				<-release // never looks at its context
				return nil
			}})
			tk := task("r", "s", "deaf", 1, 1)
			tk.Timeout = tc.timeout
			e.publish(tk)
			recv(t, started)
			tc.end(e, w)
			if how := e.waitSettled(tk.MsgID); how != tc.how {
				t.Fatalf("settled as %s, want %s", how, tc.how)
			}
		})
	}
}

func TestNotBeforeDelaysTheTask(t *testing.T) {
	e := newEnv(t)
	now := time.Now // the worker's clock; the handler reads the same one
	started := make(chan time.Time, 1)
	e.start(Options{Now: now}, map[string]Handler{"h": func(tc TaskContext) error {
		started <- now()
		return tc.Complete(nil)
	}})
	tk := task("r", "s", "h", 2, 1)
	tk.NotBefore = now().Add(300 * time.Millisecond)
	e.publish(tk)
	if at := recv(t, started); at.Before(tk.NotBefore) {
		t.Fatalf("the handler started at %s, before NotBefore %s", at, tk.NotBefore)
	}
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	if ev.At.Before(tk.NotBefore) {
		t.Errorf("answered at %s, before NotBefore", ev.At)
	}
	if info := e.consumerInfo("h"); info.Delivered.Consumer < 2 {
		t.Errorf("delivered %d times: the task is handed back until it is due", info.Delivered.Consumer)
	}
}

func TestRunEndCancelsItsTasks(t *testing.T) {
	e := newEnv(t)
	var calls sync.Map // run id → number of handler calls
	type result struct {
		run    string
		cause  error
		answer error
	}
	results := make(chan result, 4)
	started := make(chan string, 4)
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		n, _ := calls.LoadOrStore(tc.RunID(), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if tc.RunID() == "sentinel" {
			return tc.Complete("ok")
		}
		started <- tc.RunID()
		<-tc.Done()
		err := tc.Complete("discarded")
		results <- result{tc.RunID(), context.Cause(tc), err}
		return err
	}})
	cancelRun := func(run string) {
		t.Helper()
		subject, err := natsbox.CancelSubject(run)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.box.Conn().Publish(subject, nil); err != nil {
			t.Fatal(err)
		}
	}

	// A running task of the run, and one of a sub-run of another run.
	tk := task("run1", "s", "h", 1, 1)
	sub := task("run2/call/1", "s", "h", 1, 1)
	e.publish(tk)
	e.publish(sub)
	got := map[string]bool{recv(t, started): true, recv(t, started): true}
	if !got["run1"] || !got["run2/call/1"] {
		t.Fatalf("started %v", got)
	}
	cancelRun("run1")
	if how := e.waitSettled(tk.MsgID); how != "run_ended" {
		t.Fatalf("settled as %s", how)
	}
	res := recv(t, results)
	if res.run != "run1" || !errors.Is(res.cause, errRunEnded) || !isAnswered(res.answer) {
		t.Fatalf("handler of %s: cause %v, answer %v", res.run, res.cause, res.answer)
	}
	cancelRun("run2") // the parent's end reaches the sub-run
	if how := e.waitSettled(sub.MsgID); how != "run_ended" {
		t.Fatalf("sub-run task settled as %s", how)
	}
	recv(t, results)

	// A task of the run published after the announcement is not the ended run's (the
	// announcement was a stray message, or the id names a new run): it runs. The tasks the
	// ended run had queued before are dropped (TestEndedRunsOnlyDropEarlierTasks).
	again := task("run1", "s", "h", 2, 1)
	e.publish(again)
	if run := recv(t, started); run != "run1" {
		t.Fatalf("started %s, want run1's task published after the announcement", run)
	}
	cancelRun("run1")
	if how := e.waitSettled(again.MsgID); how != "run_ended" {
		t.Fatalf("settled as %s", how)
	}
	recv(t, results)
	if n, _ := calls.Load("run1"); n.(*atomic.Int32).Load() != 2 {
		t.Errorf("the handler ran %d times for run1, want 2", n.(*atomic.Int32).Load())
	}
	sentinel := task("sentinel", "s", "h", 1, 1)
	e.publish(sentinel)
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, sentinel) // the first and only event: nothing was answered for the cancelled runs
	e.waitSettled(sentinel.MsgID)
	if n, ok := e.drained(natsbox.TasksStream); !ok {
		t.Errorf("%d tasks left: the tasks of ended runs are acknowledged", n)
	}
}

// A worker that stops hands its running task back; another worker runs it (same attempt).
func TestStopHandsTheTaskToAnotherWorker(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{}, 1)
	late := make(chan error, 1)
	first := e.start(Options{AckWait: time.Second}, map[string]Handler{"h": func(tc TaskContext) error {
		started <- struct{}{}
		<-tc.Done()
		late <- tc.Complete("from the stopped worker")
		return tc.Err()
	}})
	tk := task("r", "s", "h", 4, 2)
	e.publish(tk)
	recv(t, started)
	first.stop()
	if how := e.waitSettled(tk.MsgID); how != "stopped" {
		t.Fatalf("settled as %s", how)
	}
	if err := recv(t, late); !isAnswered(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped worker's answer returned %v", err)
	}
	e.start(Options{AckWait: time.Second}, map[string]Handler{"h": func(tc TaskContext) error {
		return tc.Complete("from the second worker")
	}})
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	if string(ev.Output) != `"from the second worker"` {
		t.Fatalf("output %s", ev.Output)
	}
	if n := e.streamMsgs(natsbox.EventsStream); n != 1 {
		t.Fatalf("%d events, want 1: the stopped worker answers nothing", n)
	}
}

// A worker that stops hands back at once, not after their AckWait, the tasks it had received
// but not started (waiting for a free slot), as well as the one it ran; another worker runs
// them all.
func TestStopHandsBackTheTasksItHadNotStarted(t *testing.T) {
	e := newEnv(t)
	opts := Options{Concurrency: 1, AckWait: time.Hour} // longer than the test: only a hand-back brings a task back
	started := make(chan string, 3)
	first := e.start(opts, map[string]Handler{"h": func(tc TaskContext) error {
		started <- tc.Task().MsgID
		<-tc.Done()
		return tc.Err()
	}})
	tasks := []*protocol.Task{task("r1", "s", "h", 1, 1), task("r2", "s", "h", 1, 1), task("r3", "s", "h", 1, 1)}
	for _, tk := range tasks {
		e.publish(tk)
	}
	running := recv(t, started)
	waitAckPending(t, e, 2) // the running task, and the next one received and waiting for the slot
	first.stop()
	if n := len(started); n != 0 {
		t.Fatalf("%d more tasks started with one slot, want none", n)
	}
	e.start(opts, map[string]Handler{"h": func(tc TaskContext) error {
		return tc.Complete(tc.Task().MsgID)
	}})
	done := map[string]bool{}
	for range tasks {
		ev := e.event()
		if ev.Type != protocol.EvCompleted {
			t.Fatalf("event %s of run %s, want completed", ev.Type, ev.RunID)
		}
		done[ev.RunID] = true
	}
	if len(done) != len(tasks) {
		t.Fatalf("the second worker completed runs %v, want r1, r2 and r3 (the first worker ran %s)", done, running)
	}
}

// waitAckPending waits until the consumer of handler h has n deliveries not acknowledged.
func waitAckPending(t *testing.T, e *env, n int) {
	t.Helper()
	c, err := e.js.Consumer(testCtx(t), natsbox.TasksStream, consumerName("h"))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(failsafe); time.Now().Before(deadline); {
		info, err := c.Info(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == n {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("the consumer never had %d deliveries waiting for their acknowledgement", n)
}

// A worker that crashes (its connection dies) answers nothing; JetStream delivers the task again
// after AckWait, to another worker.
func TestCrashedWorkerTaskIsRedeliveredAfterAckWait(t *testing.T) {
	auth := func(token string) (natsbox.Identity, bool) {
		return natsbox.Identity{Name: "crash", Roles: []string{natsbox.RoleWorker}}, token == "crash-token"
	}
	e := newEnvOpts(t, natsbox.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: auth})
	crashBox, err := natsbox.Open(testCtx(t), natsbox.Options{URL: e.box.ClientURL(), Token: "crash-token"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = crashBox.Close() })
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	e.startOn((*conn.Conn)(crashBox), Options{AckWait: time.Second}, map[string]Handler{"h": func(tc TaskContext) error {
		started <- struct{}{}
		<-release
		return tc.Complete("never stored")
	}}, nil)
	tk := task("r", "s", "h", 1, 1)
	published := time.Now() // before the first delivery, from which AckWait counts
	e.publish(tk)
	recv(t, started)
	crashBox.Conn().Close() // the crash: no answer, no acknowledgement

	e.start(Options{AckWait: time.Second}, map[string]Handler{"h": func(tc TaskContext) error {
		return tc.Complete("second worker")
	}})
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	if string(ev.Output) != `"second worker"` {
		t.Fatalf("output %s", ev.Output)
	}
	if d := time.Since(published); d < time.Second {
		t.Fatalf("answered %s after the task was published, before AckWait", d)
	}
}

// Heartbeats keep a task that runs longer than AckWait from being delivered again.
func TestHeartbeatsKeepALongTask(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	e.start(Options{AckWait: time.Second}, map[string]Handler{"h": func(tc TaskContext) error {
		calls.Add(1)
		work := time.NewTimer(2500 * time.Millisecond) // the handler's work, longer than AckWait
		defer work.Stop()
		select {
		case <-work.C:
		case <-tc.Done():
		}
		return tc.Complete("done")
	}})
	tk := task("r", "s", "h", 1, 1)
	e.publish(tk)
	wantEvent(t, e.event(), protocol.EvCompleted, tk)
	e.waitSettled(tk.MsgID)
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
	if info := e.consumerInfo("h"); info.NumRedelivered != 0 {
		t.Fatalf("redelivered %d", info.NumRedelivered)
	}
}
