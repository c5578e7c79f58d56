package worker

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// workflowsKV is natsbox.WorkflowsBucket, opened on first use, so that Bundles works before Run
// has ensured the layout. It serves the two methods runstore.Store calls, Get and Create (and Put);
// the embedded interface is nil and any other method panics.
type workflowsKV struct {
	jetstream.KeyValue

	js   jetstream.JetStream
	name string // the namespace's natsbox.WorkflowsBucket
	mu   sync.Mutex
	kv   jetstream.KeyValue
}

func (l *workflowsKV) bucket(ctx context.Context) (jetstream.KeyValue, error) {
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

func (l *workflowsKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv, err := l.bucket(ctx)
	if err != nil {
		return nil, err
	}
	return kv.Get(ctx, key)
}

func (l *workflowsKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	kv, err := l.bucket(ctx)
	if err != nil {
		return 0, err
	}
	return kv.Create(ctx, key, value, opts...)
}

func (l *workflowsKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	kv, err := l.bucket(ctx)
	if err != nil {
		return 0, err
	}
	return kv.Put(ctx, key, value)
}
