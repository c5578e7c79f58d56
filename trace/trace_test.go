package trace_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/trace"
)

func TestHas(t *testing.T) {
	events := []trace.Event{{Type: trace.IterationStart}, {Type: trace.Proposal}, {Type: trace.Stop}}
	for _, tt := range []struct {
		typ  trace.Type
		want bool
	}{
		{trace.IterationStart, true}, {trace.Stop, true}, {trace.Approval, false}, {trace.ToolCall, false},
	} {
		if got := trace.Has(events, tt.typ); got != tt.want {
			t.Errorf("Has(%s) = %v, want %v", tt.typ, got, tt.want)
		}
	}
	if trace.Has(nil, trace.Stop) {
		t.Error("Has on no events reported an event")
	}
}

func TestSinkFuncReceivesEvents(t *testing.T) {
	var got []trace.Type
	var sink trace.Sink = trace.SinkFunc(func(e trace.Event) { got = append(got, e.Type) })
	sink.Emit(trace.Event{Type: trace.ToolCall})
	sink.Emit(trace.Event{Type: trace.ToolResult})
	if len(got) != 2 || got[0] != trace.ToolCall || got[1] != trace.ToolResult {
		t.Fatalf("sink received %v", got)
	}
}

// The JSON form of an event is what traces are stored and shown as: the documented type strings,
// and no empty payload fields.
func TestEventJSON(t *testing.T) {
	b, err := json.Marshal(trace.Event{Type: trace.Stop, RunID: "r1", Iteration: 3, StopReason: "completed"})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"type":"stop"`, `"run_id":"r1"`, `"iteration":3`, `"stop_reason":"completed"`} {
		if !strings.Contains(s, want) {
			t.Errorf("%s lacks %s", s, want)
		}
	}
	for _, absent := range []string{"tool", "call_id", "error", "decision"} {
		if strings.Contains(s, `"`+absent+`"`) {
			t.Errorf("%s carries the empty field %s", s, absent)
		}
	}
}
