package runner

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// toolsWorkflow is an agent "lead" with the agent tool ask (the agent step "helper") and the
// workflow tool sum (testdata/child.toml, whose task child-work a stand-in serves).
func toolsWorkflow(t *testing.T) *workflow.Bundles {
	wf := workflow.New("tools")
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"x"}]`)})
	wf.Tool("ask", workflow.ToolDef{Agent: "helper"})
	wf.Tool("sum", workflow.ToolDef{Workflow: "child.toml"})
	wf.Agent("lead", "m").WithGoal("g").WithTools("ask", "sum")
	wf.Agent("helper", "m").WithGoal("help with {{input.q}}")
	def, err := wf.BuildWith(workflow.Options{BaseDir: "testdata"})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, "testdata")
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// TestAgentToolSubRuns: the waiting answer of an agent iteration whose calls run as sub-runs
// starts them on the bundle's workflows (the agent's derived one, the file's), the shell tells
// the parent how each ended (its output, its agent's stop reason, what it spent), and the
// iteration is dispatched again with their results.
func TestAgentToolSubRuns(t *testing.T) {
	v := newEnv(t)
	bs := toolsWorkflow(t)
	usage := &protocol.Usage{ModelCalls: 1, InputTokens: 40, OutputTokens: 4, CostUSD: 0.004}
	resumed := make(chan *protocol.Task, 1)
	v.Worker(protocol.HandlerAgent).Serve(func(tk *protocol.Task) *protocol.Event {
		switch {
		case tk.Body == "helper": // the agent tool's sub-run
			ev := runtest.Completed(tk, `{"stop_reason":"completed","detail":"d","answer":`+strconvQuote(string(tk.Input))+`}`)
			ev.StopReason, ev.Usage = "completed", usage
			return ev
		case tk.Resume == 0:
			ev := wire.Answer(tk, protocol.EvWaiting, time.Now())
			ev.Pending = []protocol.PendingCall{
				{CallID: "a.1", Tool: "ask", Arguments: json.RawMessage(`{"q":"why"}`), Child: &protocol.ChildCall{Agent: "helper"}},
				{CallID: "s1", Tool: "sum", Arguments: json.RawMessage(`{"text":"t"}`), Child: &protocol.ChildCall{Workflow: "child.toml"}},
			}
			return ev
		default:
			resumed <- tk
			return runtest.Completed(tk, `"done"`)
		}
	})
	v.Worker("child-work").Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `{"summary":"short"}`) })
	id := v.Start(bs, `{}`, "tools-1")
	rec := v.Wait(id)
	if rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %+v", rec.Run.Status, rec.Run.Error)
	}
	tk := <-resumed
	askID := "tools-1/lead/1/1/h" // the call id a.1 is not a run id token: hashed
	if len(tk.ChildResults) != 2 || !strings.HasPrefix(tk.ChildResults[0].RunID, askID) || tk.ChildResults[1].RunID != "tools-1/lead/1/1/s1" {
		t.Fatalf("child results %+v", tk.ChildResults)
	}
	ask, sum := tk.ChildResults[0], tk.ChildResults[1]
	if ask.CallID != "a.1" || ask.Status != protocol.RunCompleted || ask.StopReason != "completed" || *ask.Usage != *usage ||
		string(ask.Output) != `{"stop_reason":"completed","detail":"d","answer":"{\"q\":\"why\"}"}` {
		t.Errorf("ask's result %+v (output %s)", ask, ask.Output)
	}
	if sum.Status != protocol.RunCompleted || string(sum.Output) != `{"summary":"short"}` || sum.Usage != nil {
		t.Errorf("sum's result %+v (output %s)", sum, sum.Output)
	}
	for _, r := range tk.ChildResults {
		sub, err := v.Client.Get(v.Ctx, r.RunID)
		if err != nil || sub.Parent == nil || sub.Parent.RunID != id || sub.Parent.CallID != r.CallID || sub.Parent.Iteration != 1 {
			t.Errorf("sub-run %s: %v, parent %+v", r.RunID, err, sub.Parent)
		}
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestAdmitSeesToolWorkflows: Admit sees the workflows of agent and workflow tools, as it sees
// a call step's.
func TestAdmitSeesToolWorkflows(t *testing.T) {
	v := newEnv(t)
	var seen []string
	v.restart(func(e *Engine) {
		e.admit = func(_ context.Context, defs []*workflow.Definition, _ json.RawMessage) *protocol.RunError {
			for _, d := range defs {
				seen = append(seen, d.Name)
			}
			return &protocol.RunError{Code: "E_OPERATOR_ONLY", Message: "refused"}
		}
	})
	rec := v.Wait(v.Start(toolsWorkflow(t), `{}`, ""))
	slices.Sort(seen)
	if rec.Run.Status != protocol.RunFailed || strings.Join(seen, ",") != "child,tools,tools-helper" {
		t.Errorf("run %s; Admit saw %v, want the workflow and those of its tools", rec.Run.Status, seen)
	}
}
