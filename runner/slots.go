package runner

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// The concurrency keys of workflows live in natsbox.ConcurrencyBucket, shared by every engine
// (two engines decide runs of the same key when their partitions differ), so every change is a
// compare-and-set on the revision of the key's record, tried again on a conflict:
//
//   - "key.HASH" (HASH: hex SHA-256 of the workflow's name, a NUL and the rendered key): the
//     runs holding the key's slots and the runs queued for one, oldest start first (run id
//     for equal starts). Removed when both are empty.
//   - "run.HASH" (HASH: hex SHA-256 of the run id): the name of the key the run holds or waits
//     for, written before the run enters the key's record and removed after it left it, so
//     that a release needs only the run id.
//
// The rules, each a pure function of the record (grant, enqueue, leave): a run queues behind
// every run that started before it; the first queued run gets a slot while fewer runs hold one
// than its limit (the limit of the definition it started with); a run that ends leaves the
// record, holding or queued, and its slot goes to the next. A slot granted to a queued run is
// announced by a granted event (message id RUN/granted) and marked told once that event
// arrives; every acquire and release announces again the grants not yet told, so that a crash
// between the grant and its announcement loses no run. A run granted at its start is decided
// at once (told). The engine checks a granted event against the record: one for a run that
// holds no slot (a worker's forgery, a stale grant) changes nothing.

// MaxQueued bounds the runs queued for one concurrency key: a run that would be one more is
// refused at its start (E_QUEUE_FULL), so that a key's record stays small enough to rewrite at
// every change (and within a message).
const MaxQueued = 1024

// maxKeyText bounds the rendered key a record keeps to show (its hash names the record).
const maxKeyText = 256

// errQueueFull is the error of an acquire whose key's queue holds MaxQueued runs.
var errQueueFull = errors.New("the queue of the concurrency key is full")

// maxSlotCAS bounds the compare-and-set attempts of one change of a key: past it the event is
// decided again later.
const maxSlotCAS = 64

// keyRecord is the record of one concurrency key.
type keyRecord struct {
	Workflow string    `json:"workflow"`
	Key      string    `json:"key"`
	Holders  []slotRun `json:"holders,omitempty"`
	Queue    []slotRun `json:"queue,omitempty"`
}

// slotRun is a run holding a slot of a key or queued for one.
type slotRun struct {
	Run     string    `json:"run"`
	Started time.Time `json:"started"`
	Limit   int       `json:"limit"`
	// Told: the run knows it holds its slot (its granted event came, or it was granted when it
	// started).
	Told bool `json:"told,omitempty"`
}

func hashKey(prefix string, parts ...string) string {
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	return prefix + hex.EncodeToString(h.Sum(nil))
}

// slotKey and slotRunKey are the keys of a concurrency key's record and of a run's entry.
func slotKey(workflow, key string) string { return hashKey("key.", workflow, key) }
func slotRunKey(runID string) string      { return hashKey("run.", runID) }

// holds reports whether rec's holders include run.
func (rec *keyRecord) holder(run string) *slotRun {
	for i := range rec.Holders {
		if rec.Holders[i].Run == run {
			return &rec.Holders[i]
		}
	}
	return nil
}

// has reports whether run holds a slot or is queued.
func (rec *keyRecord) has(run string) bool {
	return rec.holder(run) != nil || slices.ContainsFunc(rec.Queue, func(q slotRun) bool { return q.Run == run })
}

// clip cuts s to at most n bytes of valid UTF-8.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// enqueue puts r in the queue in start order, unless it holds a slot or waits already; it
// reports whether it changed rec.
func (rec *keyRecord) enqueue(r slotRun) bool {
	if rec.has(r.Run) {
		return false
	}
	i, _ := slices.BinarySearchFunc(rec.Queue, r, func(a, b slotRun) int {
		return cmp.Or(a.Started.Compare(b.Started), cmp.Compare(a.Run, b.Run))
	})
	rec.Queue = slices.Insert(rec.Queue, i, r)
	return true
}

// leave removes run from the holders and the queue; it reports whether it was in either.
func (rec *keyRecord) leave(run string) bool {
	n := len(rec.Holders) + len(rec.Queue)
	is := func(r slotRun) bool { return r.Run == run }
	rec.Holders = slices.DeleteFunc(rec.Holders, is)
	rec.Queue = slices.DeleteFunc(rec.Queue, is)
	return len(rec.Holders)+len(rec.Queue) != n
}

// grant gives slots to the queue's head as long as fewer runs hold one than its limit; it
// reports whether it granted any.
func (rec *keyRecord) grant() bool {
	granted := false
	for len(rec.Queue) > 0 && len(rec.Holders) < rec.Queue[0].Limit {
		rec.Holders = append(rec.Holders, rec.Queue[0])
		rec.Queue = rec.Queue[1:]
		granted = true
	}
	return granted
}

// untold lists the holders not told of their slot, but skip.
func (rec *keyRecord) untold(skip string) []string {
	var ids []string
	for _, h := range rec.Holders {
		if !h.Told && h.Run != skip {
			ids = append(ids, h.Run)
		}
	}
	return ids
}

// updateKey changes the record at key with change (which reports whether it changed it), by
// compare-and-set, tried again on a conflict; it returns the record as saved (nil when there is
// none). A record left empty is removed.
func (e *Engine) updateKey(ctx context.Context, key string, change func(rec *keyRecord) bool) (*keyRecord, error) {
	for range maxSlotCAS {
		var rec keyRecord
		var rev uint64
		kve, err := e.slots.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, fmt.Errorf("read concurrency key %s: %w", key, err)
		default:
			if err := json.Unmarshal(kve.Value(), &rec); err != nil {
				return nil, permanent(fmt.Errorf("concurrency key %s: %w", key, err))
			}
			rev = kve.Revision()
		}
		if !change(&rec) {
			if rev == 0 {
				return nil, nil
			}
			return &rec, nil
		}
		switch {
		case len(rec.Holders) == 0 && len(rec.Queue) == 0 && rev == 0:
			return nil, nil
		case len(rec.Holders) == 0 && len(rec.Queue) == 0:
			err = e.slots.Delete(ctx, key, jetstream.LastRevision(rev))
		default:
			data, merr := json.Marshal(&rec)
			if merr != nil {
				return nil, permanent(merr)
			}
			if rev == 0 {
				_, err = e.slots.Create(ctx, key, data)
			} else {
				_, err = e.slots.Update(ctx, key, data, rev)
			}
		}
		switch {
		case err == nil:
			return &rec, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch), isWrongSequence(err):
			continue // another engine changed the key: read it again
		default:
			return nil, fmt.Errorf("save concurrency key %s: %w", key, err)
		}
	}
	return nil, fmt.Errorf("concurrency key %s changed under %d attempts in a row", key, maxSlotCAS)
}

// isWrongSequence reports whether err is a delete's compare-and-set conflict.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// acquire carries out the acquire command c of run (a run of workflow wf starting): the run
// enters its key's queue and takes a slot if one is free for it. It reports whether the run
// holds a slot, and announces the grants other runs were not told of.
func (e *Engine) acquire(ctx context.Context, wf string, run *engine.Run, c *engine.Slot, at time.Time) (bool, error) {
	key := slotKey(wf, c.Key)
	if _, err := e.slots.Put(ctx, slotRunKey(run.ID), []byte(key)); err != nil {
		return false, fmt.Errorf("concurrency key of run %s: %w", run.ID, err)
	}
	full := false
	rec, err := e.updateKey(ctx, key, func(rec *keyRecord) bool {
		rec.Workflow, rec.Key = wf, clip(c.Key, maxKeyText)
		if full = len(rec.Queue) >= e.maxQueued && !rec.has(run.ID); full {
			return false
		}
		changed := rec.enqueue(slotRun{Run: run.ID, Started: run.StartedAt, Limit: c.Limit})
		changed = rec.grant() || changed
		if h := rec.holder(run.ID); h != nil && !h.Told {
			h.Told, changed = true, true // decided at once
		}
		return changed
	})
	if err != nil || rec == nil {
		return false, err
	}
	if full {
		return false, errQueueFull
	}
	if err := e.announce(ctx, rec.untold(run.ID), at); err != nil {
		return false, err
	}
	return rec.holder(run.ID) != nil, nil
}

// release frees what run runID holds or waits for under its concurrency key (nothing when it
// has no entry: it never queued, or was released before), grants the freed slot, announces the
// grants not told yet, then removes the run's entry. Each step is idempotent: a release done
// again after a crash finishes what the first one began.
func (e *Engine) release(ctx context.Context, runID string, at time.Time) error {
	e.faultRelease(runID)
	entry := slotRunKey(runID)
	kve, err := e.slots.Get(ctx, entry)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("concurrency key of run %s: %w", runID, err)
	}
	rec, err := e.updateKey(ctx, string(kve.Value()), func(rec *keyRecord) bool {
		left := rec.leave(runID)
		return rec.grant() || left
	})
	if err != nil {
		return err
	}
	if rec != nil {
		if err := e.announce(ctx, rec.untold(""), at); err != nil {
			return err
		}
	}
	if err := e.slots.Delete(ctx, entry, jetstream.LastRevision(kve.Revision())); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !isWrongSequence(err) {
		return fmt.Errorf("concurrency key of run %s: %w", runID, err)
	}
	return nil
}

// takeGrant checks the granted event of run runID against its key's record: it reports whether
// the run holds a slot, and marks it told.
func (e *Engine) takeGrant(ctx context.Context, runID string) (bool, error) {
	kve, err := e.slots.Get(ctx, slotRunKey(runID))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("concurrency key of run %s: %w", runID, err)
	}
	holds := false
	_, err = e.updateKey(ctx, string(kve.Value()), func(rec *keyRecord) bool {
		h := rec.holder(runID)
		holds = h != nil
		if h == nil || h.Told {
			return false
		}
		h.Told = true
		return true
	})
	return holds, err
}

// announce sends a granted event to each run of ids.
func (e *Engine) announce(ctx context.Context, ids []string, at time.Time) error {
	msgs := make([]*nats.Msg, 0, len(ids))
	for _, id := range ids {
		m, err := outbox.EventMsg(e.names, &protocol.Event{RunID: id, Type: protocol.EvGranted, At: at, Item: -1}, "")
		if err != nil {
			e.log.Error("runner: a run cannot be told it holds its concurrency slot", "run_id", id, "err", err)
			continue
		}
		msgs = append(msgs, m)
	}
	return e.out.Publish(ctx, msgs)
}

// acquireAtStart carries out the acquire command among the commands of a run's start, before
// the run is saved (a crash in between decides the start again, and acquire again finds the
// run where the first one put it). A run that takes a slot at once is decided at once: the
// granted event, at the time of the start, on the queued state, its commands added to the
// start's.
//
// A run whose key's queue is full is refused instead: decided again as a start with Refused
// (E_QUEUE_FULL), which ends it failed (its release finds nothing to free but its entry).
func (e *Engine) acquireAtStart(ctx context.Context, def *workflow.Definition, run *engine.Run, cmds []engine.Command, start protocol.Event) (*engine.Run, []engine.Command, error) {
	c := acquireOf(cmds)
	if c == nil {
		return run, cmds, nil
	}
	at := start.At
	holds, err := e.acquire(ctx, def.Name, run, c, at)
	if errors.Is(err, errQueueFull) {
		e.log.WarnContext(ctx, "runner: a run was refused: the queue of its concurrency key is full", "run_id", run.ID, "workflow", def.Name, "queued", e.maxQueued)
		start.Refused = &protocol.RunError{Code: protocol.CodeQueueFull,
			Message: fmt.Sprintf("the concurrency key %q of workflow %s has %d runs queued already, the most it may", clip(c.Key, maxKeyText), def.Name, e.maxQueued)}
		next, cmds, err := engine.Decide(def, e.newRun(run.ID), start)
		if err != nil {
			return nil, nil, permanent(err)
		}
		return next, cmds, nil
	}
	if err != nil || !holds {
		return run, cmds, err
	}
	next, more, err := engine.Decide(def, run, protocol.Event{RunID: run.ID, Type: protocol.EvGranted, At: at, Item: -1})
	if err != nil {
		return nil, nil, permanent(err)
	}
	return next, append(cmds, more...), nil
}

// acquireOf returns the slot of the acquire command among cmds, nil when there is none.
func acquireOf(cmds []engine.Command) *engine.Slot {
	for _, c := range cmds {
		if c.Type == engine.CmdAcquire {
			return c.Slot
		}
	}
	return nil
}
