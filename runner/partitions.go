package runner

import (
	"hash/fnv"
	"slices"
	"time"

	"github.com/reins-run/reins/internal/natsbox"
)

// Partitions. The events of a run travel in its partition (natsbox.Partition), and each
// partition is consumed by one engine at a time, its owner, named by the key "partition.NN" of
// natsbox.EnginesBucket. Every engine writes its key "member.ID" every heartbeat (on a
// connection of its own, and only while the connection it decides on is up) and watches the
// bucket; the choice of what to do is planLeases's, a pure function of what the engine saw,
// so that the rules below are tested without a server:
//
//   - An engine is alive for an observer while its member key changed within the lease TTL of
//     the observer's clock (no clocks are compared between machines), counted from no earlier
//     than when the observer's own heartbeats were acknowledged again after a gap, and not at
//     all while they are not: while the bucket takes no writes (its leader lost, an election
//     of several seconds), nobody's key changes, and that is no sign that the others died.
//     Judged otherwise, every engine would take over every other's partitions the moment the
//     bucket came back.
//   - Nor is anyone's silence longer than the watch can vouch for: it ends no later than a
//     heartbeat's interval after the watch last showed this engine's own heartbeat. A watch is
//     a consumer of its own, which a NATS node lost or lagging behind stalls while the
//     heartbeats go on; the others' keys stop changing in it too, and that is no sign that they
//     died either (measured: a stalled watch handed every partition of a live engine to another,
//     and back). The watch is started again after a TTL without this engine's heartbeat.
//   - An engine counts itself alive while its own last heartbeat was acknowledged within the
//     TTL. Else, when the watch showed another engine's key changing well after this engine's
//     first heartbeat missed (half a TTL after: a write made just before the bucket stopped
//     may be seen a little after), the bucket takes their writes and not this engine's (it was
//     paused, or cut off): it stops consuming everything at once and takes nothing (fenced).
//     A bucket that takes nobody's writes fences nobody: nobody can take a partition over
//     either.
//   - The owner a partition should have is the live engine with the highest rendezvous hash of
//     (engine, partition): adding or removing an engine moves only the partitions it gains or
//     loses.
//   - A partition whose key is absent is created by the engine that should own it. A key held by
//     an engine that is not alive is taken over by compare-and-set on its revision, and the
//     partition's consumer delivers at once what the old owner had not acknowledged: it is
//     reset to its acknowledged floor when none of the old owner's pulls waits at it (the
//     server drops those of a connection that closed), else made again from that floor, which
//     cuts the old owner off from the server (its pulls go nowhere). A live owner that should not own a partition any more hands it
//     over: it stops pulling, settles what it had (saves included), then deletes its key.
//   - An engine that consumes a partition whose key names another engine (or none) stops at once.
//
// Nothing here decides a run. Two engines deciding the same run at once (a paused owner that
// wakes up before it notices) is safe as before: every save is a compare-and-set, and the
// commands of the same decision carry the same message ids.

// DefaultLeaseTTL is how long an engine's heartbeat counts when [Config.LeaseTTL] is 0: an engine
// that died is replaced after about this long.
const DefaultLeaseTTL = 1200 * time.Millisecond

// Keys of natsbox.EnginesBucket.
const (
	memberKeyPrefix    = "member."
	partitionKeyPrefix = "partition."
	floorKeyPrefix     = "floor." // floors.go
)

func memberKey(id string) string                     { return memberKeyPrefix + id }
func partitionKey(p int) string                      { return partitionKeyPrefix + natsbox.PartitionToken(p) }
func floorKey(p int) string                          { return floorKeyPrefix + natsbox.PartitionToken(p) }
func heartbeatEvery(ttl time.Duration) time.Duration { return ttl / 6 }

// leaseView is what an engine saw of natsbox.EnginesBucket.
type leaseView struct {
	members map[string]seen // by engine id
	owners  [natsbox.Partitions]owner
	// trusted is when this engine's heartbeats were acknowledged again after a gap: the
	// others' silence counts from then. missed is when the first heartbeat after the last one
	// acknowledged was missed (zero while they are acknowledged).
	trusted, missed time.Time
	// gap is how long a member key may go unchanged and still be heard without a break
	// (seen.heard); 0 counts every change as part of one run.
	gap time.Duration
}

// seen is the revision of a member key, when this engine saw it change, and since when it has
// heard it change without a break longer than the view's gap (its heartbeats came back then).
type seen struct {
	rev   uint64
	at    time.Time
	heard time.Time
}

// owner is the engine a partition key names ("": no key) and the key's revision.
type owner struct {
	id  string
	rev uint64
}

// newLeaseView returns an empty view whose members are heard without a break while their keys
// change at least every gap.
func newLeaseView(gap time.Duration) *leaseView {
	return &leaseView{members: map[string]seen{}, gap: gap}
}

// member records the member key of id at revision rev, seen at now.
func (v *leaseView) member(id string, rev uint64, now time.Time) {
	s, ok := v.members[id]
	if ok && s.rev >= rev {
		return
	}
	heard := s.heard
	if !ok || (v.gap > 0 && now.Sub(s.at) > v.gap) {
		heard = now
	}
	v.members[id] = seen{rev: rev, at: now, heard: heard}
}

// fenced reports whether engine me, whose last heartbeat acknowledged was sent at beatAt, stops
// consuming at now: when that is a TTL ago and another engine's key changed well after the
// first heartbeat missed (v.missed), having been heard without a break for half a TTL, the
// others may have taken its partitions already. A sole engine goes on: nobody takes over from it, and
// a slow server (a busy machine) must not stop all work; an engine that starts later waits a
// TTL without a heartbeat before it takes anything, and takes over by making the consumers
// again, which cuts this one off. Engines that all go unheard (the bucket is electing a leader)
// go on too: they resume at once when it is back, with nothing handed around.
func fenced(v *leaseView, me string, beatAt, now time.Time, ttl time.Duration) bool {
	if now.Sub(beatAt) < ttl {
		return false
	}
	since := v.missed.Add(ttl / 2)
	if v.missed.IsZero() || v.missed.Before(beatAt) {
		since = beatAt // never acknowledged, or no round missed yet
	}
	for id, s := range v.members {
		// One that has been heard again for less than half a TTL after a silence of its own
		// (the bucket was electing a leader, and everyone's heartbeats came back) cannot have
		// judged this one silent yet: it counts the silence of others from its own return.
		if id != me && s.at.After(since) && now.Sub(s.heard) >= ttl/2 {
			return true
		}
	}
	return false
}

// leasePlan is what an engine does in one round.
type leasePlan struct {
	// acquire lists the partitions to take: create the key, or update it at its revision.
	acquire []int
	// release lists the partitions to hand over (stop, settle, delete the key), or whose stale
	// key of ours to delete.
	release []int
	// drop lists the partitions consumed that the bucket gives to another engine: stop at once.
	drop []int
	// forget lists the engines gone for twice the TTL, whose member keys are deleted.
	forget []string
}

// alive reports whether engine id counts as alive at now for an engine that is me.
func (v *leaseView) alive(id, me string, now time.Time, ttl time.Duration) bool {
	if id == me {
		return true
	}
	_, ok := v.members[id]
	return ok && v.silence(id, me, now, ttl) < ttl
}

// silence is how long engine id's key has not changed at now, as far as engine me could tell:
// no longer than its own heartbeats have been acknowledged, none while they are not, and no
// later than a heartbeat's interval after the watch last showed one of them.
func (v *leaseView) silence(id, me string, now time.Time, ttl time.Duration) time.Duration {
	if !v.missed.IsZero() {
		return 0
	}
	from := v.members[id].at
	if v.trusted.After(from) {
		from = v.trusted
	}
	if self, ok := v.members[me]; ok {
		if vouched := self.at.Add(heartbeatEvery(ttl)); vouched.Before(now) {
			now = vouched
		}
	}
	return max(now.Sub(from), 0)
}

// planLeases returns what engine me, consuming the partitions of consuming, does at now.
func planLeases(v *leaseView, me string, consuming *[natsbox.Partitions]bool, now time.Time, ttl time.Duration) leasePlan {
	live := []string{me}
	for id := range v.members {
		if id != me && v.alive(id, me, now, ttl) {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	var plan leasePlan
	for p := range natsbox.Partitions {
		want := rendezvous(p, live)
		holder := v.owners[p].id
		switch {
		case consuming[p] && holder != me:
			plan.drop = append(plan.drop, p)
		case consuming[p] && want != me:
			plan.release = append(plan.release, p)
		case consuming[p]:
		case want != me:
			if holder == me {
				plan.release = append(plan.release, p)
			}
		case holder == "" || holder == me || !v.alive(holder, me, now, ttl):
			plan.acquire = append(plan.acquire, p)
		}
	}
	for id := range v.members {
		if id != me && v.silence(id, me, now, ttl) >= 2*ttl {
			plan.forget = append(plan.forget, id)
		}
	}
	slices.Sort(plan.forget)
	return plan
}

// rendezvous returns the engine of live (sorted, not empty) that should own partition p: the
// highest hash of (engine, partition), ties to the first.
func rendezvous(p int, live []string) string {
	best, bestScore := "", uint64(0)
	for _, id := range live {
		h := fnv.New64a()
		_, _ = h.Write([]byte(id))
		_, _ = h.Write([]byte{'/', byte(p)})
		if s := mix(h.Sum64()); best == "" || s > bestScore {
			best, bestScore = id, s
		}
	}
	return best
}

// mix is the finalizer of SplitMix64: FNV alone barely spreads the last bytes it hashed.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
