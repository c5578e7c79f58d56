package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/agent"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
)

// t0 is the start of the virtual clocks of the tests.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// outcome is a library run: its events, the error the stream ended with, and the result.
type outcome struct {
	events []agent.Event
	err    error
	res    agent.Result
}

// run runs root in process on a session with cfg and inputs, and collects everything.
func run(t testing.TB, ctx context.Context, root agent.Agent, cfg agent.Config, inputs map[string]any) outcome {
	t.Helper()
	return runAs(t, ctx, root, cfg, "s1", inputs)
}

// runAs is run on a session named id.
func runAs(t testing.TB, ctx context.Context, root agent.Agent, cfg agent.Config, id string, inputs map[string]any) outcome {
	t.Helper()
	s := agent.NewSession(id, cfg)
	for k, v := range inputs {
		if err := s.Put(k, v); err != nil {
			t.Fatal(err)
		}
	}
	var o outcome
	for ev, err := range agent.Run(ctx, root, s) {
		if o.err != nil {
			t.Fatalf("an event followed the error %v: %+v", o.err, ev)
		}
		o.err = err
		if ev.Type != "" {
			o.events = append(o.events, ev)
		}
	}
	o.res = s.Result()
	checkWellFormed(t, o.events)
	return o
}

// checkWellFormed checks what every run's events must satisfy: Seq counts from 1 without gaps,
// and every start has one end, nested like the agents.
func checkWellFormed(t testing.TB, events []agent.Event) {
	t.Helper()
	open := map[string]int{}
	for i, ev := range events {
		if ev.Seq != i+1 {
			t.Fatalf("event %d has seq %d: %s", i+1, ev.Seq, line(ev))
		}
		switch ev.Type {
		case agent.EventStart:
			open[ev.Path]++
		case agent.EventEnd:
			if open[ev.Path] == 0 {
				t.Fatalf("event %d ends %s, which has not started", ev.Seq, ev.Path)
			}
			for p, n := range open {
				if n > 0 && strings.HasPrefix(p, ev.Path+"/") {
					t.Fatalf("event %d ends %s while %s inside it is running", ev.Seq, ev.Path, p)
				}
			}
			open[ev.Path]--
		}
	}
}

// lines is the compact form of events for assertions (trace events of LLM agents left out).
func lines(events []agent.Event) []string {
	var out []string
	for _, ev := range events {
		if ev.Type != agent.EventTrace {
			out = append(out, line(ev))
		}
	}
	return out
}

func line(ev agent.Event) string {
	switch ev.Type {
	case agent.EventIteration:
		return fmt.Sprintf("%s iteration %d", ev.Author, ev.Iteration)
	case agent.EventMessage:
		return fmt.Sprintf("%s says %s", ev.Author, ev.Text)
	case agent.EventState:
		return fmt.Sprintf("%s sets %s=%s", ev.Author, ev.Key, ev.Value)
	case agent.EventEscalate:
		s := fmt.Sprintf("%s escalates: %s", ev.Author, ev.Escalate.Reason)
		if ev.Escalate.Target != "" {
			s += " (to " + ev.Escalate.Target + ")"
		}
		return s
	case agent.EventEnd:
		s := fmt.Sprintf("%s ends %s", ev.Author, ev.End.Reason)
		if ev.End.By != "" {
			s += " by " + ev.End.By
		}
		return s
	case agent.EventTrace:
		return fmt.Sprintf("%s trace %s", ev.Author, ev.Trace.Type)
	}
	return fmt.Sprintf("%s %s", ev.Author, ev.Type)
}

// setter is a Func agent writing value under key.
func setter(name, key string, value any) agent.Agent {
	return agent.Func(name, func(_ context.Context, t *agent.Turn) error {
		return t.Set(key, value)
	})
}

// counter is a Func agent that counts its turns under key.
func counter(name, key string) agent.Agent {
	return agent.Func(name, func(_ context.Context, t *agent.Turn) error {
		var n int
		if raw, ok := t.Get(key); ok {
			if err := json.Unmarshal(raw, &n); err != nil {
				return err
			}
		}
		return t.Set(key, n+1)
	})
}

// escalateAt is a Func agent that escalates to target (""; innermost loop) on its turn number at.
func escalateAt(name, target string, at int) agent.Agent {
	return agent.Func(name, func(_ context.Context, t *agent.Turn) error {
		if t.Invocation().N == at {
			t.EscalateTo(target, fmt.Sprintf("%s is done at turn %d", name, at))
		}
		return nil
	})
}

// scripted is a scripted model of answers, each using 10 input and 5 output tokens.
func scripted(t testing.TB, clk clock.Clock, answers ...string) model.Model {
	t.Helper()
	turns := make([]model.Turn, len(answers))
	for i, a := range answers {
		turns[i] = model.Turn{Text: &a, Usage: &model.Usage{InputTokens: 10, OutputTokens: 5}}
	}
	m, err := model.NewScripted(turns, clk)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// llm is an LLM agent on m writing its answer under key.
func llm(t testing.TB, clk clock.Clock, name, goal, key string, m model.Model) *agent.LLM {
	t.Helper()
	a, err := agent.NewLLM(agent.LLMConfig{Name: name, Goal: goal, OutputKey: key,
		Loop: loop.Config{Model: m, Clock: clk, Budget: loop.Budget{MaxIterations: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func equalLines(t testing.TB, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// loopConfig is a loop configuration on m that records the goal of each loop run in goals.
func loopConfig(clk clock.Clock, m model.Model, goals *[]string) loop.Config {
	return loop.Config{Model: m, Clock: clk, Budget: loop.Budget{MaxIterations: 3},
		Hooks: loop.Hooks{BeforeModel: func(_ context.Context, req *model.Request) {
			if len(req.Messages) == 1 {
				*goals = append(*goals, req.Messages[0].Content)
			}
		}}}
}
