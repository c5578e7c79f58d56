package wire

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/reins-run/reins/internal/wirespec"
	"github.com/reins-run/reins/protocol"
)

// Values stored by reference. A JSON value that would make a message or a KV value too large
// (a run input, a step output, a task input, a checkpoint write, a recorded effect) is stored
// in the object store natsbox.ValuesBucket, and the message keeps a reference in its place: the
// JSON string
//
//	"\u0000reins-value:SIZE:RUN/SHA256"
//
// where SIZE is the value's length in bytes, RUN the run it belongs to and SHA256 the hex
// digest of the value. The shells (runner, worker) put values out when they encode and take
// them back when they decode, so engine.Decide and handlers only ever see whole values.
//
// No value a user sends can be mistaken for a reference: a string that starts with the NUL
// character is always stored by reference, however short, so an inline value never starts
// with one. A reference is read back only for the run it names, and the bytes read must have
// its size and digest, so a forged reference reads nothing of another run's and a changed
// object is refused, never used.

// refPrefix starts every reference as it appears in JSON. JSON has one way to write NUL in a
// string (\u0000; the hex digits have no case), so every string whose text starts with NUL
// starts with `"\u0000` in its JSON.
const refPrefix = `"\u0000reins-value:`

// nulString starts the JSON of every string whose text starts with NUL.
const nulString = `"\u0000`

// DefaultInlineMax is the largest value kept inline when Values.Inline is 0.
const DefaultInlineMax = 64 << 10

// packMin is the smallest value Pack puts out to make a message fit.
const packMin = 1 << 10

// ErrValue is wrapped by the errors of a reference that can never be read back: malformed, for
// another run, too large, missing, or not the value it names. An error of In without it is the
// store's, worth trying again.
var ErrValue = errors.New("a value stored by reference cannot be read")

// ErrValueMissing is wrapped (with ErrValue) when the store has no object of the reference's
// name: it was deleted (the run was pruned) or never written.
var ErrValueMissing = errors.New("the stored value is missing")

// ValueStore keeps values by name (natsbox.ObjectValues on the values bucket).
type ValueStore interface {
	// PutValue stores data under name; storing a name that exists does nothing (names are
	// digests of their data).
	PutValue(ctx context.Context, name string, data []byte) error
	// GetValue returns the data stored under name. Its error wraps wirespec.ErrNoValue when
	// there is none, wirespec.ErrValueChanged when it is larger than max bytes (not read) or not
	// what was stored; any other error is taken to be worth trying again.
	GetValue(ctx context.Context, name string, max int64) ([]byte, error)
}

// Values puts values out to a ValueStore and takes them back.
type Values struct {
	store ValueStore
	// Inline is the largest value kept inline; 0 means DefaultInlineMax.
	inline int
	// max is the largest value read back.
	max int64

	mu    sync.Mutex
	known ring // names this process stored or read, so that it does not store them again
}

// DefaultMaxValue is the largest value Values reads back when NewValues is given 0: the
// default max_input_bytes and max_output_bytes of a server's [limits] (docs/reference/server.md).
const DefaultMaxValue = 64 << 20

// NewValues returns Values over store that keeps values of at most inline bytes inline (0:
// DefaultInlineMax) and reads back values of at most max bytes (0: DefaultMaxValue).
func NewValues(store ValueStore, inline int, max int64) *Values {
	if inline <= 0 {
		inline = DefaultInlineMax
	}
	if max <= 0 {
		max = DefaultMaxValue
	}
	return &Values{store: store, inline: inline, max: max, known: newRing(knownNames)}
}

// knownNames bounds the names Values remembers.
const knownNames = 1024

// IsRef reports whether raw is a reference to a stored value.
func IsRef(raw []byte) bool { return bytes.HasPrefix(raw, []byte(refPrefix)) }

// ValueSize is the size of the value raw stands for: its length, or for a reference the size
// the reference gives.
func ValueSize(raw []byte) int64 {
	if !IsRef(raw) {
		return int64(len(raw))
	}
	size, _, err := parseRef(raw)
	if err != nil {
		return int64(len(raw))
	}
	return size
}

// mustOut reports whether raw may not stay inline whatever its size.
func mustOut(raw []byte) bool {
	return bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte(nulString))
}

func makeRef(size int, name string) json.RawMessage {
	return json.RawMessage(refPrefix + strconv.Itoa(size) + ":" + name + `"`)
}

// parseRef returns the size and object name of a reference.
func parseRef(raw []byte) (int64, string, error) {
	s := string(raw)
	if !strings.HasPrefix(s, refPrefix) || !strings.HasSuffix(s, `"`) || len(s) < len(refPrefix)+1 {
		return 0, "", fmt.Errorf("%w: %.80q is not a reference", ErrValue, s)
	}
	body := s[len(refPrefix) : len(s)-1]
	sz, name, ok := strings.Cut(body, ":")
	size, err := strconv.ParseInt(sz, 10, 64)
	if !ok || err != nil || size < 0 || sz != strconv.FormatInt(size, 10) {
		return 0, "", fmt.Errorf("%w: the reference %.80q has no valid size", ErrValue, s)
	}
	return size, name, nil
}

// valueName is the object name of data in run runID.
func valueName(runID string, data []byte) string {
	sum := sha256.Sum256(data)
	return runID + "/" + hex.EncodeToString(sum[:])
}

// Out returns raw, or a reference to it once stored when it is larger than the inline bound
// (or must not stay inline).
func (v *Values) Out(ctx context.Context, runID string, raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) <= v.inline && !mustOut(raw) {
		return raw, nil
	}
	return v.put(ctx, runID, raw)
}

// Keep stores raw for run runID whatever its size and returns its reference: for a text that a
// message carries clipped (an iteration record's), so that the whole stays readable.
func (v *Values) Keep(ctx context.Context, runID string, raw json.RawMessage) (json.RawMessage, error) {
	return v.put(ctx, runID, raw)
}

// put stores raw for run runID and returns its reference.
func (v *Values) put(ctx context.Context, runID string, raw json.RawMessage) (json.RawMessage, error) {
	name := valueName(runID, raw)
	if !v.isKnown(name) {
		if err := v.store.PutValue(ctx, name, raw); err != nil {
			return nil, fmt.Errorf("store a value of %d bytes of run %s: %w", len(raw), runID, err)
		}
		v.remember(name)
	}
	return makeRef(len(raw), name), nil
}

// In returns the value raw stands for: raw itself, or the value a reference of run runID names.
func (v *Values) In(ctx context.Context, runID string, raw json.RawMessage) (json.RawMessage, error) {
	if !IsRef(raw) {
		return raw, nil
	}
	size, name, err := parseRef(raw)
	if err != nil {
		return nil, err
	}
	hash, ok := strings.CutPrefix(name, runID+"/")
	if !ok || len(hash) != 2*sha256.Size || strings.Contains(hash, "/") {
		return nil, fmt.Errorf("%w: the reference names %q, not a value of run %s", ErrValue, name, runID)
	}
	if size > v.max {
		return nil, fmt.Errorf("%w: the value %s is %d bytes, more than the %d bytes a value may be", ErrValue, name, size, v.max)
	}
	data, err := v.store.GetValue(ctx, name, size)
	switch {
	case errors.Is(err, wirespec.ErrNoValue):
		return nil, fmt.Errorf("%w: %w: %w", ErrValue, ErrValueMissing, err)
	case errors.Is(err, wirespec.ErrValueChanged):
		return nil, fmt.Errorf("%w: the object %s is not the value its reference names: %w", ErrValue, name, err)
	case err != nil:
		return nil, fmt.Errorf("read the value %s: %w", name, err) // the store's: worth trying again
	}
	if int64(len(data)) != size || valueName(runID, data) != name {
		return nil, fmt.Errorf("%w: the object %s is not the value its reference names (%d bytes, want %d)", ErrValue, name, len(data), size)
	}
	v.remember(name)
	return data, nil
}

// Move returns raw for run to: raw itself, or when it is a reference of run from, a reference
// of run to to the same value (stored again under to's name, so that each run's values go
// with it).
func (v *Values) Move(ctx context.Context, from, to string, raw json.RawMessage) (json.RawMessage, error) {
	if !IsRef(raw) {
		return raw, nil
	}
	data, err := v.In(ctx, from, raw)
	if err != nil {
		return nil, err
	}
	return v.put(ctx, to, data)
}

func (v *Values) isKnown(name string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.known.has(name)
}

func (v *Values) remember(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.known.add(name)
}

// ring is a bounded set of names: the oldest goes when a new one comes to a full ring.
type ring struct {
	names []string
	set   map[string]bool
	next  int
}

func newRing(n int) ring { return ring{names: make([]string, n), set: make(map[string]bool, n)} }

func (r *ring) has(name string) bool { return r.set[name] }

func (r *ring) add(name string) {
	if r.set[name] {
		return
	}
	if old := r.names[r.next]; old != "" {
		delete(r.set, old)
	}
	r.names[r.next], r.set[name] = name, true
	r.next = (r.next + 1) % len(r.names)
}

// taskSlots calls visit with every raw value of a task.
func taskSlots(t *protocol.Task, visit func(*json.RawMessage)) {
	visit(&t.Input)
	visit(&t.HumanInput)
	for i := range t.ChildResults {
		visit(&t.ChildResults[i].Output)
	}
}

// eventSlots calls visit with every raw value of an event.
func eventSlots(ev *protocol.Event, visit func(*json.RawMessage)) {
	visit(&ev.Input)
	visit(&ev.Output)
	for i := range ev.Pending {
		visit(&ev.Pending[i].Arguments)
	}
}

// anySlot reports whether some slot of walk holds a value of more than n bytes, or one that
// must not stay inline.
func anySlot(walk func(func(*json.RawMessage)), n int) bool {
	found := false
	walk(func(p *json.RawMessage) {
		if len(*p) > n || len(*p) > 0 && mustOut(*p) {
			found = true
		}
	})
	return found
}

// outSlots puts out every slot of walk larger than n bytes (or that must not stay inline).
func (v *Values) outSlots(ctx context.Context, runID string, walk func(func(*json.RawMessage)), n int) error {
	var err error
	walk(func(p *json.RawMessage) {
		if err != nil || len(*p) <= n && !mustOut(*p) {
			return
		}
		*p, err = v.put(ctx, runID, *p)
	})
	return err
}

// AnyOut reports whether walk, a walk over the raw values of a value of another package's
// type (internal/runstore's runs), holds one that goes out: larger than the inline bound, or
// with pack than a kibibyte (what a caller asks for when a state is still too large to save).
func (v *Values) AnyOut(walk func(func(*json.RawMessage)), pack bool) bool {
	return anySlot(walk, v.bound(pack))
}

// OutSlots puts out, in place, every value of walk that AnyOut finds.
func (v *Values) OutSlots(ctx context.Context, runID string, walk func(func(*json.RawMessage)), pack bool) error {
	return v.outSlots(ctx, runID, walk, v.bound(pack))
}

func (v *Values) bound(pack bool) int {
	if pack {
		return packMin
	}
	return v.inline
}

// InSlots takes back every reference of walk, in place.
func (v *Values) InSlots(ctx context.Context, runID string, walk func(func(*json.RawMessage))) error {
	var err error
	walk(func(p *json.RawMessage) {
		if err != nil || !IsRef(*p) {
			return
		}
		*p, err = v.In(ctx, runID, *p)
	})
	return err
}

// OutTask returns t, or when it holds values too large to stay inline a copy of t with
// references in their place.
func (v *Values) OutTask(ctx context.Context, t *protocol.Task) (*protocol.Task, error) {
	if !anySlot(func(f func(*json.RawMessage)) { taskSlots(t, f) }, v.inline) {
		return t, nil
	}
	c := *t
	c.ChildResults = append([]protocol.ChildResult(nil), t.ChildResults...)
	return &c, v.outSlots(ctx, t.RunID, func(f func(*json.RawMessage)) { taskSlots(&c, f) }, v.inline)
}

// InTask takes back the values of t (decoded from a message) in place.
func (v *Values) InTask(ctx context.Context, t *protocol.Task) error {
	return v.InSlots(ctx, t.RunID, func(f func(*json.RawMessage)) { taskSlots(t, f) })
}

// OutEvent is OutTask for an event.
func (v *Values) OutEvent(ctx context.Context, ev *protocol.Event) (*protocol.Event, error) {
	if !anySlot(func(f func(*json.RawMessage)) { eventSlots(ev, f) }, v.inline) {
		return ev, nil
	}
	c := *ev
	c.Pending = append([]protocol.PendingCall(nil), ev.Pending...)
	return &c, v.outSlots(ctx, ev.RunID, func(f func(*json.RawMessage)) { eventSlots(&c, f) }, v.inline)
}

// InEvent is InTask for an event.
func (v *Values) InEvent(ctx context.Context, ev *protocol.Event) error {
	return v.InSlots(ctx, ev.RunID, func(f func(*json.RawMessage)) { eventSlots(ev, f) })
}
