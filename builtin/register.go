package builtin

import (
	"fmt"
	"maps"
	"slices"

	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/session"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// Register registers the built-in handlers on w: protocol.HandlerLLM and protocol.HandlerAgent, or
// only those named in handlers when any are given. Side effects are recorded in cfg.Effects, or
// in w.Effects() when it is nil, and sessions kept in cfg.Sessions, or in the sessions bucket on
// the worker's connection (session.New(w.Conn())); model and tool calls are counted in
// cfg.Metrics (nil: not counted). It fails on a configuration New refuses and on a name that is not
// a built-in handler, registering nothing then.
func Register(w *worker.Worker, cfg Config, handlers ...string) error {
	if cfg.Effects == nil {
		cfg.Effects = w.Effects()
	}
	if cfg.Deltas == nil {
		cfg.Deltas = w.PublishDelta
	}
	if cfg.Sessions == nil {
		cfg.Sessions = session.New(w.Conn())
	}
	h, err := New(cfg)
	if err != nil {
		return err
	}
	w.OnStop(func() { _ = h.Close() })
	if len(handlers) == 0 {
		handlers = []string{protocol.HandlerLLM, protocol.HandlerAgent}
	}
	serve := map[string]func(Task) error{protocol.HandlerLLM: h.LLM, protocol.HandlerAgent: h.Agent}
	for _, name := range handlers {
		if serve[name] == nil {
			return fmt.Errorf("builtin: %q is not a built-in handler (known: %s, %s)", name, protocol.HandlerLLM, protocol.HandlerAgent)
		}
	}
	bundles := runstore.OpenStore(w.WorkflowsBucket)
	seen := map[string]bool{}
	for _, name := range handlers {
		if !seen[name] {
			seen[name] = true
			w.Handle(name, adapt(serve[name], bundles))
		}
	}
	// The series of the program's own tools and models exist at 0 from the start.
	cfg.Metrics.Tools(slices.Sorted(maps.Keys(cfg.Tools))...)
	for name := range cfg.Models {
		cfg.Metrics.ForModel(goModel, name)
	}
	// What clients check a workflow against when it is submitted (worker.ServedBucket).
	w.Advertise(worker.ServedTool, slices.Sorted(maps.Keys(cfg.Tools))...)
	w.Advertise(worker.ServedModel, slices.Sorted(maps.Keys(cfg.Models))...)
	return nil
}

// adapt serves a handler of this package as a worker handler.
func adapt(serve func(Task) error, bundles *runstore.Store) worker.Handler {
	return func(tc worker.TaskContext) error { return serve(taskContext{tc, bundles}) }
}

// taskContext is a worker.TaskContext as a Task, its bundle read from the worker's workflows
// bucket.
type taskContext struct {
	worker.TaskContext
	bundles *runstore.Store
}

// Bundle returns the workflow definition the run started with (Task.Workflow).
func (c taskContext) Bundle() (*workflow.Bundle, error) {
	t := c.Task()
	if t.Workflow == "" {
		return nil, fmt.Errorf("task %s names no workflow", t.MsgID)
	}
	return c.bundles.Get(c, t.Workflow)
}

var _ Task = taskContext{}

// CompleteWithStop completes the task with the stop reason and its sentence as its outcome; the engine
// takes the label from the step's branch or the stop reason.
func (c taskContext) CompleteWithStop(output any, stopReason, detail string) error {
	return c.CompleteWith(output, worker.Outcome{StopReason: stopReason, StopDetail: detail})
}
