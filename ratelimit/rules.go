package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Limits are the limits of one scope (a provider, or one model of a provider). A zero field
// does not limit.
type Limits struct {
	// RPM is how many requests may start per minute: a bucket of RPM requests, refilled
	// continuously at RPM per minute.
	RPM int64
	// TPM is how many tokens (input and output) calls may use per minute: a bucket of TPM
	// tokens, refilled continuously at TPM per minute. A call is charged its estimate when it
	// starts and settled with its real usage when it ends.
	TPM int64
	// MaxConcurrent is how many calls may run at once.
	MaxConcurrent int64
}

// Zero reports whether l limits nothing.
func (l Limits) Zero() bool { return l.RPM <= 0 && l.TPM <= 0 && l.MaxConcurrent <= 0 }

// window is the time a bucket takes to fill up from empty: the minute of RPM and TPM.
const window = time.Minute

// State is what the bucket holds for one scope, shared by every limiter: the two buckets as
// their theoretical arrival times (the time at which each would be full again; before now, it
// is full), the pause a provider asked for, the calls running, and the queue of callers waiting.
// It is read and written whole, with compare-and-set on its revision.
type State struct {
	// Requests and Tokens are the theoretical arrival times of the two buckets, in Unix
	// nanoseconds: a bucket holds (window − (TAT − now)) × rate when TAT > now, else it is full.
	Requests int64 `json:"requests_tat,omitempty"`
	Tokens   int64 `json:"tokens_tat,omitempty"`
	// PausedUntil (Unix nanoseconds) is when the calls of the scope may start again after a
	// provider answered 429 or asked to retry after a time.
	PausedUntil int64 `json:"paused_until,omitempty"`
	// Slots are the calls running, each held until its lease ends unless renewed.
	Slots []Entry `json:"slots,omitempty"`
	// Queue is who waits for capacity, first come first.
	Queue []Entry `json:"queue,omitempty"`
}

// Entry is a slot held, or a place in the queue: who, and until when unless renewed (Unix
// nanoseconds).
type Entry struct {
	ID    string `json:"id"`
	Until int64  `json:"until"`
	// Tokens are what a caller in the queue will be charged (capped at TPM): kept for it, so
	// that callers behind it do not take them.
	Tokens int64 `json:"tokens,omitempty"`
}

// MaxEntries bounds the slots and the queue of a State: a record that would hold more is
// refused (the caller waits as if the queue were full), so that a record stays well within a
// message.
const MaxEntries = 4096

// DecodeState reads a State as the bucket holds it; empty data is the state of a scope nobody
// used yet.
func DecodeState(data []byte) (State, error) {
	var s State
	if len(data) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("ratelimit: the state of a scope is not valid: %w", err)
	}
	if len(s.Slots) > MaxEntries || len(s.Queue) > MaxEntries {
		return State{}, errors.New("ratelimit: the state of a scope holds too many entries")
	}
	for _, e := range slices.Concat(s.Slots, s.Queue) {
		if e.ID == "" {
			return State{}, errors.New("ratelimit: the state of a scope has an entry without an id")
		}
	}
	return s, nil
}

// Encode writes s as the bucket holds it.
func (s *State) Encode() []byte {
	data, _ := json.Marshal(s) // plain fields: cannot fail
	return data
}

// Clone returns a copy of s that shares nothing with it.
func (s State) Clone() State {
	s.Slots, s.Queue = slices.Clone(s.Slots), slices.Clone(s.Queue)
	return s
}

// Request is one call asking for capacity.
type Request struct {
	// ID names the call (unique among every limiter's calls): its slot and its place in the
	// queue.
	ID string
	// Tokens is the call's estimated tokens, charged to the TPM bucket when it starts (at most
	// TPM: a call larger than the whole bucket waits for a full one and empties it).
	Tokens int64
	// Lease is how long a slot is held without being renewed; QueueLease how long a place in
	// the queue is kept without being refreshed.
	Lease, QueueLease time.Duration
}

// Decision is what Acquire decided.
type Decision struct {
	// Granted: the call may start; its request, tokens and slot are charged in the state.
	Granted bool
	// Charged is the tokens charged (Request.Tokens capped at TPM; 0 without TPM).
	Charged int64
	// Write: the state changed (a grant, a place taken or refreshed in the queue, entries
	// that ran out removed) and must be written before the decision counts.
	Write bool
	// Wake is when to look again if nothing changes before (zero: only on a change).
	Wake time.Time
}

// Acquire decides whether request r may start at now under limits l, changing s accordingly
// (Decision.Write says whether it did). The rules, in order:
//
//  1. Slots and places in the queue whose lease ended are removed.
//  2. While the scope is paused (now < PausedUntil), nobody starts: wake at the pause's end.
//  3. First come, first served: what the live places ahead of the caller in the queue need (a
//     request each, their tokens, a slot each) is kept for them. A caller without a place is
//     behind every place.
//  4. It starts when, besides what is kept, a request is left in the RPM bucket, its tokens
//     (capped at TPM) in the TPM bucket, and a slot free under MaxConcurrent; else it takes a
//     place at the end of the queue (or keeps its own) and waits, waking when the buckets will
//     hold enough or the first slot's lease ends, and in any case in time to refresh its place
//     (a third of QueueLease before it ends).
//
// A scope without limits only honours pauses: it never writes.
func Acquire(s *State, l Limits, now time.Time, r Request) Decision {
	t := now.UnixNano()
	write := prune(s, t)
	var d Decision
	if t < s.PausedUntil {
		// A paused scope keeps its queue as it is: the order is kept for when the pause ends.
		d.Wake = time.Unix(0, s.PausedUntil)
		if !l.Zero() {
			write = enqueue(s, r, t) || write
			d.Wake = earliest(d.Wake, refreshAt(s, r, t))
		}
		d.Write = write
		return d
	}
	if l.Zero() {
		return Decision{Granted: true, Write: write}
	}
	charge := min(r.Tokens, l.TPM)
	if l.TPM <= 0 {
		charge = 0
	}
	// What the callers ahead of r in the queue need is kept for them: r starts only if the
	// scope has room for them and for r.
	pos := slices.IndexFunc(s.Queue, func(e Entry) bool { return e.ID == r.ID })
	if pos < 0 {
		pos = len(s.Queue)
	}
	var aheadTokens int64
	for _, e := range s.Queue[:pos] {
		aheadTokens += e.Tokens
	}
	reqTAT, reqOK := admit(s.Requests, t, int64(pos)+1, 1, l.RPM)
	tokTAT, tokOK := admit(s.Tokens, t, aheadTokens+charge, charge, l.TPM)
	slotOK := l.MaxConcurrent <= 0 || int64(len(s.Slots)+pos) < l.MaxConcurrent
	if reqOK.ok && tokOK.ok && slotOK && (l.MaxConcurrent <= 0 || len(s.Slots) < MaxEntries) {
		if l.RPM > 0 {
			s.Requests = reqTAT
		}
		if l.TPM > 0 {
			s.Tokens = tokTAT
		}
		if l.MaxConcurrent > 0 {
			s.Slots = append(s.Slots, Entry{ID: r.ID, Until: t + int64(r.Lease)})
		}
		if pos < len(s.Queue) {
			s.Queue = slices.Delete(s.Queue, pos, pos+1)
		}
		return Decision{Granted: true, Charged: charge, Write: true}
	}
	r.Tokens = charge
	d.Write = enqueue(s, r, t) || write
	wake := time.Time{}
	for _, a := range []admission{reqOK, tokOK} {
		if !a.ok {
			wake = later(wake, time.Unix(0, a.at))
		}
	}
	if !slotOK && len(s.Slots) > 0 {
		first := slices.MinFunc(s.Slots, func(a, b Entry) int { return cmpInt(a.Until, b.Until) })
		wake = later(wake, time.Unix(0, first.Until))
	}
	d.Wake = earliest(wake, refreshAt(s, r, t))
	return d
}

// Settle replaces the tokens charged for a call that ended (charged, Decision.Charged) with
// the tokens it used (used: 0 for a call that failed before the provider counted any), and
// frees its slot. It reports whether s changed.
func Settle(s *State, l Limits, id string, charged, used int64) bool {
	changed := false
	if i := slices.IndexFunc(s.Slots, func(e Entry) bool { return e.ID == id }); i >= 0 {
		s.Slots = slices.Delete(s.Slots, i, i+1)
		changed = true
	}
	if l.TPM > 0 && used != charged && s.Tokens != 0 {
		s.Tokens += cost(used-charged, l.TPM)
		changed = true
	}
	return changed
}

// Renew extends the leases of the slots of ids to until, and reports the ids that hold no slot
// any more (their lease ran out and the slot went to another caller), and whether s changed.
func Renew(s *State, ids []string, until time.Time) (lost []string, changed bool) {
	for _, id := range ids {
		i := slices.IndexFunc(s.Slots, func(e Entry) bool { return e.ID == id })
		if i < 0 {
			lost = append(lost, id)
			continue
		}
		s.Slots[i].Until = until.UnixNano()
		changed = true
	}
	return lost, changed
}

// Leave removes id's place in the queue (a caller that stopped waiting), and reports whether
// s changed.
func Leave(s *State, id string) bool {
	i := slices.IndexFunc(s.Queue, func(e Entry) bool { return e.ID == id })
	if i < 0 {
		return false
	}
	s.Queue = slices.Delete(s.Queue, i, i+1)
	return true
}

// Pause makes the scope wait until until (never shortening a pause already recorded), and
// reports whether s changed.
func Pause(s *State, until time.Time) bool {
	if u := until.UnixNano(); u > s.PausedUntil {
		s.PausedUntil = u
		return true
	}
	return false
}

// prune removes the slots and places whose lease ended by t, and a pause that ended; it
// reports whether a slot or place went (a pause that ended is no reason to write by itself).
func prune(s *State, t int64) bool {
	n := len(s.Slots) + len(s.Queue)
	ended := func(e Entry) bool { return e.Until <= t }
	s.Slots = slices.DeleteFunc(s.Slots, ended)
	s.Queue = slices.DeleteFunc(s.Queue, ended)
	if s.PausedUntil <= t {
		s.PausedUntil = 0
	}
	return len(s.Slots)+len(s.Queue) != n
}

// enqueue gives r a place at the end of the queue, or refreshes its place when a third of its
// lease is left or less, and reports whether s changed.
func enqueue(s *State, r Request, t int64) bool {
	until := t + int64(r.QueueLease)
	if i := slices.IndexFunc(s.Queue, func(e Entry) bool { return e.ID == r.ID }); i >= 0 {
		if s.Queue[i].Until-t > int64(r.QueueLease)/3 {
			return false
		}
		s.Queue[i].Until = until
		return true
	}
	if len(s.Queue) >= MaxEntries {
		return false
	}
	s.Queue = append(s.Queue, Entry{ID: r.ID, Until: until, Tokens: r.Tokens})
	return true
}

// refreshAt is when r's place in the queue is due for a refresh (a third of its lease before
// it ends); zero when r has no place.
func refreshAt(s *State, r Request, t int64) time.Time {
	i := slices.IndexFunc(s.Queue, func(e Entry) bool { return e.ID == r.ID })
	if i < 0 {
		return time.Time{}
	}
	return time.Unix(0, s.Queue[i].Until-int64(r.QueueLease)/3)
}

// admission is whether a bucket admits a cost now, and if not, from when it will.
type admission struct {
	ok bool
	at int64
}

// admit applies the generic cell rate algorithm to a bucket of rate per window with
// theoretical arrival time tat: room for need units at t (what the callers ahead keep, and the
// caller's own) when the arrival time after them is at most a window ahead of t. It returns the
// arrival time after charging n (the caller's own units).
func admit(tat, t, need, n, rate int64) (int64, admission) {
	if rate <= 0 {
		return tat, admission{ok: true}
	}
	base := max(tat, t)
	if after := base + cost(need, rate); after-t > int64(window) {
		return tat, admission{at: after - int64(window)}
	}
	return base + cost(n, rate), admission{ok: true}
}

// cost is the time n units take to refill at rate per window (negative for a refund).
func cost(n, rate int64) int64 {
	return int64(math.Round(float64(n) * float64(window) / float64(rate)))
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// earliest is the earlier of two times, a zero time meaning none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// later is the later of two times, a zero time meaning none.
func later(a, b time.Time) time.Time {
	if a.IsZero() || b.After(a) {
		return b
	}
	return a
}
