package worker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
)

// A handler's record travels with its answer, whatever the answer: its long texts clipped, and
// kept whole by reference in the run's values; a failed attempt's record too.
func TestRecordTravelsWithTheAnswer(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("r", 10_000)
	h := func(tc TaskContext) error {
		tc.Record(trace.Iteration{Iteration: tc.Iteration(), Calls: []trace.CallRecord{
			{ID: "c1", Tool: "read", Arguments: `{"id":1}`, Output: long, OutputBytes: len(long), Executed: true},
		}})
		if tc.Attempt() == 1 {
			return tc.Fail(errors.New("try again"))
		}
		return tc.Complete("done")
	}
	e.start(Options{}, map[string]Handler{"rec": h})
	first := task("r", "s", "rec", 1, 1)
	e.publish(first)
	failed := e.event()
	wantEvent(t, failed, protocol.EvFailed, first)
	second := task("r", "s", "rec", 1, 2)
	e.publish(second)
	done := e.event()
	wantEvent(t, done, protocol.EvCompleted, second)

	for _, ev := range []*protocol.Event{failed, done} {
		r := ev.Record
		if r == nil || len(r.Calls) != 1 {
			t.Fatalf("the %s answer's record: %+v", ev.Type, r)
		}
		c := r.Calls[0]
		if len(c.Output) > recordInline+64 || !strings.HasSuffix(c.Output, "more bytes]") || c.OutputBytes != len(long) || c.Arguments != `{"id":1}` {
			t.Errorf("the %s answer's call: output of %d bytes %q…, %d bytes in all", ev.Type, len(c.Output), c.Output[:20], c.OutputBytes)
		}
		raw, err := e.values(t).In(testCtx(t), "r", json.RawMessage(c.OutputRef))
		if err != nil {
			t.Fatalf("the whole output by reference %q: %v", c.OutputRef, err)
		}
		var whole string
		if err := json.Unmarshal(raw, &whole); err != nil || whole != long {
			t.Errorf("the whole output kept is %d bytes (%v), want %d", len(whole), err, len(long))
		}
	}
}

// A record too large for a message even clipped (a turn of thousands of calls) is clipped
// harder and loses its events: the answer goes, with its record.
func TestRecordTooLargeIsClippedHarder(t *testing.T) {
	e := newEnv(t)
	h := func(tc TaskContext) error {
		it := trace.Iteration{Iteration: 1}
		for i := range 400 {
			it.Calls = append(it.Calls, trace.CallRecord{ID: "c" + string(rune('a'+i%26)), Tool: "t", Output: strings.Repeat("o", 1500)})
			it.Events = append(it.Events, trace.Event{Type: trace.ToolResult, CallID: "c"})
		}
		tc.Record(it)
		return tc.Complete(nil)
	}
	e.start(Options{}, map[string]Handler{"big": h})
	tk := task("r", "s", "big", 1, 1)
	e.publish(tk)
	ev := e.event()
	wantEvent(t, ev, protocol.EvCompleted, tk)
	if ev.Record == nil || len(ev.Record.Calls) != 400 || ev.Record.Events != nil || len(ev.Record.Calls[0].Output) > recordTight+64 {
		t.Errorf("the record of a huge turn: %d calls, %d events, outputs of %d bytes", len(ev.Record.Calls), len(ev.Record.Events), len(ev.Record.Calls[0].Output))
	}
}
