package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
)

// DefaultRetention is how long reins keeps a finished run by default (reins runs prune,
// reins serve --retention).
const DefaultRetention = 7 * 24 * time.Hour

// PruneReport says what a prune removed.
type PruneReport struct {
	// Runs counts the runs removed (started by clients), SubRuns the sub-runs removed with them,
	// Checkpoints the checkpoint keys, Values the values stored by reference ([wire.Values]).
	Runs        int `json:"runs"`
	SubRuns     int `json:"sub_runs"`
	Checkpoints int `json:"checkpoints"`
	Values      int `json:"values"`
	// Before is the cut-off: the runs removed ended before it.
	Before time.Time `json:"before"`
}

// pruned is a record to remove.
type pruned struct {
	id  string
	rev uint64
}

// Prune removes the runs that finished before now − olderThan: their events (the run's subject
// of REINS_EVENTS is purged), their checkpoint keys, their values stored by reference, and last
// their record, so that a prune
// that stops half-way is done again by the next. A run ended when its final record was saved
// (the time the bucket gives the record). A running or waiting run is never removed; a
// sub-run goes with the run that started it, and only once it finished itself (one whose
// parent's record is gone goes once it finished before the cut-off). A record that changes
// while the prune runs is left alone. Workflow bundles (shared by runs) and dead-lettered tasks
// (REINS_DLQ keeps them 30 days) stay.
func (c *Client) Prune(ctx context.Context, olderThan time.Duration, now time.Time) (PruneReport, error) {
	rep := PruneReport{Before: now.Add(-olderThan).UTC()}
	runs, _, err := c.buckets(ctx)
	if err != nil {
		return rep, err
	}
	type info struct {
		rev      uint64
		finished bool
		created  time.Time
	}
	recs := map[string]info{} // what the prune needs of every record, not the records
	for e, err := range natsbox.Entries(ctx, runs, ">") {
		if err != nil {
			return rep, fmt.Errorf("client: prune: list the runs: %w", err)
		}
		if rec, err := runstore.DecodeRecord(e); err == nil {
			recs[e.Key()] = info{e.Revision(), rec.Run.Finished(), e.Created()}
		}
	}
	old := func(i info) bool { return i.finished && i.created.Before(rep.Before) }
	roots := map[string]bool{}
	var gone []pruned
	for id, i := range recs {
		if !strings.Contains(id, "/") && old(i) {
			roots[id] = true
			gone = append(gone, pruned{id, i.rev})
		}
	}
	for id, i := range recs {
		root, _, sub := strings.Cut(id, "/")
		if !sub || !i.finished {
			continue
		}
		if _, kept := recs[root]; roots[root] || !kept && old(i) {
			gone = append(gone, pruned{id, i.rev})
		}
	}
	if len(gone) == 0 {
		return rep, nil
	}
	if rep.Checkpoints, err = c.pruneCheckpoints(ctx, gone); err != nil {
		return rep, err
	}
	if rep.Values, err = c.pruneValues(ctx, gone); err != nil {
		return rep, err
	}
	if err := c.pruneIndex(ctx, gone); err != nil {
		return rep, err
	}
	for _, p := range gone {
		removed, err := c.removeRun(ctx, runs, p)
		if err != nil {
			return rep, fmt.Errorf("client: prune run %s: %w", p.id, err)
		}
		switch {
		case !removed:
		case strings.Contains(p.id, "/"):
			rep.SubRuns++
		default:
			rep.Runs++
		}
	}
	return rep, nil
}

// removeRun removes what is stored of run p: its events, then its record, if it is still at
// p.rev (false when it changed since it was read), with no purge marker left.
func (c *Client) removeRun(ctx context.Context, runs jetstream.KeyValue, p pruned) (bool, error) {
	stream, err := c.js.Stream(ctx, c.names.EventsStream())
	if err != nil {
		return false, err
	}
	if filters, err := c.names.RunEventFilters(p.id); err == nil { // else: no subject, no events
		for _, f := range filters {
			if err := stream.Purge(ctx, jetstream.WithPurgeSubject(f)); err != nil {
				return false, fmt.Errorf("purge its events: %w", err)
			}
		}
	}
	err = runs.Purge(ctx, p.id, jetstream.LastRevision(p.rev))
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
		return false, nil // changed (or removed by another prune) since it was read
	case err != nil:
		return false, fmt.Errorf("remove its record: %w", err)
	}
	return true, c.dropMarker(ctx, c.names.RunsBucket(), p.id)
}

// Delete removes run runID for good: its record, events, checkpoints and values, and those of its
// sub-runs. It refuses a run that has not finished ([ErrNotFinished]: cancel it first); a run
// whose record is corrupt ([ErrCorrupt]) can be deleted.
func (c *Client) Delete(ctx context.Context, runID string) error {
	if err := checkKey(runID); err != nil {
		return err
	}
	runs, _, err := c.buckets(ctx)
	if err != nil {
		return err
	}
	e, err := runs.Get(ctx, runID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("client: delete run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("client: delete run %s: %w", runID, err)
	}
	if rec, err := runstore.DecodeRecord(e); err == nil && !rec.Finished() {
		return fmt.Errorf("client: delete run %s: it is %s: %w (cancel it first)", runID, rec.Run.Status, ErrNotFinished)
	}
	gone := []pruned{{runID, e.Revision()}}
	for sub, err := range natsbox.Entries(ctx, runs, ">") {
		if err != nil {
			return fmt.Errorf("client: delete run %s: list its sub-runs: %w", runID, err)
		}
		if strings.HasPrefix(sub.Key(), runID+"/") {
			gone = append(gone, pruned{sub.Key(), sub.Revision()})
		}
	}
	if _, err := c.pruneCheckpoints(ctx, gone); err != nil {
		return err
	}
	if _, err := c.pruneValues(ctx, gone); err != nil {
		return err
	}
	if err := c.pruneIndex(ctx, gone); err != nil {
		return err
	}
	for _, p := range gone {
		if _, err := c.removeRun(ctx, runs, p); err != nil {
			return fmt.Errorf("client: delete run %s: %w", p.id, err)
		}
	}
	return nil
}

// pruneCheckpoints removes the checkpoint keys of the runs gone and returns how many.
func (c *Client) pruneCheckpoints(ctx context.Context, gone []pruned) (int, error) {
	kv, err := c.js.KeyValue(ctx, c.names.CheckpointsBucket())
	if err != nil {
		return 0, fmt.Errorf("client: prune: bucket %s: %w", c.names.CheckpointsBucket(), err)
	}
	ids := map[string]bool{}
	for _, p := range gone {
		ids[checkpointRun(wire.CheckpointScope(p.id, "s", -1, 1))] = true
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("client: prune: list the checkpoints: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		if scope, _, ok := strings.Cut(k, "."); ok && ids[checkpointRun(scope)] {
			keys = append(keys, k)
		}
	}
	_ = lister.Stop()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// A stream purge of each key's subject, not a KV purge: it leaves no purge marker behind (a
	// finished run writes no checkpoint again).
	if err := natsbox.PurgeKeys(ctx, c.js, c.names.CheckpointsBucket(), keys...); err != nil {
		return 0, fmt.Errorf("client: prune: the checkpoints: %w", err)
	}
	return len(keys), nil
}

// pruneValues removes the values of the runs gone and returns how many.
func (c *Client) pruneValues(ctx context.Context, gone []pruned) (int, error) {
	ids := make(map[string]bool, len(gone))
	for _, p := range gone {
		ids[p.id] = true
	}
	n, err := c.objects.DeleteValues(ctx, func(runID string) bool { return ids[runID] })
	if err != nil {
		return n, fmt.Errorf("client: prune: %w", err)
	}
	return n, nil
}

// pruneIndex removes the status index keys of the runs gone, stale ones included.
func (c *Client) pruneIndex(ctx context.Context, gone []pruned) error {
	ids := make(map[string]bool, len(gone))
	for _, p := range gone {
		ids[p.id] = true
	}
	keys, err := natsbox.StoredKeys(ctx, c.js, c.names.StatusBucket(), ">")
	if err != nil {
		return fmt.Errorf("client: prune: %w", err)
	}
	var drop []string
	for k := range keys {
		if ik, ok := runstore.ParseStatusKey(k); ok && ids[ik.RunID] {
			drop = append(drop, k)
		}
	}
	if err := natsbox.PurgeKeys(ctx, c.js, c.names.StatusBucket(), drop...); err != nil {
		return fmt.Errorf("client: prune: the status index: %w", err)
	}
	return nil
}

// dropMarker removes the purge marker a KV purge left as the last message of key, and nothing
// written after it: the stream is purged up to the marker's sequence, only if it is a marker.
// Markers would otherwise stay for good, one per pruned run.
func (c *Client) dropMarker(ctx context.Context, bucket, key string) error {
	stream, err := c.js.Stream(ctx, natsbox.KVStream(bucket))
	if err != nil {
		return err
	}
	subj := natsbox.KVSubject(bucket, key)
	msg, err := stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the purge marker: %w", err)
	}
	if op := msg.Header.Get("KV-Operation"); op != "PURGE" && op != "DEL" {
		return nil // written again since: not ours to remove
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(msg.Sequence+1)); err != nil {
		return fmt.Errorf("remove the purge marker: %w", err)
	}
	return nil
}

// checkpointRun is the run part of a checkpoint scope RUN/STEP[=ITEM]/ACTIVATION (a run id may
// hold '/', a step key may not).
func checkpointRun(scope string) string {
	for range 2 {
		i := strings.LastIndexByte(scope, '/')
		if i < 0 {
			return ""
		}
		scope = scope[:i]
	}
	return scope
}

// RetentionEvery is how often Retain prunes: a tenth of the retention, at most an hour, at
// least a second.
func RetentionEvery(olderThan time.Duration) time.Duration {
	return max(min(olderThan/10, time.Hour), time.Second)
}

// Retention configures Retain.
type Retention struct {
	// OlderThan is how long a finished run is kept (more than 0).
	OlderThan time.Duration
	// Every is the time between two prunes; 0 means RetentionEvery(OlderThan).
	Every time.Duration
	// Now and After are the clock (nil: [time.Now] and [time.After]); tests drive them.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	// Pruned, when set, sees the outcome of every prune.
	Pruned func(PruneReport, error)
}

// Retain prunes (Prune) the runs that finished more than r.OlderThan ago at once, then every
// r.Every, until ctx is done; it returns nil then. A prune that fails is reported to r.Pruned
// and done again at the next turn.
func (c *Client) Retain(ctx context.Context, r Retention) error {
	if r.OlderThan <= 0 {
		return fmt.Errorf("client: retain: OlderThan is %s: want more than 0", r.OlderThan)
	}
	if r.Every <= 0 {
		r.Every = RetentionEvery(r.OlderThan)
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.After == nil {
		r.After = time.After
	}
	for {
		rep, err := c.Prune(ctx, r.OlderThan, r.Now())
		if ctx.Err() != nil {
			return nil
		}
		if r.Pruned != nil {
			r.Pruned(rep, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.After(r.Every):
		}
	}
}
