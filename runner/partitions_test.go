package runner

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
)

const ttl = time.Second

// view builds a leaseView: members seen at the given times, partitions owned as given (the
// rest free).
func view(members map[string]time.Time, owners map[int]string) *leaseView {
	v := newLeaseView(0)
	for id, at := range members {
		v.members[id] = seen{rev: 1, at: at}
	}
	for p, id := range owners {
		v.owners[p] = owner{id: id, rev: 7}
	}
	return v
}

// trusting sets when the engine's own heartbeats were acknowledged again.
func trusting(v *leaseView, at time.Time) *leaseView {
	v.trusted = at
	return v
}

// missing sets when the engine's first heartbeat not acknowledged was sent.
func missing(v *leaseView, at time.Time) *leaseView {
	v.missed = at
	return v
}

// all returns every partition wanted by engine me among live.
func wanted(me string, live ...string) []int {
	slices.Sort(live)
	var ps []int
	for p := range natsbox.Partitions {
		if rendezvous(p, live) == me {
			ps = append(ps, p)
		}
	}
	return ps
}

func ownersOf(id string, ps []int) map[int]string {
	m := map[int]string{}
	for _, p := range ps {
		m[p] = id
	}
	return m
}

func merge(a, b map[int]string) map[int]string {
	for p, id := range b {
		a[p] = id
	}
	return a
}

func consumingOf(ps []int) *[natsbox.Partitions]bool {
	var c [natsbox.Partitions]bool
	for _, p := range ps {
		c[p] = true
	}
	return &c
}

func TestPlanLeases(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	fresh, stale, gone := now.Add(-ttl/2), now.Add(-ttl), now.Add(-2*ttl)
	every := wanted("a", "a") // all of them
	aOfAB, bOfAB := wanted("a", "a", "b"), wanted("b", "a", "b")
	for _, tc := range []struct {
		name      string
		v         *leaseView
		consuming []int
		want      leasePlan
	}{{
		name: "alone on an empty bucket: it takes everything",
		v:    view(nil, nil),
		want: leasePlan{acquire: every},
	}, {
		name:      "alone and consuming everything: nothing to do",
		v:         view(nil, ownersOf("a", every)),
		consuming: every,
	}, {
		name:      "an engine joins: what it should own is handed over",
		v:         view(map[string]time.Time{"b": fresh}, ownersOf("a", every)),
		consuming: every,
		want:      leasePlan{release: bOfAB},
	}, {
		name: "joining while the owner lives: it waits for the handover",
		v:    view(map[string]time.Time{"b": fresh}, ownersOf("b", every)),
	}, {
		name: "joining after the handover: it takes the freed keys",
		v:    view(map[string]time.Time{"b": fresh}, ownersOf("b", bOfAB)),
		want: leasePlan{acquire: aOfAB},
	}, {
		name:      "the other engine stopped beating a TTL ago: its partitions are taken over",
		v:         view(map[string]time.Time{"b": stale}, merge(ownersOf("a", aOfAB), ownersOf("b", bOfAB))),
		consuming: aOfAB,
		want:      leasePlan{acquire: bOfAB},
	}, {
		name:      "the other engine silent a TTL, but so is this one's in the watch (it stalled): it waits",
		v:         view(map[string]time.Time{"a": stale, "b": stale}, merge(ownersOf("a", aOfAB), ownersOf("b", bOfAB))),
		consuming: aOfAB,
	}, {
		name:      "the other engine silent a TTL while the watch shows this one's heartbeats: taken over",
		v:         view(map[string]time.Time{"a": now.Add(-ttl / 6), "b": stale.Add(-ttl / 6)}, merge(ownersOf("a", aOfAB), ownersOf("b", bOfAB))),
		consuming: aOfAB,
		want:      leasePlan{acquire: bOfAB},
	}, {
		name:      "the other engine silent a TTL, but so was the bucket for this one until now: it waits",
		v:         trusting(view(map[string]time.Time{"b": stale}, merge(ownersOf("a", aOfAB), ownersOf("b", bOfAB))), fresh),
		consuming: aOfAB,
	}, {
		name:      "the other engine silent a TTL since this one's heartbeats came back: taken over",
		v:         trusting(view(map[string]time.Time{"b": gone}, merge(ownersOf("a", aOfAB), ownersOf("b", bOfAB))), stale),
		consuming: aOfAB,
		want:      leasePlan{acquire: bOfAB},
	}, {
		name:      "the other engine silent two TTLs, but this one's heartbeat is not acknowledged: it waits",
		v:         missing(view(map[string]time.Time{"b": gone}, merge(ownersOf("a", aOfAB), ownersOf("b", bOfAB))), stale),
		consuming: aOfAB,
	}, {
		name:      "gone for two TTLs, but not since this one's heartbeats came back: not forgotten",
		v:         trusting(view(map[string]time.Time{"b": gone}, ownersOf("a", every)), stale),
		consuming: every,
	}, {
		name:      "gone for two TTLs: its member key is forgotten too",
		v:         view(map[string]time.Time{"b": gone}, ownersOf("a", every)),
		consuming: every,
		want:      leasePlan{forget: []string{"b"}},
	}, {
		name:      "the bucket gives a consumed partition to another: it stops at once",
		v:         view(nil, merge(ownersOf("a", every), ownersOf("x", []int{3}))),
		consuming: every,
		want:      leasePlan{drop: []int{3}},
	}, {
		name: "a stale key of its own for a partition it should not own: deleted",
		v:    view(map[string]time.Time{"b": fresh}, ownersOf("a", bOfAB[:1])),
		want: leasePlan{release: bOfAB[:1], acquire: aOfAB},
	}, {
		name: "its own key for a partition it should own and does not consume: taken again",
		v:    view(nil, ownersOf("a", []int{5})),
		want: leasePlan{acquire: every},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := planLeases(tc.v, "a", consumingOf(tc.consuming), now, ttl)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("plan = %+v\nwant   %+v", got, tc.want)
			}
		})
	}
}

// An engine whose heartbeats go unacknowledged for a TTL stops consuming only when another
// engine could have taken over: one whose heartbeats the bucket took well after this one's
// were first missed.
func TestFenced(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	beat := now.Add(-ttl)     // the last heartbeat acknowledged
	miss := beat.Add(ttl / 6) // the next one, missed
	for _, tc := range []struct {
		name         string
		members      map[string]time.Time
		beatAt, miss time.Time
		want         bool
	}{
		{"heard within the TTL", map[string]time.Time{"b": now}, now.Add(-ttl / 2), time.Time{}, false},
		{"unheard for a TTL while another engine was heard", map[string]time.Time{"b": now}, beat, miss, true},
		{"unheard, the other heard half a TTL after the miss", map[string]time.Time{"b": miss.Add(ttl/2 + time.Millisecond)}, beat, miss, true},
		{"unheard, the other's write before the outage seen late", map[string]time.Time{"b": miss.Add(ttl / 4)}, beat, miss, false},
		{"unheard, and the other unheard since (the bucket takes no writes)", map[string]time.Time{"b": beat}, beat, miss, false},
		{"unheard beside an engine that looks dead", map[string]time.Time{"b": now.Add(-3 * ttl)}, beat, miss, false},
		{"never heard beside another engine", map[string]time.Time{"b": now}, time.Time{}, now.Add(-ttl), true},
		{"unheard for a TTL, alone", nil, beat, miss, false},
		{"never heard, alone (a slow first heartbeat)", nil, time.Time{}, now.Add(-ttl), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := missing(view(tc.members, nil), tc.miss)
			v.member("a", 1, now)
			if got := fenced(v, "a", tc.beatAt, now, ttl); got != tc.want {
				t.Errorf("fenced = %v, want %v", got, tc.want)
			}
		})
	}
}

// Rendezvous ownership spreads the partitions and moves only what an engine gains or loses.
func TestRendezvous(t *testing.T) {
	engines := []string{"e1", "e2", "e3", "e4"}
	for n := 2; n <= len(engines); n++ {
		before, after := engines[:n-1], engines[:n]
		for p := range natsbox.Partitions {
			was, is := rendezvous(p, before), rendezvous(p, after)
			if was != is && is != engines[n-1] {
				t.Errorf("partition %d moved from %s to %s when %s joined", p, was, is, engines[n-1])
			}
		}
		counts := map[string]int{}
		for p := range natsbox.Partitions {
			counts[rendezvous(p, after)]++
		}
		for _, id := range after {
			if counts[id] == 0 {
				t.Errorf("with %d engines, %s owns nothing: %v", n, id, counts)
			}
		}
	}
}

// awaitOwners waits until the partition keys name the owners want returns for them.
func awaitOwners(t *testing.T, v *env, want func(p int) string) {
	t.Helper()
	w, err := v.KV(natsbox.EnginesBucket).WatchAll(v.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	have := map[int]string{}
	for {
		match := true
		for p := range natsbox.Partitions {
			match = match && have[p] == want(p)
		}
		if match {
			return
		}
		select {
		case ent := <-w.Updates():
			if ent == nil {
				continue
			}
			var p int
			if _, err := fmt.Sscanf(ent.Key(), partitionKeyPrefix+"%d", &p); err != nil {
				continue
			}
			have[p] = ""
			if ent.Operation() == jetstream.KeyValuePut {
				have[p] = string(ent.Value())
			}
		case <-v.Ctx.Done():
			t.Fatalf("the partitions never reached their owners: %v", have)
		}
	}
}

// runIDs returns one run id per partition.
func runIDs(prefix string) []string {
	ids := make([]string, natsbox.Partitions)
	left := natsbox.Partitions
	for i := 0; left > 0; i++ {
		id := prefix + strconv.Itoa(i)
		if p := natsbox.Partition(id); ids[p] == "" {
			ids[p] = id
			left--
		}
	}
	return ids
}

// decidedBy records which engine decided the events of which run.
type decidedBy struct {
	mu   sync.Mutex
	runs map[string]map[string]bool // run → engine ids
}

func (d *decidedBy) attach(e *Engine) {
	e.observe = func(out outcome, ev *protocol.Event) {
		if ev == nil || out == drop {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.runs[ev.RunID] == nil {
			d.runs[ev.RunID] = map[string]bool{}
		}
		d.runs[ev.RunID][e.id] = true
	}
}

func (d *decidedBy) engines(runID string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for id := range d.runs[runID] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// A consumption is stalled when two looks a lookEvery apart find events waiting, nothing
// delivered between them, the same consumer, and room for more unacknowledged events.
func TestStalled(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	info := func(pending uint64, delivered uint64, ackPending int, created time.Time) *jetstream.ConsumerInfo {
		return &jetstream.ConsumerInfo{NumPending: pending, Delivered: jetstream.SequenceInfo{Stream: delivered},
			NumAckPending: ackPending, Created: created, Config: jetstream.ConsumerConfig{MaxAckPending: 100}}
	}
	for _, tc := range []struct {
		name      string
		prev, cur *jetstream.ConsumerInfo
		want      bool
	}{
		{"waiting, nothing delivered", info(3, 40, 0, at), info(5, 40, 0, at), true},
		{"first look", nil, info(5, 40, 0, at), false},
		{"delivered meanwhile", info(3, 40, 0, at), info(5, 41, 1, at), false},
		{"nothing waited at the first look", info(0, 40, 0, at), info(5, 40, 0, at), false},
		{"nothing waits now", info(3, 40, 0, at), info(0, 40, 0, at), false},
		{"the consumer was made again", info(3, 40, 0, at), info(5, 40, 0, at.Add(time.Second)), false},
		{"no room: the engine has not acknowledged", info(3, 40, 100, at), info(5, 40, 100, at), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stalled(tc.prev, tc.cur); got != tc.want {
				t.Errorf("stalled = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFencedAfterASharedSilence: when everyone's heartbeats stop (the bucket elects a leader)
// and come back, another engine's heartbeat that lands before this one's does not fence it: the
// other counts this one's silence from its own return, so it cannot take anything for a TTL.
// Once the other has been heard for half a TTL and this one still is not, it is fenced.
func TestFencedAfterASharedSilence(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	beat := now.Add(-2 * ttl) // the last heartbeat of engine a acknowledged, before the silence
	v := missing(newLeaseView(ttl/2), beat.Add(ttl/6))
	v.member("b", 1, beat)
	back := now.Add(-ttl / 6) // b's first heartbeat after the silence
	v.member("b", 2, back)
	if fenced(v, "a", beat, now, ttl) {
		t.Error("fenced by a heartbeat of b that came back a moment before a's")
	}
	later := back.Add(ttl / 2)
	v.member("b", 3, back.Add(ttl/4))
	v.member("b", 4, later)
	if !fenced(v, "a", beat, later, ttl) {
		t.Error("not fenced with b heard for half a TTL and a still unheard")
	}
}
