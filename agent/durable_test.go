package agent_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reins-run/reins/agent"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// stack is an embedded NATS server with the engine and a worker in this process.
type stack struct {
	box    *natsbox.Box
	client *client.Client
}

// newStack starts an embedded server in a temporary directory, the engine, and a worker serving
// handlers; everything stops at the end of the test.
func newStack(t *testing.T, handlers map[string]worker.Handler) *stack {
	t.Helper()
	h, err := host.StartEmbedded(context.Background(), t.TempDir(), host.Config{Engine: true, Handlers: handlers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return &stack{box: (*natsbox.Box)(h.Conn()), client: client.New(client.Config{Conn: h.Conn()})}
}

// durableRun is a composition run as a durable agent_loop step.
type durableRun struct {
	rec    *client.Record
	step   protocol.StepResult
	res    agent.Result // decoded from the run's output (completed runs)
	events []agent.Event
}

// runDurable runs a workflow of one agent_loop step "compose" served by handler, with input,
// as run runID, and reads back its result and the events of its checkpoint.
func (s *stack) runDurable(t *testing.T, handler, runID string, maxTurns int, input map[string]any, opts ...func(*workflow.AgentLoopStep)) durableRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wb := workflow.New("compose").Deadline(time.Hour)
	step := wb.AgentLoop("compose", handler).WithMaxIterations(maxTurns + 1)
	for _, o := range opts {
		o(step)
	}
	def, err := wb.Build()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Start(ctx, bs, in, runID); err != nil {
		t.Fatal(err)
	}
	rec, err := s.client.Wait(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.client.Result(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	d := durableRun{rec: rec, step: out.Steps[0]}
	if rec.Run.Status == protocol.RunCompleted {
		if err := json.Unmarshal(out.Output, &d.res); err != nil {
			t.Fatalf("the step's output %s is not a Result: %v", out.Output, err)
		}
	}
	d.events = s.checkpointEvents(ctx, t, wire.CheckpointScope(runID, "compose", -1, 1))
	return d
}

// checkpointEvents folds the checkpoint writes of scope as the worker does (every write of an
// agent Handler is an append) and returns the events they hold.
func (s *stack) checkpointEvents(ctx context.Context, t *testing.T, scope string) []agent.Event {
	t.Helper()
	kv, err := s.box.JetStream().KeyValue(ctx, natsbox.CheckpointsBucket)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeysFiltered(ctx, scope+".>")
	if err != nil {
		t.Fatal(err)
	}
	var writes []wire.CheckpointWrite
	for key := range lister.Keys() {
		w, err := wire.ParseCheckpointWrite(key)
		if err != nil {
			t.Fatal(err)
		}
		writes = append(writes, w)
	}
	slices.SortFunc(writes, func(a, b wire.CheckpointWrite) int {
		return cmp.Or(cmp.Compare(a.Iteration, b.Iteration), cmp.Compare(a.N, b.N))
	})
	var items []json.RawMessage
	for _, w := range writes {
		e, err := kv.Get(ctx, w.Key())
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Append []json.RawMessage `json:"append"`
		}
		if err := json.Unmarshal(e.Value(), &v); err != nil || v.Append == nil {
			t.Fatalf("checkpoint write %s is not an append: %s", w.Key(), e.Value())
		}
		items = append(items, v.Append...)
	}
	raw, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	events, err := agent.Events(raw)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// composition is a case of the equivalence test: the same tree is built twice, each time on a
// virtual clock of its own starting at t0, once for each mode.
type composition struct {
	name   string
	build  func(clk clock.Clock) agent.Agent
	budget agent.Budget
	input  map[string]any
	// interleaved: the composition has a Parallel, whose events interleave differently in the
	// two modes (concurrently in process, one branch after the other durably); each author's
	// events are compared in order instead of the whole sequence.
	interleaved bool
	fails       string // the run fails with an error containing this
}

func equivalenceCases(t *testing.T) []composition {
	return []composition{
		{
			name: "writer-critic inside an outer loop, the critic escalating to the inner loop, then to the outer one",
			build: func(clk clock.Clock) agent.Agent {
				writer := llm(t, clk, "writer", "Write about {{topic}}. {{feedback ?? \"\"}}", "draft",
					scripted(t, clk, "tiny", "still short", "a draft long enough", "second round draft, long"))
				critic := agent.Func("critic", func(_ context.Context, t *agent.Turn) error {
					switch draft := t.Text("draft"); {
					case len(draft) < 15:
						return t.Set("feedback", "Longer than "+draft+", please.")
					case strings.HasPrefix(draft, "second"):
						t.EscalateTo("outer", "the second round is good enough")
					default:
						t.Escalate("approved: " + draft)
					}
					return nil
				})
				editor := agent.Func("editor", func(_ context.Context, t *agent.Turn) error {
					return t.Set("notes", []string{"round", t.Text("draft")})
				})
				publish := agent.Func("publish", func(_ context.Context, t *agent.Turn) error {
					t.Say("publishing " + t.Text("draft"))
					return t.Set("published", t.Text("draft"))
				})
				return agent.NewSequential("review",
					agent.NewLoop("outer", 5, agent.NewLoop("refine", 0, writer, critic), editor), publish)
			},
			budget: agent.Budget{MaxTurns: 20},
			input:  map[string]any{"topic": "bounded loops"},
		},
		{
			name: "a loop without max_iterations ended by the turn budget",
			build: func(clk clock.Clock) agent.Agent {
				return agent.NewLoop("forever", 0, llmWriter(t, clk, "draft"), counter("count", "n"))
			},
			budget: agent.Budget{MaxTurns: 5},
		},
		{
			name: "parallel branches merged in declaration order inside a loop",
			build: func(clk clock.Clock) agent.Agent {
				return agent.NewLoop("rounds", 2,
					agent.NewParallel("fan",
						agent.NewSequential("left", llmWriter(t, clk, "shared"), counter("lcount", "l")),
						agent.NewSequential("right", setter("r1", "shared", "right"), counter("rcount", "r")),
						escalateAt("judge", "", 2)),
					agent.Func("merge", func(_ context.Context, t *agent.Turn) error {
						return t.Set("merged", t.Text("shared")+"/"+t.Text("l")+"/"+t.Text("r"))
					}))
			},
			budget:      agent.Budget{MaxTurns: 30},
			interleaved: true,
		},
		{
			name: "an error of a sub-agent stops the loop",
			build: func(clk clock.Clock) agent.Agent {
				return agent.NewLoop("loop", 0, counter("count", "n"), agent.Func("flaky", func(_ context.Context, t *agent.Turn) error {
					if t.Invocation().N == 2 {
						return errors.New("the disk is full")
					}
					return nil
				}))
			},
			budget: agent.Budget{MaxTurns: 10},
			fails:  `agent "loop/flaky" failed: the disk is full`,
		},
		{
			name: "an escalation to a loop that does not enclose the agent",
			build: func(clk clock.Clock) agent.Agent {
				return agent.NewSequential("seq", agent.NewLoop("first", 1, counter("a", "n")),
					agent.NewLoop("second", 3, escalateAt("critic", "first", 1)))
			},
			fails: `agent "critic" escalated to loop "first", which does not enclose it`,
		},
	}
}

// TestDurableEquivalence runs each composition in process and as a durable agent_loop step on an
// embedded NATS server with the engine and a worker, and requires the same events (authors,
// types, order, state writes, times on the virtual clocks) and the same result.
func TestDurableEquivalence(t *testing.T) {
	cases := equivalenceCases(t)
	handlers := map[string]worker.Handler{}
	for i, c := range cases {
		clk := clock.NewVirtual(t0)
		handlers[fmt.Sprintf("compose-%d", i)] = agent.Handler(c.build(clk), agent.Config{Budget: c.budget, Clock: clk})
	}
	s := newStack(t, handlers)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runID := fmt.Sprintf("eq%d", i)
			clk := clock.NewVirtual(t0)
			lib := runAs(t, context.Background(), c.build(clk), agent.Config{Budget: c.budget, Clock: clk}, runID+"/compose", c.input)
			maxTurns := c.budget.MaxTurns
			if maxTurns == 0 {
				maxTurns = agent.DefaultBudget().MaxTurns
			}
			dur := s.runDurable(t, fmt.Sprintf("compose-%d", i), runID, maxTurns, c.input)
			if c.fails != "" {
				compareFailure(t, lib, dur, c.fails)
				return
			}
			if dur.rec.Run.Status != protocol.RunCompleted {
				t.Fatalf("the durable run ended %s: %v", dur.rec.Run.Status, dur.rec.Run.Error)
			}
			if !sameJSON(t, lib.res, dur.res) {
				t.Errorf("results differ:\n  library %s\n  durable %s", mustJSON(t, lib.res), mustJSON(t, dur.res))
			}
			if dur.step.StopReason != string(lib.res.Reason) || dur.step.Label != string(lib.res.Reason) {
				t.Errorf("the step ended with stop reason %q and label %q, want %s", dur.step.StopReason, dur.step.Label, lib.res.Reason)
			}
			if dur.step.Iterations != lib.res.Turns && dur.step.Iterations != lib.res.Turns+1 {
				t.Errorf("the step ran %d tasks for %d turns", dur.step.Iterations, lib.res.Turns)
			}
			compareEvents(t, lib.events, dur.events, c.interleaved)
		})
	}
}

// compareEvents requires the same events: the same sequence, or for an interleaved composition
// the same events of each author in the same order (the durable sequence is still well formed).
func compareEvents(t *testing.T, lib, dur []agent.Event, interleaved bool) {
	t.Helper()
	checkWellFormed(t, dur)
	if len(lib) != len(dur) {
		t.Fatalf("%d events in process, %d durably:\n%s\n---\n%s", len(lib), len(dur),
			strings.Join(lines(lib), "\n"), strings.Join(lines(dur), "\n"))
	}
	if !interleaved {
		for i := range lib {
			if a, b := mustJSON(t, lib[i]), mustJSON(t, dur[i]); a != b {
				t.Fatalf("event %d differs:\n  library %s\n  durable %s", i+1, a, b)
			}
		}
		return
	}
	group := func(events []agent.Event) map[string][]string {
		out := map[string][]string{}
		for _, ev := range events {
			ev.Seq = 0 // the interleaving numbers them differently
			out[ev.Author] = append(out[ev.Author], mustJSON(t, ev))
		}
		return out
	}
	a, b := group(lib), group(dur)
	for author, evs := range a {
		if strings.Join(evs, "\n") != strings.Join(b[author], "\n") {
			t.Errorf("the events of %s differ:\n  library %s\n  durable %s", author, strings.Join(evs, "\n  "), strings.Join(b[author], "\n  "))
		}
	}
}

// compareFailure requires a failed library run and a failed durable step with the same error.
func compareFailure(t *testing.T, lib outcome, dur durableRun, want string) {
	t.Helper()
	if lib.err == nil || !strings.Contains(lib.err.Error(), want) {
		t.Fatalf("the library run's error is %v, want %q", lib.err, want)
	}
	if dur.rec.Run.Status != protocol.RunFailed || !strings.Contains(dur.step.Error, lib.err.Error()) {
		t.Fatalf("the durable run ended %s with step error %q, want it to contain %q", dur.rec.Run.Status, dur.step.Error, lib.err.Error())
	}
	// The durable log holds the turns before the failing one: a failed turn is not saved (a
	// retry would run it again).
	n := len(dur.events)
	if n == 0 || n >= len(lib.events) {
		t.Fatalf("%d durable events for %d in process", n, len(lib.events))
	}
	for i := range dur.events {
		if a, b := mustJSON(t, lib.events[i]), mustJSON(t, dur.events[i]); a != b {
			t.Fatalf("event %d differs:\n  library %s\n  durable %s", i+1, a, b)
		}
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestDurableRetry fails the attempt of one turn: the retry runs that turn again from the same
// checkpoint (the failed attempt's writes are discarded), and the run's events and result are
// those of an uninterrupted run in process.
func TestDurableRetry(t *testing.T) {
	build := func(clk clock.Clock, failures *atomic.Int32) agent.Agent {
		flaky := agent.Func("flaky", func(_ context.Context, t *agent.Turn) error {
			if err := t.Set("seen", t.Invocation().N); err != nil {
				return err
			}
			if t.Invocation().N == 2 && failures.Add(-1) >= 0 {
				return errors.New("a transient failure")
			}
			return nil
		})
		return agent.NewLoop("loop", 3, llmWriter(t, clk, "draft"), flaky)
	}
	var failures atomic.Int32
	failures.Store(1)
	clk := clock.NewVirtual(t0)
	s := newStack(t, map[string]worker.Handler{"retry": agent.Handler(build(clk, &failures), agent.Config{Clock: clk})})
	dur := s.runDurable(t, "retry", "rt1", 10, nil, func(st *workflow.AgentLoopStep) {
		st.WithRetry(workflow.Retry{MaxAttempts: 2, Backoff: "fixed", InitialDelay: clock.Duration(10 * time.Millisecond)})
	})
	if failures.Load() != -1 {
		t.Fatalf("the flaky agent failed %d times, want once", 1-failures.Load())
	}
	if dur.rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("the durable run ended %s: %v", dur.rec.Run.Status, dur.rec.Run.Error)
	}
	var none atomic.Int32
	lclk := clock.NewVirtual(t0)
	lib := runAs(t, context.Background(), build(lclk, &none), agent.Config{Clock: lclk}, "rt1/compose", nil)
	if !sameJSON(t, lib.res, dur.res) {
		t.Errorf("results differ:\n  library %s\n  durable %s", mustJSON(t, lib.res), mustJSON(t, dur.res))
	}
	compareEvents(t, lib.events, dur.events, false)
}
