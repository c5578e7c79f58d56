package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
)

// task is a task of MCP 2025-11-25: a run started by a task-augmented tools/call, whose id is
// the run's, so that a host that comes back finds it by id.
type task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTL is null: a task lasts as long as the server keeps its run.
	TTL          *int64 `json:"ttl"`
	PollInterval int64  `json:"pollInterval,omitempty"`
}

// relatedTaskKey is the _meta key that ties a message to its task.
const relatedTaskKey = "io.modelcontextprotocol/related-task"

// taskStatus is the status of the task of a run of status st: a run waiting for a person (or a
// signal) is input_required.
func taskStatus(st protocol.RunStatus) string {
	switch st {
	case protocol.RunWaiting:
		return "input_required"
	case protocol.RunCompleted:
		return "completed"
	case protocol.RunFailed, protocol.RunTimedOut:
		return "failed"
	case protocol.RunCancelled:
		return "cancelled"
	}
	return "working"
}

// taskOf returns the task of the run of rec.
func (s *Server) taskOf(ctx context.Context, c *client.Client, rec *client.Record) (task, error) {
	res, err := c.Result(ctx, rec)
	if err != nil {
		return task{}, err
	}
	last := rec.Run.StartedAt
	for _, st := range rec.Run.Steps {
		for _, t := range []time.Time{st.StartedAt, st.Dispatched} {
			if t.After(last) {
				last = t
			}
		}
	}
	t := task{TaskID: rec.Run.ID, Status: taskStatus(rec.Run.Status), CreatedAt: rec.Run.StartedAt.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt: last.UTC().Format(time.RFC3339Nano), PollInterval: s.cfg.PollInterval.Milliseconds()}
	switch {
	case res.Error != nil:
		t.StatusMessage = res.Error.Error()
	case len(res.Waiting) > 0:
		w := res.Waiting[0]
		t.StatusMessage = fmt.Sprintf("the run waits at step %s (%s): a person answers it in the console or with the reins command", w.Step, w.Wait)
	}
	return t, nil
}

// callAsTask answers a task-augmented tools/call: the run starts, and the task is answered at
// once.
func (s *Server) callAsTask(ctx context.Context, p operator.Principal, prm callParams, runID string) (any, error) {
	err := s.begin(ctx, p, prm.Name, prm.Arguments, runID)
	var te *toolError
	if errors.As(err, &te) { // a call that starts nothing is no task: its failure, at once
		return toolFailure(te.msg, runID), nil
	}
	if err != nil {
		return nil, err
	}
	c := s.cfg.As(p)
	rec, err := s.first(ctx, c, runID)
	if err != nil {
		return nil, err
	}
	t, err := s.taskOf(ctx, c, rec)
	if err != nil {
		return nil, err
	}
	return taskCreated{t}, nil
}

// taskCreated is the answer of a task-augmented tools/call (CreateTaskResult).
type taskCreated struct {
	Task task `json:"task"`
}

// first returns the record of run runID, waiting for the engine's first save of a run just
// started.
func (s *Server) first(ctx context.Context, c *client.Client, runID string) (*client.Record, error) {
	for u, err := range c.Watch(ctx, runID, client.WatchOptions{Only: client.WatchRecords}) {
		return u.Record, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("the watch of run %s ended before its first record", runID)
}

// taskID reads the params of a tasks/* method.
func taskID(method string, params json.RawMessage) (string, error) {
	var prm struct {
		TaskID string `json:"taskId"`
	}
	if err := decodeParams(method, params, &prm); err != nil {
		return "", err
	}
	if prm.TaskID == "" {
		return "", rpcError(jsonrpc.CodeInvalidParams, "%s needs params.taskId, the id of a task tools/call answered", method)
	}
	return prm.TaskID, nil
}

// ownTask returns the record of task id, a run started by a tool call of p's (an admin's: of
// anyone's); a JSON-RPC error when there is none.
func (s *Server) ownTask(ctx context.Context, p operator.Principal, c *client.Client, id string) (*client.Record, error) {
	none := rpcError(jsonrpc.CodeInvalidParams, "there is no task %s of principal %s", id, p.Name)
	if !strings.HasPrefix(id, RunIDPrefix) {
		return nil, none
	}
	rec, err := c.Get(ctx, id)
	if errors.Is(err, client.ErrNotFound) {
		return nil, none
	}
	if err != nil {
		return nil, err
	}
	if rec.Run.StartedBy != p.Name && !p.Has(operator.RoleAdmin) {
		return nil, none
	}
	return rec, nil
}

// getTask answers tasks/get.
func (s *Server) getTask(ctx context.Context, p operator.Principal, params json.RawMessage) (any, error) {
	id, err := taskID("tasks/get", params)
	if err != nil {
		return nil, err
	}
	c := s.cfg.As(p)
	rec, err := s.ownTask(ctx, p, c, id)
	if err != nil {
		return nil, err
	}
	return s.taskOf(ctx, c, rec)
}

// taskResult answers tasks/result: it waits for the run's end, and answers as the tool call
// would have.
func (s *Server) taskResult(ctx context.Context, p operator.Principal, params json.RawMessage) (any, error) {
	id, err := taskID("tasks/result", params)
	if err != nil {
		return nil, err
	}
	c := s.cfg.As(p)
	if _, err := s.ownTask(ctx, p, c, id); err != nil {
		return nil, err
	}
	rec, err := c.Wait(ctx, id)
	if err != nil {
		return nil, err
	}
	res, err := s.outcome(ctx, c, rec)
	if err != nil {
		return nil, err
	}
	res.Meta[relatedTaskKey] = map[string]string{"taskId": id}
	return res, nil
}

// cancelTask answers tasks/cancel: the run is cancelled, as p, and the task answered once the
// engine ended it.
func (s *Server) cancelTask(ctx context.Context, p operator.Principal, params json.RawMessage) (any, error) {
	id, err := taskID("tasks/cancel", params)
	if err != nil {
		return nil, err
	}
	c := s.cfg.As(p)
	rec, err := s.ownTask(ctx, p, c, id)
	if err != nil {
		return nil, err
	}
	if rec.Finished() {
		return nil, rpcError(jsonrpc.CodeInvalidParams, "task %s is %s already: only a task that has not ended can be cancelled", id, taskStatus(rec.Run.Status))
	}
	if err := c.Cancel(ctx, id, "cancelled by an MCP host (tasks/cancel)"); err != nil {
		if errors.Is(err, client.ErrForbidden) {
			return nil, rpcError(jsonrpc.CodeInvalidRequest, "%s", strings.TrimPrefix(err.Error(), "client: "))
		}
		return nil, err
	}
	if rec, err = c.Wait(ctx, id); err != nil {
		return nil, err
	}
	return s.taskOf(ctx, c, rec)
}

// listTasks answers tasks/list: p's tasks, newest first, a page at a time.
func (s *Server) listTasks(ctx context.Context, p operator.Principal, params json.RawMessage) (any, error) {
	var prm struct {
		Cursor string `json:"cursor,omitempty"`
	}
	if err := decodeParams("tasks/list", params, &prm); err != nil {
		return nil, err
	}
	recs, next, err := s.ownRuns(ctx, p, prm.Cursor)
	if err != nil {
		return nil, err
	}
	out := struct {
		Tasks      []task `json:"tasks"`
		NextCursor string `json:"nextCursor,omitempty"`
	}{Tasks: []task{}, NextCursor: next}
	c := s.cfg.As(p)
	for _, rec := range recs {
		t, err := s.taskOf(ctx, c, rec)
		if err != nil {
			return nil, err
		}
		out.Tasks = append(out.Tasks, t)
	}
	return out, nil
}

// ownRunsPage is how many runs a page of tasks/list and resources/list reads.
const ownRunsPage = 100

// ownRuns returns a page of the runs p started with tool calls, newest first, after cursor,
// and the cursor of the next page ("" for none).
func (s *Server) ownRuns(ctx context.Context, p operator.Principal, cursor string) ([]*client.Record, string, error) {
	if !p.MayRead() {
		return nil, "", nil
	}
	page, err := s.cfg.As(p).Query(ctx, client.Query{Newest: true, Limit: ownRunsPage, After: cursor})
	if err != nil {
		if cursor != "" {
			return nil, "", rpcError(jsonrpc.CodeInvalidParams, "the cursor %q is not one this server gave", cursor)
		}
		return nil, "", err
	}
	var out []*client.Record
	for _, rec := range page.Records {
		if strings.HasPrefix(rec.Run.ID, RunIDPrefix) && (rec.Run.StartedBy == p.Name || p.Has(operator.RoleAdmin)) {
			out = append(out, rec)
		}
	}
	return out, page.Next, nil
}
