package natsbox

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
)

// respond subscribes a responder to subject on nc, known to the server when it returns, that
// answers each request with what answer returns for it (nothing when it returns nil), and
// sends the first 64 requests it gets on the channel it returns.
func respond(t *testing.T, nc *nats.Conn, subject string, answer func(*nats.Msg) []byte) <-chan *nats.Msg {
	t.Helper()
	got := make(chan *nats.Msg, 64)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		select {
		case got <- m:
		default: // a test of many requests reads none
		}
		if data := answer(m); data != nil {
			_ = m.Respond(data)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// The server has the subscription once it answers a ping: a request from another
	// connection, sent right after, would otherwise find no responder.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}

func echo(m *nats.Msg) []byte { return m.Data }

// A slot's subject is kept from one request to the next (the server's subject cache then hits),
// and each request gets its own reply.
func TestRepliesKeepTheirSubject(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	got := respond(t, b.Conn(), "echo.kept", echo)
	var subjects []string
	for _, data := range []string{"one", "two", "three"} {
		reply, err := sendForReply(b.Conn(), &nats.Msg{Subject: "echo.kept", Data: []byte(data)}, 5*time.Second)
		if err != nil || string(reply.Data) != data {
			t.Fatalf("request %q = %v, %v; want its own reply", data, reply, err)
		}
		subjects = append(subjects, (<-got).Reply)
	}
	if subjects[0] != subjects[1] || subjects[1] != subjects[2] {
		t.Errorf("three requests one after the other were answered on %q: want one subject kept", subjects)
	}
}

// A reply that comes after its request gave up is not taken for the reply of the next request
// of the same slot: the slot's subject changed when its request gave up.
func TestLateReplyIsNotTakenForTheNext(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	nc := b.Conn()
	answer := make(chan bool, 1)
	answer <- false // the first request is held, not answered
	got := respond(t, nc, "echo.late", func(m *nats.Msg) []byte {
		select {
		case ok := <-answer:
			if !ok {
				return nil
			}
		default:
		}
		return m.Data
	})
	if _, err := sendForReply(nc, &nats.Msg{Subject: "echo.late", Data: []byte("first")}, 20*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a request never answered = %v, want nats.ErrTimeout", err)
	}
	held := <-got
	// The reply to the first request, late: it reaches the replies' subscription before the
	// second request's does (one connection, in order).
	if err := held.Respond([]byte("first")); err != nil {
		t.Fatal(err)
	}
	reply, err := sendForReply(nc, &nats.Msg{Subject: "echo.late", Data: []byte("second")}, 5*time.Second)
	if err != nil || string(reply.Data) != "second" {
		t.Fatalf("the request after one that gave up = %v, %v; want its own reply, second", reply, err)
	}
	if second := (<-got).Reply; second == held.Reply {
		t.Errorf("the request after one that gave up was answered on the same subject %q", second)
	}
}

// Requests at once, from many goroutines, each get their own reply, and no more slots are made
// than requests wait at once.
func TestRepliesAtOnce(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	nc := b.Conn()
	respond(t, nc, "echo.many", echo)
	const goroutines, each = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				data := fmt.Sprintf("%d/%d", g, i)
				reply, err := sendForReply(nc, &nats.Msg{Subject: "echo.many", Data: []byte(data)}, 10*time.Second)
				if err != nil || string(reply.Data) != data {
					errs <- fmt.Errorf("request %s = %v, %v; want its own reply", data, reply, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r, err := repliesFor(nc)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.slots); n > goroutines || len(r.free) != n {
		t.Errorf("%d slots, %d free, after %d goroutines' requests: want at most %d, all free", n, len(r.free), goroutines, goroutines)
	}
}

// A request to a subject no one subscribes to fails at once with nats.ErrNoResponders, as
// nats.Conn.RequestMsg does.
func TestSendForReplyNoResponders(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	// An hour to wait: only the server's answer that no one listens ends it before the test's
	// own timeout.
	if _, err := sendForReply(b.Conn(), &nats.Msg{Subject: "nobody.here", Data: []byte("x")}, time.Hour); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a request no one subscribes to = %v, want nats.ErrNoResponders", err)
	}
}

// The replies of a connection no one holds any more go with it.
func TestRepliesGoWithTheirConnection(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	respond(t, b.Conn(), "echo.gone", echo)
	key := func() weak.Pointer[nats.Conn] {
		c, err := b.Connect(testCtx(t), "replies-gone")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sendForReply(c.Conn(), &nats.Msg{Subject: "echo.gone", Data: []byte("x")}, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		c.Close()
		return weak.Make(c.Conn())
	}()
	if _, ok := repliesOf.Load(key); !ok {
		t.Fatal("the connection's replies are not held")
	}
	// The cleanup runs after a collection finds the connection unreachable, once the goroutines
	// of the closed connection have returned.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, ok := repliesOf.Load(key); !ok {
			return
		}
		runtime.GC()
		runtime.Gosched()
	}
	t.Error("the replies of a closed connection no one holds are still held 10 s after it closed")
}

// Each connection has replies of its own, the same at every lookup, however many connections
// publish in turn (more than hotReplies lists).
func TestRepliesOfManyConnections(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	respond(t, b.Conn(), "echo.many-conns", echo)
	conns := []*nats.Conn{b.Conn()}
	for i := range maxHotReplies + 3 {
		c, err := b.Connect(testCtx(t), fmt.Sprintf("replies-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns = append(conns, c.Conn())
	}
	first := map[*nats.Conn]*replies{}
	prefixes := map[string]bool{}
	for round := range 3 {
		for i, nc := range conns {
			data := fmt.Sprintf("%d/%d", round, i)
			if reply, err := sendForReply(nc, &nats.Msg{Subject: "echo.many-conns", Data: []byte(data)}, 5*time.Second); err != nil || string(reply.Data) != data {
				t.Fatalf("connection %d, request %s = %v, %v; want its own reply", i, data, reply, err)
			}
			r, err := repliesFor(nc)
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				first[nc] = r
				prefixes[r.prefix] = true
			} else if first[nc] != r {
				t.Fatalf("connection %d: its replies changed between lookups", i)
			}
		}
	}
	if len(prefixes) != len(conns) {
		t.Errorf("%d connections share %d reply prefixes: want one each", len(conns), len(prefixes))
	}
}

// The list of hot replies makes room for an open connection by dropping the closed ones, even
// while they are still held (not collected).
func TestHotRepliesLeaveClosedConnections(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	respond(t, b.Conn(), "echo.hot", echo)
	request := func(nc *nats.Conn) {
		t.Helper()
		if _, err := sendForReply(nc, &nats.Msg{Subject: "echo.hot", Data: []byte("x")}, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	connect := func(name string) *nats.Conn {
		t.Helper()
		c, err := b.Connect(testCtx(t), name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c.Conn()
	}
	var closed []*nats.Conn
	for i := range maxHotReplies {
		nc := connect(fmt.Sprintf("hot-closed-%d", i))
		request(nc)
		nc.Close()
		closed = append(closed, nc)
	}
	nc := connect("hot-open")
	request(nc)
	listed := false
	for _, h := range *hotReplies.Load() {
		listed = listed || h.conn.Value() == nc
	}
	if !listed {
		t.Error("an open connection's replies are not listed while the list holds closed connections")
	}
	runtime.KeepAlive(closed)
}

// BenchmarkRepliesFor looks up the replies of one of three connections in turn, from every
// processor at once, as an engine's and a worker's publishes do at every iteration.
func BenchmarkRepliesFor(b *testing.B) {
	box := openB(b, Options{DataDir: b.TempDir()})
	conns := []*nats.Conn{box.Conn()}
	for _, name := range []string{"bench-replies-1", "bench-replies-2"} {
		c, err := box.Connect(b.Context(), name)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		conns = append(conns, c.Conn())
	}
	for _, nc := range conns {
		if _, err := repliesFor(nc); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := repliesFor(conns[i%len(conns)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// A request that waits less than one already waiting ends at its own deadline: the slots' one
// timer is set again for the earlier deadline.
func TestShortWaitAfterLongOne(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	nc := b.Conn()
	got := respond(t, nc, "echo.held", func(*nats.Msg) []byte { return nil }) // held, not answered
	long := make(chan error, 1)
	go func() {
		reply, err := sendForReply(nc, &nats.Msg{Subject: "echo.held", Data: []byte("long")}, time.Hour)
		if err == nil && string(reply.Data) != "long" {
			err = fmt.Errorf("reply %q", reply.Data)
		}
		long <- err
	}()
	held := <-got // the long request waits
	short := make(chan error, 1)
	go func() {
		_, err := sendForReply(nc, &nats.Msg{Subject: "echo.held", Data: []byte("short")}, 20*time.Millisecond)
		short <- err
	}()
	select {
	case err := <-short:
		if !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("a request of 20ms never answered = %v, want nats.ErrTimeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a request of 20ms never answered still waits after 30 s, behind one of an hour")
	}
	if err := held.Respond([]byte("long")); err != nil {
		t.Fatal(err)
	}
	if err := <-long; err != nil {
		t.Fatalf("the request of an hour, answered: %v", err)
	}
}

// Requests never answered, at once and with waits of their own, each end with nats.ErrTimeout;
// once none waits, the timer is no longer set.
func TestEveryUnansweredRequestEnds(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	nc := b.Conn()
	respond(t, nc, "echo.never", func(*nats.Msg) []byte { return nil })
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := sendForReply(nc, &nats.Msg{Subject: "echo.never", Data: []byte("x")}, time.Duration(10+5*(i%4))*time.Millisecond)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; !errors.Is(err, nats.ErrTimeout) {
			t.Errorf("a request never answered = %v, want nats.ErrTimeout", err)
		}
	}
	r, err := repliesFor(nc)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.wake.IsZero() {
		t.Errorf("the timer is set for %s with no request waiting", r.wake)
	}
	for _, s := range r.slots {
		if !s.deadline.IsZero() || len(s.ch) != 0 {
			t.Errorf("slot %d: deadline %s, %d on its channel, with no request waiting: want none", s.index, s.deadline, len(s.ch))
		}
	}
}

// The end of a wait told just as the reply came (expire and the reply both on the slot's
// channel) goes with that request: the next request of the slot waits for its own reply.
func TestExpiryAfterTheReplyStaysWithItsRequest(t *testing.T) {
	r := newReplies("_INBOX.test.")
	t.Cleanup(func() { r.expiry.Stop() })
	now := time.Now() // waits of an hour: the timer itself fires long after the test
	s := r.take(now, time.Hour)
	reply := &nats.Msg{Subject: s.subj, Data: []byte("first")}
	r.deliver(reply)
	if got := <-s.ch; got != reply {
		t.Fatalf("the slot's channel gave %v, want the reply delivered", got)
	}
	r.mu.Lock()
	r.expireAt(now.Add(2 * time.Hour)) // the deadline passed before the request released the slot
	r.mu.Unlock()
	r.release(s, false)
	next := r.take(now, time.Hour)
	if next != s {
		t.Fatal("the slot released is not taken again")
	}
	if n := len(next.ch); n != 0 {
		t.Fatalf("the next request's slot holds %d message(s) before it sent anything", n)
	}
	r.release(next, false)
}

// A reply goes only to the slot and gen its subject names, and only while a request waits there.
func TestDeliverOnlyToAWaitingSlot(t *testing.T) {
	r := newReplies("_INBOX.test.")
	t.Cleanup(func() { r.expiry.Stop() })
	now := time.Now() // waits of an hour: the timer itself fires long after the test
	s := r.take(now, time.Hour)
	first := s.subj
	r.release(s, true) // gave up: a new subject
	r.deliver(&nats.Msg{Subject: first, Data: []byte("late")})
	r.deliver(&nats.Msg{Subject: s.subj, Data: []byte("free")})
	if n := len(s.ch); n != 0 {
		t.Fatalf("a free slot got %d reply(ies): a late one, or one while no request waits", n)
	}
	s = r.take(now, time.Hour)
	for _, subj := range []string{first, "_INBOX.test.0.01", "_INBOX.test.00.1", "_INBOX.test.+0.1", "_INBOX.test.9.1", "_INBOX.test.0"} {
		r.deliver(&nats.Msg{Subject: subj})
	}
	if n := len(s.ch); n != 0 {
		t.Fatalf("the waiting slot (%s) got %d reply(ies) on other subjects", s.subj, n)
	}
	want := &nats.Msg{Subject: s.subj}
	r.deliver(want)
	if got := <-s.ch; got != want {
		t.Fatalf("the waiting slot got %v, want its reply", got)
	}
	r.release(s, false)
}

// FuzzParseReplySubject holds parseReplySubject to the subjects slots make: what a slot writes
// reads back as its index and gen, and whatever reads as an index and gen is written so.
func FuzzParseReplySubject(f *testing.F) {
	const prefix = "_INBOX.abc."
	for _, s := range []string{prefix + "0.0", prefix + "12.3", prefix + "01.0", prefix + "1.", prefix + ".1", prefix + "-1.0", prefix + "1.2.3", prefix + "999999999.0", prefix + "1000000000.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subj string) {
		index, gen, ok := parseReplySubject(subj, len(prefix))
		if !ok {
			return
		}
		if index < 0 || gen < 0 || gen >= maxGen {
			t.Fatalf("%q read as index %d, gen %d", subj, index, gen)
		}
		r := &replies{prefix: subj[:len(prefix)]}
		if back := r.subject(&replySlot{index: index, gen: gen}); back != subj {
			t.Fatalf("%q read as index %d, gen %d, which a slot writes as %q", subj, index, gen, back)
		}
	})
}
