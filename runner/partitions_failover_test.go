//go:build e2e

package runner

// Engines failing over on one server: one stops or dies and another takes its partitions. Heavy
// tests, under the build tag e2e: go test -tags e2e ./runner -run 'Takeover|Partitions'.

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
)

// Two engines share the partitions as rendezvous hashing says, each deciding the runs of its
// own; when one stops, the other takes its partitions at once and the runs go on.
func TestEnginesShareThePartitions(t *testing.T) {
	v := newEnv(t)
	v.stop()
	d := &decidedBy{runs: map[string]map[string]bool{}}
	start := func(id string) (*Engine, func()) {
		return v.startEngine(func(e *Engine) { e.id = id; d.attach(e) })
	}
	_, stopA := start("engine-a")
	_, _ = start("engine-b")
	live := []string{"engine-a", "engine-b"}
	awaitOwners(t, v, func(p int) string { return rendezvous(p, live) })
	v.ServeThink(3)
	ids := runIDs("shared-")
	for _, id := range ids {
		v.Start(runtest.LoopWorkflow(t, 5), "", id)
	}
	for p, id := range ids {
		if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s: %s", id, rec.Run.Status)
		}
		if got, want := d.engines(id), []string{rendezvous(p, live)}; !slices.Equal(got, want) {
			t.Errorf("run %s (partition %d) decided by %v, want %v", id, p, got, want)
		}
	}
	stopA()
	awaitOwners(t, v, func(int) string { return "engine-b" })
	for _, id := range runIDs("after-") {
		if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 5), "", id)); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s: %s", id, rec.Run.Status)
		}
		if got := d.engines(id); !slices.Equal(got, []string{"engine-b"}) {
			t.Errorf("run %s decided by %v after engine-a stopped, want engine-b", id, got)
		}
	}
}

// An engine that dies (its connection cut: no handover) with events decided and not
// acknowledged (their saves wait, for an hour) loses none of them: another engine takes its
// partitions after the lease TTL, and gets those events at once, not after the dead one's
// AckWait (an hour too).
func TestTakeoverFromAnEngineThatDied(t *testing.T) {
	v := newEnv(t)
	v.stop()
	_, conn := startDoomed(t, v, func(e *Engine) { newObserver().attach(e) })

	w := v.Worker("think")
	id := v.Start(runtest.LoopWorkflow(t, 5), "", "r-takeover")
	t1 := w.Next()
	v.Publish(runtest.Continued(t1, `1`), "")
	t2 := w.Next() // the continued event was decided: its save waits, unacknowledged
	if t2.Iteration != 2 {
		t.Fatalf("task of iteration %d", t2.Iteration)
	}
	conn.JetStream().Conn().Close() // dies: no drain, no handover

	heir, _ := v.startEngine(func(e *Engine) { e.id, e.leaseTTL, e.ackWait = "heir", ttl, time.Hour })
	awaitOwners(t, v, func(int) string { return "heir" })
	// The heir decides the continued event again: the same task, which JetStream stores once.
	v.Publish(runtest.Completed(t2, `2`), "")
	if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["think"].Iteration != 2 {
		t.Fatalf("run %s at iteration %d", rec.Run.Status, rec.Run.Steps["think"].Iteration)
	}
	if heir.stats.decided.Load() == 0 {
		t.Fatal("the heir decided nothing")
	}
}

// A takeover keeps the partition's consumer when the engine that held it died: that engine's
// pulls died with its connection, and the consumer is reset to its acknowledged floor, so what
// the engine decided and never acknowledged (its save waits an hour) comes to the heir at once,
// not after AckWait (an hour too), without the consumer being deleted and made again (1.5 s of
// a takeover on a three-node cluster at R3). When the engine that held it is alive and
// connected, its heartbeats stopped and its pulls still waiting at the consumer (its rounds of
// the leases are held here, so it is not fenced yet), the consumer is made again: those pulls
// get nothing more, and what comes after the takeover is the heir's alone.
//
// An engine alone consumes every partition through one consumer (solo.go), where its pulls
// wait: that consumer is kept when it died and made again when it is silent (also when the
// partitions' own consumers are missing, and the heir makes them), and the heir, alone in
// turn, consumes through it.
func TestTakeoverResetsTheConsumerOfAnEngineThatDied(t *testing.T) {
	died := func(_ *Engine, conn *natsbox.Box) { conn.JetStream().Conn().Close() }
	silent := func(doomed *Engine, _ *natsbox.Box) { doomed.beatsPaused.Store(true) }
	for _, tc := range []struct {
		name  string
		lose  func(doomed *Engine, conn *natsbox.Box)
		alone bool // the doomed engine consumes alone, and so does the heir after it
		same  bool // the consumer after the takeover is the one before (reset, not made again)
		// the partitions' own consumers are missing at the takeover (their creation failed)
		missing bool
	}{
		{"died", died, false, true, false},
		{"silent", silent, false, false, false},
		{"alone-died", died, true, true, false},
		{"alone-silent", silent, true, false, false},
		{"alone-silent-missing", silent, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t)
			v.stop()
			var hold atomic.Bool
			release := make(chan struct{})
			defer close(release) // before the cleanups stop the engines
			doomed, conn := startDoomed(t, v, func(e *Engine) {
				e.partitioned = !tc.alone
				e.rounding = func() {
					if hold.Load() {
						<-release
					}
				}
			})
			consumer := consumerName(natsbox.Partition("r-" + tc.name))
			if tc.alone {
				consumer = natsbox.EngineAllConsumer
				waitPulling(t, v, consumer)
			}

			w := v.Worker("think")
			id := v.Start(runtest.LoopWorkflow(t, 5), "", "r-"+tc.name)
			t1 := w.Next()
			v.Publish(runtest.Continued(t1, `1`), "")
			t2 := w.Next() // the continued event was decided: its save waits, unacknowledged
			js := v.Box.JetStream()
			before, err := js.Consumer(v.Ctx, natsbox.EventsStream, consumer)
			if err != nil {
				t.Fatal(err)
			}
			hold.Store(true)
			tc.lose(doomed, conn)
			if tc.missing {
				for p := range natsbox.Partitions {
					if err := js.DeleteConsumer(v.Ctx, natsbox.EventsStream, consumerName(p)); err != nil {
						t.Fatal(err)
					}
				}
			}

			heir, _ := v.startEngine(func(e *Engine) {
				e.id, e.leaseTTL, e.ackWait, e.partitioned = "heir", ttl, time.Hour, !tc.alone
			})
			awaitOwners(t, v, func(int) string { return "heir" })
			// The heir decides the continued event again, at once, and saves it.
			v.WaitFor(id, func(rec *client.Record) bool { return rec.Run.Steps["think"].Iteration == 2 })
			decided := doomed.stats.decided.Load()
			v.Publish(runtest.Completed(t2, `2`), "")
			if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["think"].Iteration != 2 {
				t.Fatalf("run %s at iteration %d", rec.Run.Status, rec.Run.Steps["think"].Iteration)
			}
			if heir.stats.decided.Load() == 0 {
				t.Fatal("the heir decided nothing")
			}
			if n := doomed.stats.decided.Load(); n != decided {
				t.Errorf("the engine that lost the partition decided %d events after the takeover", n-decided)
			}
			if tc.alone {
				waitPulling(t, v, consumer) // the heir's
			}
			after, err := js.Consumer(v.Ctx, natsbox.EventsStream, consumer)
			if err != nil {
				t.Fatal(err)
			}
			if same := after.CachedInfo().Created.Equal(before.CachedInfo().Created); same != tc.same {
				t.Errorf("the consumer after the takeover is the one before: %v, want %v", same, tc.same)
			}
		})
	}
}

// A lease lost while a save waits is never a double advance: an engine whose heartbeats stop
// (paused, cut off) while the save of a decision waits loses its partitions to another engine,
// which decides the event again and saves it; the first engine's save, when it comes, fails its
// compare-and-set, and the run advanced once.
func TestLeaseLostDuringASave(t *testing.T) {
	v := newEnv(t)
	v.stop()
	doomed, stopDoomed := v.startEngine(func(e *Engine) {
		e.id, e.leaseTTL, e.ackWait, e.saveWindow = "doomed", ttl, time.Hour, time.Hour
	})
	awaitOwners(t, v, func(int) string { return "doomed" })
	w := v.Worker("think")
	id := v.Start(runtest.LoopWorkflow(t, 5), "", "r-lost")
	t1 := w.Next()
	v.Publish(runtest.Continued(t1, `1`), "")
	t2 := w.Next() // the continued event was decided: its save waits (an hour)
	doomed.beatsPaused.Store(true)

	heir, _ := v.startEngine(func(e *Engine) { e.id, e.leaseTTL = "heir", ttl })
	awaitOwners(t, v, func(int) string { return "heir" })
	// The heir decides the continued event again on the saved state (the same task, stored
	// once), and the run goes on under it.
	v.Publish(runtest.Continued(t2, `2`), "")
	t3 := w.Next()
	v.WaitFor(id, func(rec *client.Record) bool { return rec.Run.Steps["think"].Iteration == 3 })
	stopDoomed() // the save that waited, of iteration 2, comes now
	if n := doomed.stats.conflicts.Load(); n == 0 {
		t.Error("the save of the engine that lost its lease did not meet a compare-and-set conflict")
	}
	ent, err := v.KV(natsbox.RunsBucket).Get(v.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := runstore.DecodeRecord(ent)
	if err != nil {
		t.Fatal(err)
	}
	if n := saved.Run.Steps["think"].Iteration; n != 3 {
		t.Fatalf("the saved record is at iteration %d after the late save, want still 3", n)
	}
	v.Publish(runtest.Completed(t3, `3`), "")
	rec := v.Wait(id)
	if rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["think"].Iteration != 3 {
		t.Fatalf("run %s at iteration %d, want completed at 3", rec.Run.Status, rec.Run.Steps["think"].Iteration)
	}
	if heir.stats.decided.Load() == 0 {
		t.Fatal("the heir decided nothing")
	}
	if n := v.StreamMsgs(natsbox.TasksStream); n != 1 {
		t.Errorf("%d messages in %s, want the keeper's only: a task was dispatched twice", n, natsbox.TasksStream)
	}
}

// A bucket that takes nobody's heartbeats (its leader lost: an election takes seconds) moves
// nothing: the engines are not fenced and go on deciding while it is silent, and once it takes
// writes again every partition stays with its owner, on the same consumer.
func TestSilentBucketMovesNothing(t *testing.T) {
	v := newEnv(t)
	v.stop()
	ids := []string{"engine-a", "engine-b"}
	rounds := map[string]chan bool{}     // acked, per heartbeat
	leased := map[string]chan struct{}{} // per round of the leases begun
	var engines []*Engine
	for _, id := range ids {
		ch, lc := make(chan bool, 4096), make(chan struct{}, 4096)
		rounds[id], leased[id] = ch, lc
		e, _ := v.startEngine(func(e *Engine) {
			e.id, e.leaseTTL = id, ttl
			e.beaten = func(acked bool) {
				select {
				case ch <- acked:
				default: // never reached within the test; the beater must not block after it
				}
			}
			e.rounding = func() {
				select {
				case lc <- struct{}{}:
				default:
				}
			}
		})
		engines = append(engines, e)
	}
	// settle waits until every engine began two rounds of the leases from now: the round that
	// took a partition's key (and made its consumer) has ended.
	settle := func() {
		t.Helper()
		for _, id := range ids {
			for len(leased[id]) > 0 {
				<-leased[id]
			}
			for range 2 {
				select {
				case <-leased[id]:
				case <-v.Ctx.Done():
					t.Fatalf("%s began no round of the leases", id)
				}
			}
		}
	}
	// awaitRounds waits until every engine had n heartbeats acked as given.
	awaitRounds := func(n int, acked bool) {
		t.Helper()
		for _, id := range ids {
			for seen := 0; seen < n; {
				select {
				case a := <-rounds[id]:
					if a == acked {
						seen++
					}
				case <-v.Ctx.Done():
					t.Fatalf("%s: %d rounds with acked=%v, want %d", id, seen, acked, n)
				}
			}
		}
	}
	awaitOwners(t, v, func(p int) string { return rendezvous(p, ids) })
	settle()
	created := func() map[int]time.Time {
		at := map[int]time.Time{}
		for p := range natsbox.Partitions {
			c, err := v.Box.JetStream().Consumer(v.Ctx, natsbox.EventsStream, consumerName(p))
			if err != nil {
				t.Fatal(err)
			}
			at[p] = c.CachedInfo().Created
		}
		return at
	}
	before := created()
	v.ServeThink(3)

	rounds2TTL := int(2 * ttl / heartbeatEvery(ttl))
	for _, e := range engines {
		e.beatsPaused.Store(true)
	}
	awaitRounds(rounds2TTL, false)
	for _, id := range runIDs("silent-") { // one run per partition, decided while nobody beats
		if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 5), "", id)); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s: %s", id, rec.Run.Status)
		}
	}
	for _, e := range engines {
		e.beatsPaused.Store(false)
	}
	awaitRounds(rounds2TTL, true) // long enough for a takeover, had the silence counted
	for _, e := range engines {
		if n := e.stats.fences.Load(); n != 0 {
			t.Errorf("%d rounds fenced %s while nobody's heartbeat was taken", n, e.id)
		}
	}
	awaitOwners(t, v, func(p int) string { return rendezvous(p, ids) })
	settle()
	for p, at := range created() {
		if !at.Equal(before[p]) {
			t.Errorf("the consumer of partition %d was made again (%v, was %v)", p, at, before[p])
		}
	}
	for _, id := range runIDs("after-") {
		if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 5), "", id)); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s: %s", id, rec.Run.Status)
		}
	}
}

// A round of the leases that lasts longer than a TTL (taking many partitions over makes each
// consumer again) does not stop the heartbeats: the other engine does not see this one dead
// and takes nothing from it.
func TestLongRoundKeepsBeating(t *testing.T) {
	v := newEnv(t)
	v.stop()
	ids := []string{"engine-a", "engine-b"}
	beats := make(chan bool, 4096)
	var blockNext atomic.Bool
	stuck, release := make(chan struct{}, 1), make(chan struct{})
	v.startEngine(func(e *Engine) {
		e.id, e.leaseTTL = ids[0], ttl
		e.beaten = func(acked bool) {
			select {
			case beats <- acked:
			default: // never reached within the test; the beater must not block after it
			}
		}
		e.rounding = func() {
			if blockNext.CompareAndSwap(true, false) {
				stuck <- struct{}{}
				<-release
			}
		}
	})
	v.startEngine(func(e *Engine) { e.id, e.leaseTTL = ids[1], ttl })
	awaitOwners(t, v, func(p int) string { return rendezvous(p, ids) })

	blockNext.Store(true)
	<-stuck // engine-a's leases are in a round that does not end
	defer close(release)
	for n := 0; n < int(3*ttl/heartbeatEvery(ttl)); {
		select {
		case acked := <-beats:
			if acked {
				n++
			}
		case <-v.Ctx.Done():
			t.Fatalf("%d heartbeats of engine-a acknowledged while its round lasted, want them to go on", n)
		}
	}
	ownersStill(t, v, ids, "engine-a's long round")
}

// A takeover makes the consumers of the partitions it takes at once: one whose creation (or
// reset) waits (for a JetStream meta leader being elected, when a NATS node is lost) holds none
// of the others. The heir's first takeover of a consumer waits until another one begins.
func TestTakeoverMakesConsumersAtOnce(t *testing.T) {
	v := newEnv(t)
	v.stop()
	doomed, _ := v.startEngine(func(e *Engine) { e.id, e.leaseTTL = "doomed", ttl })
	awaitOwners(t, v, func(int) string { return "doomed" })
	doomed.beatsPaused.Store(true)

	var remade atomic.Int64
	another := make(chan struct{})
	held := make(chan bool, 1)
	v.startEngine(func(e *Engine) {
		e.id, e.leaseTTL = "heir", ttl
		e.takingOver = func(int) {
			switch remade.Add(1) {
			case 1:
				select {
				case <-another:
					held <- true
				case <-v.Ctx.Done():
					held <- false
				}
			case 2:
				close(another)
			}
		}
	})
	awaitOwners(t, v, func(int) string { return "heir" })
	if !<-held {
		t.Fatal("the first consumer being made again held every other one")
	}
	w := v.Worker("think")
	for _, id := range runIDs("atonce-") {
		v.Start(runtest.LoopWorkflow(t, 1), "", id)
		v.Publish(runtest.Completed(w.Next(), `1`), "")
		if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s: %s", id, rec.Run.Status)
		}
	}
}

// A delivery lost on its way to the engine (the NATS node it came through stopped, or the
// consumer's leader stepped down with it in flight) is delivered again as soon as the engine's
// connection comes back, not after AckWait (an hour here): the engine resets the consumer to
// its acknowledged floor. The test takes the delivery itself, from the consumer an engine that
// stopped left, and never acknowledges it; the next engine gets it only through the reset.
func TestLostDeliveryComesBackWithTheConnection(t *testing.T) {
	v := newEnv(t)
	v.stop()
	hour := func(e *Engine) { e.ackWait, e.partitioned = time.Hour, true }
	_, stopFirst := v.startEngine(hour)
	w := v.Worker("think")
	const id = "lost-1"
	v.Start(runtest.LoopWorkflow(t, 3), "", id)
	t1 := w.Next()
	stopFirst() // its partitions are released; their consumers stay as they are

	v.Publish(runtest.Continued(t1, `1`), "")
	cons, err := v.Box.JetStream().Consumer(v.Ctx, natsbox.EventsStream, consumerName(natsbox.Partition(id)))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for range batch.Messages() {
		lost++ // delivered, and never acknowledged
	}
	if lost != 1 {
		t.Fatalf("took %d deliveries of the answer, want 1", lost)
	}

	next, _ := v.startEngine(hour)
	if err := next.js.Conn().ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	if t2 := w.Next(); t2.Iteration != 2 {
		t.Fatalf("the task after the lost answer is iteration %d, want 2", t2.Iteration)
	}
	if next.stats.redelivered.Load() == 0 {
		t.Error("the engine reset no consumer")
	}
}

// A heartbeat that gets no answer (sent as the connection's NATS node went away) does not
// hold back the ones after it: with every other heartbeat of engine-a unanswered for a whole
// TTL, the others still land every two heartbeat intervals, engine-b takes nothing, and
// engine-a is not fenced.
func TestUnansweredHeartbeatsHoldNothingBack(t *testing.T) {
	v := newEnv(t)
	v.stop()
	ids := []string{"engine-a", "engine-b"}
	beats := make(chan bool, 4096)
	var sent, unanswered atomic.Int64
	var lose atomic.Bool
	a, _ := v.startEngine(func(e *Engine) {
		e.id, e.leaseTTL = ids[0], ttl
		e.sendingBeat = func(ctx context.Context) {
			if lose.Load() && sent.Add(1)%2 == 1 {
				unanswered.Add(1)
				<-ctx.Done() // no answer within the heartbeat's TTL
			}
		}
		e.beaten = func(acked bool) {
			select {
			case beats <- acked:
			default: // never reached within the test; the beater must not block after it
			}
		}
	})
	b, _ := v.startEngine(func(e *Engine) { e.id, e.leaseTTL = ids[1], ttl })
	awaitOwners(t, v, func(p int) string { return rendezvous(p, ids) })

	lose.Store(true)
	for lost := 0; lost < int(3*ttl/heartbeatEvery(ttl))/2; {
		select {
		case acked := <-beats:
			if !acked {
				lost++
			}
		case <-v.Ctx.Done():
			t.Fatalf("%d heartbeats of engine-a went unanswered, want more", lost)
		}
	}
	lose.Store(false)
	if n := unanswered.Load(); n < 3 {
		t.Fatalf("%d heartbeats were held without an answer, want at least 3", n)
	}
	ownersStill(t, v, ids, "engine-a's heartbeats went half unanswered")
	if n := a.stats.fences.Load(); n != 0 {
		t.Errorf("engine-a was fenced %d times", n)
	}
	if n := b.stats.fences.Load(); n != 0 {
		t.Errorf("engine-b was fenced %d times", n)
	}
}

// A takeover that cannot reset the partition's consumer (resetForTakeover) deletes it and makes
// it again from its acknowledged floor. When the creation fails (its answer lost while a NATS node dies), the next round finds no
// consumer: it is made from the floor seen, not from the partition's first event, whose
// events (thousands, every one decided again) held the partition's runs for minutes in the
// node-failover benchmark.
func TestConsumerMadeAgainFromTheFloorSeen(t *testing.T) {
	v := newEnv(t)
	v.stop()
	js := v.Box.JetStream()
	const id = "floor-1"
	p := natsbox.Partition(id)
	const events = 5
	floor := ackEvents(t, v, id, events) // what an engine decided and acknowledged: every event so far

	lost := errors.New("the creation's answer was lost")
	v.eng.resetting = func(int) error { return errors.New("the reset's answer was lost") }
	v.eng.remaking = func(int) error { return lost }
	if _, err := v.eng.partitionConsumer(v.Ctx, p, true); !errors.Is(err, lost) {
		t.Fatalf("a takeover whose creation failed: %v, want %v", err, lost)
	}
	if _, err := js.Consumer(v.Ctx, natsbox.EventsStream, consumerName(p)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the consumer after a failed takeover: %v, want it gone", err)
	}
	v.eng.remaking = nil
	again, err := v.eng.partitionConsumer(v.Ctx, p, true)
	if err != nil {
		t.Fatal(err)
	}
	if start := again.CachedInfo().Config.OptStartSeq; start != floor+1 {
		t.Fatalf("the consumer made again starts at %d, want %d: after the floor", start, floor+1)
	}
	// The first event it delivers is the first after the floor: none decided before comes again.
	v.Publish(&protocol.Event{RunID: id, Type: protocol.EvTick, At: time.Unix(events, 0), Item: -1}, "")
	m, err := again.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if md, err := m.Metadata(); err != nil || md.Sequence.Stream != floor+1 {
		t.Fatalf("the consumer made again delivers %+v first (%v), want the event after the floor, %d", md, err, floor+1)
	}
}

// A floor remembered from an events stream that was made again since (its sequences begin at 1
// again) is not used: the consumer made again starts at the new stream's first event, and none
// of its events is skipped.
func TestConsumerMadeAgainAfterTheStreamWas(t *testing.T) {
	v := newEnv(t)
	v.stop()
	js := v.Box.JetStream()
	const id = "floor-2"
	p := natsbox.Partition(id)
	v.eng.floors[p].Store(1000) // seen of the stream before it was made again
	if err := js.DeleteStream(v.Ctx, natsbox.EventsStream); err != nil {
		t.Fatal(err)
	}
	if err := natsbox.EnsureLayout(v.Ctx, js, v.Box.Layout()); err != nil {
		t.Fatal(err)
	}
	v.Publish(&protocol.Event{RunID: id, Type: protocol.EvTick, At: time.Unix(1, 0), Item: -1}, "")
	cons, err := v.eng.partitionConsumer(v.Ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.DeliverPolicy; got != jetstream.DeliverAllPolicy {
		t.Fatalf("the consumer of the new stream delivers by %v, want from its first event", got)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("the new stream's event was not delivered: %v", err)
	}
	if md, err := m.Metadata(); err != nil || md.Sequence.Stream != 1 {
		t.Fatalf("the consumer delivers %+v first (%v), want the new stream's first event", md, err)
	}
	if f := v.eng.floors[p].Load(); f != 0 {
		t.Errorf("the floor of the old stream is still remembered: %d", f)
	}
}

// An engine that takes over from an engine alone that died starts every partition past what
// the consumer of every partition acknowledged, not from the partitions' own consumers, which
// stood still meanwhile: the runs the dead engine finished are not decided again, and a run it
// left waiting goes on.
func TestTakeoverFromAnEngineAlone(t *testing.T) {
	v := newEnv(t)
	v.stop()
	_, conn := startDoomed(t, v, func(*Engine) {})
	waitPulling(t, v, natsbox.EngineAllConsumer)
	v.ServeThink(3)
	for _, id := range runIDs("done-") {
		if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 3), "", id)); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s: %s", id, rec.Run.Status)
		}
	}
	waitAcked(t, v, natsbox.EngineAllConsumer)
	conn.JetStream().Conn().Close() // dies: no handover

	heir, _ := v.startEngine(func(e *Engine) { e.id, e.leaseTTL = "heir", ttl })
	awaitOwners(t, v, func(int) string { return "heir" })
	waitPulling(t, v, natsbox.EngineAllConsumer)
	if n := heir.stats.decided.Load() + heir.stats.acked.Load(); n != 0 {
		t.Errorf("the heir got %d events of runs the dead engine finished", n)
	}
	if rec := v.Wait(v.Start(runtest.LoopWorkflow(t, 3), "", "after")); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run after the takeover: %s", rec.Run.Status)
	}
}

// startDoomed starts the engine "doomed" on a connection of its own (AckWait and save window an
// hour, the tests' lease TTL), set up by before ahead of its start, and waits until it owns
// every partition. It stops with the test.
func startDoomed(t *testing.T, v *env, before func(*Engine)) (*Engine, *natsbox.Box) {
	t.Helper()
	dconn, err := v.Box.Connect(v.Ctx, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := New(Config{Conn: (*conn.Conn)(dconn), ID: "doomed", AckWait: time.Hour, SaveWindow: time.Hour, LeaseTTL: ttl, Logger: runtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	before(doomed)
	ctx, cancel := context.WithCancel(v.Ctx)
	t.Cleanup(cancel)
	go func() { _ = doomed.Run(ctx) }()
	<-doomed.Ready()
	awaitOwners(t, v, func(int) string { return "doomed" })
	return doomed, dconn
}

// ownersStill checks that every partition key names the engine of ids that rendezvous hashing
// gives it: nothing moved after what happened.
func ownersStill(t *testing.T, v *env, ids []string, after string) {
	t.Helper()
	kv := v.KV(natsbox.EnginesBucket)
	for p := range natsbox.Partitions {
		ent, err := kv.Get(v.Ctx, partitionKey(p))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(ent.Value()), rendezvous(p, ids); got != want {
			t.Errorf("partition %d is %s's after %s, want still %s's", p, got, after, want)
		}
	}
}
