package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/natsbox"
	"github.com/reins-run/reins/wire"
)

// Effects is the record of side effects, natsbox.EffectsBucket: what a side-effecting call
// returned, by an id naming the call (its idempotency key), so that a call that runs again
// (its iteration was redelivered after a crash) returns the recorded result instead of doing
// its work twice. The values are the caller's; the keys are wire.EffectKey of the ids. It is
// safe for concurrent use, and opens the bucket on first use.
type Effects struct {
	js jetstream.JetStream
	mu sync.Mutex
	kv jetstream.KeyValue
}

// Effects returns the worker's record of side effects (package builtin records its tools'
// results there).
func (w *Worker) Effects() *Effects { return w.effects }

func (e *Effects) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kv != nil {
		return e.kv, nil
	}
	kv, err := e.js.KeyValue(ctx, natsbox.EffectsBucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", natsbox.EffectsBucket, err)
	}
	e.kv = kv
	return kv, nil
}

// LoadEffect returns the value recorded for id, or nil when nothing is recorded.
func (e *Effects) LoadEffect(ctx context.Context, id string) ([]byte, error) {
	kv, err := e.bucket(ctx)
	if err != nil {
		return nil, fmt.Errorf("worker: read the record of a side effect: %w", err)
	}
	ke, err := kv.Get(ctx, wire.EffectKey(id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("worker: read the record of side effect %s: %w", wire.EffectKey(id), err)
	}
	return ke.Value(), nil
}

// StoreEffect records value for id; it returns once JetStream stored it. A later record of the
// same id replaces it.
func (e *Effects) StoreEffect(ctx context.Context, id string, value []byte) error {
	kv, err := e.bucket(ctx)
	if err != nil {
		return fmt.Errorf("worker: record a side effect: %w", err)
	}
	if _, err := kv.Put(ctx, wire.EffectKey(id), value); err != nil {
		return fmt.Errorf("worker: record side effect %s: %w", wire.EffectKey(id), err)
	}
	return nil
}
