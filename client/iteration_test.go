package client_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
	"github.com/reins-run/reins/workflow"
)

// Follow yields every event of a run in order, and a record only after the events it shows:
// a progress that prints both never shows a step ahead of its iterations, and never misses
// one. Iteration reads back what each iteration recorded.
func TestFollowAndIteration(t *testing.T) {
	v := newEnv(t)
	const n = 5
	bs := runtest.LoopWorkflow(t, n)
	v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event {
		ev := runtest.Continued(task, strconv.Itoa(task.Iteration))
		if task.Iteration == n {
			ev = runtest.Completed(task, `"done"`)
		}
		ev.Record = &trace.Iteration{Iteration: task.Iteration, Proposal: &trace.ProposalRecord{Kind: "answer", Text: "it " + strconv.Itoa(task.Iteration)}}
		return ev
	})
	done := make(chan []string, 1)
	go func() {
		var got []string
		answered := 0
		for u, err := range v.Client.Watch(v.Ctx, "followed", client.WatchOptions{}) {
			if err != nil {
				t.Errorf("Follow: %v", err)
				break
			}
			switch {
			case u.Event != nil:
				if u.Seq == 0 {
					t.Errorf("event %s without its stream sequence", u.Event.Type)
				}
				if client.IsAnswer(u.Event) {
					answered = u.Event.Iteration
					got = append(got, string(u.Event.Type)+" "+strconv.Itoa(u.Event.Iteration))
				}
			case u.Record != nil:
				if sr := u.Record.Run.Steps["think"]; sr != nil && sr.Iteration > answered+1 {
					t.Errorf("a record of iteration %d came before the answer to iteration %d", sr.Iteration, sr.Iteration-1)
				}
				if u.Record.Finished() {
					got = append(got, "finished")
				}
			}
		}
		done <- got
	}()
	v.Start(bs, "", "followed")
	v.Wait("followed")
	got := <-done
	want := "continued 1,continued 2,continued 3,continued 4,completed 5,finished"
	if strings.Join(got, ",") != want {
		t.Errorf("Follow yielded %v, want %s", got, want)
	}

	parts, err := v.Client.Iteration(v.Ctx, "followed", "think", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 1 || parts[0].Answer != protocol.EvContinued || parts[0].Attempt != 1 ||
		parts[0].Event.Record == nil || parts[0].Event.Record.Proposal.Text != "it 3" {
		t.Errorf("iteration 3: %+v", parts)
	}
	if _, err := v.Client.Iteration(v.Ctx, "followed", "think", n+1); !errors.Is(err, client.ErrNoIteration) {
		t.Errorf("an iteration the step did not reach: %v, want ErrNoIteration", err)
	}
	if _, err := v.Client.Iteration(v.Ctx, "followed", "other", 1); !errors.Is(err, client.ErrNoIteration) {
		t.Errorf("a step the run does not have: %v, want ErrNoIteration", err)
	}
}

func TestParseIteration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		step string
		n    int
		err  string
	}{
		{in: "investigate:3", step: "investigate", n: 3},
		{in: "research#2:1", step: "research#2", n: 1},
		{in: "a:b:4", step: "a:b", n: 4},
		{in: "investigate", err: "is not STEP:N"},
		{in: ":3", err: "is not STEP:N"},
		{in: "investigate:0", err: "not a number from 1"},
		{in: "investigate:x", err: "not a number from 1"},
		{in: "investigate:", err: "not a number from 1"},
	} {
		step, n, err := client.ParseIteration(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseIteration(%q) = %q, %d, %v; want an error with %q", tc.in, step, n, err, tc.err)
		case tc.err == "" && (err != nil || step != tc.step || n != tc.n):
			t.Errorf("ParseIteration(%q) = %q, %d, %v; want %q, %d", tc.in, step, n, err, tc.step, tc.n)
		}
	}
}

// FuzzParseIteration: what ParseIteration accepts prints back as itself.
func FuzzParseIteration(f *testing.F) {
	for _, s := range []string{"investigate:3", "a#1:2", "x", ":1", "s:-1", "s:01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		step, n, err := client.ParseIteration(s)
		if err != nil {
			return
		}
		if step == "" || n < 1 || !strings.HasPrefix(s, step+":") {
			t.Fatalf("ParseIteration(%q) = %q, %d", s, step, n)
		}
	})
}

func TestCheckRecords(t *testing.T) {
	// Only the steps' types matter here.
	def := &workflow.Definition{Name: "checked", Steps: []workflow.Step{
		{ID: "investigate", Type: workflow.Agent}, {ID: "think", Type: workflow.AgentLoop},
	}}
	answer := func(step string, typ protocol.EventType, iter int, rec *trace.Iteration, usage *protocol.Usage, stop string) protocol.Event {
		return protocol.Event{Type: typ, Step: step, Item: -1, Iteration: iter, Attempt: 1, Record: rec, Usage: usage, StopReason: stop}
	}
	rec := func(iter, tokens int, stop string) *trace.Iteration {
		return &trace.Iteration{Iteration: iter, InputTokens: int64(tokens), StopReason: stop}
	}
	used := &protocol.Usage{InputTokens: 10}
	for _, tc := range []struct {
		name    string
		evs     []protocol.Event
		records int
		problem string
	}{
		{"agreeing", []protocol.Event{
			{Type: protocol.EvStart, Item: -1},
			answer("investigate", protocol.EvContinued, 1, rec(1, 10, ""), used, ""),
			answer("investigate", protocol.EvCompleted, 2, rec(2, 10, "completed"), used, "completed"),
			answer("think", protocol.EvCompleted, 1, nil, nil, ""), // an agent_loop keeps no record
		}, 2, ""},
		{"an agent's answer without its record", []protocol.Event{
			answer("investigate", protocol.EvContinued, 1, nil, used, ""),
		}, 0, "the continued answer to iteration 1 of step investigate (attempt 1) has no record"},
		{"a failed attempt may have none", []protocol.Event{
			answer("investigate", protocol.EvFailed, 1, nil, nil, ""),
		}, 0, ""},
		{"another iteration's record", []protocol.Event{
			answer("investigate", protocol.EvContinued, 2, rec(1, 10, ""), used, ""),
		}, 1, "carries the record of iteration 1"},
		{"another stop", []protocol.Event{
			answer("investigate", protocol.EvCompleted, 1, rec(1, 10, "refused"), used, "completed"),
		}, 1, "stops completed, its record refused"},
		{"other tokens", []protocol.Event{
			answer("investigate", protocol.EvContinued, 1, rec(1, 99, ""), used, ""),
		}, 1, "reports 10 tokens, its record 99"},
	} {
		n, problem := client.CheckRecords(def, tc.evs)
		if n != tc.records || (tc.problem == "") != (problem == "") || !strings.Contains(problem, tc.problem) {
			t.Errorf("%s: CheckRecords = %d, %q; want %d, %q", tc.name, n, problem, tc.records, tc.problem)
		}
	}
}
