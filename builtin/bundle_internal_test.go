package builtin

import (
	"strings"
	"testing"

	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
)

// taskOnly is a worker.TaskContext that only knows its task.
type taskOnly struct {
	worker.TaskContext
	task *protocol.Task
}

func (t taskOnly) Task() *protocol.Task { return t.task }

// A task that names no workflow has no bundle to read: the handler fails it in one sentence
// naming the task, without a read of the bucket.
func TestBundleOfTaskWithoutWorkflow(t *testing.T) {
	c := taskContext{TaskContext: taskOnly{task: &protocol.Task{MsgID: "r/s/1/1/1"}}}
	b, err := c.Bundle()
	if b != nil || err == nil || !strings.Contains(err.Error(), "task r/s/1/1/1 names no workflow") {
		t.Fatalf("Bundle: %v, %v; want the error that the task names no workflow", b, err)
	}
}
