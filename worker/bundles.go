package worker

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// workflows is natsbox.WorkflowsBucket, opened on first use, so that WorkflowsBucket works
// before Run has ensured the layout.
type workflows struct {
	js   jetstream.JetStream
	name string // the namespace's natsbox.WorkflowsBucket
	mu   sync.Mutex
	kv   jetstream.KeyValue
}

func (l *workflows) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kv != nil {
		return l.kv, nil
	}
	kv, err := l.js.KeyValue(ctx, l.name)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", l.name, err)
	}
	l.kv = kv
	return kv, nil
}

// WorkflowsBucket returns the bucket of the workflow definitions runs started with, by hash
// (Task.Workflow), opened on first use: the built-in handlers read the step they serve there.
func (w *Worker) WorkflowsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return w.workflows.bucket(ctx)
}
