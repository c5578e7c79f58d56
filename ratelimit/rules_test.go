package ratelimit_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/ratelimit"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }
func ns(d time.Duration) int64     { return t0.Add(d).UnixNano() }

func req(id string, tokens int64) ratelimit.Request {
	return ratelimit.Request{ID: id, Tokens: tokens, Lease: 30 * time.Second, QueueLease: 9 * time.Second}
}

// TestAcquire: each rule of Acquire on one state, one call at a time.
func TestAcquire(t *testing.T) {
	for _, tc := range []struct {
		name   string
		state  ratelimit.State
		limits ratelimit.Limits
		now    time.Duration
		req    ratelimit.Request
		want   ratelimit.Decision
		after  func(t *testing.T, s ratelimit.State)
	}{
		{name: "no limits: granted without a write", limits: ratelimit.Limits{}, req: req("a", 100),
			want: ratelimit.Decision{Granted: true}},
		{name: "a full RPM bucket grants and charges one request's interval", limits: ratelimit.Limits{RPM: 2}, req: req("a", 100),
			want: ratelimit.Decision{Granted: true, Write: true},
			after: func(t *testing.T, s ratelimit.State) {
				if s.Requests != ns(30*time.Second) {
					t.Errorf("requests TAT = %v, want t0+30s", time.Unix(0, s.Requests).Sub(t0))
				}
			}},
		{name: "an empty RPM bucket queues until one request refills",
			state:  ratelimit.State{Requests: ns(60 * time.Second)},
			limits: ratelimit.Limits{RPM: 2}, req: req("a", 100),
			want: ratelimit.Decision{Write: true, Wake: at(6 * time.Second)}, // the queue place's refresh comes before the refill at 30s
			after: func(t *testing.T, s ratelimit.State) {
				if len(s.Queue) != 1 || s.Queue[0].ID != "a" || s.Queue[0].Until != ns(9*time.Second) {
					t.Errorf("queue = %+v", s.Queue)
				}
			}},
		{name: "a refreshed place wakes at the refill",
			state:  ratelimit.State{Requests: ns(60 * time.Second), Queue: []ratelimit.Entry{{ID: "a", Until: ns(20 * time.Second)}}},
			limits: ratelimit.Limits{RPM: 2}, now: 12 * time.Second, req: req("a", 100),
			want: ratelimit.Decision{Wake: at(17 * time.Second)}}, // refresh due at 20s − 3s; the refill at 30s is later
		{name: "TPM charges the estimate",
			limits: ratelimit.Limits{TPM: 1000}, req: req("a", 600),
			want: ratelimit.Decision{Granted: true, Charged: 600, Write: true},
			after: func(t *testing.T, s ratelimit.State) {
				if s.Tokens != ns(36*time.Second) {
					t.Errorf("tokens TAT = %v, want t0+36s", time.Unix(0, s.Tokens).Sub(t0))
				}
			}},
		{name: "a call larger than TPM waits for a full bucket and empties it",
			state:  ratelimit.State{Tokens: ns(time.Second)},
			limits: ratelimit.Limits{TPM: 1000}, now: time.Second, req: req("a", 5000),
			want: ratelimit.Decision{Granted: true, Charged: 1000, Write: true}},
		{name: "a call larger than TPM waits while the bucket is not full",
			state:  ratelimit.State{Tokens: ns(2 * time.Second)},
			limits: ratelimit.Limits{TPM: 1000}, now: time.Second, req: req("a", 5000),
			want: ratelimit.Decision{Write: true, Wake: at(2 * time.Second)}},
		{name: "a free slot is held with a lease", limits: ratelimit.Limits{MaxConcurrent: 1}, req: req("a", 1),
			want: ratelimit.Decision{Granted: true, Write: true},
			after: func(t *testing.T, s ratelimit.State) {
				if !slices.Equal(s.Slots, []ratelimit.Entry{{ID: "a", Until: ns(30 * time.Second)}}) {
					t.Errorf("slots = %+v", s.Slots)
				}
			}},
		{name: "no free slot: queued, waking at the first lease's end or the refresh",
			state:  ratelimit.State{Slots: []ratelimit.Entry{{ID: "x", Until: ns(5 * time.Second)}}},
			limits: ratelimit.Limits{MaxConcurrent: 1}, req: req("a", 1),
			want: ratelimit.Decision{Write: true, Wake: at(5 * time.Second)}},
		{name: "a slot whose lease ended goes to the next caller",
			state:  ratelimit.State{Slots: []ratelimit.Entry{{ID: "x", Until: ns(5 * time.Second)}}},
			limits: ratelimit.Limits{MaxConcurrent: 1}, now: 5 * time.Second, req: req("a", 1),
			want: ratelimit.Decision{Granted: true, Write: true},
			after: func(t *testing.T, s ratelimit.State) {
				if len(s.Slots) != 1 || s.Slots[0].ID != "a" {
					t.Errorf("slots = %+v", s.Slots)
				}
			}},
		{name: "first come first served: room for the caller ahead only",
			state:  ratelimit.State{Requests: ns(59 * time.Second), Queue: []ratelimit.Entry{{ID: "first", Until: ns(9 * time.Second)}}},
			limits: ratelimit.Limits{RPM: 60}, req: req("b", 1),
			want: ratelimit.Decision{Write: true, Wake: at(time.Second)}, // room for two requests at 1s
			after: func(t *testing.T, s ratelimit.State) {
				if len(s.Queue) != 2 || s.Queue[1].ID != "b" {
					t.Errorf("queue = %+v", s.Queue)
				}
			}},
		{name: "first come first served: the tokens the caller ahead needs are kept for it",
			state:  ratelimit.State{Queue: []ratelimit.Entry{{ID: "first", Until: ns(9 * time.Second), Tokens: 900}}},
			limits: ratelimit.Limits{TPM: 1000}, req: req("b", 200),
			want: ratelimit.Decision{Write: true, Wake: at(6 * time.Second)},
			after: func(t *testing.T, s ratelimit.State) {
				if len(s.Queue) != 2 || s.Queue[1] != (ratelimit.Entry{ID: "b", Until: ns(9 * time.Second), Tokens: 200}) {
					t.Errorf("queue = %+v", s.Queue)
				}
			}},
		{name: "room for the caller ahead and the caller: both may start",
			state:  ratelimit.State{Queue: []ratelimit.Entry{{ID: "first", Until: ns(9 * time.Second)}}},
			limits: ratelimit.Limits{MaxConcurrent: 2}, req: req("b", 1),
			want: ratelimit.Decision{Granted: true, Write: true},
			after: func(t *testing.T, s ratelimit.State) {
				if len(s.Queue) != 1 || len(s.Slots) != 1 {
					t.Errorf("queue = %+v, slots = %+v", s.Queue, s.Slots)
				}
			}},
		{name: "no room beside the slot kept for the caller ahead",
			state:  ratelimit.State{Slots: []ratelimit.Entry{{ID: "x", Until: ns(20 * time.Second)}}, Queue: []ratelimit.Entry{{ID: "first", Until: ns(9 * time.Second)}}},
			limits: ratelimit.Limits{MaxConcurrent: 2}, req: req("b", 1),
			want: ratelimit.Decision{Write: true, Wake: at(6 * time.Second)}},
		{name: "the head of the queue starts and leaves it",
			state:  ratelimit.State{Queue: []ratelimit.Entry{{ID: "first", Until: ns(9 * time.Second)}, {ID: "b", Until: ns(9 * time.Second)}}},
			limits: ratelimit.Limits{RPM: 60}, req: req("first", 1),
			want: ratelimit.Decision{Granted: true, Write: true},
			after: func(t *testing.T, s ratelimit.State) {
				if len(s.Queue) != 1 || s.Queue[0].ID != "b" {
					t.Errorf("queue = %+v", s.Queue)
				}
			}},
		{name: "a place that ran out (its caller died) is passed",
			state:  ratelimit.State{Queue: []ratelimit.Entry{{ID: "dead", Until: ns(9 * time.Second)}}},
			limits: ratelimit.Limits{RPM: 60}, now: 9 * time.Second, req: req("b", 1),
			want: ratelimit.Decision{Granted: true, Write: true}},
		{name: "paused: nobody starts, even without limits, until the pause ends",
			state:  ratelimit.State{PausedUntil: ns(20 * time.Second)},
			limits: ratelimit.Limits{}, now: 5 * time.Second, req: req("a", 1),
			want: ratelimit.Decision{Wake: at(20 * time.Second)}},
		{name: "paused with limits: the caller keeps its place in the queue",
			state:  ratelimit.State{PausedUntil: ns(20 * time.Second)},
			limits: ratelimit.Limits{RPM: 60}, now: 5 * time.Second, req: req("a", 1),
			want: ratelimit.Decision{Write: true, Wake: at(11 * time.Second)}},
		{name: "a pause that ended is gone",
			state:  ratelimit.State{PausedUntil: ns(20 * time.Second)},
			limits: ratelimit.Limits{}, now: 20 * time.Second, req: req("a", 1),
			want: ratelimit.Decision{Granted: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.state.Clone()
			got := ratelimit.Acquire(&s, tc.limits, at(tc.now), tc.req)
			if got.Granted != tc.want.Granted || got.Charged != tc.want.Charged || got.Write != tc.want.Write || !got.Wake.Equal(tc.want.Wake) {
				t.Errorf("Acquire = %+v, want %+v", got, tc.want)
			}
			if tc.after != nil {
				tc.after(t, s)
			}
		})
	}
}

// TestSettleRenewPause: tokens settle to the real usage, a slot is freed once, a lost slot is
// reported, and a pause is never shortened.
func TestSettleRenewPause(t *testing.T) {
	l := ratelimit.Limits{TPM: 1000, MaxConcurrent: 2}
	var s ratelimit.State
	d := ratelimit.Acquire(&s, l, t0, req("a", 600))
	if !d.Granted || d.Charged != 600 {
		t.Fatalf("Acquire = %+v", d)
	}
	if !ratelimit.Settle(&s, l, "a", 600, 100) {
		t.Fatal("Settle changed nothing")
	}
	if s.Tokens != ns(6*time.Second) || len(s.Slots) != 0 {
		t.Errorf("after settling 100 of 600: tokens TAT t0+%v, slots %+v", time.Unix(0, s.Tokens).Sub(t0), s.Slots)
	}
	// Another call of 600 fits now that 500 came back.
	if d := ratelimit.Acquire(&s, l, t0, req("b", 600)); !d.Granted {
		t.Errorf("after the refund, Acquire = %+v", d)
	}
	lost, changed := ratelimit.Renew(&s, []string{"b", "gone"}, at(time.Minute))
	if !changed || !slices.Equal(lost, []string{"gone"}) || s.Slots[0].Until != ns(time.Minute) {
		t.Errorf("Renew: lost %v, changed %t, slots %+v", lost, changed, s.Slots)
	}
	if !ratelimit.Pause(&s, at(time.Minute)) || ratelimit.Pause(&s, at(time.Second)) || s.PausedUntil != ns(time.Minute) {
		t.Errorf("pause until %v", time.Unix(0, s.PausedUntil).Sub(t0))
	}
	if ratelimit.Leave(&s, "nobody") {
		t.Error("Leave of a caller not queued changed the state")
	}
}

// TestBucketsNeverExceeded: callers that ask at random times on the virtual clock, each
// settling with a random usage up to its charge, are granted no more than the buckets allow
// over any span: between two grants d apart, at most RPM × (1 + d/1m) requests start and at
// most TPM × (1 + d/1m) tokens are spent (charges less refunds). With MaxConcurrent, never more
// calls run at once.
func TestBucketsNeverExceeded(t *testing.T) {
	for _, l := range []ratelimit.Limits{{RPM: 10}, {TPM: 5000}, {RPM: 30, TPM: 20000, MaxConcurrent: 3}} {
		clk := clock.NewVirtual(t0)
		rng := rand.New(rand.NewPCG(1, 2))
		var s ratelimit.State
		type event struct {
			at     time.Time
			tokens int64 // a charge, or a refund (negative)
			grant  bool
		}
		var events []event
		running := map[string]int64{} // id → tokens charged
		for i := range 3000 {
			clk.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
			for _, id := range slices.Sorted(maps.Keys(running)) { // calls end at random
				if charged := running[id]; rng.IntN(3) == 0 {
					used := rng.Int64N(charged + 1)
					ratelimit.Settle(&s, l, id, charged, used)
					events = append(events, event{at: clk.Now(), tokens: used - charged})
					delete(running, id)
				}
			}
			id := fmt.Sprintf("c%d", i)
			d := ratelimit.Acquire(&s, l, clk.Now(), req(id, 100+rng.Int64N(4000)))
			if !d.Granted {
				ratelimit.Leave(&s, id) // this caller gives up: the next one is not behind it
				continue
			}
			if l.MaxConcurrent > 0 && int64(len(running)) >= l.MaxConcurrent {
				t.Fatalf("%+v: %d calls at once", l, len(running)+1)
			}
			running[id] = d.Charged
			events = append(events, event{at: clk.Now(), tokens: d.Charged, grant: true})
		}
		grants := 0
		for i := range events {
			if !events[i].grant {
				continue
			}
			grants++
			var n, tokens int64
			for j := i; j < len(events); j++ {
				tokens += events[j].tokens
				if !events[j].grant {
					continue
				}
				n++
				minutes := events[j].at.Sub(events[i].at).Minutes()
				if l.RPM > 0 && float64(n) > float64(l.RPM)*(1+minutes)+1e-6 {
					t.Fatalf("%+v: %d requests over %.3f minutes", l, n, minutes)
				}
				if l.TPM > 0 && float64(tokens) > float64(l.TPM)*(1+minutes)+1 {
					t.Fatalf("%+v: %d tokens over %.3f minutes", l, tokens, minutes)
				}
			}
		}
		if grants < 100 {
			t.Fatalf("%+v: only %d calls granted in 3,000 tries", l, grants)
		}
	}
}

// FuzzDecodeState: any bytes as a scope's record either decode into a state the rules take
// without failing, or are refused.
func FuzzDecodeState(f *testing.F) {
	for _, s := range []string{"", "{}", `{"requests_tat":5,"slots":[{"id":"a","until":3}],"queue":[{"id":"b","until":9}]}`,
		`{"slots":[{"id":"","until":1}]}`, `{"paused_until":-1}`, `[]`, `{"queue":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ratelimit.DecodeState(data)
		if err != nil {
			return
		}
		l := ratelimit.Limits{RPM: 5, TPM: 100, MaxConcurrent: 2}
		d := ratelimit.Acquire(&s, l, t0, req("z", 50))
		if d.Granted {
			ratelimit.Settle(&s, l, "z", d.Charged, 10)
		}
		again, err := ratelimit.DecodeState(s.Encode())
		if err != nil {
			t.Fatalf("a state the rules wrote does not decode: %v", err)
		}
		if len(again.Slots) > ratelimit.MaxEntries || len(again.Queue) > ratelimit.MaxEntries {
			t.Fatal("too many entries")
		}
	})
}
