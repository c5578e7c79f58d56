package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
)

// Alone. An engine that owns every partition while no other engine is live consumes them all
// through one consumer, natsbox.EngineAllConsumer (filtered on every partition's subjects),
// instead of one consumer each: the server writes each durable consumer's state to disk up to
// ten times a second, and a consumer filtered on one partition reads past the other
// partitions' events to find its own. That cost a lone engine an eighth of its iterations per
// second (BENCHMARKS.md, "Where the lost quarter went"). The leases do not change: the engine
// holds every partition's key, and the partitions' consumers stay where they were.
//
// Floors make the switches safe. A consumer's acknowledged floor says that every event up to
// it was decided: of its partition, or of every partition for the consumer of them all. So the
// floor known of a partition (floorIn) is the highest of its consumer's, the one kept in the
// bucket and the consumer of every partition's, and a consumer may start anywhere past it:
//
//   - goSolo (every partition owned and consumed on its own consumer, no other engine live;
//     after a takeover, only once soloAfterTakeover lease TTLs passed; or at once, from the
//     first round, when the engine took every partition's key and none was there before):
//     the partitions' consumptions stop, drained, and the consumer of every partition delivers
//     from past the lowest floor known of a partition; it is made again when pulls wait at it
//     (an engine paused while it consumed alone, whose partitions were taken since), else
//     reset there.
//   - split (a round hands a partition over or lets one go): the consumption of every
//     partition stops, drained, and each partition's consumer is consumed again, first moved
//     past the floor known of its partition (catchUp), which the consumer of them all raised.
//   - a takeover (the engine that held a partition stopped beating): the taker first cuts off
//     the pulls that wait at the consumer of every partition (cutAll: the engine that pulls
//     there may be paused, not dead), then moves the partition's consumer past the floor known
//     of it (resetForTakeover).
//
// What was delivered past a floor and decided comes again and changes nothing, as after every
// takeover. Tests keep a lone engine on the partitions' consumers with Engine.partitioned.

// all stands for every partition: the consumption of the consumer of them all.
const all = -1

// everyPartition is 0 … natsbox.Partitions-1.
var everyPartition = func() []int {
	ps := make([]int, natsbox.Partitions)
	for p := range ps {
		ps[p] = p
	}
	return ps
}()

// each returns the partitions a consumption of p covers: p alone, or every one for all.
func each(p int) []int {
	if p == all {
		return everyPartition
	}
	return everyPartition[p : p+1]
}

// soloRetry is how long an engine that failed to consume alone waits before it tries again.
const soloRetry = lookEvery

// soloAfterTakeover is how many lease TTLs an engine that took a partition over waits before
// it consumes alone.
const soloAfterTakeover = 4

// solo reports whether the engine consumes every partition through the consumer of them all.
func (l *leases) solo() bool { return l.parts[0] != nil && l.parts[0].n == all }

// alone reports whether the engine should consume alone: it owns every partition, no other
// engine is live, and neither a failed attempt nor a takeover was recent.
func (l *leases) alone(now time.Time) bool {
	if l.e.partitioned || now.Before(l.soloAfter) {
		return false
	}
	for p := range l.parts {
		if l.view.owners[p].id != l.id {
			return false
		}
	}
	for id := range l.view.members {
		if id != l.id && l.view.alive(id, l.id, now, l.ttl) {
			return false
		}
	}
	return true
}

// apart reports whether every partition is consumed on its own consumer.
func (l *leases) apart() bool {
	for p, part := range l.parts {
		if part == nil || part.n != p {
			return false
		}
	}
	return true
}

// goSolo moves the consumption of every partition onto the consumer of them all. When that
// fails, the partitions are left owned and not consumed: the next round takes them again,
// each on its own consumer.
func (l *leases) goSolo(ctx context.Context) {
	for p := range l.parts {
		l.halt(p, true)
	}
	l.settle(ctx)
	cons, err := l.e.allConsumer(ctx)
	if err == nil {
		err = l.start(ctx, all, cons)
	}
	if err != nil {
		l.soloAfter = time.Now().Add(soloRetry)
		l.e.log.Warn("runner: consume every partition through one consumer", "consumer", natsbox.EngineAllConsumer, "err", err)
		return
	}
	l.e.log.Info("runner: the engine is alone: it consumes every partition through one consumer", "consumer", natsbox.EngineAllConsumer)
}

// split moves the consumption of the partitions whose keys the engine still holds back onto
// each partition's consumer, moved past the floor the consumer of them all reached; the timers
// of the others stop (another engine took them). A partition whose consumer cannot be had is
// left owned and not consumed, for the next round.
func (l *leases) split(ctx context.Context) {
	l.halt(0, true)
	l.settle(ctx)
	if c, err := l.e.js.Consumer(ctx, l.e.names.EventsStream(), natsbox.EngineAllConsumer); err == nil {
		l.e.dropPending(ctx, c.CachedInfo())
	}
	made := make([]jetstream.Consumer, natsbox.Partitions)
	failed := make([]error, natsbox.Partitions)
	var making sync.WaitGroup
	for p := range natsbox.Partitions {
		if l.view.owners[p].id != l.id {
			l.e.timers.cancelWhere(func(runID string) bool { return natsbox.Partition(runID) == p })
			continue
		}
		making.Go(func() { made[p], failed[p] = l.e.partitionConsumer(ctx, p, false) })
	}
	making.Wait()
	for p, err := range failed {
		if made[p] == nil && err == nil {
			continue // not held
		}
		if err == nil {
			err = l.start(ctx, p, made[p])
		}
		if err != nil {
			l.e.log.Warn("runner: consume a partition on its own consumer again", "partition", p, "err", err)
		}
	}
	l.e.log.Info("runner: another engine is live: each partition is consumed on its own consumer again")
}

// settle waits, a lease TTL at most, until what the engine pulled is decided.
func (l *leases) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, l.ttl)
	defer cancel()
	for p := range natsbox.Partitions {
		if !l.e.flight.wait(ctx, p) {
			return
		}
	}
}

// allConsumer returns the consumer of every partition, delivering from past the lowest floor
// known of a partition (and made again when a pull waits at it).
func (e *Engine) allConsumer(ctx context.Context) (jetstream.Consumer, error) {
	for p := range natsbox.Partitions {
		if c, err := e.js.Consumer(ctx, e.names.EventsStream(), consumerName(p)); err == nil {
			e.sawFloor(p, c.CachedInfo())
			e.dropPending(ctx, c.CachedInfo())
		}
	}
	from := slices.Min(e.floorsIn(ctx, everyPartition))
	name := natsbox.EngineAllConsumer
	cons, err := e.js.Consumer(ctx, e.names.EventsStream(), name)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cons, err = e.makeAllConsumer(ctx)
	case err != nil:
	case cons.CachedInfo().NumWaiting > 0 || cons.CachedInfo().Config.AckWait != e.ackWait:
		if err = e.js.DeleteConsumer(ctx, e.names.EventsStream(), name); err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
			cons, err = e.makeAllConsumer(ctx)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", name, err)
	}
	rctx, cancel := context.WithTimeout(ctx, resetWait)
	defer cancel()
	if _, err := natsbox.ResetConsumer(rctx, e.js, e.names.EventsStream(), name, from+1); err != nil {
		return nil, fmt.Errorf("consumer %s: deliver from %d: %w", name, from+1, err)
	}
	return cons, nil
}

// dropPending resets a consumer the engine stopped consuming, as info shows it, to its
// acknowledged floor when events delivered past it stay unacknowledged: those the server sent as
// the consumption was drained reached no one, and would be counted unacknowledged until AckWait,
// then delivered again to whichever engine consumes it next. Whatever was sent is decided
// through the consumer that takes over (every event past the floor known comes again there).
func (e *Engine) dropPending(ctx context.Context, info *jetstream.ConsumerInfo) {
	if info.NumAckPending == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, resetWait)
	defer cancel()
	if _, err := natsbox.ResetConsumer(ctx, e.js, e.names.EventsStream(), info.Name, 0); err != nil {
		e.log.Debug("runner: reset a consumer no longer consumed to its floor", "consumer", info.Name, "err", err)
	}
}

// makeAllConsumer creates the consumer of every partition. It delivers every event (a reset
// places it), filtered on the partitions' subjects: the events stream's subjects hold others
// (an earlier layout's, forged ones) no partition's consumer delivers.
func (e *Engine) makeAllConsumer(ctx context.Context) (jetstream.Consumer, error) {
	filters := make([]string, natsbox.Partitions)
	for p := range filters {
		filters[p] = e.names.PartitionSubjects(p)
	}
	return e.js.CreateConsumer(ctx, e.names.EventsStream(), jetstream.ConsumerConfig{
		Durable:        natsbox.EngineAllConsumer,
		Description:    "reins engine: decides the events of every partition, for an engine alone",
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        e.ackWait,
		MaxDeliver:     -1,
		MaxAckPending:  maxAckPending,
		FilterSubjects: filters,
	})
}

// allFloor returns the acknowledged floor of the consumer of every partition, 0 when there is
// none (or it cannot be read within floorWait).
func (e *Engine) allFloor(ctx context.Context) uint64 {
	ctx, cancel := context.WithTimeout(ctx, floorWait)
	defer cancel()
	cons, err := e.js.Consumer(ctx, e.names.EventsStream(), natsbox.EngineAllConsumer)
	if err != nil {
		return 0
	}
	return cons.CachedInfo().AckFloor.Stream
}

// cutAll deletes the consumer of every partition when a pull waits at it: the engine that
// consumed alone, whose partitions are being taken over, may be paused rather than dead, and
// would be given events when it wakes up, or decide them meanwhile. It is deleted first, and its
// floor kept afterwards as every partition's (this engine knows it at once): each moment it
// stands is one in which that engine may still decide.
func (e *Engine) cutAll(ctx context.Context) {
	cons, err := e.js.Consumer(ctx, e.names.EventsStream(), natsbox.EngineAllConsumer)
	if err != nil || cons.CachedInfo().NumWaiting == 0 {
		return
	}
	for p := range natsbox.Partitions {
		e.sawFloor(p, cons.CachedInfo())
	}
	if err := e.js.DeleteConsumer(ctx, e.names.EventsStream(), natsbox.EngineAllConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		e.log.Warn("runner: cut off the pulls at the consumer of every partition", "err", err)
		return
	}
	e.log.Info("runner: pulls waited at the consumer of every partition, of an engine whose partitions are taken over: it is deleted, which cuts them off")
	e.keepFloors(ctx, everyPartition)
}
