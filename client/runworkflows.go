package client

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/workflow"
)

// RunWorkflow is a workflow that runs were started of, as the index of runs knows it: its
// definition's name, how many runs of it are kept (sub-runs aside) and which is the newest.
type RunWorkflow struct {
	Name      string
	Runs      int
	LastRunID string
	// LastStarted is when the newest run started.
	LastStarted time.Time
	// RegisteredAs names the registered workflows whose latest version's definition has this
	// name (a workflow is registered under a name of its own: refund for a definition named
	// refund_investigation); none for a file nobody registered.
	RegisteredAs []string
}

// RunWorkflows lists the workflows of the kept runs by name, registered or not (a run of
// reins run FILE registers nothing). It reads the index's keys and the registry's latest
// versions, never a run's record, so it costs what one page of Query does; the definition of a
// registered version is read once per client (definitionNames). A name the index cannot hold
// as a token (one with a dot, a space or a wildcard) is left out.
func (c *Client) RunWorkflows(ctx context.Context) ([]RunWorkflow, error) {
	if _, _, err := c.buckets(ctx); err != nil {
		return nil, err
	}
	set, err := natsbox.StoredKeys(ctx, c.js, c.names.StatusBucket(), runstore.StatusFilter("", ""))
	if err != nil {
		return nil, fmt.Errorf("client: list the workflows of runs: %w", err)
	}
	type seen struct {
		runs map[string]bool
		last runstore.IndexKey
	}
	by := map[string]*seen{}
	for k := range set {
		ik, ok := runstore.ParseStatusKey(k)
		if !ok || ik.Workflow == "-" || strings.Contains(ik.RunID, "/") {
			continue
		}
		s := by[ik.Workflow]
		if s == nil {
			s = &seen{runs: map[string]bool{}}
			by[ik.Workflow] = s
		}
		// A run whose status changes has two keys for a moment, with one cursor.
		s.runs[ik.RunID] = true
		if ik.Cursor > s.last.Cursor {
			s.last = ik
		}
	}
	as, err := c.registeredAs(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]RunWorkflow, 0, len(by))
	for name, s := range by {
		out = append(out, RunWorkflow{Name: name, Runs: len(s.runs), LastRunID: s.last.RunID, LastStarted: s.last.Started(), RegisteredAs: as[name]})
	}
	slices.SortFunc(out, func(a, b RunWorkflow) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// registeredAs maps the name of each registered workflow's latest definition to the names it
// is registered under, by name.
func (c *Client) registeredAs(ctx context.Context) (map[string][]string, error) {
	regs, err := c.Workflows(ctx)
	if err != nil {
		return nil, err
	}
	reg, err := c.registry(ctx)
	if err != nil {
		return nil, err
	}
	_, wfs, err := c.buckets(ctx)
	if err != nil {
		return nil, err
	}
	store := runstore.NewStore(wfs)
	as := map[string][]string{}
	for _, r := range regs { // by name
		name, err := c.definitionName(ctx, store, reg, r)
		if err != nil {
			return nil, err
		}
		as[name] = append(as[name], r.Name)
	}
	return as, nil
}

// definitionName is the name of registered version r's definition: its stored bundle's, or,
// when that is gone, its source's. A version's hash fixes its definition, so the name is read
// once and remembered (c.defNames).
func (c *Client) definitionName(ctx context.Context, store *runstore.Store, reg jetstream.KeyValue, r Registered) (string, error) {
	key := registeredVersion{r.Name, r.Version, r.Hash}
	if name, ok := c.defNames.get(key); ok {
		return name, nil
	}
	name, err := c.readDefinitionName(ctx, store, reg, r)
	if err != nil {
		return "", err
	}
	c.defNames.put(key, name)
	return name, nil
}

// readDefinitionName reads what definitionName remembers.
func (c *Client) readDefinitionName(ctx context.Context, store *runstore.Store, reg jetstream.KeyValue, r Registered) (string, error) {
	c.defNames.read()
	if b, err := store.Get(ctx, r.Hash); err == nil {
		return b.Definition.Name, nil
	}
	v, err := c.version(ctx, reg, r.Name, r.Version)
	if err != nil {
		return "", err
	}
	def, _ := workflow.Parse(r.Name+".toml", []byte(v.Source))
	if def == nil {
		return "", fmt.Errorf("client: workflow %s version %d: its source holds no workflow", r.Name, r.Version)
	}
	return def.Name, nil
}

// maxDefinitionNames bounds the definition names a client remembers: past it, the one
// remembered first is forgotten.
const maxDefinitionNames = 4096

// registeredVersion is one registered version: its name, number and definition's hash.
type registeredVersion struct {
	name    string
	version int
	hash    string
}

// definitionNames remembers the definition name of registered versions, so that listing the
// workflows of runs (GET /v1/workflows) reads a version's definition once, not on every list.
// A new version has a key of its own, so nothing remembered goes stale. The zero value is ready.
type definitionNames struct {
	mu    sync.Mutex
	names map[registeredVersion]string
	order []registeredVersion // in the order remembered, to forget the first past the bound
	reads int                 // definitions read, which the tests count
}

func (d *definitionNames) get(k registeredVersion) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name, ok := d.names[k]
	return name, ok
}

func (d *definitionNames) put(k registeredVersion, name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.names == nil {
		d.names = map[registeredVersion]string{}
	}
	if _, ok := d.names[k]; ok {
		return
	}
	if len(d.order) >= maxDefinitionNames {
		delete(d.names, d.order[0])
		d.order = slices.Delete(d.order, 0, 1)
	}
	d.names[k] = name
	d.order = append(d.order, k)
}

func (d *definitionNames) read() {
	d.mu.Lock()
	d.reads++
	d.mu.Unlock()
}
