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

// respond subscribes a responder to subject on nc that answers each request with what answer
// returns for it (nothing when it returns nil), and sends the first 64 requests it gets on the
// channel it returns.
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
	if n := len(r.bySubj); n > goroutines || len(r.free) != n {
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
