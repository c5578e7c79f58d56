package reins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

type order struct {
	OrderID string `json:"order_id"`
}

type status struct {
	Status string `json:"status"`
}

// refundWorkflow is an agent that looks an order up with a Go tool (its model is scripted: no
// key needed), then a Go handler that writes the answer.
func refundWorkflow() *workflow.Definition {
	wf := workflow.New("refund")
	wf.Model("m", workflow.ModelDef{Provider: "scripted", Script: json.RawMessage(
		`[{"tool_calls":[{"name":"lookup","arguments":{"order_id":"O-1"}}]},{"text":"The order was delivered."}]`)})
	wf.Tool("lookup", workflow.ToolDef{Description: "Look an order up.", Handler: "orders.read",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`)})
	wf.Agent("investigate", "m").WithGoal("Find out what happened to order {{input.order_id}}.").WithTools("lookup")
	wf.Task("answer", "answer")
	wf.Edge("investigate", "answer")
	def, err := wf.Build()
	if err != nil {
		panic(err)
	}
	return def
}

func Example() {
	ctx := context.Background()
	r, err := reins.New(ctx, reins.Config{})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	r.Tool("orders.read", tool.Func("orders.read", "Read an order.", func(_ context.Context, o order) (status, error) {
		return status{Status: "delivered"}, nil
	}))
	r.Handle("answer", func(tc worker.TaskContext) error {
		var in struct {
			Answer string `json:"answer"` // an agent step's output: stop_reason, detail, answer
		}
		if err := json.Unmarshal(tc.Input(), &in); err != nil {
			return err
		}
		return tc.Complete("Answer: " + in.Answer)
	})
	res, err := r.Run(ctx, refundWorkflow(), order{OrderID: "O-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, string(res.Output))
	for _, s := range res.Steps {
		fmt.Println(s.ID, s.Status, s.StopReason)
	}
	// Output:
	// completed "Answer: The order was delivered."
	// investigate completed completed
	// answer completed
}

// Registrations are frozen once the first run started, as http.ServeMux's are on a duplicate.
func TestRegisterAfterStart(t *testing.T) {
	ctx := t.Context()
	r, err := reins.New(ctx, reins.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Handle("answer", func(tc worker.TaskContext) error { return tc.Complete(1) })
	wf := workflow.New("one")
	wf.Task("answer", "answer")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(ctx, def, nil)
	if err != nil || string(res.Output) != "1" {
		t.Fatalf("run: %+v, %v", res, err)
	}
	defer func() {
		if p := fmt.Sprint(recover()); !strings.Contains(p, `"late" registered after the first run started`) {
			t.Errorf("a late Handle panicked with %q", p)
		}
	}()
	r.Handle("late", func(tc worker.TaskContext) error { return nil })
}

// A Go model serves the llm and agent steps whose model has its name; a workflow declares one
// that only the program provides with provider = "go".
func TestGoModel(t *testing.T) {
	ctx := t.Context()
	r, err := reins.New(ctx, reins.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	text := "hello from Go"
	m, err := model.NewScripted([]model.Turn{{Text: &text}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Model("mine", m)
	wf := workflow.New("greet").Model("mine", workflow.ModelDef{Provider: "go"})
	wf.LLM("greet", "mine").WithPrompt("Say hello.")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(ctx, def, nil)
	if err != nil || res.Status != "completed" || !strings.Contains(string(res.Output), text) {
		t.Fatalf("run: %s, output %s, error %+v, %v", res.Status, res.Output, res.Error, err)
	}

	other := workflow.New("unserved").Model("theirs", workflow.ModelDef{Provider: "go"})
	other.LLM("greet", "theirs").WithPrompt("Say hello.")
	if def, err = other.Build(); err != nil {
		t.Fatal(err)
	}
	res, err = r.Run(ctx, def, nil)
	if err != nil || res.Status != "failed" || len(res.Steps) != 1 || !strings.Contains(res.Steps[0].Error, `unknown provider "go"`) {
		t.Fatalf("a go model no one registered: %s, steps %+v, %v", res.Status, res.Steps, err)
	}
}
