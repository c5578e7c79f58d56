package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/reins-run/reins/internal/testkit/allocs"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// FuzzTaskMsgID: the id built in a buffer on the stack equals the plain RUN/KEY/ACTIVATION/
// ITERATION/ATTEMPT, ids longer than the buffer included.
func FuzzTaskMsgID(f *testing.F) {
	f.Add("r-1", "fan#3", 1, 2, 1)
	f.Add(strings.Repeat("r", 120), "ask", -1, 0, 99999)
	f.Fuzz(func(t *testing.T, run, key string, activation, iteration, attempt int) {
		want := fmt.Sprintf("%s/%s/%d/%d/%d", run, key, activation, iteration, attempt)
		if got := taskMsgID(run, key, activation, iteration, attempt); got != want {
			t.Fatalf("taskMsgID = %q, want %q", got, want)
		}
	})
}

// TestTaskMsgIDAllocs: a task's id is one allocation, its string.
func TestTaskMsgIDAllocs(t *testing.T) {
	if n := allocs.PerRun(100, func() { _ = taskMsgID("01JDV3N6Q0R1S2T3U4V5W6X7Y8", "agent", 1, 12, 1) }); n != 1 {
		t.Errorf("taskMsgID allocates %v times, want 1", n)
	}
}

// refCanon is canon as it was, through json.Marshal alone: the reference for its shortcut.
func refCanon(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null"), nil
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("not valid UTF-8")
	}
	if !json.Valid(raw) {
		return nil, errors.New("not valid JSON")
	}
	return json.Marshal(raw)
}

// FuzzCanon: canon's copy of a value already compact equals json.Marshal's bytes, and every
// other value (spaces, HTML characters, U+2028) is still written by json.Marshal; the copy
// shares nothing with its input.
func FuzzCanon(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{ "a" : [1, 2] }`, `"<b>"`, `"a\"b \\ c"`, "\"\u2028\"", `"\u2028"`,
		`[1,"x y",{"k":"v\n"}]`, "\t1\n", `""`, `"&amp;"`, `nul`, "\xff", `{"a":"\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := canon(raw)
		want, werr := refCanon(raw)
		if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("canon(%q) = %q, %v; json.Marshal gives %q, %v", raw, got, err, want, werr)
		}
		if len(got) > 0 && len(raw) > 0 && &got[0] == &raw[0] {
			t.Fatalf("canon(%q) shares its input's bytes", raw)
		}
	})
}

// TestCanonAllocs: an answer's compact output is one allocation, its copy. Under the race
// detector json.Valid's scanner, which comes from a sync.Pool, is dropped at random, and the
// pin is that canon still allocates less than json.Marshal's way.
func TestCanonAllocs(t *testing.T) {
	raw := json.RawMessage(`{"turn":12,"messages":[{"role":"assistant","content":"done, see a.go"}]}`)
	n := allocs.PerRun(100, func() { _, _ = canon(raw) })
	if allocs.Race {
		if ref := allocs.PerRun(100, func() { _, _ = refCanon(raw) }); n >= ref {
			t.Errorf("canon allocates %v times under -race, json.Marshal's way %v: want fewer", n, ref)
		}
		return
	}
	if n != 1 {
		t.Errorf("canon allocates %v times, want 1", n)
	}
}

// TestDecideAllocs: one iteration of an agent_loop step, as the shell decides it (a run with
// its server's limits) is eight allocations, with a timeout or without: the run and its map of
// steps (two), the step it changes, the output made canonical, the list of commands (the task's
// watch too, with a timeout), the task and its id. The copy of the run shares what the decision
// leaves alone (Run.fork): a deep copy was three more here.
func TestDecideAllocs(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		wf := workflow.New("allocs")
		wf.AgentLoop("review", "h").WithMaxIterations(1 << 30).WithTimeout(timeout)
		def, err := wf.Build()
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		run, _, err := Decide(def, &Run{ID: "r", Limits: &Limits{MaxSteps: 100, MaxEvents: 1 << 30}},
			protocol.Event{Type: protocol.EvStart, At: at, Input: json.RawMessage(`{"pr":42}`), Item: -1})
		if err != nil {
			t.Fatal(err)
		}
		ev := protocol.Event{Type: protocol.EvContinued, At: at, Step: "review", Item: -1, Activation: 1, Iteration: 1, Attempt: 1,
			Output: json.RawMessage(`{"notes":"looked at one more file"}`)}
		want := 1
		if timeout > 0 {
			want = 2
		}
		n := allocs.PerRun(100, func() {
			if _, cmds, err := Decide(def, run, ev); err != nil || len(cmds) != want {
				t.Fatalf("Decide: %d commands, %v; want %d", len(cmds), err, want)
			}
		})
		switch {
		case allocs.Race && n > 8+2: // canon's json.Valid takes its scanner from a sync.Pool, which -race empties at random
			t.Errorf("Decide of an iteration with timeout %v allocates %v times under -race, want at most 10", timeout, n)
		case !allocs.Race && n != 8:
			t.Errorf("Decide of an iteration with timeout %v allocates %v times, want 8", timeout, n)
		}
	}
}
