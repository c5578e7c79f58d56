package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/workflow"
)

// The registry: workflows registered by name (docs/api.md, "Workflows"), in the bucket
// natsbox.Names.RegistryBucket. Key NAME holds the latest version of NAME (without its
// source), key NAME.vN version N with its source; a version is never changed or removed; key
// NAME.access who may add versions (Access, access.go). The
// definition of every version is stored as a bundle in the workflows bucket under its hash, as
// client.Start stores it, so that a run of a registered workflow is a run like any other.

// Registered is one version of a workflow registered by name.
type Registered struct {
	Name         string    `json:"name"`
	Version      int       `json:"version"`
	Hash         string    `json:"hash"` // the definition's hash (workflow.Definition.Hash)
	RegisteredAt time.Time `json:"registered_at"`
	RegisteredBy string    `json:"registered_by"` // the principal that registered it
	// Source is the workflow file as registered (TOML); Workflows leaves it out.
	Source string `json:"source,omitempty"`
}

var (
	// ErrNoWorkflow: no workflow is registered under the name.
	ErrNoWorkflow = errors.New("no workflow is registered under this name")
	// ErrNoVersion: the workflow is registered, but not in that version.
	ErrNoVersion = errors.New("the registered workflow has no such version")
	// ErrBadName: not a name a workflow may be registered under ([CheckName]).
	ErrBadName = errors.New("not a valid workflow name")
	// ErrTooLarge: the workflow is too large to store in one NATS message.
	ErrTooLarge = errors.New("too large to store")
	// ErrChanged: the source of a version no longer gives the definition it registered, and
	// the bundle stored under its hash is gone.
	ErrChanged = errors.New("the registered source no longer gives its definition")
)

// MaxNameLen is the longest name a workflow may be registered under.
const MaxNameLen = 64

// CheckName reports whether name can name a registered workflow: 1 to MaxNameLen characters
// of [a-z0-9_-], the first a letter or a digit.
func CheckName(name string) error {
	bad := func(why string) error {
		shown := name
		if len(shown) > MaxNameLen+8 {
			shown = shown[:MaxNameLen+8] + "…"
		}
		return fmt.Errorf("client: workflow name %q is %w: %s", shown, ErrBadName, why)
	}
	if name == "" {
		return bad("it is empty")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		case c == '-' || c == '_':
			return bad("it must begin with a lowercase letter or a digit")
		default:
			return bad(fmt.Sprintf("want only lowercase letters, digits, '-' and '_', and byte %d is %q", i, c))
		}
	}
	if len(name) > MaxNameLen {
		return bad(fmt.Sprintf("it is %d characters long, more than %d", len(name), MaxNameLen))
	}
	return nil
}

func versionKey(name string, version int) string { return name + ".v" + strconv.Itoa(version) }

// registry opens the registry bucket, creating the layout when it does not exist (a server
// whose layout predates it).
func (c *Client) registry(ctx context.Context) (jetstream.KeyValue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reg != nil {
		return c.reg, nil
	}
	var reg jetstream.KeyValue
	open := func(ctx context.Context) (err error) {
		reg, err = c.js.KeyValue(ctx, c.names.RegistryBucket())
		return err
	}
	err := natsbox.Retry(ctx, open)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		if err = natsbox.EnsureLayout(ctx, c.js, c.layout); err == nil {
			err = natsbox.Retry(ctx, open)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("client: open the registry of workflows: %w", err)
	}
	c.reg = reg
	return reg, nil
}

// Register registers source, the workflow file def was read from, under name, as the client's
// principal, who must be the name's owner, one of its writers or an admin ([ErrNotWriter],
// before anything is stored); the principal who registers a new name owns it (Access). The
// caller has validated def ([workflow.Validate] with OneFile, and the server's
// submission check): Register stores what it is given. It returns the version: a new one
// (created true, numbered one more than the latest), or the latest when def is the same
// definition as the latest's (created false). Two registrations of different files at once
// get two versions, one after the other.
func (c *Client) Register(ctx context.Context, name string, source []byte, def *workflow.Definition) (Registered, bool, error) {
	if err := CheckName(name); err != nil {
		return Registered{}, false, err
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		return Registered{}, false, fmt.Errorf("client: register %s: %w", name, err)
	}
	for _, b := range bs.All {
		b.BaseDir = "" // a registered workflow names no file: nothing resolves against a directory
	}
	reg, err := c.registry(ctx)
	if err != nil {
		return Registered{}, false, err
	}
	if _, err := c.mayWrite(ctx, reg, name); err != nil {
		return Registered{}, false, err
	}
	_, wfs, err := c.buckets(ctx)
	if err != nil {
		return Registered{}, false, err
	}
	latest, rev, err := c.latest(ctx, reg, name)
	if err != nil && !errors.Is(err, ErrNoWorkflow) {
		return Registered{}, false, err
	}
	if latest != nil && latest.Hash == bs.Root {
		return *latest, false, nil
	}
	v := Registered{Name: name, Hash: bs.Root, RegisteredAt: c.now().UTC(), RegisteredBy: c.principal, Source: string(source)}
	v.Version = 1
	if latest != nil {
		v.Version = latest.Version + 1
	}
	if err := c.fits(v); err != nil {
		return Registered{}, false, err
	}
	if err := c.bundlesFit(bs); err != nil {
		return Registered{}, false, err
	}
	// The definition is stored before any version names it.
	if err := runstore.PutBundles(ctx, wfs, bs); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			err = fmt.Errorf("its definition is %w for one NATS message: %w", ErrTooLarge, err)
		}
		return Registered{}, false, fmt.Errorf("client: register %s: %w", name, err)
	}
	created, err := c.claimVersion(ctx, reg, &v)
	if err != nil {
		return Registered{}, false, err
	}
	return v, created, c.moveLatest(ctx, reg, v, latest, rev)
}

// claimVersion stores v under the first free version from v.Version on. A version that holds
// the same definition is taken as it is (a registration of the same file at the same time, or
// one that stopped before it moved the latest key): created false, and v becomes it.
func (c *Client) claimVersion(ctx context.Context, reg jetstream.KeyValue, v *Registered) (bool, error) {
	for {
		data, err := json.Marshal(v)
		if err != nil {
			return false, err
		}
		err = natsbox.RetryNoStream(ctx, func() error {
			_, err := reg.Create(ctx, versionKey(v.Name, v.Version), data)
			return err
		})
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, jetstream.ErrKeyExists):
			return false, fmt.Errorf("client: register %s version %d: %w", v.Name, v.Version, err)
		}
		have, err := c.version(ctx, reg, v.Name, v.Version)
		if err != nil {
			return false, err
		}
		if have.Hash == v.Hash {
			*v = *have
			return false, nil
		}
		v.Version++
	}
}

// fits tells whether version v fits one message of the NATS server: ErrTooLarge otherwise.
func (c *Client) fits(v Registered) error {
	v.Version += 1000 // room for the versions that may be taken meanwhile
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := c.fitsMessage(len(data)); err != nil {
		return fmt.Errorf("client: register %s: the workflow with its source %w", v.Name, err)
	}
	return nil
}

// bundlesFit tells whether every bundle of bs fits one message of the NATS server, before any
// is stored: ErrTooLarge, naming the workflow, its size and the limit, otherwise.
func (c *Client) bundlesFit(bs *workflow.Bundles) error {
	for _, h := range slices.Sorted(maps.Keys(bs.All)) {
		b := bs.All[h]
		data, err := json.Marshal(b)
		if err != nil {
			return fmt.Errorf("client: workflow %s: %w", b.Definition.Name, err)
		}
		if err := c.fitsMessage(len(data)); err != nil {
			return fmt.Errorf("client: workflow %s %w", b.Definition.Name, err)
		}
	}
	return nil
}

// messageHeadroom is what a KV write's headers may take of a message.
const messageHeadroom = 4096

// fitsMessage tells whether a value of size bytes fits one KV write to the NATS server; its
// error completes a sentence whose subject is the value.
func (c *Client) fitsMessage(size int) error {
	limit := c.js.Conn().MaxPayload()
	if int64(size) > limit-messageHeadroom {
		return fmt.Errorf("is %w: it takes %d bytes as stored, more than the %d bytes one message of the NATS server holds (its max_payload of %d, less %d for headers)",
			ErrTooLarge, size, limit-messageHeadroom, limit, messageHeadroom)
	}
	return nil
}

// moveLatest makes v the latest version of its name, unless a later one already is: a
// compare-and-set on the latest key from its revision rev (0: there was none), read again
// when another registration moved it meanwhile.
func (c *Client) moveLatest(ctx context.Context, reg jetstream.KeyValue, v Registered, latest *Registered, rev uint64) error {
	head := v
	head.Source = ""
	data, err := json.Marshal(head)
	if err != nil {
		return err
	}
	for {
		if latest != nil && latest.Version >= v.Version {
			return nil
		}
		if rev == 0 {
			_, err = reg.Create(ctx, v.Name, data)
		} else {
			_, err = reg.Update(ctx, v.Name, data, rev)
		}
		if err == nil || !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSequence(err) {
			if err != nil {
				return fmt.Errorf("client: register %s: move the latest version to %d: %w", v.Name, v.Version, err)
			}
			return nil
		}
		if latest, rev, err = c.latest(ctx, reg, v.Name); err != nil && !errors.Is(err, ErrNoWorkflow) {
			return err
		}
	}
}

// isWrongLastSequence reports whether err is the server's answer to a compare-and-set whose
// revision is not the key's.
func isWrongLastSequence(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// latest reads the latest version of name (without its source) and the revision of its key;
// ErrNoWorkflow when there is none.
func (c *Client) latest(ctx context.Context, reg jetstream.KeyValue, name string) (*Registered, uint64, error) {
	e, err := reg.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("client: workflow %s: %w", name, ErrNoWorkflow)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("client: read workflow %s: %w", name, err)
	}
	r, err := decodeRegistered(e)
	if err != nil {
		return nil, 0, err
	}
	return r, e.Revision(), nil
}

// version reads version n of name with its source.
func (c *Client) version(ctx context.Context, reg jetstream.KeyValue, name string, n int) (*Registered, error) {
	e, err := reg.Get(ctx, versionKey(name, n))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if _, _, lerr := c.latest(ctx, reg, name); errors.Is(lerr, ErrNoWorkflow) {
			return nil, lerr
		}
		return nil, fmt.Errorf("client: workflow %s version %d: %w", name, n, ErrNoVersion)
	}
	if err != nil {
		return nil, fmt.Errorf("client: read workflow %s version %d: %w", name, n, err)
	}
	return decodeRegistered(e)
}

func decodeRegistered(e jetstream.KeyValueEntry) (*Registered, error) {
	r := new(Registered)
	if err := json.Unmarshal(e.Value(), r); err != nil || r.Name == "" || r.Version < 1 || r.Hash == "" {
		return nil, fmt.Errorf("client: the registry's key %s does not hold a registered workflow", e.Key())
	}
	return r, nil
}

// Workflow returns version (0: the latest) of the workflow registered as name, with its
// source: [ErrNoWorkflow] when nothing is registered under name, [ErrNoVersion] when that version
// is not.
func (c *Client) Workflow(ctx context.Context, name string, version int) (Registered, error) {
	if err := CheckName(name); err != nil {
		return Registered{}, fmt.Errorf("%w: %w", ErrNoWorkflow, err)
	}
	if version < 0 {
		return Registered{}, fmt.Errorf("client: workflow %s version %d: %w", name, version, ErrNoVersion)
	}
	reg, err := c.registry(ctx)
	if err != nil {
		return Registered{}, err
	}
	if version == 0 {
		latest, _, err := c.latest(ctx, reg, name)
		if err != nil {
			return Registered{}, err
		}
		version = latest.Version
	}
	r, err := c.version(ctx, reg, name, version)
	if err != nil {
		return Registered{}, err
	}
	return *r, nil
}

// Workflows returns the latest version of every registered workflow, by name, without their
// sources.
func (c *Client) Workflows(ctx context.Context) ([]Registered, error) {
	reg, err := c.registry(ctx)
	if err != nil {
		return nil, err
	}
	var all []Registered
	for e, err := range natsbox.Entries(ctx, reg, "*") { // the latest keys: one token, NAME
		if err != nil {
			return nil, fmt.Errorf("client: list the registered workflows: %w", err)
		}
		r, err := decodeRegistered(e)
		if err != nil {
			return nil, err
		}
		r.Source = ""
		all = append(all, *r)
	}
	slices.SortFunc(all, func(a, b Registered) int { return cmp.Compare(a.Name, b.Name) })
	return all, nil
}

// WorkflowNames yields the name of every registered workflow, then of every one registered (or
// given a new version) from then on, until ctx ends (with ctx's error) or the watch does.
func (c *Client) WorkflowNames(ctx context.Context) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		reg, err := c.registry(ctx)
		if err != nil {
			yield("", err)
			return
		}
		w, cancel, err := natsbox.StartWatch(ctx, func(ctx context.Context) (jetstream.KeyWatcher, error) {
			return reg.Watch(ctx, "*", jetstream.IgnoreDeletes()) // the latest keys: one token, NAME
		})
		if err != nil {
			yield("", fmt.Errorf("client: watch the registered workflows: %w", err))
			return
		}
		defer cancel()
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				yield("", fmt.Errorf("client: watch the registered workflows: %w", ctx.Err()))
				return
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					yield("", errors.New("client: watch the registered workflows: the watch ended"))
					return
				case e != nil && !yield(e.Key(), nil):
					return
				}
			}
		}
	}
}

// Bundles returns the bundles of registered version r: read from the workflows bucket by its
// hash, or, when they are not there (removed, or written there by someone else), made again
// from its source, which must give the same definition ([ErrChanged] otherwise).
func (c *Client) Bundles(ctx context.Context, r Registered) (*workflow.Bundles, error) {
	_, wfs, err := c.buckets(ctx)
	if err != nil {
		return nil, err
	}
	store := runstore.NewStore(wfs)
	bs := &workflow.Bundles{Root: r.Hash, All: map[string]*workflow.Bundle{}}
	var add func(h string) error
	add = func(h string) error {
		if bs.All[h] != nil {
			return nil
		}
		b, err := store.Get(ctx, h)
		if err != nil {
			return err
		}
		bs.All[h] = b
		for _, sub := range b.Workflows {
			if err := add(sub); err != nil {
				return err
			}
		}
		for _, sub := range b.Agents {
			if err := add(sub); err != nil {
				return err
			}
		}
		return nil
	}
	err = add(r.Hash)
	if err == nil {
		return bs, nil
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, wire.ErrMalformed) {
		return nil, fmt.Errorf("client: workflow %s version %d: %w", r.Name, r.Version, err)
	}
	def, ps := workflow.Parse(r.Name+".toml", []byte(r.Source))
	if len(ps) > 0 || def == nil {
		return nil, fmt.Errorf("client: workflow %s version %d: %w (its bundle is gone and the source does not parse)", r.Name, r.Version, ErrChanged)
	}
	def.Normalize()
	rebuilt, err := workflow.NewBundles(def, "")
	if err != nil {
		return nil, fmt.Errorf("client: workflow %s version %d: %w", r.Name, r.Version, err)
	}
	if rebuilt.Root != r.Hash {
		return nil, fmt.Errorf("client: workflow %s version %d: %w (hash %.12s, registered %.12s)", r.Name, r.Version, ErrChanged, rebuilt.Root, r.Hash)
	}
	for _, b := range rebuilt.All {
		b.BaseDir = ""
	}
	return rebuilt, nil
}
