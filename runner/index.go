package runner

import (
	"context"
	"fmt"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
)

// The status index (natsbox.StatusBucket, keys runstore.StatusKey). A run's key for its new
// status is written before
// the record that has that status is saved, and the key of its old status is removed after,
// so the key of every run's saved status is there whatever crashes; a key left behind by a
// crash is stale, and readers check each run they list against its record. Stale keys go when
// their run is pruned. An engine that starts adds the keys an older version never wrote
// (reindex); it never removes one, since another engine may be saving meanwhile.

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
	return e.saver.IndexStatus(ctx, next.rec.Run)
}

// indexAfter removes the index key of old's status, once next is saved. A key that stays (the
// engine died first, or the removal failed) is stale: listings skip it, reindex removes it.
func (e *Engine) indexAfter(ctx context.Context, old, next *entry) {
	if old == nil || !statusChanged(old, next) {
		return
	}
	run := old.rec.Run
	if err := natsbox.PurgeKeys(ctx, e.js, e.names.StatusBucket(), runstore.StatusKey(run)); err != nil {
		e.log.Warn("runner: a run's old status stays in the index", "run_id", run.ID, "status", run.Status, "err", err)
	}
}

// reindex adds the index key of every saved record (want) that the index lacks (records of a
// version without the index), and removes the keys of the form an older version wrote
// (STATUS.RUNID), which no reader reads. It removes no key of the current form: another engine
// may be between its index write and its save, and a key that is only stale costs a listing
// one read.
func (e *Engine) reindex(ctx context.Context, want map[string]bool) error {
	have, err := natsbox.StoredKeys(ctx, e.js, e.names.StatusBucket(), ">")
	if err != nil {
		return err
	}
	var old []string
	for k := range have {
		if _, ok := runstore.ParseStatusKey(k); !ok {
			old = append(old, k)
		}
	}
	if err := natsbox.PurgeKeys(ctx, e.js, e.names.StatusBucket(), old...); err != nil {
		return fmt.Errorf("remove the index keys of an older version: %w", err)
	}
	for k := range want {
		if !have[k] {
			if _, err := e.index.Put(ctx, k, []byte{'1'}); err != nil {
				return fmt.Errorf("index %s: %w", k, err)
			}
		}
	}
	return nil
}
