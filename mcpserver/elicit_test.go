package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/protocol"
)

// elicitor returns a client's options whose elicitation handler hands each question to the
// returned channel and answers it with answer.
func elicitor(answer *mcp.ElicitResult) (*mcp.ClientOptions, chan *mcp.ElicitParams) {
	asked := make(chan *mcp.ElicitParams, 4)
	return &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked <- r.Params
		return answer, nil
	}}, asked
}

// question waits for the host to be asked.
func (s *stack) question(asked chan *mcp.ElicitParams) *mcp.ElicitParams {
	s.t.Helper()
	select {
	case q := <-asked:
		return q
	case <-s.Ctx.Done():
		s.t.Fatal("the host was never asked")
		return nil
	}
}

// TestElicitApprove: a synchronous call whose run waits for approval asks a host that can
// elicit, naming the run and the step; its approval, as the principal (a submitter and an
// approver), lets the run complete.
func TestElicitApprove(t *testing.T) {
	s := newStack(t)
	opts, asked := elicitor(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true, "message": "ship it"}})
	cs := s.connect("pat", opts)
	res, err := cs.CallTool(s.Ctx, &mcp.CallToolParams{Name: "review", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("review after the host approved: %v %+v", err, res)
	}
	q := s.question(asked)
	runID, _ := res.Meta["reins/run_id"].(string)
	if !strings.Contains(q.Message, runID) || !strings.Contains(q.Message, "step ask") || !strings.Contains(q.Message, "Ship it?") {
		t.Errorf("the question %q does not name the run %s, the step and its prompt", q.Message, runID)
	}
	rec, err := s.Admin.Get(s.Ctx, runID)
	if err != nil || len(rec.Run.Acts) == 0 || rec.Run.Acts[0].By != "pat" {
		t.Fatalf("the approval is not pat's: %+v %v", rec.Run.Acts, err)
	}
}

// TestElicitDeclineAsTask: a task whose run waits for approval asks the host on its session;
// a host that declines leaves the run waiting, and a person can still approve it.
func TestElicitDeclineAsTask(t *testing.T) {
	s := newStack(t)
	opts, asked := elicitor(&mcp.ElicitResult{Action: "decline"})
	cs := s.connect("sam", opts)
	tk := s.createTask("sam", cs.ID(), "review", map[string]any{})
	q := s.question(asked)
	if !strings.Contains(q.Message, tk.TaskID) {
		t.Errorf("the question %q does not name the run", q.Message)
	}
	rec, err := s.Admin.Get(s.Ctx, tk.TaskID)
	if err != nil || rec.Run.Status != protocol.RunWaiting || len(rec.Run.Acts) != 0 {
		t.Fatalf("after the host declined: %v %+v %v, want still waiting, no act", rec.Run.Status, rec.Run.Acts, err)
	}
	if err := s.Admin.Approve(s.Ctx, tk.TaskID, "ask", ""); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(tk.TaskID, protocol.RunCompleted)
}

// TestElicitRefused: the host's approval is the principal's, which the engine judges: an
// approver who is not one of the step's approvers, or a principal who may not approve at all,
// leaves the run waiting.
func TestElicitRefused(t *testing.T) {
	s := newStack(t)
	s.register("guarded", `name = "guarded"

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship it?"
approvers = ["alice"]
`)
	opts, asked := elicitor(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}})
	// pat is an approver, but not of this step: the engine refuses the decision.
	pat := s.connect("pat", opts)
	tk := s.createTask("pat", pat.ID(), "guarded", map[string]any{})
	s.question(asked)
	s.said("mcp: the host's answer was not taken; the run keeps waiting")
	rec, err := s.Admin.Get(s.Ctx, tk.TaskID)
	if err != nil || rec.Run.Status != protocol.RunWaiting {
		t.Fatalf("after pat's approval: %v %v, want still waiting", rec.Run.Status, err)
	}

	// sam may submit but not approve: the host is asked, and the run keeps waiting.
	opts, asked = elicitor(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}})
	sam := s.connect("sam", opts)
	var res *mcp.CallToolResult
	done := make(chan error, 1)
	go func() {
		var err error
		res, err = sam.CallTool(s.Ctx, &mcp.CallToolParams{Name: "review", Arguments: map[string]any{}})
		done <- err
	}()
	s.question(asked)
	s.said("mcp: the host's answer was not taken; the run keeps waiting")
	id := s.runs("review")
	if len(id) != 1 {
		t.Fatalf("runs of review: %v", id)
	}
	rec, err = s.Admin.Get(s.Ctx, id[0])
	if err != nil || rec.Run.Status != protocol.RunWaiting {
		t.Fatalf("after sam's approval: %v %v", rec.Run.Status, err)
	}
	if err := s.Admin.Approve(s.Ctx, id[0], "ask", ""); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || res.IsError {
		t.Errorf("review after the admin approved: %v %+v", err, res)
	}
}

// TestTaskProgress: a call as a task with a progress token gets a progress notification per
// iteration of its run on its session, as a synchronous call does.
func TestTaskProgress(t *testing.T) {
	s := newStack(t)
	notes := make(chan *mcp.ProgressNotificationParams, 8)
	cs := s.connect("sam", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		notes <- r.Params
	}})
	var out struct {
		Task task `json:"task"`
	}
	s.call("sam", cs.ID(), "tools/call", map[string]any{"name": "think", "arguments": map[string]any{},
		"task": map[string]any{}, "_meta": map[string]any{"progressToken": "t-1"}}, &out)
	if out.Task.TaskID == "" {
		t.Fatal("no task")
	}
	for i := range 2 {
		select {
		case p := <-notes:
			if p.ProgressToken != "t-1" || p.Progress != float64(i+1) || !strings.Contains(p.Message, "step act iteration") {
				t.Errorf("notification %d: %+v", i, p)
			}
		case <-s.Ctx.Done():
			t.Fatalf("progress notifications %d, want one per iteration (2)", i)
		}
	}
}
