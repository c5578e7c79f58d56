package runner

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
)

// Floors. A partition's consumer that is found missing (deleted by a takeover whose creation
// got no answer) is made again from the highest acknowledged floor known of it, not from the
// partition's first event: deciding every event of a busy partition again took minutes, behind
// which its runs waited. The engine remembers the floors it sees (sawFloor, at each look at a
// consumer) and keeps them in natsbox.EnginesBucket, key "floor.NN" (keepFloor), so that an
// engine that never saw the consumer (started after it was lost) knows it too. A floor belongs
// to one events stream: the key names the stream's creation time, and a floor of a stream made
// again since (its sequences begin at 1 again) is not used.

// floorWait bounds a read or a write of a floor kept.
const floorWait = natsbox.PullExpiry / 2

// keptFloor is the value of a partition's key "floor.NN".
type keptFloor struct {
	Floor uint64 `json:"floor"`
	// Stream is when the events stream the floor is of was created.
	Stream time.Time `json:"stream_created"`
}

// floorIn returns the acknowledged floor of partition p's consumer to make it again from: the
// highest of the one this engine saw, the one kept in the bucket and that of the consumer of
// every partition (solo.go: what it acknowledged, of any partition, was decided), as long as
// the events stream still holds it and, for the kept one, is the stream it was kept of; else 0
// (from the first event). When the stream cannot be read, the consumer's creation fails as well and is
// tried again.
func (e *Engine) floorIn(ctx context.Context, p int) uint64 { return e.floorsIn(ctx, each(p))[0] }

// floorsIn returns floorIn of each partition of ps, reading the events stream and the consumer
// of every partition once for them all.
func (e *Engine) floorsIn(ctx context.Context, ps []int) []uint64 {
	floors := make([]uint64, len(ps))
	for i, p := range ps {
		floors[i] = e.floors[p].Load()
	}
	s, err := e.js.Stream(ctx, e.names.EventsStream())
	if err != nil {
		return floors
	}
	info := s.CachedInfo()
	all := e.allFloor(ctx)
	for i, p := range ps {
		floors[i] = e.floorOf(ctx, p, floors[i], info, all)
	}
	return floors
}

// floorOf is floorIn of partition p, from the floor seen of it, the events stream's info and
// the floor of the consumer of every partition.
func (e *Engine) floorOf(ctx context.Context, p int, floor uint64, info *jetstream.StreamInfo, all uint64) uint64 {
	if last := info.State.LastSeq; last < floor {
		e.log.Warn("runner: the events stream ends before the floor last seen of a partition: it was made again, and the floor is not used", "partition", p, "floor", floor, "last", last)
		e.floors[p].CompareAndSwap(floor, 0)
		floor = 0
	}
	rctx, cancel := context.WithTimeout(ctx, floorWait) // a takeover does not wait long for it
	kept, _, err := e.readFloor(rctx, p)
	cancel()
	switch {
	case err != nil:
		e.log.Debug("runner: read the floor kept of a partition", "partition", p, "err", err)
	case kept.Floor <= floor:
	case !kept.Stream.Equal(info.Created) || kept.Floor > info.State.LastSeq:
		e.log.Warn("runner: the floor kept of a partition is of an events stream made again since: it is not used", "partition", p, "floor", kept.Floor)
	default:
		floor = kept.Floor
	}
	if all > floor && all <= info.State.LastSeq {
		floor = all
	}
	return floor
}

// sawFloor records the acknowledged floor of partition p's consumer in info, the highest seen:
// every event up to it was decided and saved, so a consumer made again starts after it.
func (e *Engine) sawFloor(p int, info *jetstream.ConsumerInfo) {
	if info == nil {
		return
	}
	raise(&e.floors[p], info.AckFloor.Stream)
}

// keepFloor writes the floor seen of partition p to its key when it passed the one written:
// by compare-and-set, so that the key only grows (an engine that saw less writes nothing). A
// write that fails is tried again at the next look.
func (e *Engine) keepFloor(ctx context.Context, p int) {
	floor := e.floors[p].Load()
	if floor <= e.kept[p].Load() {
		return
	}
	// Bounded: the looks at the consumer wait for it, and a bucket electing a leader answers
	// nothing; the next look tries again.
	ctx, cancel := context.WithTimeout(ctx, floorWait)
	defer cancel()
	s, err := e.js.Stream(ctx, e.names.EventsStream())
	if err != nil {
		return
	}
	created := s.CachedInfo().Created
	kept, rev, err := e.readFloor(ctx, p)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		e.log.Debug("runner: read the floor kept of a partition", "partition", p, "err", err)
		return
	}
	if kept.Floor >= floor && kept.Stream.Equal(created) {
		raise(&e.kept[p], kept.Floor)
		return
	}
	b, _ := json.Marshal(keptFloor{Floor: floor, Stream: created})
	if rev == 0 {
		_, err = e.engines.Create(ctx, floorKey(p), b)
	} else {
		_, err = e.engines.Update(ctx, floorKey(p), b, rev)
	}
	if err != nil {
		e.log.Debug("runner: keep the floor of a partition", "partition", p, "err", err)
		return
	}
	raise(&e.kept[p], floor)
}

// keepFloors keeps the floors seen of partitions ps (keepFloor), all within one floorWait: a
// bucket that answers nothing holds the caller back once, not once per partition.
func (e *Engine) keepFloors(ctx context.Context, ps []int) {
	ctx, cancel := context.WithTimeout(ctx, floorWait)
	defer cancel()
	for _, p := range ps {
		e.keepFloor(ctx, p)
	}
}

// readFloor reads partition p's key "floor.NN" and its revision (0 and
// jetstream.ErrKeyNotFound when there is none). A value that cannot be read counts as no floor:
// it is written over.
func (e *Engine) readFloor(ctx context.Context, p int) (keptFloor, uint64, error) {
	ent, err := e.engines.Get(ctx, floorKey(p))
	if err != nil {
		return keptFloor{}, 0, err
	}
	var kept keptFloor
	if err := json.Unmarshal(ent.Value(), &kept); err != nil {
		e.log.Warn("runner: the floor kept of a partition cannot be read: it is written over", "partition", p, "err", err)
		return keptFloor{}, ent.Revision(), nil
	}
	return kept, ent.Revision(), nil
}

// raise sets v to n when n is higher.
func raise(v interface {
	Load() uint64
	CompareAndSwap(old, new uint64) bool
}, n uint64) {
	for {
		seen := v.Load()
		if n <= seen || v.CompareAndSwap(seen, n) {
			return
		}
	}
}
