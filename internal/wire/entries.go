package wire

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/nats-io/nats.go/jetstream"
)

// errWatchEnded is yielded when a watch stops before it delivered every current entry.
var errWatchEnded = errors.New("the watch ended early")

// Entries yields the current entries of the keys of kv that match filter (">" for every key),
// deleted keys left out, and ends once it yielded the last one; it reads nothing written after
// that. It yields one error and ends when ctx is done or the watch stops early. opts add watch
// options (jetstream.MetaOnly, for example).
func Entries(ctx context.Context, kv jetstream.KeyValue, filter string, opts ...jetstream.WatchOpt) iter.Seq2[jetstream.KeyValueEntry, error] {
	return func(yield func(jetstream.KeyValueEntry, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := kv.WatchFiltered(ctx, []string{filter}, append([]jetstream.WatchOpt{jetstream.IgnoreDeletes()}, opts...)...)
		if err != nil {
			yield(nil, fmt.Errorf("read %s: %w", filter, err))
			return
		}
		defer func() { _ = w.Stop() }()
		for {
			select {
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					yield(nil, fmt.Errorf("read %s: %w", filter, errWatchEnded))
					return
				case e == nil: // the current entries have all been delivered
					return
				case !yield(e, nil):
					return
				}
			case <-ctx.Done():
				yield(nil, fmt.Errorf("read %s: %w", filter, ctx.Err()))
				return
			}
		}
	}
}
