package wire_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/allocs"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// refEventMsgID is EventMsgID as its documentation reads, written plainly: the reference the
// id built in a buffer on the stack must equal.
func refEventMsgID(ev *protocol.Event, child string) string {
	switch ev.Type {
	case protocol.EvStart, protocol.EvCancel:
		return ev.RunID + "/" + string(ev.Type)
	case protocol.EvTick:
		return strings.Join([]string{ev.RunID, "tick", ev.Step, strconv.Itoa(ev.Item), strconv.Itoa(ev.Activation), strconv.FormatInt(ev.At.UnixNano(), 10)}, "/")
	case protocol.EvChildFinished:
		return child + "/finished"
	case protocol.EvGranted:
		return ev.RunID + "/granted"
	}
	key := ev.Step
	if ev.Item >= 0 {
		key += "#" + strconv.Itoa(ev.Item)
	}
	id := strings.Join([]string{ev.RunID, key, strconv.Itoa(ev.Activation), strconv.Itoa(ev.Iteration), strconv.Itoa(ev.Attempt)}, "/")
	if ev.Resume > 0 {
		id += "/r" + strconv.Itoa(ev.Resume)
	}
	id += "/" + string(ev.Type)
	if ev.Nonce != "" {
		id += "/" + ev.Nonce
	}
	return id
}

var msgIDTypes = []protocol.EventType{protocol.EvStart, protocol.EvCancel, protocol.EvTick, protocol.EvChildFinished,
	protocol.EvGranted, protocol.EvCompleted, protocol.EvContinued, protocol.EvWaiting, protocol.EvFailed,
	protocol.EvTimedOut, protocol.EvDecision, protocol.EvSignal, protocol.EvResume}

// FuzzEventMsgID: EventMsgID and AppendEventMsgID equal the plain reference for any event,
// ids longer than the stack buffer included, and AppendEventMsgID keeps what dst held.
func FuzzEventMsgID(f *testing.F) {
	f.Add("r-1", "fan", uint8(6), 3, 1, 2, 1, 0, "lq2x-9", "r-1/sub/1", int64(1795255200123456789), "pre")
	f.Add("r-1", "ask", uint8(5), -1, 2, 1, 3, 2, "", "", int64(0), "")
	f.Add(strings.Repeat("r", 150), "s", uint8(10), 0, 0, 0, 0, 0, "n", "", int64(-1), "")
	f.Add("r-1", "wait", uint8(2), -1, 4, 0, 0, 0, "", "", int64(1795255200123456789), "x")
	f.Fuzz(func(t *testing.T, run, step string, typ uint8, item, activation, iteration, attempt, resume int, nonce, child string, at int64, prefix string) {
		ev := &protocol.Event{RunID: run, Type: msgIDTypes[int(typ)%len(msgIDTypes)], Step: step, Item: item,
			Activation: activation, Iteration: iteration, Attempt: attempt, Resume: resume, Nonce: nonce, At: time.Unix(0, at)}
		want := refEventMsgID(ev, child)
		if got := wire.EventMsgID(ev, child); got != want {
			t.Fatalf("EventMsgID = %q, want %q", got, want)
		}
		if got := string(wire.AppendEventMsgID([]byte(prefix), ev, child)); got != prefix+want {
			t.Fatalf("AppendEventMsgID = %q, want %q", got, prefix+want)
		}
	})
}

// TestEventMsgIDAllocs: an answer's id is one allocation, its string; appended to a buffer with
// room, none (a worker sizes every answer with it).
func TestEventMsgIDAllocs(t *testing.T) {
	ev := wire.Answer(sampleTask(), protocol.EvContinued, time.Now())
	ev.Nonce = "lq2x8d1k-1z141z3"
	if n := allocs.PerRun(100, func() { _ = wire.EventMsgID(ev, "") }); n != 1 {
		t.Errorf("EventMsgID of an answer allocates %v times, want 1", n)
	}
	buf := make([]byte, 0, 256)
	if n := allocs.PerRun(100, func() { _ = wire.AppendEventMsgID(buf[:0], ev, "") }); n != 0 {
		t.Errorf("AppendEventMsgID allocates %v times, want 0", n)
	}
}
