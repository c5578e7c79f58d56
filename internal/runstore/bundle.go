package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/workflow"
)

// Bundle is what natsbox.WorkflowsBucket stores under a definition's hash: the definition, the
// hashes of the sub-workflow files it names, and the directory its relative paths resolve
// against (cassettes of replay models, sub-workflow files).
type Bundle struct {
	Definition *workflow.Definition `json:"definition"`
	// Workflows maps each sub-workflow file the definition names (as written in it) to the
	// hash of that file's bundle.
	Workflows map[string]string `json:"workflows,omitempty"`
	// Agents maps each step the definition's agent tools run to the hash of the bundle of the
	// workflow its sub-runs run (workflow.Definition.AgentDefinition).
	Agents map[string]string `json:"agents,omitempty"`
	// BaseDir is the absolute directory relative paths resolve against: that of the
	// definition's file, or for a definition built in Go the base directory given to NewBundles
	// (by default the working directory of the process that made the bundles). "" (a bundle
	// made by hand) resolves them against the reader's working directory.
	BaseDir string `json:"base_dir,omitempty"`
}

// Resolve returns path made absolute against the bundle's BaseDir.
func (b *Bundle) Resolve(path string) string {
	if path == "" || filepath.IsAbs(path) || b.BaseDir == "" {
		return path
	}
	return filepath.Join(b.BaseDir, path)
}

// Bundles holds a definition and its sub-workflows, by hash.
type Bundles struct {
	Root string // the hash of the root definition
	All  map[string]*Bundle
}

// NewBundles returns the bundles of def, a definition that has passed workflow.Validate, and of
// every sub-workflow file it names, read (with workflow.Load) from baseDir ("" means the
// directory of def.Source.File, else the working directory).
func NewBundles(def *workflow.Definition, baseDir string) (*Bundles, error) {
	if baseDir == "" && def.Source != nil && def.Source.File != "" {
		baseDir = filepath.Dir(def.Source.File)
	}
	abs, err := filepath.Abs(baseDir)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", def.Name, err)
	}
	bs := &Bundles{All: map[string]*Bundle{}}
	bs.Root, err = bs.add(def, abs, map[string]string{}, 0)
	return bs, err
}

// add adds def and its sub-workflows; files maps absolute file names already added to hashes.
func (bs *Bundles) add(def *workflow.Definition, dir string, files map[string]string, depth int) (string, error) {
	if depth > workflow.MaxCallDepth {
		return "", fmt.Errorf("workflow %s: sub-workflows nested deeper than %d", def.Name, workflow.MaxCallDepth)
	}
	b := &Bundle{Definition: def, BaseDir: dir}
	for _, file := range subWorkflows(def) {
		path := file
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		h, ok := files[path]
		if !ok {
			sub, ps := workflow.Load(path)
			if len(ps) > 0 {
				return "", fmt.Errorf("workflow %s: sub-workflow %s: %s", def.Name, file, ps[0].String())
			}
			var err error
			if h, err = bs.add(sub, filepath.Dir(path), files, depth+1); err != nil {
				return "", err
			}
			files[path] = h
		}
		if b.Workflows == nil {
			b.Workflows = map[string]string{}
		}
		b.Workflows[file] = h
	}
	if err := bs.addAgents(b, dir, files, depth); err != nil {
		return "", err
	}
	h, err := def.Hash()
	if err != nil {
		return "", err
	}
	bs.All[h] = b
	return h, nil
}

// addAgents adds to b the bundles of the workflows its definition's agent tools run, in the
// same directory (their workflow tools' files resolve as the definition's do).
func (bs *Bundles) addAgents(b *Bundle, dir string, files map[string]string, depth int) error {
	for _, step := range b.Definition.ToolAgents() {
		sub, err := b.Definition.AgentDefinition(step)
		if err != nil {
			return err
		}
		h, err := sub.Hash()
		if err != nil {
			return err
		}
		if _, ok := bs.All[h]; !ok {
			if h, err = bs.add(sub, dir, files, depth+1); err != nil {
				return err
			}
		}
		if b.Agents == nil {
			b.Agents = map[string]string{}
		}
		b.Agents[step] = h
	}
	return nil
}

// subWorkflows lists the files a definition names: call and map workflow keys, parallel
// workflow branches and workflow tools.
func subWorkflows(def *workflow.Definition) []string {
	var files []string
	for _, name := range slices.Sorted(maps.Keys(def.Tools)) {
		if f := def.Tools[name].Workflow; f != "" {
			files = append(files, f)
		}
	}
	for _, s := range def.Steps {
		if s.Workflow != "" {
			files = append(files, s.Workflow)
		}
		for _, br := range s.Branches {
			if br.Workflow != "" {
				files = append(files, br.Workflow)
			}
		}
	}
	return files
}

// Put stores every bundle in kv (natsbox.WorkflowsBucket). A bundle already there is left as
// it is (the key is the hash of the definition), unless its definition has another hash.
func (bs *Bundles) Put(ctx context.Context, kv jetstream.KeyValue) error {
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
	var have Bundle
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
	cache map[string]*Bundle
}

// NewStore returns a Store over kv (natsbox.WorkflowsBucket).
func NewStore(kv jetstream.KeyValue) *Store {
	return OpenStore(func(context.Context) (jetstream.KeyValue, error) { return kv, nil })
}

// OpenStore returns a Store over the bucket open returns, called at each read or write that
// needs it: a worker's bucket is opened on first use, so that a store made before the layout
// exists works once it does.
func OpenStore(open func(context.Context) (jetstream.KeyValue, error)) *Store {
	return &Store{open: open, cache: map[string]*Bundle{}}
}

// Get returns the bundle stored under hash.
func (s *Store) Get(ctx context.Context, hash string) (*Bundle, error) {
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
	b = new(Bundle)
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
func (s *Store) Put(ctx context.Context, bs *Bundles) error {
	kv, err := s.open(ctx)
	if err != nil {
		return err
	}
	if err := bs.Put(ctx, kv); err != nil {
		return err
	}
	s.mu.Lock()
	for h, b := range bs.All {
		s.cache[h] = b
	}
	s.mu.Unlock()
	return nil
}
