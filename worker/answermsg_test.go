package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/testkit/allocs"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// FuzzNonce: the nonce appended in one buffer equals the plain NANOS-R, both in base 36, and a
// continued answer's message id made with it is the id of the answer with that nonce, which
// ends it.
func FuzzNonce(f *testing.F) {
	f.Add(int64(1795255200123456789), uint32(7), "r-1", "agent", 12, 0)
	f.Add(int64(-1), uint32(1<<32-1), strings.Repeat("r", 200), "fan", 1, 3)
	f.Add(int64(0), uint32(0), "", "", 0, 0)
	f.Fuzz(func(t *testing.T, nanos int64, r uint32, run, step string, iteration, resume int) {
		at := time.Unix(0, nanos)
		want := strconv.FormatInt(at.UnixNano(), 36) + "-" + strconv.FormatUint(uint64(r), 36)
		if got := string(appendNonce(nil, at, r)); got != want {
			t.Fatalf("nonce = %q, want %q", got, want)
		}
		ev := &protocol.Event{RunID: run, Type: protocol.EvContinued, At: at, Step: step, Item: -1, Activation: 1, Iteration: iteration, Attempt: 1, Resume: resume}
		id := continuedID(ev, r)
		if ev.Nonce != want || id != wire.EventMsgID(ev, "") || !strings.HasSuffix(id, "/"+want) {
			t.Fatalf("continuedID = %q, nonce %q; want the id of the answer with nonce %q", id, ev.Nonce, want)
		}
	})
}

// TestNonceAllocs: a continued answer's message id and nonce are one allocation, the id's
// string, which the nonce ends.
func TestNonceAllocs(t *testing.T) {
	ev := &protocol.Event{RunID: "01JDV3N6Q0R1S2T3U4V5W6X7Y8", Type: protocol.EvContinued, At: time.Now(), Step: "agent", Item: -1, Activation: 1, Iteration: 12, Attempt: 1}
	if n := allocs.PerRun(100, func() { _ = continuedID(ev, 1<<31) }); n != 1 {
		t.Errorf("continuedID allocates %v times, want 1", n)
	}
}

// TestAnswerMsgReused: a kept answer message carries only what its last build put in it (no
// trace context nor reply subject of an answer before), and building and resetting it
// allocates nothing.
func TestAnswerMsgReused(t *testing.T) {
	am := &answerMsg{m: nats.Msg{Header: nats.Header{}}}
	m := am.build("reins.event.03.r-1", []byte(`{"a":1}`), "r-1/agent/1/1/1/continued/x")
	m.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	m.Reply = "_INBOX.a.b.0" // what a publish waiting for its acknowledgement sets
	am.reset()
	if am.m.Data != nil || am.m.Subject != "" || am.m.Reply != "" || len(am.m.Header) != 0 {
		t.Fatalf("reset kept %+v", am.m)
	}
	m = am.build("reins.event.04.r-2", []byte(`{"b":2}`), "r-2/agent/1/2/1/completed")
	want := nats.Header{jetstream.MsgIDHeader: {"r-2/agent/1/2/1/completed"}}
	if m.Subject != "reins.event.04.r-2" || string(m.Data) != `{"b":2}` || !maps.EqualFunc(m.Header, want, func(a, b []string) bool { return len(a) == 1 && a[0] == b[0] && len(b) == 1 }) {
		t.Fatalf("second build = %q %s %v, want its own subject, data and id only", m.Subject, m.Data, m.Header)
	}
	data := []byte(`{}`)
	if n := allocs.PerRun(100, func() {
		am.build("reins.event.04.r-2", data, "r-2/agent/1/2/1/completed")
		am.reset()
	}); n != 0 {
		t.Errorf("build and reset allocate %v times, want 0", n)
	}
}

// TestClaimWaitsForAnswer: the worker's claim while the handler's answer is in flight waits
// for it to finish (the channel it waits on made then), and a claim after it does not wait.
func TestClaimWaitsForAnswer(t *testing.T) {
	w := &Worker{log: slog.New(slog.DiscardHandler)}
	tc := &taskContext{Context: context.Background(), w: w, m: noMetrics{}, task: &protocol.Task{MsgID: "r-1/a/1/1/1"}}
	if err := tc.begin(); err != nil {
		t.Fatal(err)
	}
	claimed := make(chan bool)
	go func() { claimed <- tc.claim(errTimedOut) }()
	// The claim waits on the channel it made under mu: wait for it to exist, then finish.
	for made := false; !made; {
		tc.mu.Lock()
		made = tc.finished != nil
		tc.mu.Unlock()
		runtime.Gosched()
	}
	select {
	case <-claimed:
		t.Fatal("claim returned while the answer was in flight")
	default:
	}
	tc.finish(nil, "continued")
	if <-claimed {
		t.Error("claim = true after the handler answered, want false")
	}
	if tc.claim(errTimedOut) {
		t.Error("a claim after the answer = true, want false")
	}
	if n := allocs.PerRun(10, func() {
		fresh := &taskContext{Context: context.Background(), w: w, m: noMetrics{}, task: tc.task}
		fresh.finish(nil, "completed")
	}); n != 1 {
		t.Errorf("a task answered without a claim allocates %v times (its context only), want 1", n)
	}
}

// TestTaskContextAllocs: a task's context, from its making to its release, is three allocations
// without a timeout (the task's state, its cancellable context and the function that cancels
// it; its checkpoints' scope is the task's fields, made into a string only for a checkpoint's
// read or write), and twelve with one (its deadline, seven in package context;
// the timer that settles the task when it passes, two). The end of its run, the worker's stop
// and the timeout reach a running handler through the worker's own calls (taskContext.arm),
// not through an AfterFunc on every task's context, which cost six (seven on a context with a
// deadline).
func TestTaskContextAllocs(t *testing.T) {
	w := &Worker{log: slog.New(slog.DiscardHandler), now: time.Now}
	s := &serving{name: "h", m: noMetrics{}}
	base, stop := context.WithCancelCause(context.Background()) // as the worker's: handlers' contexts are its children
	defer stop(nil)
	for _, c := range []struct {
		timeout time.Duration
		want    float64
	}{{0, 3}, {time.Hour, 12}} {
		tk := task("r-1", "agent", "h", 12, 1)
		tk.Timeout = c.timeout
		n := allocs.PerRun(100, func() {
			tc := w.newTaskContext(base, s, nil, tk, false)
			tc.startClock()
			tc.arm()
			if !tc.disarm() {
				t.Fatal("disarm = false: nothing ended the context")
			}
			tc.stopContext()
		})
		if n != c.want {
			t.Errorf("the context of a task with timeout %v allocates %v times, want %v", c.timeout, n, c.want)
		}
	}
}

// TestEncodeOutput: an answer's output is what json.Marshal makes of it, and an answer without
// one (Continue(nil)) allocates nothing for it.
func TestEncodeOutput(t *testing.T) {
	for _, output := range []any{nil, 1, "<a & b>", map[string]any{"z": 1, "a": []int{}}, json.RawMessage(`{"k": [1, 2]}`), (*int)(nil)} {
		want, err := json.Marshal(output)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeOutput(output)
		if err != nil || string(got) != string(want) {
			t.Errorf("encodeOutput(%#v) = %s, %v; want %s as json.Marshal gives", output, got, err, want)
		}
	}
	if _, err := encodeOutput(func() {}); err == nil {
		t.Error("encodeOutput of a function: no error")
	}
	if n := allocs.PerRun(100, func() { _, _ = encodeOutput(nil) }); n != 0 {
		t.Errorf("encodeOutput(nil) allocates %v times, want 0", n)
	}
}

// TestAnswerEvent: an answer's event comes from answerEvents and goes back to it once
// delivered, so that building one allocates nothing; an event kept after an answer that
// carried more (pending calls, an error, an output, usage, a record) comes back holding only
// what the next answer sets.
func TestAnswerEvent(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	w := &Worker{log: slog.New(slog.DiscardHandler), now: func() time.Time { return at }}
	tk := task("r-1", "agent", "h", 12, 1)
	tc := w.newTaskContext(context.Background(), &serving{name: "h", m: noMetrics{}}, nil, tk, false)
	defer tc.stopContext()

	full := tc.event(protocol.EvWaiting)
	full.Pending = []protocol.PendingCall{{CallID: "c1", Tool: "refund"}}
	full.Error, full.Output, full.Nonce = "boom", json.RawMessage(`{"n":1}`), "n0nce"
	full.Usage = &protocol.Usage{ModelCalls: 2}
	full.Record = &protocol.Iteration{Iteration: 12}
	keepAnswerEvent(full)
	for range 4 { // whichever event the pool hands back
		ev := tc.event(protocol.EvContinued)
		if want := wire.Answer(tk, protocol.EvContinued, at); !reflect.DeepEqual(ev, want) {
			t.Fatalf("an answer's event after a kept one = %+v, want %+v", ev, want)
		}
		keepAnswerEvent(ev)
	}

	n := allocs.PerRun(100, func() { keepAnswerEvent(tc.event(protocol.EvContinued)) })
	switch {
	case allocs.Race && n > 1: // -race empties the pool at random: at most a new event each time
		t.Errorf("an answer's event allocates %v times under -race, want at most 1", n)
	case !allocs.Race && n != 0:
		t.Errorf("an answer's event allocates %v times, want 0: it comes from answerEvents", n)
	}
}
