package natsbox

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errWatchEnded is yielded when a watch stops before it delivered every current entry.
var errWatchEnded = errors.New("the watch ended early")

// Entries yields the current entries of the keys of kv that match filter (">" for every key),
// deleted keys left out, and ends once it yielded the last one; it reads nothing written after
// that. It yields one error and ends when ctx is done or the watch stops early. opts add watch
// options (jetstream.MetaOnly, for example).
//
// A watch that delivers nothing for EntriesStall is started again, at most entriesAttempts
// times, and yields only the keys it has not yielded yet: when a NATS node dies, the request
// that created the watch's consumer, or the consumer itself, can be lost with it while the
// bucket's stream elects a new leader, and that watch would wait for nothing until ctx ends (a
// task's whole timeout, in a worker).
func Entries(ctx context.Context, kv jetstream.KeyValue, filter string, opts ...jetstream.WatchOpt) iter.Seq2[jetstream.KeyValueEntry, error] {
	return func(yield func(jetstream.KeyValueEntry, error) bool) {
		seen := map[string]bool{}
		for attempt := 1; ; attempt++ {
			stalled := entriesOnce(ctx, kv, filter, opts, seen, yield)
			if !stalled {
				return
			}
			if attempt == entriesAttempts {
				yield(nil, fmt.Errorf("read %s: %w: no entry came for %s, %d times", filter, errWatchEnded, EntriesStall, attempt))
				return
			}
		}
	}
}

// EntriesStall is how long Entries waits for the next entry of a watch before it starts
// another; entriesAttempts bounds the watches.
const (
	EntriesStall    = 5 * time.Second
	entriesAttempts = 4
)

// entriesOnce runs one watch of Entries, yielding the entries whose keys are not in seen (and
// adding them); it reports whether the watch stalled, having yielded what it yielded, rather
// than ended (done, stopped by yield, or failed with its error yielded).
func entriesOnce(ctx context.Context, kv jetstream.KeyValue, filter string, opts []jetstream.WatchOpt, seen map[string]bool, yield func(jetstream.KeyValueEntry, error) bool) (stalled bool) {
	// Starting the watch is a request that can be lost too (StartWatch).
	w, stop, err := StartWatch(ctx, func(ctx context.Context) (jetstream.KeyWatcher, error) {
		return kv.WatchFiltered(ctx, []string{filter}, append([]jetstream.WatchOpt{jetstream.IgnoreDeletes()}, opts...)...)
	})
	if err != nil {
		yield(nil, fmt.Errorf("read %s: %w", filter, err))
		return false
	}
	defer stop()
	defer func() { _ = w.Stop() }()
	stall := time.NewTimer(EntriesStall)
	defer stall.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				yield(nil, fmt.Errorf("read %s: %w", filter, errWatchEnded))
				return false
			case e == nil: // the current entries have all been delivered
				return false
			case seen[e.Key()]:
			default:
				seen[e.Key()] = true
				if !yield(e, nil) {
					return false
				}
			}
			stall.Reset(EntriesStall)
		case <-stall.C:
			return true
		case <-ctx.Done():
			yield(nil, fmt.Errorf("read %s: %w", filter, ctx.Err()))
			return false
		}
	}
}
