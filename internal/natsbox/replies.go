package natsbox

import (
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
)

// Replies to the requests of the hot path. nats.go answers each request on an inbox of its
// own: a token, a channel and an entry of a map per request, and at the server a subject it
// matches for the first time, which misses its subject cache. Every iteration publishes an
// answer and a task and waits for their acknowledgements, so that was about 15 of an
// iteration's allocations (BENCHMARKS.md). [sendForReply] is answered on a subject kept by a
// slot from one request to the next, which the server's cache holds.
//
// A slot serves one request at a time. Its subject changes when a request gives up on its
// reply (timeout, a failed send), so that a reply that comes late goes to a subject no slot
// has any more and is dropped, never taken for the reply of the slot's next request: the
// server sends one reply per request, so a slot whose request got its reply gets no other.
// The slots of a connection share one timer for their requests' deadlines: in a stream of
// requests it fires about once per wait, not reset and stopped for each (BENCHMARKS.md).
// A kept subject is no easier to forge a reply on than nats.go's: anyone who can make the
// server answer on another connection's inbox (a user of the same account, docs/security.md,
// "Consumers and replies") can read that inbox's subjects as they go by, kept or not.

// replies is the reply subscription of one connection and its slots.
type replies struct {
	prefix string // the subscription's subjects: prefix + a slot's index + "." + its gen

	// subscribed is done once the subscription is sent (its error in err), before any
	// request names one of its subjects: the server reads a connection's subscription and
	// publishes in the order they were written.
	subscribed sync.Once
	err        error

	mu    sync.Mutex
	slots []*replySlot // every slot, by its index
	free  []*replySlot // the slots no request holds

	// expiry ends the requests whose wait is over: one timer for the slots, set for wake,
	// the first of their deadlines (zero: not set), rather than a timer reset for each
	// request (BENCHMARKS.md). A request whose deadline is later than wake leaves it alone;
	// when it fires, expire sets it again for the first deadline still ahead.
	expiry *time.Timer
	wake   time.Time
}

// replySlot is where the reply of one request at a time comes.
type replySlot struct {
	index int    // its place in replies.slots
	gen   int    // how many times its subject changed
	subj  string // prefix + index + "." + gen
	// ch gets the reply, or nil when the request's deadline passed first (expire).
	ch chan *nats.Msg
	// deadline is when the request that holds the slot stops waiting; zero while no request
	// waits on the slot (free, or told its wait is over).
	deadline time.Time
}

func newReplies(prefix string) *replies {
	r := &replies{prefix: prefix}
	r.expiry = time.AfterFunc(time.Hour, r.expire)
	r.expiry.Stop()
	return r
}

// repliesOf holds the replies of each connection, by a weak pointer: a connection no one
// holds any more takes its entry with it (the entry holds nothing that holds the connection).
var repliesOf sync.Map // weak.Pointer[nats.Conn] → *replies

// hotReplies lists the replies of the connections that published lately, found without
// weak.Make and the map (a lock of the connection's memory span and a hash, on the path of every
// publish). The list is copied to change and read without a lock; an entry of a connection
// collected since matches no connection, and it and those of connections closed are dropped
// when another is added (rememberHot): an entry holds the replies, not the connection.
var hotReplies atomic.Pointer[[]hotReply]

// maxHotReplies bounds the list: a process publishes through a few connections (an engine's,
// a worker's).
const maxHotReplies = 8

type hotReply struct {
	conn weak.Pointer[nats.Conn]
	r    *replies
}

// repliesFor returns nc's replies, subscribed.
func repliesFor(nc *nats.Conn) (*replies, error) {
	if hot := hotReplies.Load(); hot != nil {
		for _, h := range *hot {
			if h.conn.Value() == nc {
				return h.r, nil
			}
		}
	}
	key := weak.Make(nc)
	got, ok := repliesOf.Load(key)
	if !ok {
		got, _ = repliesOf.LoadOrStore(key, newReplies(nc.NewInbox()+"."))
	}
	r := got.(*replies)
	r.subscribed.Do(func() { r.subscribe(nc, key) })
	if r.err == nil {
		rememberHot(key, r)
	}
	return r, r.err
}

// rememberHot adds r, the subscribed replies of key's connection, to hotReplies when the list
// has room, or an entry of a connection closed or collected since. A full list of open
// connections is left as it is: a process that publishes through more connections than it
// lists finds the others through the map, as before the list, rather than making the list
// again at every publish.
func rememberHot(key weak.Pointer[nats.Conn], r *replies) {
	for {
		old := hotReplies.Load()
		var list []hotReply
		if old != nil {
			list = *old
		}
		gone := func(h hotReply) bool {
			c := h.conn.Value()
			return h.conn == key || c == nil || c.IsClosed()
		}
		if len(list) == maxHotReplies && !slices.ContainsFunc(list, gone) {
			return // full of open connections: nothing made at every publish
		}
		next := append(slices.DeleteFunc(slices.Clone(list), gone), hotReply{key, r})
		if hotReplies.CompareAndSwap(old, &next) {
			return
		}
	}
}

// subscribe subscribes r on nc, whose key in repliesOf is key.
func (r *replies) subscribe(nc *nats.Conn, key weak.Pointer[nats.Conn]) {
	if _, r.err = nc.Subscribe(r.prefix+"*.*", r.deliver); r.err != nil {
		repliesOf.CompareAndDelete(key, r) // the next request tries again
		return
	}
	runtime.AddCleanup(nc, func(k weak.Pointer[nats.Conn]) { repliesOf.Delete(k) }, key)
}

// deliver hands a reply to the slot of its subject, when a request waits there. A reply to a
// subject no slot has (a request that gave up), or to a slot no request waits on, is dropped.
func (r *replies) deliver(m *nats.Msg) {
	index, gen, ok := parseReplySubject(m.Subject, len(r.prefix))
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if index >= len(r.slots) {
		return
	}
	s := r.slots[index]
	if s.gen != gen || s.deadline.IsZero() {
		return
	}
	select {
	case s.ch <- m:
	default: // never: one reply per request, and a slot's request waits for it
	}
}

// parseReplySubject reads a slot's index and gen from the subject of a reply, after the
// prefix (of length skip: the subscription delivers no other subject). Only the subject a slot
// makes reads as one: decimal numbers without a sign or a leading zero.
func parseReplySubject(subj string, skip int) (index, gen int, ok bool) {
	if len(subj) <= skip {
		return 0, 0, false
	}
	rest := subj[skip:]
	dot := strings.IndexByte(rest, '.')
	if dot < 0 {
		return 0, 0, false
	}
	index, ok = parseCount(rest[:dot])
	if !ok {
		return 0, 0, false
	}
	gen, ok = parseCount(rest[dot+1:])
	return index, gen, ok
}

// parseCount reads what strconv.Itoa writes of a count: digits, no leading zero, at most 9.
func parseCount(s string) (int, bool) {
	if len(s) == 0 || len(s) > 9 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	n := 0
	for i := range len(s) {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// take returns a free slot, or a new one, waiting for a reply until now+wait.
func (r *replies) take(now time.Time, wait time.Duration) *replySlot {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s *replySlot
	if n := len(r.free); n > 0 {
		s = r.free[n-1]
		r.free = r.free[:n-1]
	} else {
		s = &replySlot{index: len(r.slots), ch: make(chan *nats.Msg, 1)}
		s.subj = r.subject(s)
		r.slots = append(r.slots, s)
	}
	s.deadline = now.Add(wait)
	if r.wake.IsZero() || s.deadline.Before(r.wake) {
		r.wake = s.deadline
		r.expiry.Reset(wait)
	}
	return s
}

// release frees s for the next request; gaveUp says its request did not get its reply, and
// gives s a new subject. What came on s's channel since the request's reply (expire's nil,
// sent as the reply came) goes with the request.
func (r *replies) release(s *replySlot, gaveUp bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.deadline = time.Time{}
	if gaveUp {
		s.gen = (s.gen + 1) % maxGen
		s.subj = r.subject(s)
	}
	select {
	case <-s.ch:
	default:
	}
	r.free = append(r.free, s)
}

// expire tells each request whose deadline passed that its wait is over, and sets the timer
// again for the first deadline still ahead.
func (r *replies) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireAt(time.Now())
}

// expireAt is expire at time now, r.mu held.
func (r *replies) expireAt(now time.Time) {
	var next time.Time
	for _, s := range r.slots {
		switch {
		case s.deadline.IsZero():
		case !now.Before(s.deadline):
			s.deadline = time.Time{}
			select {
			case s.ch <- nil:
			default: // its reply came first, and is taken
			}
		case next.IsZero() || s.deadline.Before(next):
			next = s.deadline
		}
	}
	r.wake = next
	if !next.IsZero() {
		r.expiry.Reset(next.Sub(now))
	}
}

// maxGen bounds a slot's gen to what parseCount reads; a subject used again after as many
// changes as that has long had its late reply.
const maxGen = 1_000_000_000

func (r *replies) subject(s *replySlot) string {
	return r.prefix + strconv.Itoa(s.index) + "." + strconv.Itoa(s.gen)
}

// sendForReply sends m with a reply subject of its own and returns the reply, within wait: as
// nats.Conn.RequestMsg does, nats.ErrNoResponders when no one subscribes to m's subject and
// nats.ErrTimeout when no reply came. It sets m.Reply.
func sendForReply(nc *nats.Conn, m *nats.Msg, wait time.Duration) (*nats.Msg, error) {
	r, err := repliesFor(nc)
	if err != nil {
		return nil, err
	}
	s := r.take(time.Now(), wait)
	m.Reply = s.subj
	if err := nc.PublishMsg(m); err != nil {
		r.release(s, true)
		return nil, err
	}
	reply := <-s.ch
	r.release(s, reply == nil)
	switch {
	case reply == nil:
		return nil, nats.ErrTimeout
	case len(reply.Data) == 0 && reply.Header.Get("Status") == "503":
		return nil, nats.ErrNoResponders
	}
	return reply, nil
}
