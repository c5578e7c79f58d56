package wire_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// sampleTask is a task of the second iteration of child 3 of step fan, with every field set.
func sampleTask() *protocol.Task {
	return &protocol.Task{
		RunID: "r-1", Step: "fan", Item: 3, Body: "research", Type: workflow.Agent, Handler: protocol.HandlerAgent,
		Workflow: "abc123", Model: "investigator", Prompt: "p", Instructions: "i", Goal: "g",
		Activation: 1, Iteration: 2, Attempt: 1, Input: json.RawMessage(`{"topic":"x"}`),
		MsgID:     "r-1/fan#3/1/2/1",
		NotBefore: time.Date(2026, 11, 21, 10, 0, 0, 5, time.UTC), Timeout: 90 * time.Second,
	}
}

func TestTaskRoundTrip(t *testing.T) {
	human := sampleTask()
	human.HumanInput = json.RawMessage(`"Order O-7, please."`)
	for _, want := range []*protocol.Task{sampleTask(), resumedTask(), human} {
		data, err := wire.EncodeTask(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.DecodeTask(data)
		if err != nil {
			t.Fatal(err)
		}
		if !taskEqual(got, want) {
			t.Errorf("decoded %+v\nwant %+v", got, want)
		}
	}
	want := sampleTask()
	subj, err := natsbox.Names{}.TaskSubject(want.Handler)
	if err != nil || subj != "reins.task."+protocol.HandlerAgent {
		t.Errorf("TaskSubject = %q, %v", subj, err)
	}
	if subj, err := (natsbox.Names{}).TaskSubject("payments.charge"); err != nil || subj != "reins.task.payments.charge" {
		t.Errorf("TaskSubject(payments.charge) = %q, %v: a dotted handler names a subject of several tokens", subj, err)
	}
	for _, h := range []string{"a..b", "a.", "a b", "a*"} {
		if _, err := (natsbox.Names{}).TaskSubject(h); err == nil {
			t.Errorf("TaskSubject accepted handler %q, which cannot name a subject", h)
		}
	}
}

func TestDecodeTaskErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"empty", ``, "task: malformed message: unexpected end of JSON input"},
		{"not JSON", `{"run_id":`, "task: malformed message: unexpected end of JSON input"},
		{"text", `hello`, "task: malformed message: invalid character 'h'..."},
		{"array", `[]`, "task: malformed message: json: cannot unmarshal array..."},
		{"wrong type", `{"run_id":1}`, "task: malformed message: json: cannot unmarshal number..."},
		{"null", `null`, "task: malformed message: no run_id"},
		{"no run_id", `{"step":"s","msg_id":"m","activation":1,"iteration":1,"attempt":1}`, "task: malformed message: no run_id"},
		{"no step", `{"run_id":"r","msg_id":"m","activation":1,"iteration":1,"attempt":1}`, "task r: malformed message: no step"},
		{"no msg_id", `{"run_id":"r","step":"s","activation":1,"iteration":1,"attempt":1}`, "task r/s: malformed message: no msg_id"},
		{"zero activation", `{"run_id":"r","step":"s","msg_id":"r/s/0/1/1","iteration":1,"attempt":1}`, "task r/s/0/1/1: malformed message: activation, iteration and attempt must be 1 or more"},
		{"zero iteration", `{"run_id":"r","step":"s","msg_id":"r/s/1/0/1","activation":1,"attempt":1}`, "task r/s/1/0/1: malformed message: activation, iteration and attempt must be 1 or more"},
		{"zero attempt", `{"run_id":"r","step":"s","msg_id":"r/s/1/1/0","activation":1,"iteration":1,"attempt":0}`, "task r/s/1/1/0: malformed message: activation, iteration and attempt must be 1 or more"},
		{"negative attempt", `{"run_id":"r","step":"s","msg_id":"m","activation":1,"iteration":1,"attempt":-1}`, "task m: malformed message: activation, iteration and attempt must be 1 or more"},
		{"bad time", `{"run_id":"r","step":"s","msg_id":"m","not_before":"yesterday"}`, `task: malformed message: parsing time...`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, err := wire.DecodeTask([]byte(tc.body))
			if err == nil {
				t.Fatalf("DecodeTask(%s) = %+v, want an error", tc.body, task)
			}
			if !errors.Is(err, wire.ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
			checkMessage(t, err, tc.want)
		})
	}
}

// sampleEvents has an event of every type, with every field its type uses.
func sampleEvents() []*protocol.Event {
	at := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	task := sampleTask()
	completed := wire.Answer(task, protocol.EvCompleted, at)
	completed.Output, completed.Label, completed.StopReason = json.RawMessage(`{"answer":"yes"}`), "completed", "completed"
	completed.Usage = &protocol.Usage{ModelCalls: 2, ToolCalls: 1, InputTokens: 100, OutputTokens: 20, CostUSD: 0.001}
	continued := wire.Answer(task, protocol.EvContinued, at)
	continued.Output, continued.Nonce = json.RawMessage(`[1,2]`), "n0nce"
	failed := wire.Answer(task, protocol.EvFailed, at)
	failed.Error, failed.Permanent = "boom", true
	waiting := wire.Answer(task, protocol.EvWaiting, at)
	waiting.Pending = []protocol.PendingCall{{CallID: "call_1", Tool: "refund", Arguments: json.RawMessage(`{"order_id":"O-1"}`)}}
	return []*protocol.Event{
		{RunID: "r-1", Type: protocol.EvStart, At: at, Input: json.RawMessage(`{"order_id":"O-1"}`), Item: -1, Workflow: "abc123",
			Parent: &protocol.Parent{RunID: "r-0", Step: "sub", Item: -1, Activation: 2}, Registered: &protocol.Registration{Name: "refund", Version: 2}},
		completed, continued, failed, waiting,
		wire.Answer(task, protocol.EvTimedOut, at),
		{RunID: "r-1", Type: protocol.EvTick, At: at, Step: "wait", Item: -1, Activation: 1},
		{RunID: "r-1", Type: protocol.EvCancel, At: at, Item: -1, Reason: "no longer needed"},
		{RunID: "r-1", Type: protocol.EvChildFinished, At: at, Step: "sub", Item: -1, Activation: 1, Child: "r-1/sub/1", Status: protocol.RunCompleted, Output: json.RawMessage(`"done"`)},
	}
}

func TestEventRoundTrip(t *testing.T) {
	for _, want := range sampleEvents() {
		t.Run(string(want.Type), func(t *testing.T) {
			data, err := wire.EncodeEvent(want)
			if err != nil {
				t.Fatal(err)
			}
			got, err := wire.DecodeEvent(data)
			if err != nil {
				t.Fatal(err)
			}
			if !eventEqual(got, want) {
				t.Errorf("decoded %+v\nwant %+v", got, want)
			}
			subj, err := natsbox.Names{}.EventSubject(want.RunID)
			if err != nil || subj != "reins.event.11.r-1" {
				t.Errorf("EventSubject = %q, %v", subj, err)
			}
		})
	}
	if _, err := (natsbox.Names{}).EventSubject("a b"); err == nil {
		t.Error("EventSubject accepted run id \"a b\"")
	}
}

func TestDecodeEventErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"empty", ``, "event: malformed message: unexpected end of JSON input"},
		{"not JSON", `{"run_id":"r",`, "event: malformed message: unexpected end of JSON input"},
		{"string", `"start"`, "event: malformed message: json: cannot unmarshal string..."},
		{"wrong type", `{"run_id":"r","type":"start","item":"x"}`, "event: malformed message: json: cannot unmarshal string..."},
		{"bad time", `{"run_id":"r","type":"start","at":"now"}`, `event: malformed message: parsing time...`},
		{"null", `null`, "event: malformed message: no run_id"},
		{"no run_id", `{"type":"start"}`, "event: malformed message: no run_id"},
		{"no type", `{"run_id":"r-1","step":"s"}`, "event for run r-1: malformed message: no type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := wire.DecodeEvent([]byte(tc.body))
			if err == nil {
				t.Fatalf("DecodeEvent(%s) = %+v, want an error", tc.body, ev)
			}
			if !errors.Is(err, wire.ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
			checkMessage(t, err, tc.want)
		})
	}
}

func TestAnswer(t *testing.T) {
	task := sampleTask()
	at := time.Date(2026, 11, 21, 11, 0, 0, 0, time.FixedZone("CET", 3600))
	ev := wire.Answer(task, protocol.EvFailed, at)
	want := &protocol.Event{RunID: "r-1",
		Type: protocol.EvFailed, At: at.UTC(), Step: "fan", Item: 3, Activation: 1, Iteration: 2, Attempt: 1,
		Protocol: protocol.Version, // the worker declares the version it answers in
	}
	if !eventEqual(ev, want) || ev.At.Location() != time.UTC {
		t.Errorf("Answer = %+v, want %+v in UTC", ev, want)
	}
	// The answer to a resumed task carries its Resume, which the engine matches.
	resumed := resumedTask()
	ev = wire.Answer(resumed, protocol.EvWaiting, at)
	want.Type, want.Resume = protocol.EvWaiting, 2
	if !eventEqual(ev, want) {
		t.Errorf("Answer to a resumed task = %+v, want %+v", ev, want)
	}
}

// resumedTask is sampleTask dispatched again, for the second time, after humans decided.
func resumedTask() *protocol.Task {
	t := sampleTask()
	t.Resume, t.MsgID = 2, t.MsgID+"/r2"
	t.Decisions = []protocol.Decision{{CallID: "call_1", Approve: true}, {CallID: "call_2", Message: "no"}}
	return t
}

func TestEventMsgID(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	task := sampleTask()
	stepTask := &protocol.Task{RunID: "r-1", Step: "ask", Item: -1, Activation: 2, Iteration: 1, Attempt: 3, MsgID: "r-1/ask/2/1/3"}
	withNonce := wire.Answer(task, protocol.EvContinued, at)
	withNonce.Nonce = "n1"
	otherNonce := wire.Answer(task, protocol.EvContinued, at)
	otherNonce.Nonce = "n2"
	resumed := resumedTask()
	resumedNonce := wire.Answer(resumed, protocol.EvContinued, at)
	resumedNonce.Nonce = "n1"
	decision := &protocol.Event{RunID: "r-1", Type: protocol.EvDecision, At: at, Step: "fan", Item: 3,
		Activation: 1, Iteration: 2, Resume: 2, CallID: "call_1", Approve: true, Nonce: "d1"}
	decisionAny := &protocol.Event{RunID: "r-1", Type: protocol.EvDecision, At: at, Step: "ask", Item: -1, Nonce: "d2"}
	signal := &protocol.Event{RunID: "r-1", Type: protocol.EvSignal, At: at, Item: -1, Name: "go", Nonce: "s1"}
	for _, tc := range []struct {
		name  string
		ev    *protocol.Event
		child string
		want  string
	}{
		{"start", &protocol.Event{RunID: "r-1", Type: protocol.EvStart, At: at, Item: -1}, "", "r-1/start"},
		{"cancel", &protocol.Event{RunID: "r-1", Type: protocol.EvCancel, At: at, Item: -1, Reason: "x"}, "", "r-1/cancel"},
		{"completed", wire.Answer(task, protocol.EvCompleted, at), "", task.MsgID + "/completed"},
		{"completed of a step", wire.Answer(stepTask, protocol.EvCompleted, at), "", stepTask.MsgID + "/completed"},
		{"completed of a resumed task", wire.Answer(resumed, protocol.EvCompleted, at), "", resumed.MsgID + "/completed"},
		{"waiting", wire.Answer(task, protocol.EvWaiting, at), "", task.MsgID + "/waiting"},
		{"continued of a resumed task", resumedNonce, "", resumed.MsgID + "/continued/n1"},
		{"failed of a resumed task", wire.Answer(resumed, protocol.EvFailed, at), "", "r-1/fan#3/1/2/1/r2/failed"},
		{"decision", decision, "", "r-1/fan#3/1/2/0/r2/decision/d1"},
		{"decision of a step", decisionAny, "", "r-1/ask/0/0/0/decision/d2"},
		{"signal", signal, "", "r-1//0/0/0/signal/s1"},
		{"continued", wire.Answer(task, protocol.EvContinued, at), "", task.MsgID + "/continued"},
		{"continued with a nonce", withNonce, "", task.MsgID + "/continued/n1"},
		{"continued with another nonce", otherNonce, "", task.MsgID + "/continued/n2"},
		{"failed", wire.Answer(task, protocol.EvFailed, at), "", task.MsgID + "/failed"},
		{"timed_out", wire.Answer(stepTask, protocol.EvTimedOut, at), "", stepTask.MsgID + "/timed_out"},
		{"tick", &protocol.Event{RunID: "r-1", Type: protocol.EvTick, At: at, Step: "wait", Item: -1, Activation: 4}, "", "r-1/tick/wait/-1/4/" + "1795255200123456789"},
		{"tick of a child", &protocol.Event{RunID: "r-1", Type: protocol.EvTick, At: at.Add(time.Nanosecond), Step: "fan", Item: 2, Activation: 1}, "", "r-1/tick/fan/2/1/1795255200123456790"},
		{"deadline tick", &protocol.Event{RunID: "r-1", Type: protocol.EvTick, At: at, Item: 0}, "", "r-1/tick//0/0/1795255200123456789"},
		{"child_finished", &protocol.Event{RunID: "r-1", Type: protocol.EvChildFinished, At: at, Step: "sub", Item: -1, Activation: 1, Output: json.RawMessage(`1`)}, "r-1/sub/1", "r-1/sub/1/finished"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := wire.EventMsgID(tc.ev, tc.child); got != tc.want {
				t.Errorf("EventMsgID = %q, want %q", got, tc.want)
			}
		})
	}

	// Every event of sampleEvents has its own id, and so has each answer of the resumed task
	// and of the task that paused (same iteration and attempt); the same event always the same
	// one.
	seen := map[string]protocol.EventType{}
	all := sampleEvents()
	for _, typ := range []protocol.EventType{protocol.EvWaiting, protocol.EvCompleted, protocol.EvFailed, protocol.EvTimedOut} {
		all = append(all, wire.Answer(resumed, typ, at))
	}
	for _, ev := range all {
		id := wire.EventMsgID(ev, "r-1/sub/1")
		if other, dup := seen[id]; dup {
			t.Errorf("%s and %s events share the id %q", other, ev.Type, id)
		}
		seen[id] = ev.Type
		if again := wire.EventMsgID(ev, "r-1/sub/1"); again != id {
			t.Errorf("%s: id %q then %q", ev.Type, id, again)
		}
	}
	// The output of a child_finished event is not part of its id.
	a := &protocol.Event{RunID: "r-1", Type: protocol.EvChildFinished, At: at, Output: json.RawMessage(`1`)}
	b := &protocol.Event{RunID: "r-1", Type: protocol.EvChildFinished, At: at.Add(time.Hour), Output: json.RawMessage(`2`)}
	if wire.EventMsgID(a, "c") != wire.EventMsgID(b, "c") {
		t.Error("two child_finished events of one child have different ids")
	}
}

// TestServerRunID: the ids of the server's space, with the reason a client may not choose one.
func TestServerRunID(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"t-nightly-abc", `an id that begins with "t-" names a run of a trigger`},
		{"t-", `begins with "t-"`},
		{"r-1-fork-2", `an id that ends in "-fork-N" names a fork`},
		{"r-1-fork-2-fork-10", `ends in "-fork-N"`},
		{"p/step/1", `an id with '/' names a sub-run`},
		{"-fork-", ""},
		{"my-fork-test", ""},
		{"r-1-fork-", ""},
		{"r-1-fork-2a", ""},
		{"T-upper", ""},
		{"at-1", ""},
		{"fork-1", ""},
		{"r-fork", ""},
	} {
		why := wire.ServerRunID(tc.id)
		err := wire.CheckClientRunID(tc.id)
		switch {
		case tc.want == "" && (why != "" || err != nil):
			t.Errorf("%q: ServerRunID %q, CheckClientRunID %v; want a client's", tc.id, why, err)
		case tc.want != "" && (!strings.Contains(why, tc.want) || err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: ServerRunID %q, CheckClientRunID %v; want %q", tc.id, why, err, tc.want)
		}
	}
}

func TestCheckRunID(t *testing.T) {
	long := strings.Repeat("a", wire.MaxRunIDLen)
	for _, tc := range []struct {
		id   string
		want string // "" when valid
	}{
		{"r-jkqceekiwrndor7gahfq", ""},
		{"A_z-09", ""},
		{"x", ""},
		{long, ""},
		{"", `run id "": want 1 to 64 characters`},
		{long + "a", `want 1 to 64 characters`},
		{"a.b", `run id "a.b": the character '.' at byte 1 is not one of A-Z a-z 0-9 _ -`},
		{"a b", `the character ' ' at byte 1`},
		{"a/b", `the character '/' at byte 1`},
		{"*", `the character '*' at byte 0`},
		{"ab>", `the character '>' at byte 2`},
		{"a\n", `the character '\n' at byte 1`},
		{"é", `the character 'é' at byte 0`},
		{"a\xff", "the character '\uFFFD' at byte 1"},
	} {
		err := wire.CheckRunID(tc.id)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckRunID(%q): %v", tc.id, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckRunID(%q) = %v, want an error with %q", tc.id, err, tc.want)
		}
		if err == nil {
			// A valid run id is a subject token and a KV key.
			if _, err := natsbox.EventSubject(tc.id); err != nil {
				t.Errorf("run id %q is valid but not a subject token: %v", tc.id, err)
			}
			if !kvKey.MatchString(tc.id) {
				t.Errorf("run id %q is valid but not a KV key", tc.id)
			}
		}
	}
}

// kvKey is what a key of a NATS KV bucket may hold (nats.go's validKeyRe).
var kvKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func TestCheckpointScope(t *testing.T) {
	for _, tc := range []struct {
		run, step        string
		item, activation int
		want             string
	}{
		{"r-1", "loop", -1, 1, "r-1/loop/1"},
		{"r-1", "fan", 0, 2, "r-1/fan=0/2"},
		{"r-1", "fan", 12, 3, "r-1/fan=12/3"},
		{"r-1/sub/1", "work", -1, 1, "r-1/sub/1/work/1"},
		{"r.1", "a b*>", -1, 1, "r_1/a_b__/1"},
		{"r-1", "stép", -1, 1, "r-1/st_p/1"},
		{"r-1", "bad\xffbyte", -1, 1, "r-1/bad_byte/1"},
		{"r-1", "tab\tnewline\n", 4, 1, "r-1/tab_newline_=4/1"},
	} {
		got := wire.CheckpointScope(tc.run, tc.step, tc.item, tc.activation)
		if got != tc.want {
			t.Errorf("CheckpointScope(%q, %q, %d, %d) = %q, want %q", tc.run, tc.step, tc.item, tc.activation, got, tc.want)
		}
		if strings.Contains(got, ".") || !kvKey.MatchString(got) {
			t.Errorf("scope %q is not a dot-free KV key", got)
		}
		for _, w := range [][2]int{{1, 0}, {1, 7}, {12, 0}, {0, 123}} {
			key := wire.CheckpointKey(got, w[0], w[1])
			if !kvKey.MatchString(key) {
				t.Errorf("key %q is not a KV key", key)
			}
			scope, iter, n, err := wire.ParseCheckpointKey(key)
			if err != nil || scope != got || iter != w[0] || n != w[1] {
				t.Errorf("ParseCheckpointKey(%q) = %q, %d, %d, %v; want %q, %d, %d", key, scope, iter, n, err, got, w[0], w[1])
			}
			for _, resume := range []int{0, 1, 12} {
				want := wire.CheckpointWrite{Scope: got, Iteration: w[0], Resume: resume, N: w[1]}
				key := want.Key()
				if !kvKey.MatchString(key) {
					t.Errorf("key %q is not a KV key", key)
				}
				if w, err := wire.ParseCheckpointWrite(key); err != nil || w != want {
					t.Errorf("ParseCheckpointWrite(%q) = %+v, %v; want %+v", key, w, err, want)
				}
			}
		}
	}
	for _, tc := range []struct {
		w    wire.CheckpointWrite
		want string
	}{
		{wire.CheckpointWrite{Scope: "r-1/loop/1", Iteration: 3}, "r-1/loop/1.3.0"},
		{wire.CheckpointWrite{Scope: "r-1/loop/1", Iteration: 3, N: 2}, "r-1/loop/1.3.2"},
		{wire.CheckpointWrite{Scope: "r-1/loop/1", Iteration: 3, Resume: 1}, "r-1/loop/1.3.r1.0"},
		{wire.CheckpointWrite{Scope: "r-1/loop/1", Iteration: 3, Resume: 10, N: 4}, "r-1/loop/1.3.r10.4"},
	} {
		if got := tc.w.Key(); got != tc.want {
			t.Errorf("%+v.Key() = %q, want %q", tc.w, got, tc.want)
		}
	}
	if got := wire.CheckpointKey("r-1/loop/1", 3, 0); got != "r-1/loop/1.3.0" {
		t.Errorf("CheckpointKey = %q", got)
	}
	// ParseCheckpointKey reads first tasks' keys only.
	if _, _, _, err := wire.ParseCheckpointKey("r-1/loop/1.3.r1.0"); err == nil || !errors.Is(err, wire.ErrMalformed) ||
		!strings.Contains(err.Error(), "a resumed task's write") {
		t.Errorf("ParseCheckpointKey of a resumed write: %v, want ErrMalformed saying so", err)
	}
}

func TestParseCheckpointKeyErrors(t *testing.T) {
	for _, key := range []string{
		"", "scope", "scope.1", "scope.1.2.3", ".1.2", "scope..2", "scope.1.",
		"scope.x.1", "scope.1.y", "scope.1.2x",
		"scope.-1.0", "scope.1.-2", "scope.+1.0", "scope.01.0", "scope.1.00",
		"scope.99999999999999999999.0",
		"scope.1.r0.0", "scope.1.r.0", "scope.1.r01.0", "scope.1.R1.0", "scope.1.r-1.0", "scope.1.r+1.0",
		"scope.1.r1", "scope.1.r1.", "scope.1.r1.x", "scope.1.r1.01", "scope.x.r1.0", ".1.r1.0", "scope.1.r1.0.0",
	} {
		w, err := wire.ParseCheckpointWrite(key)
		if err == nil {
			t.Errorf("ParseCheckpointWrite(%q) = %+v; want an error", key, w)
			continue
		}
		if !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), "checkpoint key "+jsonQuote(key)) {
			t.Errorf("ParseCheckpointWrite(%q): %v, want ErrMalformed naming the key", key, err)
		}
		scope, iter, n, err := wire.ParseCheckpointKey(key)
		if err == nil {
			t.Errorf("ParseCheckpointKey(%q) = %q, %d, %d; want an error", key, scope, iter, n)
			continue
		}
		if !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), "checkpoint key "+jsonQuote(key)) {
			t.Errorf("ParseCheckpointKey(%q): %v, want ErrMalformed naming the key", key, err)
		}
	}
}

func TestEffectKey(t *testing.T) {
	a, b := wire.EffectKey("r-1/step/3/0\x00refund\x00{}"), wire.EffectKey("r-1/step/3/1\x00refund\x00{}")
	if a == b || a != wire.EffectKey("r-1/step/3/0\x00refund\x00{}") {
		t.Errorf("EffectKey is not one key per id: %q, %q", a, b)
	}
	for _, id := range []string{"", "a.b c*>", strings.Repeat("é", 500)} {
		if k := wire.EffectKey(id); len(k) != 64 || !kvKey.MatchString(k) || strings.Contains(k, ".") {
			t.Errorf("EffectKey(%q) = %q, want 64 hex digits", id, k)
		}
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// taskEqual and eventEqual compare decoded values: JSON values compact, times as instants.
func taskEqual(a, b *protocol.Task) bool {
	x, y := *a, *b
	if !x.NotBefore.Equal(y.NotBefore) || !jsonEqual(x.Input, y.Input) || !jsonEqual(x.HumanInput, y.HumanInput) {
		return false
	}
	x.NotBefore, y.NotBefore = time.Time{}, time.Time{}
	x.Input, y.Input, x.HumanInput, y.HumanInput = nil, nil, nil, nil
	if len(x.Decisions) == 0 && len(y.Decisions) == 0 { // [] encodes as absent (omitempty)
		x.Decisions, y.Decisions = nil, nil
	}
	return reflect.DeepEqual(x, y)
}

func eventEqual(a, b *protocol.Event) bool {
	x, y := *a, *b
	if !x.At.Equal(y.At) || !jsonEqual(x.Input, y.Input) || !jsonEqual(x.Output, y.Output) {
		return false
	}
	if (x.Usage == nil) != (y.Usage == nil) || x.Usage != nil && *x.Usage != *y.Usage {
		return false
	}
	if (x.Parent == nil) != (y.Parent == nil) || x.Parent != nil && *x.Parent != *y.Parent {
		return false
	}
	if len(x.Pending) != len(y.Pending) {
		return false
	}
	for i := range x.Pending {
		p, q := x.Pending[i], y.Pending[i]
		if p.CallID != q.CallID || p.Tool != q.Tool || !jsonEqual(orNull(p.Arguments), orNull(q.Arguments)) {
			return false
		}
	}
	x.At, y.At = time.Time{}, time.Time{}
	x.Input, y.Input, x.Output, y.Output = nil, nil, nil, nil
	x.Usage, y.Usage, x.Parent, y.Parent = nil, nil, nil, nil
	x.Pending, y.Pending = nil, nil
	return reflect.DeepEqual(x, y)
}

// orNull is v, or null when v is absent: a pending call's arguments have no omitempty, so
// absent ones encode as null.
func orNull(v json.RawMessage) json.RawMessage {
	if v == nil {
		return json.RawMessage("null")
	}
	return v
}

// jsonEqual compares two JSON texts compacted; nil is the absent value, unlike null.
func jsonEqual(a, b json.RawMessage) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	return compact(a) == compact(b)
}

// compact is raw as encoding/json writes it: compacted, with <, >, &, U+2028 and U+2029
// escaped, as the encoders write raw values, so that a value read back from an encoding
// compares equal to the one encoded.
func compact(raw json.RawMessage) string {
	out, err := json.Marshal(raw)
	if err != nil {
		return string(raw)
	}
	return string(out)
}

// checkMessage checks an error's message: want exactly, or, when want ends with "...", a
// message starting with the rest (the end is encoding/json's wording).
func checkMessage(t *testing.T, err error, want string) {
	t.Helper()
	if prefix, ok := strings.CutSuffix(want, "..."); ok {
		if !strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("error %q\nwant   %q", err, want)
		}
		return
	}
	if err.Error() != want {
		t.Errorf("error %q\nwant   %q", err, want)
	}
}

// TestCheckSender: who may send which event on which subject of a run, with the sentence of a
// refusal naming the sender.
func TestCheckSender(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(typ protocol.EventType, mod ...func(*protocol.Event)) *protocol.Event {
		e := &protocol.Event{RunID: "r-1", Type: typ, At: at, Item: -1}
		for _, m := range mod {
			m(e)
		}
		return e
	}
	parent := func(e *protocol.Event) { e.Parent = &protocol.Parent{RunID: "p", Step: "s", Item: -1, Activation: 1} }
	id := func(s string) func(*protocol.Event) { return func(e *protocol.Event) { e.RunID = s } }
	const (
		worker = ""
		eng    = natsbox.EngineKind
		submit = natsbox.SubmitKind
		human  = natsbox.HumanKind
	)
	for _, tc := range []struct {
		kind string
		ev   *protocol.Event
		want string // "" when taken
	}{
		{worker, ev(protocol.EvCompleted), ""},
		{worker, ev(protocol.EvContinued), ""},
		{worker, ev(protocol.EvWaiting), ""},
		{worker, ev(protocol.EvFailed), ""},
		{worker, ev(protocol.EvTimedOut), ""},
		{worker, ev(protocol.EvCancel), "a worker may not cancel run r-1: workers answer tasks"},
		{worker, ev(protocol.EvStart), "a worker may not send a start event for run r-1"},
		{worker, ev(protocol.EvStart, parent), "a worker may not send a start event for run r-1"},
		{worker, ev(protocol.EvTick), "a worker may not send a tick event for run r-1: on the run's subject workers only answer tasks, and only the engine makes tick events"},
		{worker, ev(protocol.EvChildFinished), "a worker may not send a child_finished event"},
		{worker, ev(protocol.EvGranted), "a worker may not send a granted event"},
		{worker, ev(protocol.EvDecision), "a worker may not send a decision event for run r-1: a person's decisions come on the subject of its principal"},
		{worker, ev(protocol.EvSignal), "a worker may not send a signal event"},
		{eng, ev(protocol.EvStart), ""},
		{eng, ev(protocol.EvStart, parent, id("p/s/1")), ""},
		{eng, ev(protocol.EvStart, id("t-x-abc")), ""},
		{eng, ev(protocol.EvCancel), ""},
		{eng, ev(protocol.EvTick), ""},
		{eng, ev(protocol.EvChildFinished), ""},
		{eng, ev(protocol.EvGranted), ""},
		{eng, ev(protocol.EvFailed), ""},
		{eng, ev(protocol.EvDecision), "the engine's subject of run r-1 carries no decision event"},
		{eng, ev(protocol.EvResume), "carries no resume event"},
		{submit, ev(protocol.EvStart), ""},
		{submit, ev(protocol.EvCancel), ""},
		{human, ev(protocol.EvCancel), ""},
		{human, ev(protocol.EvDecision), ""},
		{human, ev(protocol.EvResume), ""},
		{human, ev(protocol.EvSignal), ""},
		{submit, ev(protocol.EvStart, parent), "principal bob may not start run r-1 as a sub-run of run p: only the engine starts sub-runs"},
		{submit, ev(protocol.EvStart, id("t-nightly-abc")), `principal bob may not start run t-nightly-abc: an id that begins with "t-" names a run of a trigger, which only the server starts`},
		{submit, ev(protocol.EvStart, id("r-fork-1")), `principal bob may not start run r-fork-1: an id that ends in "-fork-N" names a fork`},
		{submit, ev(protocol.EvStart, id("p/s/1")), "principal bob may not start run p/s/1: an id with '/' names a sub-run, which only the engine starts"},
		{submit, ev(protocol.EvTick), "principal bob may not send a tick event for run r-1: only the engine and workers make it"},
		{human, ev(protocol.EvChildFinished), "principal bob may not send a child_finished event"},
		{human, ev(protocol.EvGranted), "principal bob may not send a granted event"},
		{human, ev(protocol.EvCompleted), "principal bob may not send a completed event"},
		{human, ev(protocol.EvStart), "principal bob may not send a start event for run r-1 on its human subject: it goes on its submit subject"},
		{submit, ev(protocol.EvDecision), "principal bob may not send a decision event for run r-1 on its submit subject: it goes on its human subject"},
		{submit, ev("x"), "principal bob may not send a x event for run r-1: reins knows no such event of a person"},
	} {
		err := wire.CheckSender(tc.kind, "bob", tc.ev)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q %s %s: %v; want it taken", tc.kind, tc.ev.Type, tc.ev.RunID, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q %s %s: %v; want %q", tc.kind, tc.ev.Type, tc.ev.RunID, err, tc.want)
		case err != nil && strings.Count(err.Error(), ". ") > 0:
			t.Errorf("%q %s: %q is more than one sentence", tc.kind, tc.ev.Type, err)
		}
	}
}

// TestSender: what the subject says of the sender, by kind of subject: a worker is nobody, a
// person is the principal of its subject, the engine is the engine but on a start, which is by
// the principal it starts the run as (a trigger's) or by nobody (a sub-run's).
func TestSender(t *testing.T) {
	n := natsbox.Names{}
	run, _ := n.EventSubject("r-1")
	eng, _ := n.EngineSubject("r-1")
	sam, _ := n.PrincipalSubject("r-1", natsbox.SubmitKind, "sam")
	for _, tc := range []struct {
		name, subject string
		ev            protocol.Event
		kind, by, obo string
	}{
		{"worker", run, protocol.Event{Type: protocol.EvCompleted, By: "x", OnBehalfOf: "y"}, "", "", ""},
		{"person", sam, protocol.Event{Type: protocol.EvCancel, By: "x", OnBehalfOf: "y"}, natsbox.SubmitKind, "sam", "y"},
		{"engine's cancel", eng, protocol.Event{Type: protocol.EvCancel, By: "x", OnBehalfOf: "y"}, natsbox.EngineKind, natsbox.EngineName, ""},
		{"trigger's start", eng, protocol.Event{Type: protocol.EvStart, By: "x", OnBehalfOf: "bob"}, natsbox.EngineKind, "bob", ""},
		{"sub-run's start, as its parent's submitter", eng, protocol.Event{Type: protocol.EvStart, By: "x", OnBehalfOf: "bob", Parent: &protocol.Parent{RunID: "p"}}, natsbox.EngineKind, "bob", ""},
		{"sub-run's start of a run of nobody's", eng, protocol.Event{Type: protocol.EvStart, By: "x", Parent: &protocol.Parent{RunID: "p"}}, natsbox.EngineKind, "", ""},
	} {
		ev := tc.ev
		ev.RunID = "r-1"
		runID, kind, principal, ok := n.ParseEventSubject(tc.subject)
		if ok {
			ok = wire.Sender(runID, kind, principal, &ev)
		}
		if !ok || kind != tc.kind || ev.By != tc.by || ev.OnBehalfOf != tc.obo {
			t.Errorf("%s: kind %q by %q on behalf of %q (%t); want %q %q %q", tc.name, kind, ev.By, ev.OnBehalfOf, ok, tc.kind, tc.by, tc.obo)
		}
	}
	other := protocol.Event{RunID: "r-2", Type: protocol.EvCancel}
	if runID, kind, principal, _ := n.ParseEventSubject(eng); wire.Sender(runID, kind, principal, &other) {
		t.Error("the engine's subject of run r-1 carries an event of run r-2")
	}
}

// FuzzServerRunID: an id a client may start (CheckClientRunID) is a valid run id outside the
// server's space, a subject token and a KV key; an id in the server's space is refused with
// the reason ServerRunID gives, and has one of the server's forms.
func FuzzServerRunID(f *testing.F) {
	for _, s := range []string{"r-1", "t-x", "t-", "a/b/1", "x-fork-1", "-fork-", "T-x", "", "a.b", "é", strings.Repeat("a", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := wire.CheckClientRunID(id)
		why := wire.ServerRunID(id)
		syntax := wire.CheckRunID(id)
		switch {
		case err == nil && (why != "" || syntax != nil):
			t.Fatalf("CheckClientRunID(%q) took it: the server's (%q), syntax %v", id, why, syntax)
		case err != nil && why == "" && syntax == nil:
			t.Fatalf("CheckClientRunID(%q) = %v for a valid id outside the server's space", id, err)
		case err != nil && why != "" && !strings.Contains(err.Error(), why):
			t.Fatalf("CheckClientRunID(%q) = %v does not say why: %s", id, err, why)
		}
		if why != "" && !strings.Contains(id, "/") && !strings.HasPrefix(id, wire.TriggerRunIDPrefix) && !strings.Contains(id, wire.ForkRunMark) {
			t.Fatalf("ServerRunID(%q) = %q for an id of no server's form", id, why)
		}
		if err == nil {
			if _, serr := natsbox.EventSubject(id); serr != nil || !kvKey.MatchString(id) {
				t.Fatalf("run id %q is taken but not a subject token or a KV key: %v", id, serr)
			}
		}
	})
}
