package client_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/workflow"
)

// Unserved names what a workflow needs that no worker announces: a handler nobody serves, the
// built-in handler of an llm step when no built-in worker runs, a tool served by a Go handler
// and a Go model; not what a worker announces, nor a mocked or forbidden tool, nor a scripted
// model.
func TestUnserved(t *testing.T) {
	v := newEnv(t)
	kv, err := v.Box.JetStream().KeyValue(v.Ctx, natsbox.ServedBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"handler.served.w1", "handler.reins-agent.w1", "tool.orders.read.w1"} {
		if _, err := kv.Put(v.Ctx, k, []byte("w1")); err != nil {
			t.Fatal(err)
		}
	}
	wf := workflow.New("support")
	wf.Model("scripted", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(`[{"text":"hi"}]`)})
	wf.Model("mine", workflow.ModelDef{Provider: "go"})
	wf.Tool("read", workflow.ToolDef{Description: "Read.", Handler: "orders.read"})
	wf.Tool("refund", workflow.ToolDef{Description: "Refund.", Handler: "orders.refund"})
	wf.Tool("mocked", workflow.ToolDef{Description: "Mocked.", Handler: "orders.mocked", Mock: json.RawMessage(`[{"output":1}]`)})
	wf.Tool("wire", workflow.ToolDef{Description: "Wire money.", Handler: "payments.wire"}) // forbidden: never runs
	wf.Task("a", "served")
	wf.Task("b", "nobody")
	wf.LLM("c", "scripted").WithPrompt("Hi.")
	wf.Agent("d", "mine").WithGoal("Go.").WithTools("read", "refund", "mocked", "wire").WithPolicy(workflow.Policy{Forbid: []string{"wire"}})
	wf.Edge("a", "b")
	wf.Edge("b", "c")
	wf.Edge("c", "d")
	_, bs := runtest.Bundles(t, wf)
	got, err := v.Client.Unserved(v.Ctx, bs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`no worker serves the handler "nobody" that step b of workflow support needs: its runs wait until one does`,
		`no worker serves the handler "reins-llm" that step c of workflow support needs: its runs wait until one does`,
		`no worker serves the tool "orders.refund" that step d of workflow support needs: its runs wait until one does`,
		`no worker serves the model "mine" that step d of workflow support needs: its runs wait until one does`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("unserved:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
