package reins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/operator"
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
	r.Handle("answer", func(tc reins.TaskContext) error {
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
	r.Handle("answer", func(tc reins.TaskContext) error { return tc.Complete(1) })
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
	r.Handle("late", func(tc reins.TaskContext) error { return nil })
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

// Watch yields the events that moved a run, in the order the engine took them, whether it
// begins while the run goes or after it ended, and ends with the run.
func TestWatch(t *testing.T) {
	ctx := t.Context()
	r, err := reins.New(ctx, reins.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Handle("count", func(tc reins.TaskContext) error {
		if tc.Iteration() < 3 {
			return tc.Continue(tc.Iteration())
		}
		return tc.Complete("counted")
	})
	wf := reins.NewWorkflow("watched")
	wf.AgentLoop("count", "count").WithMaxIterations(5)
	wf.WaitEvent("go", "go")
	wf.Edge("count", "go")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	id, err := r.Start(ctx, def, nil)
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for ev, err := range r.Watch(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, fmt.Sprintf("%s %s %d", ev.Type, ev.Step, ev.Iteration))
		if ev.Type == reins.EvCompleted && ev.Step == "count" {
			if err := r.Signal(ctx, id, "go", 42); err != nil { // the run waits for it now
				t.Fatal(err)
			}
		}
	}
	want := []string{"start  0", "continued count 1", "continued count 2", "completed count 3", "signal  0"}
	if !slices.Equal(live, want) {
		t.Errorf("live events:\n%q\nwant\n%q", live, want)
	}
	rec, err := r.Get(ctx, id)
	if err != nil || rec.Run.Status != reins.RunCompleted {
		t.Fatalf("the run after its watch ended: %+v, %v", rec, err)
	}
	if p, err := r.Query(ctx, reins.Query{Workflow: "watched", Status: reins.RunCompleted}); err != nil || len(p.Records) != 1 || p.Records[0].Run.ID != id {
		t.Errorf("Query of the completed runs of watched: %+v, %v; want %s", p, err, id)
	}
	var later []string
	for ev, err := range r.Watch(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, fmt.Sprintf("%s %s %d", ev.Type, ev.Step, ev.Iteration))
	}
	if !slices.Equal(later, want) {
		t.Errorf("a watch that begins after the run ended:\n%q\nwant\n%q", later, want)
	}
}

// A program that restarts on its data directory serves the runs left in flight: a run that
// waited for an approval when the program stopped goes on once a decision comes, with the
// handlers the new program registered.
func TestRestartServesRunsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a run never served fails the test
	defer cancel()
	dir := t.TempDir()
	wf := reins.NewWorkflow("gated")
	wf.Approval("ask", "Ship?")
	wf.Task("ship", "ship")
	wf.Edge("ask", "ship").When("approved")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	first, err := reins.New(ctx, reins.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	id, err := first.StartWith(ctx, def, nil, reins.StartOptions{RunID: "gated-1"})
	if err != nil || id != "gated-1" {
		t.Fatalf("StartWith: %q, %v", id, err)
	}
	for ev, err := range first.Watch(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == reins.EvStart {
			break // the start is decided: the run waits at ask
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	again, err := reins.New(ctx, reins.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	again.Handle("ship", func(tc reins.TaskContext) error { return tc.Complete("shipped") })
	if err := again.Approve(ctx, id, "ask", "go"); err != nil {
		t.Fatal(err)
	}
	for _, err := range again.Watch(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
	}
	rec, err := again.Get(ctx, id)
	if err != nil || rec.Run.Status != reins.RunCompleted || string(rec.Run.Output) != `"shipped"` {
		t.Fatalf("the run after the restart: %+v, %v", rec, err)
	}
	if _, err := again.StartWith(ctx, def, nil, reins.StartOptions{RunID: "gated-1"}); !errors.Is(err, reins.ErrExists) {
		t.Errorf("a second start of gated-1: %v, want ErrExists", err)
	}
	if _, err := again.Get(ctx, "gated-2"); !errors.Is(err, reins.ErrNotFound) {
		t.Errorf("Get of a run never started: %v, want ErrNotFound", err)
	}
}

// With Listen, a worker of another program connects to the embedded server with the data
// directory's admin token and serves a handler the program does not register; a wrong token is
// refused.
func TestListen(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	r, err := reins.New(ctx, reins.Config{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	url := r.ClientURL()
	token, err := operator.ReadAdminToken(dir)
	if err != nil || url == "" {
		t.Fatalf("url %q, admin token: %v", url, err)
	}
	if _, err := conn.Dial(ctx, url, conn.Token("not-the-admin-token")); err == nil {
		t.Error("a worker with a wrong token connected")
	}
	c, err := conn.Dial(ctx, url, conn.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := worker.New(c, worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("remote", func(tc reins.TaskContext) error { return tc.Complete("from afar") })
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()
	<-w.Ready()
	wf := reins.NewWorkflow("far")
	wf.Task("remote", "remote")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(ctx, def, nil)
	if err != nil || res.Status != reins.RunCompleted || string(res.Output) != `"from afar"` {
		t.Fatalf("run: %s, output %s, %v", res.Status, res.Output, err)
	}
}
