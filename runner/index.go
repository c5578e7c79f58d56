package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
)

// The status index (natsbox.StatusBucket). A run's key for its new status is written before
// the record that has that status is saved, and the key of its old status is removed after,
// so the key of every run's saved status is there whatever crashes; a key left behind by a
// crash is stale, and readers check each run they list against its record. Stale keys go when
// their run is pruned. An engine that starts adds the keys an older version never wrote
// (reindex); it never removes one, since another engine may be saving meanwhile.

// statusKey is the index key of run id under status.
func statusKey(status protocol.RunStatus, id string) string { return string(status) + "." + id }

// statusChanged reports whether saving next over old changes the run's status (old nil: a
// new record).
func statusChanged(old, next *entry) bool {
	return old == nil || old.rec.Run.Status != next.rec.Run.Status
}

// indexBefore writes the index key of next's status, before next is saved.
func (e *Engine) indexBefore(ctx context.Context, old, next *entry) error {
	if !statusChanged(old, next) {
		return nil
	}
	run := next.rec.Run
	if _, err := e.index.Put(ctx, statusKey(run.Status, run.ID), []byte{'1'}); err != nil {
		return fmt.Errorf("index run %s as %s: %w", run.ID, run.Status, err)
	}
	return nil
}

// indexAfter removes the index key of old's status, once next is saved. A key that stays (the
// engine died first, or the removal failed) is stale: listings skip it, reindex removes it.
func (e *Engine) indexAfter(ctx context.Context, old, next *entry) {
	if old == nil || !statusChanged(old, next) {
		return
	}
	run := old.rec.Run
	if err := purgeKeys(ctx, e.js, natsbox.StatusBucket, statusKey(run.Status, run.ID)); err != nil {
		e.log.Warn("runner: a run's old status stays in the index", "run", run.ID, "status", run.Status, "err", err)
	}
}

// reindex adds the index key of every saved record's status that the index lacks (records of
// a version without the index). It removes nothing: another engine may be between its index
// write and its save, and a key that is only stale costs a listing one read.
func (e *Engine) reindex(ctx context.Context, statuses map[string]protocol.RunStatus) error {
	have, err := indexKeys(ctx, e.index, ">")
	if err != nil {
		return err
	}
	for id, st := range statuses {
		if k := statusKey(st, id); !have[k] {
			if _, err := e.index.Put(ctx, k, []byte{'1'}); err != nil {
				return fmt.Errorf("index run %s: %w", id, err)
			}
		}
	}
	return nil
}

// indexKeys returns the keys of the index that match filter.
func indexKeys(ctx context.Context, index jetstream.KeyValue, filter string) (map[string]bool, error) {
	lister, err := index.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("read the status index: %w", err)
	}
	keys := map[string]bool{}
	for k := range lister.Keys() {
		keys[k] = true
	}
	_ = lister.Stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return keys, nil
}

// purgeKeys removes keys of bucket for good: a purge of the stream's subject of each key, which
// leaves no purge marker behind.
func purgeKeys(ctx context.Context, js jetstream.JetStream, bucket string, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	stream, err := js.Stream(ctx, kvStream(bucket))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(kvSubject(bucket, k))); err != nil {
			return fmt.Errorf("remove %s: %w", k, err)
		}
	}
	return nil
}

// listByStatus returns the records of the runs started by clients whose saved status is
// status, reading the index and then those records only.
func (c *Client) listByStatus(ctx context.Context, runs, index jetstream.KeyValue, status protocol.RunStatus) ([]*Record, error) {
	keys, err := indexKeys(ctx, index, string(status)+".>")
	if err != nil {
		return nil, fmt.Errorf("runner: list runs: %w", err)
	}
	var recs []*Record
	for k := range keys {
		id := strings.TrimPrefix(k, string(status)+".")
		if strings.Contains(id, "/") {
			continue // a sub-run
		}
		e, err := runs.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // stale: removed since
		case err != nil:
			return nil, fmt.Errorf("runner: list runs: read run %s: %w", id, err)
		}
		rec, err := decodeRecord(e)
		if err != nil {
			rec = corruptRecord(e, err)
		}
		if rec.Run.Status == status {
			recs = append(recs, rec)
		}
	}
	return recs, nil
}
