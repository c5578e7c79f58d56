package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/workflow"
)

// PutBundles stores every bundle of bs in kv (natsbox.WorkflowsBucket). A bundle already there
// is left as it is (the key is the hash of the definition), unless its definition has another
// hash.
func PutBundles(ctx context.Context, kv jetstream.KeyValue, bs *workflow.Bundles) error {
	for h, b := range bs.All {
		data, err := json.Marshal(b)
		if err != nil {
			return fmt.Errorf("workflow %s: %w", b.Definition.Name, err)
		}
		// Through natsbox.RetryNoStream, as every publish: right after a node of a cluster
		// comes back, the bucket may answer nobody until its stream has a leader again.
		err = natsbox.RetryNoStream(ctx, func() error {
			_, err := kv.Create(ctx, h, data)
			return err
		})
		if errors.Is(err, jetstream.ErrKeyExists) {
			err = replaceSquatter(ctx, kv, h, data)
		}
		if err != nil {
			return fmt.Errorf("store workflow %s: %w", b.Definition.Name, err)
		}
	}
	return nil
}

// replaceSquatter replaces the bundle under h when its definition does not hash to h: someone
// who may store workflows wrote it there first, and a Store refuses to read it. A bundle whose
// definition hashes to h is the same workflow and is left as it is.
func replaceSquatter(ctx context.Context, kv jetstream.KeyValue, h string, data []byte) error {
	e, err := kv.Get(ctx, h)
	if err != nil {
		return err
	}
	var have workflow.Bundle
	if json.Unmarshal(e.Value(), &have) == nil && have.Definition != nil {
		if hh, err := have.Definition.Hash(); err == nil && hh == h {
			return nil
		}
	}
	_, err = kv.Update(ctx, h, data, e.Revision())
	return err
}

// Store reads bundles from kv by hash and keeps them: a bundle never changes under its hash.
// It is safe for concurrent use.
type Store struct {
	open  func(context.Context) (jetstream.KeyValue, error)
	mu    sync.Mutex
	cache map[string]*workflow.Bundle
}

// NewStore returns a Store over kv (natsbox.WorkflowsBucket).
func NewStore(kv jetstream.KeyValue) *Store {
	return OpenStore(func(context.Context) (jetstream.KeyValue, error) { return kv, nil })
}

// OpenStore returns a Store over the bucket open returns, called at each read or write that
// needs it: a worker's bucket is opened on first use, so that a store made before the layout
// exists works once it does.
func OpenStore(open func(context.Context) (jetstream.KeyValue, error)) *Store {
	return &Store{open: open, cache: map[string]*workflow.Bundle{}}
}

// Get returns the bundle stored under hash.
func (s *Store) Get(ctx context.Context, hash string) (*workflow.Bundle, error) {
	s.mu.Lock()
	b := s.cache[hash]
	s.mu.Unlock()
	if b != nil {
		return b, nil
	}
	kv, err := s.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("workflow %.12s: %w", hash, err)
	}
	e, err := kv.Get(ctx, hash)
	if err != nil {
		return nil, fmt.Errorf("workflow %.12s: %w", hash, err)
	}
	b = new(workflow.Bundle)
	if err := json.Unmarshal(e.Value(), b); err != nil {
		return nil, fmt.Errorf("workflow %.12s: %w: the stored bundle is not valid: %v", hash, wire.ErrMalformed, err)
	}
	if b.Definition == nil {
		return nil, fmt.Errorf("workflow %.12s: %w: the stored bundle has no definition", hash, wire.ErrMalformed)
	}
	b.Definition.Normalize()
	// A bundle is stored under the hash of its definition; one whose definition has another
	// hash was not stored by reins (anyone who may store workflows can write any key) and
	// must not run in the place of the workflow that hash names.
	if h, err := b.Definition.Hash(); err != nil || h != hash {
		return nil, fmt.Errorf("workflow %.12s: %w: the stored definition does not have the hash it is stored under", hash, wire.ErrMalformed)
	}
	s.mu.Lock()
	s.cache[hash] = b
	s.mu.Unlock()
	return b, nil
}

// Put stores bs in the store's bucket and keeps them.
func (s *Store) Put(ctx context.Context, bs *workflow.Bundles) error {
	kv, err := s.open(ctx)
	if err != nil {
		return err
	}
	if err := PutBundles(ctx, kv, bs); err != nil {
		return err
	}
	s.mu.Lock()
	for h, b := range bs.All {
		s.cache[h] = b
	}
	s.mu.Unlock()
	return nil
}
