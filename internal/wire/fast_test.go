package wire

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/reins-run/reins/protocol"
)

// The fast decoders must agree with encoding/json on every input they take, and take what the
// encoders write.

func v1Task(data []byte) (protocol.Task, error) {
	t := protocol.Task{Item: -1}
	err := json.Unmarshal(data, &t)
	return t, err
}

func v1Event(data []byte) (protocol.Event, error) {
	ev := protocol.Event{Item: -1}
	err := json.Unmarshal(data, &ev)
	return ev, err
}

func sampleTask() *protocol.Task {
	return &protocol.Task{RunID: "r-1", Step: "review", Item: 2, Body: "b", Type: "agent", Handler: "reins.agent",
		Workflow: "abc", Model: "m", Prompt: "p <&> é", Instructions: "i", Goal: "g", Activation: 1, Iteration: 3,
		Attempt: 2, Input: json.RawMessage(`{"a": [1, 2.5, "x"]}`), MsgID: "r-1/review#2/1/3/2",
		NotBefore: time.Date(2026, 11, 22, 1, 2, 3, 456, time.UTC), Timeout: 90 * time.Second, Resume: 1,
		Decisions:  []protocol.Decision{{CallID: "c1", Approve: true, By: "ann"}, {CallID: "c2", Message: "no"}},
		HumanInput: json.RawMessage(`"go on"`)}
}

func sampleEvent() *protocol.Event {
	return &protocol.Event{RunID: "r-1", Workflow: "abc", Nonce: "n1", Parent: &protocol.Parent{RunID: "p", Step: "s", Item: -1, Activation: 1},
		Registered: &protocol.Registration{Name: "refund", Version: 3},
		Type:       protocol.EvWaiting, At: time.Date(2026, 11, 22, 1, 2, 3, 456, time.FixedZone("x", 3600)),
		Input: json.RawMessage(`{"x":1}`), Step: "review", Item: 0, Activation: 1, Iteration: 4, Attempt: 1,
		Output: json.RawMessage(`[true,null]`), Label: "ok", StopReason: "done", Error: "e",
		Usage: &protocol.Usage{ModelCalls: 1, InputTokens: 10, CostUSD: 0.5}, Permanent: true, Reason: "r",
		Status: protocol.RunCompleted, Resume: 2, Pending: []protocol.PendingCall{{CallID: "c", Tool: "t", Arguments: json.RawMessage(`{}`)}},
		CallID: "c", Approve: true, Message: "m", By: "b", Name: "sig", ID: "id-1"}
}

func TestDecodeFastTakesWhatEncodersWrite(t *testing.T) {
	cases := map[string]any{
		"full task": sampleTask(), "bare task": &protocol.Task{RunID: "r", Step: "s", Item: -1, MsgID: "m", Activation: 1, Iteration: 1, Attempt: 1},
		"full event": sampleEvent(), "bare event": Answer(sampleTask(), protocol.EvContinued, time.Unix(0, 1)),
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			switch v := v.(type) {
			case *protocol.Task:
				got := protocol.Task{Item: -1}
				if !decodeTaskFast(data, &got) {
					t.Fatalf("decodeTaskFast refused %s", data)
				}
				if want, _ := v1Task(data); !reflect.DeepEqual(got, want) || got.MsgID != v.MsgID {
					t.Errorf("decodeTaskFast(%s) = %+v, want %+v", data, got, want)
				}
			case *protocol.Event:
				got := protocol.Event{Item: -1}
				if !decodeEventFast(data, &got) {
					t.Fatalf("decodeEventFast refused %s", data)
				}
				if want, _ := v1Event(data); !reflect.DeepEqual(got, want) {
					t.Errorf("decodeEventFast(%s) = %+v, want %+v", data, got, want)
				}
			}
		})
	}
}

func TestDecodeFastRefusesWhatItCannotRead(t *testing.T) {
	for _, data := range []string{
		`{"RUN_ID":"r"}`, `{"run_id":null}`, `{"item":1.5}`, `{"item":"1"}`,
		`{"run_id":"r"} x`, `{"run_id":"r"`, `[]`, `{"usage":null}`, `{"at":null}`, `{"unknown":1}`, "{\"run_id\":\"\xff\"}",
	} {
		if decodeEventFast([]byte(data), &protocol.Event{}) {
			t.Errorf("decodeEventFast took %s", data)
		}
	}
}

func FuzzDecodeTaskFast(f *testing.F) {
	data, _ := json.Marshal(sampleTask())
	f.Add(data)
	f.Add([]byte(`{"run_id":"r","item":-0,"timeout":1e3}`))
	f.Add([]byte(`{"run_id":"r","run_id":"s","Step":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := protocol.Task{Item: -1}
		if !decodeTaskFast(data, &got) {
			return // DecodeTask goes to the v1 decoder
		}
		want, err := v1Task(data)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeTaskFast(%q) = %+v; encoding/json: %+v, %v", data, got, want, err)
		}
	})
}

func FuzzDecodeEventFast(f *testing.F) {
	data, _ := json.Marshal(sampleEvent())
	f.Add(data)
	f.Add([]byte(`{"run_id":"r","type":"continued","at":"2026-01-01T00:00:00Z","output":{"a":1} }`))
	f.Add([]byte(`{"usage":{"model_calls":1},"usage":{"tool_calls":2}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := protocol.Event{Item: -1}
		if !decodeEventFast(data, &got) {
			return // DecodeEvent goes to the v1 decoder
		}
		want, err := v1Event(data)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeEventFast(%q) = %+v; encoding/json: %+v, %v", data, got, want, err)
		}
	})
}

// Strings given lately are told apart by their bytes, whichever of intern's places they share,
// and one seen again is the string interned the first time.
func TestSameStrings(t *testing.T) {
	values := []string{"", "a", "b", "ab", "ba", "run-000001", "run-000002", "run-100000", "explore", "agent_loop", "continued"}
	first := map[string]string{}
	for round := range 3 {
		for _, want := range values {
			var got string
			if !same(jsontext.Value(`"`+want+`"`), &got) || got != want {
				t.Fatalf("round %d: same(%q) = %q", round, want, got)
			}
			if round == 0 {
				first[want] = got
			} else if want != "" && unsafe.StringData(got) != unsafe.StringData(first[want]) {
				t.Errorf("round %d: %q is another string than the one interned the first time", round, want)
			}
		}
	}
}
