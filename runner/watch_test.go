package runner

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
)

// info is what a look at a consumer created at created finds: events waiting, the last
// delivered, and unacknowledged, with room for 100.
func info(pending, delivered uint64, ackPending int, created time.Time) *jetstream.ConsumerInfo {
	return &jetstream.ConsumerInfo{NumPending: pending, Delivered: jetstream.SequenceInfo{Stream: delivered},
		NumAckPending: ackPending, Created: created, Config: jetstream.ConsumerConfig{MaxAckPending: 100}}
}

// A consumption is stalled when two looks find events waiting, nothing delivered between
// them, the same consumer, and room for more unacknowledged events.
func TestStalled(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
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

// The looks of one consumption, in turn: a stall is judged over two looks at least stallAfter
// apart, whatever made them; a sign of trouble (pulls unanswered, a leader elected) makes the
// watcher look again every stallAfter until the consumer delivers, nothing waits, or suspectFor
// passed.
func TestConsumerWatch(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		why     lookCause
		at      time.Duration
		info    *jetstream.ConsumerInfo // nil: no answer
		settled bool
		stall   bool // want
		again   bool // want
	}
	const s = time.Second
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"periodic looks of a stall, as before", []step{
			{lookTick, 10 * s, info(3, 40, 0, t0), true, false, false},
			{lookTick, 20 * s, info(5, 40, 0, t0), true, true, false},
		}},
		{"periodic looks of a consumption that goes", []step{
			{lookTick, 10 * s, info(3, 40, 0, t0), true, false, false},
			{lookTick, 20 * s, info(5, 48, 0, t0), true, false, false},
		}},
		{"a leader elected, then a stall judged stallAfter later", []step{
			{lookTick, 10 * s, info(3, 40, 0, t0), true, false, false},
			{lookLeader, 16 * s, info(3, 40, 0, t0), true, true, false}, // 6 s since the last look
		}},
		{"a leader elected right after a look: look again", []step{
			{lookTick, 10 * s, info(3, 40, 0, t0), true, false, false},
			{lookLeader, 10*s + 300*time.Millisecond, info(3, 40, 0, t0), true, false, true},
			{lookAgain, 11*s + 300*time.Millisecond, info(4, 40, 0, t0), true, true, false},
		}},
		{"a leader elected first, the consumption delivers: no more looks", []step{
			{lookLeader, 5 * s, info(3, 40, 0, t0), true, false, true},
			{lookAgain, 6 * s, info(1, 45, 2, t0), true, false, false},
		}},
		{"a leader elected first, the consumption stalls", []step{
			{lookLeader, 5 * s, info(3, 40, 0, t0), true, false, true},
			{lookAgain, 6 * s, info(3, 40, 0, t0), true, true, false},
		}},
		{"pulls unanswered during an election: looks again until the leader answers", []step{
			{lookTick, 10 * s, info(3, 40, 0, t0), true, false, false},
			{lookPulls, 12 * s, nil, true, false, true},
			{lookAgain, 14 * s, nil, true, false, true},
			{lookAgain, 16 * s, info(4, 40, 0, t0), true, true, false},
		}},
		{"suspect for suspectFor at most", []step{
			{lookPulls, 1 * s, nil, true, false, true},
			{lookAgain, 1*s + suspectFor - time.Millisecond, nil, true, false, true},
			{lookAgain, 1*s + suspectFor, nil, true, false, false},
		}},
		{"nothing waits: nothing to judge, no more looks", []step{
			{lookLeader, 5 * s, info(0, 40, 0, t0), true, false, false},
		}},
		{"nothing waits any more: no more looks", []step{
			{lookLeader, 5 * s, info(3, 40, 0, t0), true, false, true},
			{lookAgain, 6 * s, info(0, 43, 3, t0), true, false, false},
		}},
		{"events in flight in the engine: no stall", []step{
			{lookLeader, 5 * s, info(3, 40, 0, t0), true, false, true},
			{lookAgain, 6 * s, info(3, 40, 0, t0), false, false, true},
			{lookAgain, 7 * s, info(3, 40, 0, t0), true, true, false}, // settled now, and a second since the last look
		}},
		{"a stall seen over less than stallAfter is judged over the whole time", []step{
			{lookTick, 10 * s, info(3, 40, 0, t0), true, false, false},
			{lookPulls, 10*s + 400*time.Millisecond, info(3, 40, 0, t0), true, false, true},
			{lookAgain, 10*s + 800*time.Millisecond, info(3, 40, 0, t0), true, false, true},
			{lookAgain, 11 * s, info(3, 40, 0, t0), true, true, false},
		}},
		{"a delivery before the sign of trouble does not clear it", []step{
			{lookTick, 10 * s, info(3, 40, 0, t0), true, false, false},
			{lookLeader, 15 * s, info(3, 46, 0, t0), true, false, true},
			{lookAgain, 16 * s, info(3, 46, 0, t0), true, true, false},
		}},
		{"the consumer made again: no stall", []step{
			{lookLeader, 5 * s, info(3, 40, 0, t0), true, false, true},
			{lookAgain, 6 * s, info(3, 40, 0, at(6*s)), true, false, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w consumerWatch
			for i, st := range tc.steps {
				stall, again := w.look(st.why, lookAt{info: st.info, at: at(st.at)}, st.settled)
				if stall != st.stall || again != st.again {
					t.Fatalf("look %d (%s at %s): stall %v, again %v; want %v, %v", i+1, st.why, st.at, stall, again, st.stall, st.again)
				}
			}
		})
	}
}

// The advisories name a consumer; only the engine's consumers of partitions count.
func TestPartitionOfConsumer(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    int
		ok   bool
	}{
		{consumerName(0), 0, true},
		{consumerName(natsbox.Partitions - 1), natsbox.Partitions - 1, true},
		{natsbox.EngineConsumerPrefix + "7", 0, false},
		{natsbox.EngineConsumerPrefix + "99", 0, false},
		{natsbox.EngineConsumerPrefix + "-1", 0, false},
		{"reins-engine", 0, false},
		{"worker-01", 0, false},
	} {
		if p, ok := partitionOfConsumer(tc.name); p != tc.p || ok != tc.ok {
			t.Errorf("partitionOfConsumer(%q) = %d, %v; want %d, %v", tc.name, p, ok, tc.p, tc.ok)
		}
	}
}
