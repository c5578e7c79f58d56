package wire_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
)

// The wire format is what workers in other languages, and records saved by earlier versions,
// rely on: testdata/golden holds messages as this code wrote them when the format was last
// settled (a task, every kind of event a message carries, answers, run records). Each is
// decoded and encoded again, and the messages below are encoded, to the same bytes: a change to
// the format fails here, whatever package the codec lives in.

var at = time.Date(2026, 11, 29, 18, 0, 0, 123456789, time.UTC)

// goldenTask is a task of an agent step, resumed after a decision, as the engine sends it.
func goldenTask() *protocol.Task {
	return &protocol.Task{RunID: "r-1", Step: "triage", Item: -1, Body: "triage", Type: "agent",
		Handler: protocol.HandlerAgent, Workflow: "5f2b9c", Model: "openai:gpt-4o",
		Instructions: "Sort the ticket.", Goal: "Label <this> & that", Session: "customer-42",
		StartedBy: "alice", Activation: 1, Iteration: 3, Attempt: 2,
		Input: json.RawMessage(`{"ticket":"T-1","body":"printer \"on fire\""}`),
		MsgID: "r-1/triage/1/3/2/r1", NotBefore: at.Add(time.Second), Timeout: 90 * time.Second,
		Resume: 1, Decisions: []protocol.Decision{{CallID: "c1", Approve: true, By: "bob"},
			{CallID: "c2", Message: "no refunds", By: "admin", OnBehalfOf: "bob"}},
		ChildResults: []protocol.ChildResult{{CallID: "c3", RunID: "r-1/triage/c3", Status: protocol.RunCompleted,
			Output: json.RawMessage(`"done"`), StopReason: "completed", Usage: &protocol.Usage{ModelCalls: 1, CostUSD: 0.0012}}},
		Protocol: protocol.Version}
}

func goldenRecord() *trace.Iteration {
	return &trace.Iteration{Iteration: 3,
		Proposal: &trace.ProposalRecord{Kind: "tool_calls", Text: "Looking it up."},
		Calls: []trace.CallRecord{{ID: "c1", Tool: "lookup", Arguments: `{"id":"T-1"}`, Decision: "accept",
			Key: "k1", Executed: true, Output: `{"status":"open"}`, OutputBytes: 17}},
		ModelCalls: 1, InputTokens: 812, OutputTokens: 40, CostUSD: 0.00243, ModelTime: 850 * time.Millisecond,
		Duration: 900 * time.Millisecond,
		Events:   []trace.Event{{Type: trace.IterationStart, RunID: "r-1", Iteration: 3, Time: at}}}
}

// goldenEvents are events of every type a message carries (state_too_large is the engine's
// own and never sent), the answers made as a worker makes them.
func goldenEvents() map[string]*protocol.Event {
	t := goldenTask()
	answer := func(typ protocol.EventType, set func(*protocol.Event)) *protocol.Event {
		ev := wire.Answer(t, typ, at)
		set(ev)
		return ev
	}
	return map[string]*protocol.Event{
		"event-start": {RunID: "r-1", Type: protocol.EvStart, At: at, Item: -1,
			Input: json.RawMessage(`{"ticket":"T-1"}`), By: "alice", ID: "start-1", Workflow: "5f2b9c",
			Registered: &protocol.Registration{Name: "triage", Version: 4}},
		"event-start-subrun": {RunID: "r-1/triage/c3", Type: protocol.EvStart, At: at, Item: -1,
			Input: json.RawMessage(`{"q":"refund?"}`), Workflow: "77aa01", By: "engine", OnBehalfOf: "alice",
			Parent: &protocol.Parent{RunID: "r-1", Step: "triage", Item: -1, Activation: 1, Iteration: 3, CallID: "c3"}},
		"answer-completed": answer(protocol.EvCompleted, func(ev *protocol.Event) {
			ev.Output, ev.Label, ev.StopReason, ev.StopDetail = json.RawMessage(`{"label":"hardware"}`), "hardware", "completed", "the model answered."
			ev.Usage = &protocol.Usage{ModelCalls: 2, ToolCalls: 1, InputTokens: 1500, OutputTokens: 80, CostUSD: 0.0049}
			ev.Record = goldenRecord()
		}),
		"answer-continued": answer(protocol.EvContinued, func(ev *protocol.Event) {
			ev.Output, ev.Nonce = json.RawMessage(`{"n":2}`), "n0nce"
			ev.Usage = &protocol.Usage{ModelCalls: 1, InputTokens: 700, OutputTokens: 30, CostUSD: 0.0021}
			ev.Record = goldenRecord()
		}),
		"answer-failed": answer(protocol.EvFailed, func(ev *protocol.Event) {
			ev.Error, ev.Permanent = "lookup: ticket T-1 not found", true
		}),
		"answer-timed_out": answer(protocol.EvTimedOut, func(ev *protocol.Event) { ev.Error = "the attempt ran past its timeout of 1m30s" }),
		"answer-waiting": answer(protocol.EvWaiting, func(ev *protocol.Event) {
			ev.Pending = []protocol.PendingCall{{CallID: "c1", Tool: "refund", Arguments: json.RawMessage(`{"amount":12.5}`)},
				{CallID: "c3", Tool: "expert", Arguments: json.RawMessage(`{"q":"refund?"}`), Child: &protocol.ChildCall{Agent: "expert"}}}
			ev.Record = goldenRecord()
		}),
		"event-tick": {RunID: "r-1", Type: protocol.EvTick, At: at, Step: "pause", Item: 2, Activation: 1},
		"event-cancel": {RunID: "r-1", Type: protocol.EvCancel, At: at, Item: -1, Reason: "not needed any more",
			By: "alice", ID: "cancel-1"},
		"event-child_finished": {RunID: "r-1", Type: protocol.EvChildFinished, At: at, Step: "triage", Item: -1,
			Activation: 1, Iteration: 3, CallID: "c3", Status: protocol.RunCompleted, Output: json.RawMessage(`"done"`),
			StopReason: "completed", Usage: &protocol.Usage{ModelCalls: 1, CostUSD: 0.0012}, Child: "r-1/triage/c3"},
		"event-decision": {RunID: "r-1", Type: protocol.EvDecision, At: at, Step: "triage", Item: -1, Activation: 1,
			Iteration: 3, Attempt: 2, CallID: "c1", Approve: true, Message: "fine", By: "admin", OnBehalfOf: "bob", ID: "d-1"},
		"event-resume": {RunID: "r-1", Type: protocol.EvResume, At: at, Step: "ask", Item: -1,
			Output: json.RawMessage(`{"answer":"yes"}`), By: "bob", ID: "resume-1"},
		"event-signal": {RunID: "r-1", Type: protocol.EvSignal, At: at, Item: -1, Name: "paid",
			Output: json.RawMessage(`{"amount":12.5}`), By: "billing", ID: "sig-9"},
		"event-granted": {RunID: "r-1", Type: protocol.EvGranted, At: at, Item: -1, By: "engine"},
	}
}

// goldenRun is the record of a run waiting for a decision, with a map step's children.
func goldenRun() *engine.Record {
	return &engine.Record{Run: &engine.Run{ID: "r-1", Workflow: "triage", Hash: "5f2b9c", Status: protocol.RunWaiting,
		Input: json.RawMessage(`{"ticket":"T-1"}`), StartedAt: at, Deadline: at.Add(time.Hour), Executed: 4,
		Steps: map[string]*engine.StepRun{
			"fetch": {Step: "fetch", Status: protocol.StepCompleted, Activation: 1, Iteration: 1, Attempt: 1, Attempts: 1,
				StartedAt: at, Dispatched: at, Input: json.RawMessage(`{"id":"T-1"}`), Output: json.RawMessage(`{"body":"x"}`),
				Usage: protocol.Usage{ToolCalls: 1}},
			"triage": {Step: "triage", Status: protocol.StepWaiting, Activation: 1, Iteration: 3, Attempt: 2, Attempts: 4,
				StartedAt: at, FirstIterationAt: at, Dispatched: at.Add(time.Minute), Goal: "Label it", Session: "customer-42",
				Usage: protocol.Usage{ModelCalls: 3, InputTokens: 2200, OutputTokens: 110, CostUSD: 0.007},
				Wait:  protocol.WaitApproval, WaitingSince: at.Add(2 * time.Minute), Waited: 3 * time.Second,
				Pending:   []protocol.PendingCall{{CallID: "c1", Tool: "refund", Arguments: json.RawMessage(`{"amount":12.5}`)}},
				Decisions: map[string]protocol.Decision{"c2": {CallID: "c2", Message: "no", By: "bob"}},
				ChildResults: map[string]protocol.ChildResult{"c3": {CallID: "c3", RunID: "r-1/triage/c3",
					Status: protocol.RunCompleted, Output: json.RawMessage(`"done"`)}}},
			"each#0": {Step: "body", Parent: "each", Item: 0, Status: protocol.StepCompleted, Activation: 1, Iteration: 1,
				Attempt: 1, Output: json.RawMessage(`1`)},
		},
		Edges: []engine.EdgeState{{State: engine.EdgeFired, Uses: 1}, {State: engine.EdgeDead}},
		Path:  []string{"fetch"}, Signals: map[string][]json.RawMessage{"paid": {json.RawMessage(`{"amount":1}`)}},
		SignalIDs: []string{"sig-1"}, StartedBy: "alice",
		Acts: []engine.Act{{ID: "d-0", Type: protocol.EvDecision, At: at, By: "eve", Step: "triage", CallID: "c2",
			Refused: "eve is not an approver of step triage"}},
		Slot:   &engine.Slot{Key: "customer-42", Limit: 2, Granted: at},
		Limits: &engine.Limits{MaxSteps: 1000, MaxSignals: 10, MaxEvents: 5000}, Events: 9}}
}

// everyField is a value of T with every field set, as TestAppendEveryField fills them.
func everyFieldOf[T any](t *testing.T) *T {
	v := new(T)
	f := filler{t: t, target: -1}
	f.fill(reflect.ValueOf(v).Elem())
	return v
}

// goldenMessages are the messages of testdata/golden by file name, encoded.
func goldenMessages(t *testing.T) map[string][]byte {
	out := map[string][]byte{}
	put := func(name string) func([]byte, error) {
		return func(b []byte, err error) {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out[name+".json"] = b
		}
	}
	put("task")(wire.EncodeTask(goldenTask()))
	put("task-every-field")(wire.EncodeTask(everyFieldOf[protocol.Task](t)))
	for name, ev := range goldenEvents() {
		put(name)(wire.EncodeEvent(ev))
	}
	put("event-every-field")(wire.EncodeEvent(everyFieldOf[protocol.Event](t)))
	put("record")(runstore.EncodeRecord(goldenRun()))
	sub := goldenRun()
	sub.Run.ID, sub.Parent = "r-1/triage/c3", &protocol.Parent{RunID: "r-1", Step: "triage", Item: -1, Activation: 1, Iteration: 3, CallID: "c3"}
	put("record-subrun")(runstore.EncodeRecord(sub))
	every := &engine.Record{Run: everyFieldOf[engine.Run](t), Parent: everyFieldOf[protocol.Parent](t)}
	put("record-every-field")(runstore.EncodeRecord(every))
	return out
}

// entry is a record as the runs bucket returns it, for DecodeRecord.
type entry struct {
	jetstream.KeyValueEntry
	key   string
	value []byte
}

func (e entry) Key() string      { return e.key }
func (e entry) Value() []byte    { return e.value }
func (e entry) Revision() uint64 { return 1 }

// reencode decodes a golden message by the kind its file name says and encodes it again.
func reencode(name string, data []byte) ([]byte, error) {
	switch {
	case strings.HasPrefix(name, "task"):
		task, err := wire.DecodeTask(data)
		if err != nil {
			return nil, err
		}
		return wire.EncodeTask(task)
	case strings.HasPrefix(name, "record"):
		var probe struct {
			Run struct {
				ID string `json:"id"`
			} `json:"run"`
		}
		if err := json.Unmarshal(data, &probe); err != nil {
			return nil, err
		}
		rec, err := runstore.DecodeRecord(entry{key: probe.Run.ID, value: data})
		if err != nil {
			return nil, err
		}
		return runstore.EncodeRecord(rec)
	default:
		ev, err := wire.DecodeEvent(data)
		if err != nil {
			return nil, err
		}
		return wire.EncodeEvent(ev)
	}
}

func TestGoldenMessages(t *testing.T) {
	dir := filepath.Join("testdata", "golden")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden messages in %s: %v", dir, err)
	}
	made := goldenMessages(t)
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			want := bytes.TrimSuffix(data, []byte("\n"))
			got, err := reencode(name, want)
			if err != nil {
				t.Fatalf("decoding %s: %v", name, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s decoded and encoded again:\n%s\nwant:\n%s", name, got, want)
			}
			if m, ok := made[name]; !ok {
				t.Errorf("%s: no message of the test makes it", name)
			} else if !bytes.Equal(m, want) {
				t.Errorf("%s encoded from the test's message:\n%s\nwant:\n%s", name, m, want)
			}
		})
	}
	if len(files) != len(made) {
		t.Errorf("%d golden files, %d messages: record the new ones", len(files), len(made))
	}
}
