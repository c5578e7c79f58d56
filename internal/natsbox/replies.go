package natsbox

import (
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
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
// A kept subject is no easier to forge a reply on than nats.go's: anyone who can make the
// server answer on another connection's inbox (a user of the same account, docs/security.md,
// "Consumers and replies") can read that inbox's subjects as they go by, kept or not.

// replies is the reply subscription of one connection and its slots.
type replies struct {
	prefix string // the subscription's subjects: prefix + a slot's token + "." + its gen

	// subscribed is done once the subscription is sent (its error in err), before any
	// request names one of its subjects: the server reads a connection's subscription and
	// publishes in the order they were written.
	subscribed sync.Once
	err        error

	mu     sync.Mutex
	bySubj map[string]*replySlot // every slot, by its subject
	free   []*replySlot          // the slots no request holds
}

// replySlot is where the reply of one request at a time comes.
type replySlot struct {
	token string // unique to the slot (a NUID)
	gen   int    // how many times its subject changed
	subj  string // prefix + token + "." + gen
	ch    chan *nats.Msg
	timer *time.Timer // reused by each request
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
		got, _ = repliesOf.LoadOrStore(key, &replies{prefix: nc.NewInbox() + ".", bySubj: map[string]*replySlot{}})
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

// deliver hands a reply to the slot of its subject; a reply to a subject no slot has (a
// request that gave up) is dropped.
func (r *replies) deliver(m *nats.Msg) {
	r.mu.Lock()
	s := r.bySubj[m.Subject]
	r.mu.Unlock()
	if s == nil {
		return
	}
	select {
	case s.ch <- m:
	default: // never: one reply per request, and a slot's request waits for it
	}
}

// take returns a free slot, or a new one.
func (r *replies) take() *replySlot {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.free); n > 0 {
		s := r.free[n-1]
		r.free = r.free[:n-1]
		return s
	}
	s := &replySlot{token: nuid.Next(), ch: make(chan *nats.Msg, 1)}
	s.subj = r.subject(s)
	r.bySubj[s.subj] = s
	return s
}

// release frees s for the next request; gaveUp says its request did not get its reply, and
// gives s a new subject.
func (r *replies) release(s *replySlot, gaveUp bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gaveUp {
		delete(r.bySubj, s.subj)
		s.gen++
		s.subj = r.subject(s)
		r.bySubj[s.subj] = s
		select {
		case <-s.ch: // a reply that came as the request gave up
		default:
		}
	}
	r.free = append(r.free, s)
}

func (r *replies) subject(s *replySlot) string {
	return r.prefix + s.token + "." + strconv.Itoa(s.gen)
}

// sendForReply sends m with a reply subject of its own and returns the reply, within wait: as
// nats.Conn.RequestMsg does, nats.ErrNoResponders when no one subscribes to m's subject and
// nats.ErrTimeout when no reply came. It sets m.Reply.
func sendForReply(nc *nats.Conn, m *nats.Msg, wait time.Duration) (*nats.Msg, error) {
	r, err := repliesFor(nc)
	if err != nil {
		return nil, err
	}
	s := r.take()
	m.Reply = s.subj
	if err := nc.PublishMsg(m); err != nil {
		r.release(s, true)
		return nil, err
	}
	if s.timer == nil {
		s.timer = time.NewTimer(wait)
	} else {
		s.timer.Reset(wait)
	}
	select {
	case reply := <-s.ch:
		s.timer.Stop()
		r.release(s, false)
		if len(reply.Data) == 0 && reply.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		return reply, nil
	case <-s.timer.C:
		r.release(s, true)
		return nil, nats.ErrTimeout
	}
}
