package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
)

// Who may add versions to a registered name (docs/api.md, "Owners and writers"): the
// principal who registered it first (its owner), the principals and roles the owner names its
// writers, and admins. Key NAME.access of the registry holds it; a name registered before
// access records existed has none, and belongs to the principal who registered its version 1
// until its first new version or change of writers stores the record.

// Access is who may add versions to a registered name.
type Access struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	// Writers are principals' names and roles ("role:NAME": every principal with that role)
	// who may add versions besides the owner and admins; only the owner and admins change
	// them.
	Writers   []string  `json:"writers"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	UpdatedBy string    `json:"updated_by,omitempty"`
}

// RolePrefix marks a writer that is a role, not a principal: "role:finance".
const RolePrefix = "role:"

// MaxWriters bounds the writers of a name.
const MaxWriters = 64

var (
	// ErrNotWriter: the principal is neither the name's owner, nor one of its writers, nor an
	// admin. It wraps [ErrForbidden].
	ErrNotWriter = fmt.Errorf("not a writer of the registered workflow: %w", ErrForbidden)
	// ErrNotOwner: the principal is neither the name's owner nor an admin. It wraps
	// [ErrForbidden].
	ErrNotOwner = fmt.Errorf("not the owner of the registered workflow: %w", ErrForbidden)
	// ErrBadWriters: a list of writers that is not one ([CheckWriters]).
	ErrBadWriters = errors.New("not a list of writers")
)

// AccessKey is the registry's key of the access record of name.
func AccessKey(name string) string { return name + ".access" }

// Allows reports whether principal, holding roles, may add versions to the name (admins are
// the caller's to allow).
func (a Access) Allows(principal string, roles []string) bool {
	if principal == a.Owner || slices.Contains(a.Writers, principal) {
		return true
	}
	for _, r := range roles {
		if slices.Contains(a.Writers, RolePrefix+r) {
			return true
		}
	}
	return false
}

// CheckWriters reports whether writers can be a name's writers, and returns them without
// duplicates, in their order: at most MaxWriters entries, each a principal's name or
// "role:NAME", the names NATS subject tokens (as principals' are). The error is one sentence
// naming the entry.
func CheckWriters(writers []string) ([]string, error) {
	if len(writers) > MaxWriters {
		return nil, fmt.Errorf("client: %d writers is %w: at most %d", len(writers), ErrBadWriters, MaxWriters)
	}
	out := make([]string, 0, len(writers))
	for i, w := range writers {
		name := strings.TrimPrefix(w, RolePrefix)
		if err := natsbox.CheckToken(name); err != nil || strings.Contains(name, ":") {
			return nil, fmt.Errorf("client: writer %d, %.80q, is %w: want a principal's name or role:NAME, a name without '.', ':', '*', '>' or white space", i+1, w, ErrBadWriters)
		}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out, nil
}

// admin reports whether the client's principal is an admin.
func (c *Client) admin() bool {
	return c.principal == natsbox.RoleAdmin || slices.Contains(c.roles, natsbox.RoleAdmin)
}

// Access returns who may add versions to the workflow registered as name: [ErrNoWorkflow] when
// nothing is registered under it.
func (c *Client) Access(ctx context.Context, name string) (Access, error) {
	if err := CheckName(name); err != nil {
		return Access{}, fmt.Errorf("%w: %w", ErrNoWorkflow, err)
	}
	reg, err := c.registry(ctx)
	if err != nil {
		return Access{}, err
	}
	a, _, err := c.access(ctx, reg, name)
	return a, err
}

// Accesses returns the access of every name that has an access record, by name. A name
// registered before access records existed is not in it: Access derives it.
func (c *Client) Accesses(ctx context.Context) (map[string]Access, error) {
	reg, err := c.registry(ctx)
	if err != nil {
		return nil, err
	}
	all := map[string]Access{}
	for e, err := range natsbox.Entries(ctx, reg, AccessKey("*")) {
		if err != nil {
			return nil, fmt.Errorf("client: list the owners of the registered workflows: %w", err)
		}
		a, err := decodeAccess(e)
		if err != nil {
			return nil, err
		}
		all[a.Name] = *a
	}
	return all, nil
}

// access reads the access record of name and its revision; revision 0 for a name registered
// before access records existed, whose access is derived from its version 1; ErrNoWorkflow when
// there is neither.
func (c *Client) access(ctx context.Context, reg jetstream.KeyValue, name string) (Access, uint64, error) {
	e, err := reg.Get(ctx, AccessKey(name))
	switch {
	case err == nil:
		a, err := decodeAccess(e)
		if err != nil {
			return Access{}, 0, err
		}
		return *a, e.Revision(), nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return Access{}, 0, fmt.Errorf("client: read the owner of workflow %s: %w", name, err)
	}
	first, err := c.version(ctx, reg, name, 1)
	if errors.Is(err, ErrNoVersion) { // version 1 is gone: the latest says who registered
		first, _, err = c.latest(ctx, reg, name)
	}
	if err != nil {
		return Access{}, 0, err
	}
	return Access{Name: name, Owner: first.RegisteredBy, Writers: []string{}}, 0, nil
}

func decodeAccess(e jetstream.KeyValueEntry) (*Access, error) {
	a := new(Access)
	if err := json.Unmarshal(e.Value(), a); err != nil || a.Name == "" || a.Owner == "" || a.Name != strings.TrimSuffix(e.Key(), ".access") {
		return nil, fmt.Errorf("client: the registry's key %s does not hold the owner of a registered workflow", e.Key())
	}
	if a.Writers == nil {
		a.Writers = []string{}
	}
	return a, nil
}

// CheckWriter tells, before anything is sent, whether the client's principal may add a
// version to name (Register checks again as it stores): [ErrNotWriter] when it may not. Anyone
// may register a name nothing is registered under.
func (c *Client) CheckWriter(ctx context.Context, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	reg, err := c.registry(ctx)
	if err != nil {
		return err
	}
	a, _, err := c.access(ctx, reg, name)
	switch {
	case errors.Is(err, ErrNoWorkflow):
		return nil
	case err != nil:
		return err
	}
	return c.checkWriter(a)
}

// mayWrite checks that the client's principal may add a version to name, and stores the
// name's access record when it has none: the principal owns a name nothing is registered
// under (two registering a new name at once: the first record stored wins), and a name
// registered before access records existed keeps the owner it derives. ErrNotWriter when it
// may not; nothing is stored then.
func (c *Client) mayWrite(ctx context.Context, reg jetstream.KeyValue, name string) (Access, error) {
	for {
		a, rev, err := c.access(ctx, reg, name)
		switch {
		case errors.Is(err, ErrNoWorkflow):
			a = Access{Name: name, Owner: c.principal, Writers: []string{}, UpdatedAt: c.now().UTC(), UpdatedBy: c.principal}
		case err != nil:
			return Access{}, err
		case rev > 0 || !c.allowed(a):
			return a, c.checkWriter(a)
		}
		// Store the record: a new name's, or one derived for a name that predates them.
		data, err := json.Marshal(a)
		if err != nil {
			return Access{}, err
		}
		_, err = reg.Create(ctx, AccessKey(name), data)
		if err == nil {
			return a, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return Access{}, fmt.Errorf("client: register %s: record its owner: %w", name, err)
		}
		// Another registration stored the record first: read it again.
	}
}

// allowed reports whether the client's principal may add versions under a.
func (c *Client) allowed(a Access) bool { return c.admin() || a.Allows(c.principal, c.roles) }

// checkWriter is ErrNotWriter, in one sentence naming the principal and the owner, unless the
// client's principal may add versions under a.
func (c *Client) checkWriter(a Access) error {
	if c.allowed(a) {
		return nil
	}
	return fmt.Errorf("client: principal %s may not add a version to workflow %s: it belongs to %s, and only %s, the writers %s names and admins may: %w", c.principal, a.Name, a.Owner, a.Owner, a.Owner, ErrNotWriter)
}

// SetWriters makes writers (principals' names and "role:NAME", [CheckWriters]) the writers of
// the workflow registered as name, in place of those it had: what the name's owner and admins
// may do ([ErrNotOwner] for anyone else; nothing is stored then). [ErrNoWorkflow] when nothing is
// registered under name.
func (c *Client) SetWriters(ctx context.Context, name string, writers []string) (Access, error) {
	if err := CheckName(name); err != nil {
		return Access{}, fmt.Errorf("%w: %w", ErrNoWorkflow, err)
	}
	writers, err := CheckWriters(writers)
	if err != nil {
		return Access{}, err
	}
	reg, err := c.registry(ctx)
	if err != nil {
		return Access{}, err
	}
	for {
		a, rev, err := c.access(ctx, reg, name)
		if err != nil {
			return Access{}, err
		}
		if c.principal != a.Owner && !c.admin() {
			return a, fmt.Errorf("client: principal %s may not change who writes workflow %s: it belongs to %s, and only %s and admins may: %w", c.principal, name, a.Owner, a.Owner, ErrNotOwner)
		}
		a.Writers, a.UpdatedAt, a.UpdatedBy = writers, c.now().UTC(), c.principal
		data, err := json.Marshal(a)
		if err != nil {
			return Access{}, err
		}
		if rev == 0 {
			_, err = reg.Create(ctx, AccessKey(name), data)
		} else {
			_, err = reg.Update(ctx, AccessKey(name), data, rev)
		}
		if err == nil {
			return a, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSequence(err) {
			return Access{}, fmt.Errorf("client: workflow %s: store its writers: %w", name, err)
		}
		// Changed meanwhile: read it again, and decide again who may.
	}
}
