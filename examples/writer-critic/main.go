// Command writer-critic runs a composed agent: a Loop of two sub-agents, a writer (an LLM agent
// on a scripted model, so no API key is needed) and a critic (a Func agent). The writer drafts a
// paragraph on a topic and stores it under state key "draft"; the critic reads the draft and
// either writes "feedback" for the writer's next turn or approves by escalating, which ends the
// loop. The loop has no iteration bound of its own (MaxIterations 0): the run's budget bounds it.
// Every event is printed as it happens, then the result.
//
//	go run ./examples/writer-critic              # in process
//	go run ./examples/writer-critic -durable     # the same agent as a durable agent_loop step on
//	                                             # an embedded NATS server, one turn per task
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/agent"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/trace"
)

// Options are the command's flags.
type Options struct {
	Topic   string
	Durable bool
	// Data is the embedded server's data directory in durable mode ("" for a temporary one).
	Data string
}

// budget bounds the run: the loop itself would go on until the critic approves.
var budget = agent.Budget{MaxTurns: 12, MaxDuration: time.Minute}

// drafts are the writer's scripted answers, one per turn.
var drafts = []string{
	"Agent loops can run forever.",
	"Agent loops stop when a budget runs out.",
	"Bounded agent loops stop when a budget runs out, and a model that gives up escalates to the loop above it, which decides what happens next.",
}

func main() {
	var o Options
	flag.StringVar(&o.Topic, "topic", "bounded agent loops", "what the writer writes about")
	flag.BoolVar(&o.Durable, "durable", false, "run as a durable agent_loop step on an embedded NATS server")
	flag.StringVar(&o.Data, "data", "", "the embedded server's data directory with -durable (default: a temporary one)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := Run(ctx, os.Stdout, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer-critic:", err)
		os.Exit(1)
	}
	if res.Reason != agent.Escalated {
		os.Exit(1) // the critic never approved
	}
}

// Compose builds the agent: a Loop "refine" of the writer and the critic, on the real clock.
func Compose() (agent.Agent, error) {
	turns := make([]model.Turn, len(drafts))
	for i := range drafts {
		turns[i] = model.Turn{Text: &drafts[i], Usage: &model.Usage{InputTokens: 40 + 10*int64(i), OutputTokens: int64(len(drafts[i]) / 4)}}
	}
	m, err := model.NewScripted(turns, nil)
	if err != nil {
		return nil, err
	}
	writer, err := agent.NewLLM(agent.LLMConfig{
		Name:      "writer",
		Goal:      "Write one paragraph about {{topic}}. {{feedback ?? \"\"}}",
		OutputKey: "draft",
		Loop: loop.Config{Model: m, Instructions: "You write short, precise paragraphs.",
			Budget: loop.Budget{MaxIterations: 3}},
	})
	if err != nil {
		return nil, err
	}
	return agent.NewLoop("refine", 0, writer, agent.Func("critic", critique)), nil
}

// critique approves a draft that names a budget and says what happens when the model gives up,
// in 15 words or more; otherwise it writes what is missing under "feedback".
func critique(_ context.Context, t *agent.Turn) error {
	draft := t.Text("draft")
	var missing []string
	if !strings.Contains(draft, "budget") {
		missing = append(missing, "say what bounds the loop")
	}
	if !strings.Contains(draft, "escalate") {
		missing = append(missing, "say what happens when the model gives up")
	}
	if n := len(strings.Fields(draft)); n < 15 {
		missing = append(missing, fmt.Sprintf("use 15 words or more (%d now)", n))
	}
	if len(missing) > 0 {
		return t.Set("feedback", "Revise: "+strings.Join(missing, "; ")+".")
	}
	t.Escalate("approved after " + fmt.Sprint(t.Invocation().N) + " reviews")
	return nil
}

// Run runs the agent, in process or durably, printing its events as they happen and then the
// result to w.
func Run(ctx context.Context, w io.Writer, o Options) (agent.Result, error) {
	if o.Topic == "" {
		o.Topic = "bounded agent loops"
	}
	root, err := Compose()
	if err != nil {
		return agent.Result{}, err
	}
	p := &printer{w: w}
	cfg := agent.Config{Budget: budget, OnEvent: p.print}
	if !o.Durable {
		res, err := runInProcess(ctx, root, cfg, o)
		if err != nil {
			return res, err
		}
		p.result(res)
		return res, nil
	}
	res, tasks, err := runDurable(ctx, root, cfg, o)
	if err != nil {
		return res, err
	}
	p.result(res)
	fmt.Fprintf(w, "durable: %d tasks, one turn each\n", tasks)
	return res, nil
}

// runInProcess runs root on a session of its own.
func runInProcess(ctx context.Context, root agent.Agent, cfg agent.Config, o Options) (agent.Result, error) {
	s := agent.NewSession("writer-critic", cfg)
	if err := s.Put("topic", o.Topic); err != nil {
		return agent.Result{}, err
	}
	for _, err := range agent.Run(ctx, root, s) {
		if err != nil {
			return s.Result(), err
		}
	}
	return s.Result(), nil
}

// runDurable runs root as the agent_loop step "refine" of a workflow, on an embedded NATS server
// with the engine and a worker in this process (reins.New): each task runs one turn of the
// writer or the critic and checkpoints where the composition is.
func runDurable(ctx context.Context, root agent.Agent, cfg agent.Config, o Options) (agent.Result, int, error) {
	r, err := reins.New(ctx, reins.Config{DataDir: o.Data})
	if err != nil {
		return agent.Result{}, 0, err
	}
	defer r.Close()
	r.Handle("writer-critic", agent.Handler(root, cfg))
	wb := reins.NewWorkflow("writer-critic").Deadline(5 * time.Minute)
	// The engine's bound leaves room for the composition's own: its budget ends the run first.
	wb.AgentLoop("refine", "writer-critic").WithMaxIterations(budget.MaxTurns + 1)
	def, err := wb.Build()
	if err != nil {
		return agent.Result{}, 0, err
	}
	out, err := r.Run(ctx, def, map[string]string{"topic": o.Topic})
	if err != nil {
		return agent.Result{}, 0, err
	}
	if out.Status != reins.RunCompleted {
		return agent.Result{}, 0, fmt.Errorf("run %s ended %s: %v", out.RunID, out.Status, out.Error)
	}
	var res agent.Result
	if err := json.Unmarshal(out.Output, &res); err != nil {
		return agent.Result{}, 0, fmt.Errorf("run %s: the step's output is not a composition result: %w", out.RunID, err)
	}
	return res, out.Steps[0].Iterations, nil
}

// printer writes events and the result, one line each.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) print(ev agent.Event) {
	line := eventLine(ev)
	if line == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%3d %-7s %s\n", ev.Seq, ev.Author, line)
}

// eventLine is the text of an event ("" for the loop's trace events other than model calls).
func eventLine(ev agent.Event) string {
	switch ev.Type {
	case agent.EventStart:
		return "starts"
	case agent.EventIteration:
		return fmt.Sprintf("iteration %d", ev.Iteration)
	case agent.EventMessage:
		return "says: " + ev.Text
	case agent.EventState:
		return fmt.Sprintf("sets %s = %s", ev.Key, ev.Value)
	case agent.EventEscalate:
		return "escalates: " + ev.Escalate.Reason
	case agent.EventEnd:
		s := "ends " + string(ev.End.Reason)
		if ev.End.By != "" {
			s += " by " + ev.End.By
		}
		if ev.End.Detail != "" {
			s += ": " + ev.End.Detail
		}
		return s
	case agent.EventTrace:
		if t := ev.Trace; t.Type == trace.ModelCall && t.Error == "" {
			return fmt.Sprintf("model call: %d tokens in, %d out", t.InputTokens, t.OutputTokens)
		}
	}
	return ""
}

func (p *printer) result(res agent.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "result: %s", res.Reason)
	if res.By != "" {
		fmt.Fprintf(p.w, " by %s", res.By)
	}
	fmt.Fprintf(p.w, " (%s) after %d turns, %d model calls, %d tokens\n", res.Detail, res.Turns,
		res.Usage.ModelCalls, res.Usage.InputTokens+res.Usage.OutputTokens)
	var draft string
	if err := json.Unmarshal(res.State["draft"], &draft); err != nil {
		draft = "(none)"
	}
	fmt.Fprintf(p.w, "draft: %s\n", draft)
}
