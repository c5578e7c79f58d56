package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
)

// partitionPull is how many events one partition's consumption holds pulled ahead.
const partitionPull = 256

// leases is the engine's part in natsbox.EnginesBucket (partitions.go has the rules): its
// heartbeats, what it saw, and the partitions it consumes. Only its loop goroutine touches it.
type leases struct {
	e    *Engine
	kv   jetstream.KeyValue
	sh   *shards
	id   string
	ttl  time.Duration
	view *leaseView

	watch     jetstream.KeyWatcher
	stopWatch context.CancelFunc
	beats     *beats
	stopBeats func() // stops the beater and waits for it
	// beatAt and beatRev are the last heartbeat acknowledged as the round read it; checkRev
	// and checkAt tell a watch that stopped showing them (watchStale).
	beatAt            time.Time
	beatRev, checkRev uint64
	checkAt           time.Time
	// soloAfter is when the engine may try again to consume alone, after it failed (solo.go).
	soloAfter time.Time

	// parts holds the consumption of each partition consumed, nil for the others: the
	// partition's own consumer's, or the same one for all of them while the engine consumes
	// alone (solo.go).
	parts [natsbox.Partitions]*partition
	lost  chan *partition // consumptions that ended on their own
}

// partition is the consumption of one consumer: of partition n's, or of every partition's
// (n is all, solo.go).
type partition struct {
	n         int
	cc        jetstream.ConsumeContext
	stopWatch context.CancelFunc
}

// first is a partition the consumption covers.
func (part *partition) first() int { return max(part.n, 0) }

// consumerName is the durable consumer of partition p.
func consumerName(p int) string { return natsbox.EngineConsumerPrefix + natsbox.PartitionToken(p) }

// consume takes part in the leases and consumes the partitions it gets until ctx is done, then
// hands them over: it stops pulling, settles and saves what it had, and deletes its keys.
func (e *Engine) consume(ctx context.Context, kv jetstream.KeyValue) error {
	sh := e.startShards(context.WithoutCancel(ctx)) // an event being decided is finished, not abandoned
	kctx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	var keeping sync.WaitGroup
	keeping.Go(func() { e.keepAlive(kctx) })
	defer func() { stopKeeping(); keeping.Wait() }() // after the shards settled what they held
	l := &leases{e: e, kv: kv, sh: sh, id: e.id, ttl: e.leaseTTL, view: newLeaseView(e.leaseTTL / 2),
		lost: make(chan *partition, natsbox.Partitions)}
	err := l.loop(ctx)
	if l.stopBeats != nil {
		l.stopBeats() // before leave deletes the member key: no heartbeat makes it again
	}
	close(sh.stopping) // from now on, what arrives goes back to the server
	for p := range l.parts {
		l.stop(p, false)
	}
	sh.close()
	if l.stopWatch != nil {
		l.stopWatch()
	}
	l.leave(context.WithoutCancel(ctx))
	return err
}

// loop runs the rounds of the leases until ctx is done.
func (l *leases) loop(ctx context.Context) error {
	if err := l.startWatch(ctx); err != nil {
		return err
	}
	l.beats = &beats{}
	l.beat(ctx) // the first round has one
	bctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { l.beating(bctx) })
	l.stopBeats = func() { cancel(); wg.Wait() }
	l.round(ctx, true)
	close(l.e.ready)
	tick := time.NewTicker(heartbeatEvery(l.ttl))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ent, ok := <-l.watch.Updates():
			if !ok {
				if err := l.startWatch(ctx); err != nil {
					return err
				}
				continue
			}
			l.apply(ent, time.Now())
		case part := <-l.lost:
			if l.parts[part.first()] == part {
				l.e.log.Warn("runner: the consumption of a partition stopped; it is taken again", "consumer", consumerName(part.n))
				l.stop(part.first(), false)
			}
		case <-tick.C:
			l.round(ctx, false)
		}
	}
}

// startWatch (re)starts the watch of the bucket and reads what it holds now: keys that are not
// there any more leave the view.
func (l *leases) startWatch(ctx context.Context) error {
	if l.stopWatch != nil {
		l.stopWatch()
	}
	w, stop, err := natsbox.StartWatch(ctx, func(ctx context.Context) (jetstream.KeyWatcher, error) {
		return l.kv.WatchAll(ctx)
	})
	if err != nil {
		return fmt.Errorf("runner: watch %s: %w", l.e.names.EnginesBucket(), err)
	}
	l.watch, l.stopWatch = w, stop
	now := time.Now()
	present := map[string]bool{}
	for ent := range w.Updates() {
		if ent == nil {
			break // the current values are all in
		}
		present[ent.Key()] = true
		l.apply(ent, now)
	}
	for id := range l.view.members {
		if !present[memberKey(id)] {
			delete(l.view.members, id)
		}
	}
	for p := range l.view.owners {
		if !present[partitionKey(p)] {
			l.view.owners[p] = owner{}
		}
	}
	l.checkRev, l.checkAt = l.beatRev, now
	return nil
}

// apply records one entry of the watch.
func (l *leases) apply(ent jetstream.KeyValueEntry, now time.Time) {
	gone := ent.Operation() != jetstream.KeyValuePut
	switch key := ent.Key(); {
	case len(key) > len(memberKeyPrefix) && key[:len(memberKeyPrefix)] == memberKeyPrefix:
		id := key[len(memberKeyPrefix):]
		if gone {
			delete(l.view.members, id)
			return
		}
		l.view.member(id, ent.Revision(), now)
	case len(key) == len(partitionKeyPrefix)+2 && key[:len(partitionKeyPrefix)] == partitionKeyPrefix:
		p, err := strconv.Atoi(key[len(partitionKeyPrefix):])
		if err != nil || p < 0 || p >= natsbox.Partitions {
			return
		}
		if gone {
			l.view.owners[p] = owner{rev: ent.Revision()}
			return
		}
		l.view.owners[p] = owner{id: string(ent.Value()), rev: ent.Revision()}
	}
}

// round reads what the heartbeats found, and does what planLeases says; first also tidies the
// status index.
func (l *leases) round(ctx context.Context, first bool) {
	if l.e.rounding != nil {
		l.e.rounding()
	}
	now := time.Now()
	b := l.beats.read()
	l.beatAt, l.beatRev, l.view.trusted, l.view.missed = b.at, b.rev, b.trusted, b.missed
	if fenced(l.view, l.id, l.beatAt, now, l.ttl) {
		l.e.stats.fences.Add(1)
		for p, part := range l.parts {
			if part != nil {
				l.e.log.Warn("runner: no heartbeat acknowledged for a lease TTL: the engine stops consuming", "partition", p, "ttl", l.ttl)
				l.stop(p, false)
			}
		}
		return
	}
	if l.watchStale(now) {
		l.e.log.Warn("runner: the watch of the engines shows no heartbeat of this engine: it starts again", "bucket", l.e.names.EnginesBucket())
		if err := l.startWatch(ctx); err != nil {
			l.e.log.Warn("runner: watch the engines", "err", err)
		}
		return
	}
	var consuming [natsbox.Partitions]bool
	for p, part := range l.parts {
		consuming[p] = part != nil
	}
	plan := planLeases(l.view, l.id, &consuming, now, l.ttl)
	if l.solo() && len(plan.drop)+len(plan.release) > 0 {
		l.split(ctx)
	}
	for _, p := range plan.drop {
		l.e.log.Info("runner: another engine owns a partition now", "partition", p, "owner", l.view.owners[p].id)
		l.stop(p, false)
	}
	l.release(ctx, plan.release)
	l.acquire(ctx, plan.acquire, first)
	if l.apart() && l.alone(now) {
		l.goSolo(ctx)
	}
	for _, id := range plan.forget {
		if err := l.kv.Delete(ctx, memberKey(id), jetstream.LastRevision(l.view.members[id].rev)); err == nil {
			delete(l.view.members, id)
		}
	}
}

// beats is what an engine's heartbeats found. They are sent by a goroutine of their own, the
// beater, and not by the rounds of the leases: a round that takes many partitions over (each
// consumer made again, a few hundred milliseconds apiece on a busy cluster) lasts longer than
// a TTL, and the other engines would see the engine dead meanwhile, take its partitions, and
// stop beating in turn while they take them: back and forth, as measured on a cluster losing
// nodes before the beater. Nor does a heartbeat wait for the one before: a request sent as the
// connection's NATS node went away is never answered, and waiting a TTL for its answer was a
// TTL of silence, after which another engine took every partition (measured: a node stopped,
// the engine's connection moved to another node within 10 ms, and its partitions moved anyway).
type beats struct {
	mu    sync.Mutex
	state beatState
}

// beatState: at and rev are the last heartbeat acknowledged (sent at at); missed is when the
// first heartbeat after it was missed (zero: none); trusted, when heartbeats were acknowledged
// again after a gap (leaseView).
type beatState struct {
	at, missed, trusted time.Time
	rev                 uint64
}

func (b *beats) read() beatState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// beating sends a heartbeat every heartbeatEvery(ttl) until ctx is done, each on its own, and
// then waits for those in flight.
func (l *leases) beating(ctx context.Context) {
	tick := time.NewTicker(heartbeatEvery(l.ttl))
	defer tick.Stop()
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			inFlight.Go(func() { l.beat(ctx) })
		}
	}
}

// beat writes the engine's member key, while the connection the engine consumes on is up: a
// heartbeat says that the engine can decide, which it cannot without that connection. It waits
// a TTL at most for the acknowledgement: by then the heartbeat says nothing any more.
func (l *leases) beat(ctx context.Context) {
	now := time.Now()
	acked := false
	defer func() {
		if l.e.beaten != nil {
			l.e.beaten(acked)
		}
	}()
	if l.e.beatsPaused.Load() || !l.e.js.Conn().IsConnected() {
		l.beats.miss(now)
		return
	}
	bctx, cancel := context.WithTimeout(ctx, l.ttl)
	defer cancel()
	if l.e.sendingBeat != nil {
		l.e.sendingBeat(bctx)
	}
	host, _ := os.Hostname()
	rev, err := l.kv.Put(bctx, memberKey(l.id), []byte(host+" pid "+strconv.Itoa(os.Getpid())))
	if err != nil {
		l.beats.miss(now)
		l.e.log.Debug("runner: heartbeat", "err", err)
		return
	}
	acked = true
	l.beats.ack(now, rev)
}

// ack records a heartbeat sent at sent and acknowledged at revision rev. Heartbeats overlap:
// one sent before the last acknowledged tells nothing new.
func (b *beats) ack(sent time.Time, rev uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !sent.After(b.state.at) && !b.state.at.IsZero() {
		return
	}
	if b.state.at.IsZero() || (!b.state.missed.IsZero() && sent.After(b.state.missed)) {
		b.state.trusted, b.state.missed = time.Now(), time.Time{}
	}
	b.state.at, b.state.rev = sent, max(b.state.rev, rev)
}

// miss records a heartbeat sent at sent and not acknowledged (or not sent); one sent before the
// last acknowledged tells nothing new.
func (b *beats) miss(sent time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sent.Before(b.state.at) {
		return
	}
	if b.state.missed.IsZero() || sent.Before(b.state.missed) {
		b.state.missed = sent
	}
}

// watchStale reports whether the watch has not shown a heartbeat of this engine for a TTL.
func (l *leases) watchStale(now time.Time) bool {
	if l.view.members[l.id].rev >= l.checkRev {
		l.checkRev, l.checkAt = l.beatRev, now
		return false
	}
	return now.Sub(l.checkAt) >= l.ttl
}

// release hands partitions over: stop pulling, settle what was pulled (within a TTL), then
// delete the keys. The engine that takes a key deleted in a handover consumes from the
// consumer as it is, trusting that nothing waits unacknowledged; so a partition keeps its key
// when what it pulled is not settled yet, or when an acknowledgement of it may not have
// reached the server (one failed, or the connection is down). The key is handed over at a
// later round, or taken over once this engine stops beating, and a takeover makes the
// consumer again from its acknowledged floor, so that nothing waits out AckWait.
func (l *leases) release(ctx context.Context, ps []int) {
	if len(ps) == 0 {
		return
	}
	for _, p := range ps {
		l.stop(p, true)
	}
	wctx, cancel := context.WithTimeout(ctx, l.ttl)
	defer cancel()
	settled := map[int]bool{}
	for _, p := range ps {
		settled[p] = l.e.flight.wait(wctx, p) && !l.e.flight.unsure(p) && l.e.js.Conn().IsConnected()
	}
	for _, p := range ps {
		o := l.view.owners[p]
		if o.id != l.id {
			continue
		}
		if !settled[p] {
			l.e.log.Warn("runner: a partition is not handed over: what it pulled may not be acknowledged", "partition", p)
			continue
		}
		if err := l.kv.Delete(ctx, partitionKey(p), jetstream.LastRevision(o.rev)); err != nil {
			l.e.log.Debug("runner: hand a partition over", "partition", p, "err", err)
			continue
		}
		l.e.log.Info("runner: a partition was handed over", "partition", p)
	}
}

// acquire takes the partitions ps: the keys first, then their consumers and, meanwhile, the
// timers of their runs (with the status index tidied, on the first round), then their
// consumption.
func (l *leases) acquire(ctx context.Context, ps []int, first bool) {
	var took []int
	from := map[int]string{} // the engine a key named before this one took it ("": no key)
	held := false            // a key taken was there
	for _, p := range ps {
		o := l.view.owners[p]
		if o.id != "" && o.id != l.id && l.stillBeating(ctx, o.id) {
			continue
		}
		var rev uint64
		var err error
		if o.id == "" {
			rev, err = l.kv.Create(ctx, partitionKey(p), []byte(l.id))
		} else {
			rev, err = l.kv.Update(ctx, partitionKey(p), []byte(l.id), o.rev)
		}
		if err != nil {
			l.e.log.Debug("runner: take a partition", "partition", p, "err", err)
			continue
		}
		l.view.owners[p] = owner{id: l.id, rev: rev}
		// A key that was there, another engine's or ours (this engine stopped consuming after
		// a fence or a lost consumption), may leave events pulled and never acknowledged: the
		// consumer is made again so that they come at once, not after AckWait.
		from[p] = o.id
		held = held || o.id != ""
		took = append(took, p)
	}
	if len(took) == 0 && !first {
		return
	}
	mine := map[int]bool{}
	for _, p := range took {
		mine[p] = true
	}
	// The consumers are made at once, not one after the other: a creation that waits for a
	// JetStream meta leader being elected (a NATS node lost) would hold every partition after
	// it (measured: four partitions unconsumed for 5, 10, 15 and 20 s). The timers are armed
	// meanwhile (reading every run record is a consumer of its own, made at R3 too), and both
	// are done before the consumption starts.
	made := make([]jetstream.Consumer, len(took))
	failed := make([]error, len(took))
	var making sync.WaitGroup
	for i, p := range took {
		making.Go(func() { made[i], failed[i] = l.e.partitionConsumer(ctx, p, from[p] != "") })
	}
	if err := l.e.rearm(ctx, mine, first); err != nil {
		l.e.log.Warn("runner: arm the timers of the partitions taken", "err", err)
	}
	making.Wait()
	if first && !held && len(took) == natsbox.Partitions && l.alone(time.Now()) {
		// Alone from the start, with no key another process held: every partition through the
		// consumer of them all at once. The partitions' own consumers are made (a takeover after
		// this engine dies resets them, and does not wait for their creation) but not
		// consumed: started and then halted, their consumptions left deliveries unacknowledged
		// at them (with leaf nodes, the server delivers to a pull up to 2 s after its
		// subscription went away).
		l.goSolo(ctx)
		return
	}
	for i, p := range took {
		err := failed[i]
		if err == nil {
			err = l.start(ctx, p, made[i])
		}
		if err != nil {
			// The key stays ours: the next round takes the partition again.
			l.e.log.Warn("runner: consume a partition", "partition", p, "err", err)
			continue
		}
		if from[p] != "" && from[p] != l.id {
			l.e.log.Info("runner: a partition was taken over from an engine that stopped beating", "partition", p)
			// Not alone at once: a takeover's runs go on first, and the engine that died is
			// often started again within seconds, which would split what was just joined.
			l.soloAfter = time.Now().Add(soloAfterTakeover * l.ttl)
		}
	}
}

// stillBeating reads the member key of engine id, whose heartbeats this engine stopped seeing,
// from the bucket's leader (a replica behind it, which a direct get may reach, answers an older
// revision): true when it changed since (the watch lags behind, the engine lives), or when no
// answer comes within a TTL (nothing is taken on a guess).
func (l *leases) stillBeating(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, l.ttl)
	defer cancel()
	rev, found, err := natsbox.LeaderRevision(ctx, l.e.js, l.e.names.EnginesBucket(), memberKey(id))
	switch {
	case err != nil:
		return true
	case !found:
		return false
	case rev > l.view.members[id].rev:
		l.view.member(id, rev, time.Now())
		return true
	}
	return false
}

// start consumes partition p from cons, or every partition (p is all) from the consumer of
// them all.
func (l *leases) start(ctx context.Context, p int, cons jetstream.Consumer) error {
	e := l.e
	why := make(chan error, 1)
	look, reset := make(chan struct{}, 1), make(chan struct{}, 1)
	back := e.js.Conn().StatusChanged(nats.CONNECTED) // before the first pull: none is missed
	cc, err := cons.Consume(func(m jetstream.Msg) { e.route(l.sh, m) },
		jetstream.PullMaxMessages(partitionPull),
		jetstream.PullExpiry(natsbox.PullExpiry),
		jetstream.PullHeartbeat(natsbox.PullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { e.consumeError(err, why, look, reset) }))
	if err != nil {
		e.js.Conn().RemoveStatusListener(back)
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	part := &partition{n: p, cc: cc, stopWatch: stopWatch}
	for _, q := range each(p) {
		l.parts[q] = part
		e.flight.consumed(q)
		e.stats.consuming(q, true)
	}
	gone := make(chan error, 1)
	go e.watchConsumer(wctx, p, cons, look, reset, back, gone)
	go func() {
		select {
		case <-cc.Closed():
		case <-gone:
		case <-wctx.Done():
			return
		}
		select {
		case l.lost <- part:
		case <-wctx.Done():
		}
	}()
	return nil
}

// stop ends the consumption of partition p, if any, and of every partition it covers (all of
// them, for the consumer of every partition): drain lets what was pulled reach the shards,
// else it goes back to the server unacknowledged. The timers of their runs stop.
func (l *leases) stop(p int, drain bool) {
	part := l.halt(p, drain)
	if part == nil {
		return
	}
	if part.n == all {
		l.e.timers.cancelWhere(func(string) bool { return true })
		return
	}
	l.e.timers.cancelWhere(func(runID string) bool { return natsbox.Partition(runID) == p })
}

// halt ends the consumption that covers partition p, if any, as stop does, and returns it;
// the timers go on.
func (l *leases) halt(p int, drain bool) *partition {
	part := l.parts[p]
	if part == nil {
		return nil
	}
	for _, q := range each(part.n) {
		l.parts[q] = nil
		l.e.stats.consuming(q, false)
	}
	part.stopWatch()
	if drain {
		part.cc.Drain()
	} else {
		part.cc.Stop()
	}
	<-part.cc.Closed()
	return part
}

// leave deletes the keys of the partitions this engine holds and its member key, so that
// another engine takes them at once.
func (l *leases) leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for p, o := range l.view.owners {
		if o.id == l.id {
			_ = l.kv.Delete(ctx, partitionKey(p), jetstream.LastRevision(o.rev))
		}
	}
	_ = l.kv.Delete(ctx, memberKey(l.id))
}

// partitionConsumer returns the consumer of partition p, made when missing. After a takeover (or
// when this engine takes again a key of its own it had stopped consuming) what the engine that
// held it had not acknowledged comes at once (what it acknowledged beyond the floor comes again,
// and changes nothing), and that engine's pulls get nothing more: the consumer is reset to its
// floor when no pull waits at it (resetForTakeover), else made again from its floor.
func (e *Engine) partitionConsumer(ctx context.Context, p int, takeover bool) (jetstream.Consumer, error) {
	name := consumerName(p)
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "reins engine: decides the events of partition " + natsbox.PartitionToken(p),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       e.ackWait,
		MaxDeliver:    -1,
		MaxAckPending: maxAckPending,
		FilterSubject: e.names.PartitionSubjects(p),
	}
	cons, err := e.js.Consumer(ctx, e.names.EventsStream(), name)
	if err == nil {
		e.sawFloor(p, cons.CachedInfo())
	}
	if takeover && (err == nil || errors.Is(err, jetstream.ErrConsumerNotFound)) {
		if e.takingOver != nil {
			e.takingOver(p)
		}
		// The engine that held the partition may have pulled at the consumer of them all,
		// whether or not the partition's own is there (its creation may have failed): those
		// pulls are cut off first.
		e.cutAll(ctx)
	}
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		// Missing: new, or deleted by a takeover (this engine's or another's) whose creation
		// failed or is not done. From the floor known, if any, and not from the first event
		// the partition ever had: deciding them all again took minutes of a busy partition,
		// behind which its runs waited (a node-failover benchmark's 3.5 minutes).
		if floor := e.floorIn(ctx, p); floor > 0 {
			e.log.Warn("runner: the consumer of a partition is missing: it is made again from the acknowledged floor known", "consumer", name, "floor", floor)
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, floor+1
		}
		return e.js.CreateConsumer(ctx, e.names.EventsStream(), cfg)
	case err != nil:
		return nil, fmt.Errorf("consumer %s: %w", name, err)
	case takeover:
		if e.resetForTakeover(ctx, p, cons.CachedInfo()) {
			return cons, nil
		}
		if floor := e.floorIn(ctx, p); floor > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, floor+1
		}
		if err := e.js.DeleteConsumer(ctx, e.names.EventsStream(), name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("consumer %s: %w", name, err)
		}
		if e.remaking != nil {
			if err := e.remaking(p); err != nil {
				return nil, err
			}
		}
		return e.js.CreateConsumer(ctx, e.names.EventsStream(), cfg)
	case cons.CachedInfo().Config.AckWait != e.ackWait:
		have := cons.CachedInfo().Config
		have.AckWait = e.ackWait
		if cons, err = e.js.UpdateConsumer(ctx, e.names.EventsStream(), have); err != nil {
			return nil, err
		}
	}
	return cons, e.catchUp(ctx, p, cons)
}

// catchUp moves partition p's consumer, taken as it is, past the floor known of the partition
// when it stands below it: an engine consumed every partition through the consumer of them all
// meanwhile (solo.go), and what it acknowledged there need not be decided again.
func (e *Engine) catchUp(ctx context.Context, p int, cons jetstream.Consumer) error {
	info := cons.CachedInfo()
	to := e.pastFloor(ctx, p, info)
	if to == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, resetWait)
	defer cancel()
	if _, err := natsbox.ResetConsumer(rctx, e.js, e.names.EventsStream(), info.Name, to); err != nil {
		return fmt.Errorf("consumer %s: move it to %d, past the floor known: %w", info.Name, to, err)
	}
	e.log.Debug("runner: a partition's consumer moved past the floor the consumer of every partition reached", "partition", p, "to", to)
	return nil
}

// pastFloor returns where partition p's consumer, as info shows it, should deliver from when
// the floor known of the partition (floorIn) stands above its own: the sequence after it;
// else 0.
func (e *Engine) pastFloor(ctx context.Context, p int, info *jetstream.ConsumerInfo) uint64 {
	if floor := e.floorIn(ctx, p); floor > info.AckFloor.Stream {
		return floor + 1
	}
	return 0
}

// resetForTakeover delivers again everything of partition p's consumer past its acknowledged
// floor, or past the floor known of the partition when that is higher (floorIn: the engine
// that held it consumed every partition through the consumer of them all, solo.go)
// (natsbox.ResetConsumer), when info, read just now from its leader, shows no pull
// waiting: the engine that held the partition then has nothing on its way to it. Making the
// consumer again (a deletion and a creation, each through the JetStream meta leader, and a new
// Raft group at R3) cost a takeover 1.5 s on a loaded three-node cluster; a reset is one
// proposal of the consumer's own group, tens of milliseconds. It reports whether it reset.
//
// The server drops the pulls of a client whose connection closed (an engine that died) before
// it counts them. A pull that still waits is of an engine alive and connected (paused, or its
// heartbeats cut off): a reset would leave it there, to be given the events, so the consumer
// is made again, which cuts it off. An engine paused between two of its pulls has none
// waiting, and pulls again when it wakes up: from a consumer made again too, whose name is the
// same; the rounds of its leases stop it (fenced), and every save is a compare-and-set.
func (e *Engine) resetForTakeover(ctx context.Context, p int, info *jetstream.ConsumerInfo) bool {
	if info == nil || info.Config.AckWait != e.ackWait {
		return false
	}
	if info.NumWaiting > 0 {
		e.log.Debug("runner: pulls wait at a partition's consumer taken over: it is made again, which cuts them off", "partition", p, "pulls", info.NumWaiting)
		return false
	}
	to := e.pastFloor(ctx, p, info) // 0: from its own floor
	rctx, cancel := context.WithTimeout(ctx, resetWait)
	defer cancel()
	var seq uint64
	var err error
	if e.resetting != nil {
		err = e.resetting(p)
	}
	if err == nil {
		seq, err = natsbox.ResetConsumer(rctx, e.js, e.names.EventsStream(), info.Name, to)
	}
	if err != nil {
		e.log.Debug("runner: reset a partition's consumer taken over; it is made again", "partition", p, "err", err)
		return false
	}
	e.log.Debug("runner: a partition's consumer taken over delivers again past its acknowledged floor", "partition", p, "from", seq)
	return true
}

// resetWait bounds a takeover's reset; one with no answer by then is made again instead.
const resetWait = time.Second

// flight keeps the events of each partition routed and not settled yet, with when they came:
// a partition handed over first settles what it pulled, and those held long are kept from
// redelivery (keepalive.go). An event is held as a [heldEvent], which knows its partition and
// its place in the partition's list, so that holding and settling it are a slice's append and
// swap, without a map keyed by every event that comes.
type flight struct {
	mu   sync.Mutex
	held [natsbox.Partitions][]*heldEvent
	idle [natsbox.Partitions]chan struct{} // closed when held empties while someone waits
	lost [natsbox.Partitions]bool          // an acknowledgement failed (failed, unsure)
}

// heldEvent is an event message the engine holds: what the shards decide and settle (its
// methods are the message's), with what flight keeps of it.
type heldEvent struct {
	jetstream.Msg
	at   time.Time
	part int32
	slot int32 // its place in flight.held[part]; -1 once settled
}

// add holds m, an event of partition p that came at now, and returns it as held.
func (f *flight) add(p int, m jetstream.Msg, now time.Time) *heldEvent {
	f.mu.Lock()
	h := &heldEvent{Msg: m, at: now, part: int32(p), slot: int32(len(f.held[p]))}
	f.held[p] = append(f.held[p], h)
	f.mu.Unlock()
	return h
}

// done settles h (once: settled again, it changes nothing).
func (f *flight) done(h *heldEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.slot < 0 {
		return
	}
	held := f.held[h.part]
	last := held[len(held)-1]
	held[h.slot], last.slot = last, h.slot
	held[len(held)-1] = nil
	f.held[h.part], h.slot = held[:len(held)-1], -1
	if len(f.held[h.part]) == 0 && f.idle[h.part] != nil {
		close(f.idle[h.part])
		f.idle[h.part] = nil
	}
}

// settledAll reports whether nothing of partitions ps is in flight: what the engine pulled is
// decided.
func (f *flight) settledAll(ps []int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range ps {
		if len(f.held[p]) > 0 {
			return false
		}
	}
	return true
}

// wait returns once nothing of partition p is in flight (true), or ctx is done first (false).
func (f *flight) wait(ctx context.Context, p int) bool {
	f.mu.Lock()
	if len(f.held[p]) == 0 {
		f.mu.Unlock()
		return true
	}
	if f.idle[p] == nil {
		f.idle[p] = make(chan struct{})
	}
	ch := f.idle[p]
	f.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// failed records that an acknowledgement (or nak) of an event of partition p could not be
// sent: the event may wait unacknowledged on the server.
func (f *flight) failed(p int) {
	f.mu.Lock()
	f.lost[p] = true
	f.mu.Unlock()
}

// unsure reports whether an acknowledgement of partition p failed since it was consumed anew.
func (f *flight) unsure(p int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost[p]
}

// consumed starts partition p's record of failed acknowledgements anew: its consumer was made
// again from the acknowledged floor, or is consumed as it is by an engine that trusts it.
func (f *flight) consumed(p int) {
	f.mu.Lock()
	f.lost[p] = false
	f.mu.Unlock()
}
