package mcpserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/protocol"
)

// createTask calls tool with args as a task in session, as principal name, and returns the
// task the call answers with.
func (s *stack) createTask(name, session, tool string, args any) task {
	s.t.Helper()
	var created struct {
		Task task `json:"task"`
	}
	s.call(name, session, "tools/call", map[string]any{"name": tool, "arguments": args, "task": map[string]any{"ttl": 60000}}, &created)
	if created.Task.TaskID == "" {
		s.t.Fatalf("tools/call of %s as a task answered no task", tool)
	}
	return created.Task
}

// TestTaskToResult: a call as a task answers at once with a task whose id is its run's; the
// task is polled to completed, and tasks/result answers as the call would have, tied to the
// task. The initialize answer says the server takes tasks.
func TestTaskToResult(t *testing.T) {
	s := newStack(t)
	cs := s.connect("sam", nil)
	var init struct {
		Capabilities struct {
			Tasks struct {
				Requests struct {
					Tools struct {
						Call *struct{} `json:"call"`
					} `json:"tools"`
				} `json:"requests"`
				Cancel *struct{} `json:"cancel"`
			} `json:"tasks"`
		} `json:"capabilities"`
	}
	status, a := s.post("sam", "", "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}})
	if status != http.StatusOK || json.Unmarshal(a.Result, &init) != nil || init.Capabilities.Tasks.Requests.Tools.Call == nil || init.Capabilities.Tasks.Cancel == nil {
		t.Errorf("initialize: status %d, %s; want the tasks capability with tools/call and cancel", status, a.Result)
	}

	tk := s.createTask("sam", cs.ID(), "echo", map[string]any{"order_id": "T-1"})
	if !strings.HasPrefix(tk.TaskID, "mcp-") || tk.CreatedAt == "" || tk.LastUpdatedAt == "" {
		t.Errorf("task %+v", tk)
	}
	rec, err := s.Admin.Get(s.Ctx, tk.TaskID)
	if err != nil || rec.Run.StartedBy != "sam" {
		t.Fatalf("the task's run: %v %v", rec, err)
	}
	s.waitStatus(tk.TaskID, protocol.RunCompleted)
	var got task
	s.call("sam", cs.ID(), "tasks/get", map[string]any{"taskId": tk.TaskID}, &got)
	if got.Status != "completed" {
		t.Errorf("tasks/get of a finished run: %s", got.Status)
	}
	// Another session of the same principal (a host that came back) finds it by id.
	other := s.connect("sam", nil)
	var res mcp.CallToolResult
	s.call("sam", other.ID(), "tasks/result", map[string]any{"taskId": tk.TaskID}, &res)
	out, _ := json.Marshal(res.StructuredContent)
	related, _ := res.Meta["io.modelcontextprotocol/related-task"].(map[string]any)
	if res.IsError || string(out) != `{"order_id":"T-1"}` || related["taskId"] != tk.TaskID {
		t.Errorf("tasks/result: isError %v, %s, _meta %v", res.IsError, out, res.Meta)
	}
	var list struct {
		Tasks []task `json:"tasks"`
	}
	s.call("sam", other.ID(), "tasks/list", map[string]any{}, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].TaskID != tk.TaskID {
		t.Errorf("tasks/list: %+v", list.Tasks)
	}

	// Another principal neither finds the task nor lists it, nor uses the session.
	sue := s.connect("sue", nil)
	if status, a := s.post("sue", sue.ID(), "tasks/get", map[string]any{"taskId": tk.TaskID}); status != http.StatusOK || a.Error == nil || !strings.Contains(a.Error.Message, "there is no task "+tk.TaskID) {
		t.Errorf("sue's tasks/get of sam's task: %d %+v", status, a.Error)
	}
	s.call("sue", sue.ID(), "tasks/list", map[string]any{}, &list)
	if len(list.Tasks) != 0 {
		t.Errorf("sue lists %+v", list.Tasks)
	}
	if status, _ := s.post("sue", cs.ID(), "tasks/get", map[string]any{"taskId": tk.TaskID}); status != http.StatusForbidden {
		t.Errorf("sue in sam's session: status %d, want 403", status)
	}
	if status, a := s.post("sam", cs.ID(), "tasks/get", map[string]any{"taskId": "mcp-nothing"}); a.Error == nil || !strings.Contains(a.Error.Message, "there is no task mcp-nothing") {
		t.Errorf("an unknown task: %d %+v", status, a.Error)
	}
}

// TestTaskCancel: tasks/cancel cancels the run, and the task is cancelled; a finished task
// cannot be cancelled again.
func TestTaskCancel(t *testing.T) {
	s := newStack(t)
	cs := s.connect("sam", nil)
	tk := s.createTask("sam", cs.ID(), "sleeper", map[string]any{})
	if tk.Status != "working" {
		t.Errorf("a sleeping run's task is %s, want working", tk.Status)
	}
	var got task
	s.call("sam", cs.ID(), "tasks/cancel", map[string]any{"taskId": tk.TaskID}, &got)
	if got.Status != "cancelled" {
		t.Errorf("tasks/cancel answered %s", got.Status)
	}
	rec, err := s.Admin.Get(s.Ctx, tk.TaskID)
	if err != nil || rec.Run.Status != protocol.RunCancelled {
		t.Fatalf("the run after tasks/cancel: %v %v", rec.Run.Status, err)
	}
	if _, a := s.post("sam", cs.ID(), "tasks/cancel", map[string]any{"taskId": tk.TaskID}); a.Error == nil || !strings.Contains(a.Error.Message, "cancelled already") {
		t.Errorf("a second cancel: %+v", a.Error)
	}
	var res mcp.CallToolResult
	s.call("sam", cs.ID(), "tasks/result", map[string]any{"taskId": tk.TaskID}, &res)
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "cancelled") {
		t.Errorf("the result of a cancelled task: %+v", res)
	}
}

// TestTaskInputRequired: a run that waits for a person's approval is an input_required task,
// and completes once a person approves.
func TestTaskInputRequired(t *testing.T) {
	s := newStack(t)
	cs := s.connect("sam", nil)
	tk := s.createTask("sam", cs.ID(), "review", map[string]any{})
	s.waitStatus(tk.TaskID, protocol.RunWaiting)
	var got task
	s.call("sam", cs.ID(), "tasks/get", map[string]any{"taskId": tk.TaskID}, &got)
	if got.Status != "input_required" || !strings.Contains(got.StatusMessage, "ask") {
		t.Errorf("a run waiting for approval: task %+v, want input_required naming the step", got)
	}
	if err := s.Admin.Approve(s.Ctx, tk.TaskID, "ask", "ship it"); err != nil {
		t.Fatal(err)
	}
	var res mcp.CallToolResult
	s.call("sam", cs.ID(), "tasks/result", map[string]any{"taskId": tk.TaskID}, &res)
	if res.IsError {
		t.Errorf("the approved run's result: %+v", res.Content)
	}
	s.call("sam", cs.ID(), "tasks/get", map[string]any{"taskId": tk.TaskID}, &got)
	if got.Status != "completed" {
		t.Errorf("after the approval the task is %s", got.Status)
	}
}
