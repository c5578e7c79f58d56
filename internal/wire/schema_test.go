package wire_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/testkit/protocoltest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
	"github.com/reins-run/reins/workflow"
)

// The JSON Schemas of docs/protocol against the bodies this package encodes: the tasks the
// engine dispatches and the answers a worker makes (wire.Answer and what the worker adds), with
// values by reference. The worker's tests check the messages it really sends and writes
// (worker/schema_test.go). A schema that drifts from the code fails here.

// TestSchemasCompile: every schema of docs/protocol is draft 2020-12 and compiles.
func TestSchemasCompile(t *testing.T) {
	schemas, err := protocoltest.Schemas()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"common", "task", "answer", "answer-continued", "answer-completed", "answer-waiting",
		"answer-failed", "answer-timed_out", "checkpoint", "effect", "delta"} {
		if schemas[name+".schema.json"] == nil {
			t.Errorf("docs/protocol/%s.schema.json is missing", name)
		}
	}
}

// engineTasks are the tasks engine.Start dispatches for a task step with a timeout and an
// agent_loop step in parallel (a child's task).
func engineTasks(t *testing.T) []*protocol.Task {
	t.Helper()
	wf := workflow.New("schema")
	wf.Task("work", "h.work").WithTimeout(30 * time.Second).WithInput("{{input.topic}}")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	loop := workflow.New("loop")
	loop.AgentLoop("think", "h.think").WithMaxIterations(3)
	loopDef, err := loop.Build()
	if err != nil {
		t.Fatal(err)
	}
	var tasks []*protocol.Task
	for _, d := range []*workflow.Definition{def, loopDef} {
		_, cmds, err := engine.Start(d, "run-1", json.RawMessage(`{"topic":"<tax> & \"law\""}`), time.Date(2026, 11, 27, 10, 0, 0, 123456789, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			if c.Type == engine.CmdDispatch {
				tasks = append(tasks, c.Task)
			}
		}
	}
	if len(tasks) != 2 {
		t.Fatalf("engine.Start dispatched %d tasks, want 2", len(tasks))
	}
	return tasks
}

// fullTask is a resumed child's task with every member the engine may set.
func fullTask() *protocol.Task {
	t := resumedTask()
	t.Protocol = protocol.Version
	t.HumanInput = json.RawMessage(`{"answer":"yes"}`)
	t.Session, t.StartedBy = "customer-7", "alice"
	t.Decisions = []protocol.Decision{{CallID: "c1", Approve: true, By: "alice"}, {CallID: "c2", Message: "no", By: "bob", OnBehalfOf: "carol"}}
	t.ChildResults = []protocol.ChildResult{{CallID: "c3", RunID: "r-1/fan/1/3/2/c3", Status: protocol.RunCompleted,
		Output: json.RawMessage(`{"ok":true}`), StopReason: "completed", StopDetail: "done", Usage: &protocol.Usage{ModelCalls: 2, CostUSD: 0.01}},
		{CallID: "c4", RunID: "r-1/fan/1/3/2/c4", Status: protocol.RunFailed, Error: "boom"}}
	return t
}

func encodeTask(t *testing.T, tk *protocol.Task) []byte {
	t.Helper()
	data, err := wire.EncodeTask(tk)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func encodeEvent(t *testing.T, ev *protocol.Event) []byte {
	t.Helper()
	data, err := wire.EncodeEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestTaskSchema(t *testing.T) {
	for _, tk := range engineTasks(t) {
		data := encodeTask(t, tk)
		if !strings.Contains(string(data), `"protocol":1`) {
			t.Errorf("the engine's task %s does not say its protocol version", data)
		}
		protocoltest.Validate(t, "task.schema.json", data)
	}
	full := encodeTask(t, fullTask())
	protocoltest.Validate(t, "task.schema.json", full)
	// fullTask sets every member of protocol.Task, so that a member added to the type and not
	// to the schema fails here.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(full, &members); err != nil {
		t.Fatal(err)
	}
	for f := range reflect.TypeFor[protocol.Task]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if _, ok := members[name]; !ok && name != "-" {
			t.Errorf("fullTask leaves out the member %q (field %s): set it, and describe it in task.schema.json", name, f.Name)
		}
	}
	bare := sampleTask() // a task of an engine before the version: no "protocol" member
	protocoltest.Validate(t, "task.schema.json", encodeTask(t, bare))

	// A task whose values are too large for a message carries references.
	values := wire.NewValues(newMemStore(), 0, 0)
	big := fullTask()
	big.Input = json.RawMessage(`"` + strings.Repeat("x", 70<<10) + `"`)
	big.HumanInput = json.RawMessage(`"\u0000starts with NUL"`)
	out, err := values.OutTask(context.Background(), big)
	if err != nil {
		t.Fatal(err)
	}
	if !wire.IsRef(out.Input) || !wire.IsRef(out.HumanInput) {
		t.Fatalf("the values did not go out: %.80s %.80s", out.Input, out.HumanInput)
	}
	protocoltest.Validate(t, "task.schema.json", encodeTask(t, out))
	ref := out.Input
	protocoltest.Validate(t, "common.schema.json", ref) // common.schema.json accepts anything: it only defines
	var refText string
	if err := json.Unmarshal(ref, &refText); err != nil || !strings.HasPrefix(refText, "\x00reins-value:") {
		t.Fatalf("reference %s: %v", ref, err)
	}

	// Negative cases: the schema refuses what no engine sends.
	for name, edit := range map[string]func(m map[string]any){
		"no run_id":         func(m map[string]any) { delete(m, "run_id") },
		"no msg_id":         func(m map[string]any) { delete(m, "msg_id") },
		"no input":          func(m map[string]any) { delete(m, "input") },
		"attempt 0":         func(m map[string]any) { m["attempt"] = 0 },
		"protocol 2":        func(m map[string]any) { m["protocol"] = 2 },
		"unknown member":    func(m map[string]any) { m["priority"] = 1 },
		"step type switch":  func(m map[string]any) { m["type"] = "switch" },
		"timeout as string": func(m map[string]any) { m["timeout"] = "30s" },
		"decision without approve": func(m map[string]any) {
			m["decisions"] = []any{map[string]any{"call_id": "c1"}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			protocoltest.Refuse(t, "task.schema.json", edited(t, encodeTask(t, fullTask()), edit))
		})
	}
}

// edited decodes data, edits it and encodes it again.
func edited(t *testing.T, data []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// answers are an answer of each type to task tk, with what the worker adds to each.
func answers(tk *protocol.Task) map[protocol.EventType]*protocol.Event {
	at := time.Date(2026, 11, 27, 10, 0, 1, 5, time.UTC)
	usage := &protocol.Usage{ModelCalls: 1, ToolCalls: 2, InputTokens: 300, OutputTokens: 40, CostUSD: 0.0025}
	cont := wire.Answer(tk, protocol.EvContinued, at)
	cont.Output, cont.Nonce, cont.Usage = json.RawMessage(`{"step":2}`), "mabc-1x2y", usage
	cont.Record = &trace.Iteration{}
	done := wire.Answer(tk, protocol.EvCompleted, at)
	done.Output, done.Label, done.StopReason, done.StopDetail = json.RawMessage(`null`), "approved", "completed", "the goal is met"
	wait := wire.Answer(tk, protocol.EvWaiting, at)
	wait.Pending = []protocol.PendingCall{{CallID: "c1", Tool: "refund", Arguments: json.RawMessage(`{"amount":10}`)},
		{CallID: "c2", Tool: "research", Arguments: json.RawMessage(`{}`), Child: &protocol.ChildCall{Agent: "researcher"}}}
	fail := wire.Answer(tk, protocol.EvFailed, at)
	fail.Error, fail.Permanent = "bad input", true
	timedOut := wire.Answer(tk, protocol.EvTimedOut, at)
	timedOut.Error = "the handler did not answer within 30s"
	return map[protocol.EventType]*protocol.Event{protocol.EvContinued: cont, protocol.EvCompleted: done,
		protocol.EvWaiting: wait, protocol.EvFailed: fail, protocol.EvTimedOut: timedOut}
}

func TestAnswerSchemas(t *testing.T) {
	for _, tk := range append(engineTasks(t), fullTask()) {
		for typ, ev := range answers(tk) {
			data := encodeEvent(t, ev)
			if !strings.Contains(string(data), `"protocol":1`) {
				t.Errorf("the answer %s does not say its protocol version", data)
			}
			protocoltest.Validate(t, "answer.schema.json", data)
			protocoltest.Validate(t, "answer-"+string(typ)+".schema.json", data)
			for other := range answers(tk) {
				if other != typ {
					protocoltest.Refuse(t, "answer-"+string(other)+".schema.json", data)
				}
			}
		}
	}
	// An output by reference.
	values := wire.NewValues(newMemStore(), 0, 0)
	ev := answers(fullTask())[protocol.EvCompleted]
	ev.Output = json.RawMessage(`[` + strings.Repeat(`"x",`, 20<<10) + `1]`)
	out, err := values.OutEvent(context.Background(), ev)
	if err != nil || !wire.IsRef(out.Output) {
		t.Fatalf("the output did not go out: %v", err)
	}
	protocoltest.Validate(t, "answer-completed.schema.json", encodeEvent(t, out))

	// Negative cases: a missing required member, a member of another type, a wrong type.
	cases := map[string]struct {
		typ  protocol.EventType
		edit func(m map[string]any)
	}{
		"continued without nonce":  {protocol.EvContinued, func(m map[string]any) { delete(m, "nonce") }},
		"continued without output": {protocol.EvContinued, func(m map[string]any) { delete(m, "output") }},
		"completed without at":     {protocol.EvCompleted, func(m map[string]any) { delete(m, "at") }},
		"completed without item":   {protocol.EvCompleted, func(m map[string]any) { delete(m, "item") }},
		"completed with pending": {protocol.EvCompleted, func(m map[string]any) {
			m["pending"] = []any{map[string]any{"call_id": "c", "tool": "t", "arguments": nil}}
		}},
		"waiting without pending": {protocol.EvWaiting, func(m map[string]any) { delete(m, "pending") }},
		"waiting, empty pending":  {protocol.EvWaiting, func(m map[string]any) { m["pending"] = []any{} }},
		"failed without error":    {protocol.EvFailed, func(m map[string]any) { delete(m, "error") }},
		"failed, permanent false": {protocol.EvFailed, func(m map[string]any) { m["permanent"] = false }},
		"timed_out without error": {protocol.EvTimedOut, func(m map[string]any) { delete(m, "error") }},
		"an unknown member":       {protocol.EvCompleted, func(m map[string]any) { m["reason"] = "x" }},
		"usage with a string":     {protocol.EvCompleted, func(m map[string]any) { m["usage"] = map[string]any{"model_calls": "1"} }},
		"attempt 0":               {protocol.EvFailed, func(m map[string]any) { m["attempt"] = 0 }},
		"protocol 2":              {protocol.EvCompleted, func(m map[string]any) { m["protocol"] = 2 }},
		"a time that is not one":  {protocol.EvCompleted, func(m map[string]any) { m["at"] = "yesterday" }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			data := edited(t, encodeEvent(t, answers(fullTask())[c.typ]), c.edit)
			protocoltest.Refuse(t, "answer-"+string(c.typ)+".schema.json", data)
		})
	}
}

// TestDeltaSchema: a delta as a worker publishes it (json.Marshal, worker.PublishDelta).
func TestDeltaSchema(t *testing.T) {
	for _, d := range []protocol.Delta{
		{RunID: "run-1", Step: "draft", Iteration: 1, Turn: 1, Text: "Hel"},
		{RunID: "run-1/lead/1/1/c1", Step: "fan#2", Iteration: 3, Turn: 2, CallIndex: 1, CallID: "call_1", CallName: "refund", Arguments: `{"amo`},
		{RunID: "run-1", Step: "draft"},
	} {
		data, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		protocoltest.Validate(t, "delta.schema.json", data)
	}
	protocoltest.Refuse(t, "delta.schema.json", []byte(`{"run_id":"r","iteration":1,"text":"x"}`))
	protocoltest.Refuse(t, "delta.schema.json", []byte(`{"run_id":"r","step":"s","iteration":1,"text":7}`))
}
