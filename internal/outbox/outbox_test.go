package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/testkit/allocs"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// lossy answers the publishes of subject as a stream would, after dropping the first drop of
// them (a stream whose leader died drops what it gets), and records every message id it got.
type lossy struct {
	mu   sync.Mutex
	ids  []string
	drop int
}

func (l *lossy) serve(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		l.mu.Lock()
		l.ids = append(l.ids, m.Header.Get(jetstream.MsgIDHeader))
		n := len(l.ids)
		l.mu.Unlock()
		if n > l.drop {
			_ = m.Respond([]byte(`{"stream":"LOSSY","seq":1}`))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

func (l *lossy) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

// The messages of a decision that are not acknowledged within natsbox.PublishAttempt are sent
// again, with their message ids, until they are; those acknowledged are not.
func TestPublishSendsAgainWhatWasNotAcknowledged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	answered, dropped := &lossy{}, &lossy{drop: 1}
	answered.serve(t, box.Conn(), "lossy.answered")
	dropped.serve(t, box.Conn(), "lossy.dropped")
	o := &outbox.Outbox{JS: box.JetStream()}
	err = o.Publish(ctx, []*nats.Msg{
		outbox.NewMsg("lossy.answered", []byte(`{}`), "id-a"),
		outbox.NewMsg("lossy.dropped", []byte(`{}`), "id-d"),
	})
	if err != nil {
		t.Fatalf("Publish: %v, want both stored", err)
	}
	if got := answered.got(); len(got) != 1 || got[0] != "id-a" {
		t.Errorf("the message acknowledged at once was sent as %v, want once as id-a", got)
	}
	if got := dropped.got(); len(got) != 2 || got[0] != "id-d" || got[1] != "id-d" {
		t.Errorf("the message dropped once was sent as %v, want twice as id-d: stored once", got)
	}
}

// A message id taken first by another sender, on another subject of the events stream, does not
// swallow the event: Own (through Publish, with one message or several) publishes it again
// under an id of its own, and it is stored; a duplicate of the event itself (same subject)
// stands.
func TestPublishOutlivesSquattedIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	if err := natsbox.EnsureLayout(ctx, box.JetStream(), box.Layout()); err != nil {
		t.Fatal(err)
	}
	n := box.Names()
	subj := func(f func(string) (string, error), id string) string {
		s, err := f(id)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	mallory := func(id string) (string, error) { return n.PrincipalSubject(id, natsbox.SubmitKind, "mallory") }
	o := &outbox.Outbox{JS: box.JetStream(), Names: n}
	stored := func(subject string) int {
		s, err := box.JetStream().Stream(ctx, n.EventsStream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		return int(info.State.Subjects[subject])
	}
	for _, tc := range []struct {
		name string
		runs []string
	}{{"one message", []string{"r-1"}}, {"several", []string{"r-2", "r-3"}}} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []*nats.Msg
			for _, id := range tc.runs {
				// mallory takes the id of the engine's start of sub-run id first.
				squat := outbox.NewMsg(subj(mallory, id), []byte(`{"run_id":"`+id+`","type":"start"}`), id+"/start")
				if _, err := box.JetStream().PublishMsg(ctx, squat); err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, outbox.NewMsg(subj(n.EngineSubject, id), []byte(`{"run_id":"`+id+`","type":"start","parent":{}}`), id+"/start"))
			}
			if err := o.Publish(ctx, msgs); err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if got := stored(m.Subject); got != 1 {
					t.Errorf("%s: the engine's message is stored %d times, want once", m.Subject, got)
				}
			}
		})
	}
	// An event sent again (a replay of the decision) on its own subject is a duplicate of its
	// own: stored once.
	m := outbox.NewMsg(subj(n.EngineSubject, "r-4"), []byte(`{"run_id":"r-4","type":"tick"}`), "r-4/tick")
	for range 2 {
		if err := o.Publish(ctx, []*nats.Msg{m}); err != nil {
			t.Fatal(err)
		}
	}
	if got := stored(m.Subject); got != 1 {
		t.Errorf("an event sent twice is stored %d times, want once", got)
	}
}

// TestMsgRecycled: a message NewMsg makes after Recycle carries only what it was made with (no
// header, subject or data of the one before), and making and recycling one allocates nothing.
func TestMsgRecycled(t *testing.T) {
	for range 3 { // a pool under -race drops at random: several rounds reach a kept message
		m := outbox.NewMsg("reins.task.a", []byte(`{"a":1}`), "r-1/a/1/1/1")
		m.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		m.Reply = "inbox"
		outbox.Recycle(m)
		m = outbox.NewMsg("reins.task.b", []byte(`{"b":2}`), "r-2/b/1/2/1")
		if m.Subject != "reins.task.b" || string(m.Data) != `{"b":2}` || m.Reply != "" || len(m.Header) != 1 ||
			len(m.Header[jetstream.MsgIDHeader]) != 1 || m.Header.Get(jetstream.MsgIDHeader) != "r-2/b/1/2/1" {
			t.Fatalf("a recycled message: %q %s reply %q, headers %v; want its own subject, data and id only", m.Subject, m.Data, m.Reply, m.Header)
		}
		outbox.Recycle(m)
	}
	data := []byte(`{}`)
	switch n := allocs.PerRun(100, func() { outbox.Recycle(outbox.NewMsg("reins.task.a", data, "r-1/a/1/1/1")) }); {
	case allocs.Race && n > 3: // -race empties the pool at random: at most a new message each time
		t.Errorf("a message made and recycled allocates %v times under -race, want at most 3", n)
	case !allocs.Race && n != 0:
		t.Errorf("a message made and recycled allocates %v times, want 0", n)
	}
}

// TestTaskMsgRecycled: a task's message made after Recycle holds the task's own bytes, written
// into the buffer the recycled message kept, and making and recycling one allocates nothing.
func TestTaskMsgRecycled(t *testing.T) {
	o := &outbox.Outbox{Values: wire.NewValues(nil, 0, 0), MaxPayload: 1 << 20}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	long := &protocol.Task{RunID: "r-1", Step: "agent", Item: -1, Handler: "h", Activation: 1, Iteration: 1, Attempt: 1,
		Input: json.RawMessage(`{"notes":"` + strings.Repeat("x", 200) + `"}`), MsgID: "r-1/agent/1/1/1", Protocol: protocol.Version}
	short := &protocol.Task{RunID: "r-2", Step: "agent", Item: -1, Handler: "h", Activation: 1, Iteration: 2, Attempt: 1,
		Input: json.RawMessage(`{}`), MsgID: "r-2/agent/1/2/1", Protocol: protocol.Version}
	for range 3 { // a pool under -race drops at random: several rounds reach a kept message
		for _, tk := range []*protocol.Task{long, short, long} {
			m, err := o.TaskMsg(context.Background(), tk, at)
			if err != nil {
				t.Fatal(err)
			}
			want, err := wire.EncodeTask(tk)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Data, want) || m.Header.Get(jetstream.MsgIDHeader) != tk.MsgID || len(m.Header) != 1 {
				t.Fatalf("the message of task %s: %s, headers %v; want %s and its id only", tk.MsgID, m.Data, m.Header, want)
			}
			outbox.Recycle(m)
		}
	}
	switch n := allocs.PerRun(100, func() {
		m, err := o.TaskMsg(context.Background(), long, at)
		if err != nil {
			t.Fatal(err)
		}
		outbox.Recycle(m)
	}); {
	case allocs.Race && n > 5: // -race empties the pool at random: at most a new message and its bytes
		t.Errorf("a task's message made and recycled allocates %v times under -race, want at most 5", n)
	case !allocs.Race && n != 0:
		t.Errorf("a task's message made and recycled allocates %v times, want 0", n)
	}
}

// TestMsgSize holds MsgSize to the headers as the protocol writes them ("NATS/1.0\r\n", a
// "Key: value\r\n" line per value, "\r\n") and the data, with the message id alone (sized
// without walking the map) and with other headers.
func TestMsgSize(t *testing.T) {
	data := []byte(`{"run_id":"r-1"}`)
	for _, c := range []struct {
		name   string
		header nats.Header
	}{
		{"no header", nil},
		{"the id alone", nats.Header{jetstream.MsgIDHeader: {"r-1/agent/1/2/1"}}},
		{"the id twice", nats.Header{jetstream.MsgIDHeader: {"a", "bb"}}},
		{"the id without a value", nats.Header{jetstream.MsgIDHeader: {}}},
		{"another header alone", nats.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}},
		{"the id and a trace", nats.Header{jetstream.MsgIDHeader: {"r-1/s/1"}, "Traceparent": {"00-x-y-01"}}},
	} {
		want := len("NATS/1.0\r\n") + len("\r\n") + len(data)
		for k, vs := range c.header {
			for _, v := range vs {
				want += len(k + ": " + v + "\r\n")
			}
		}
		if got := outbox.MsgSize(&nats.Msg{Subject: "s", Header: c.header, Data: data}); got != want {
			t.Errorf("%s: MsgSize = %d, want %d", c.name, got, want)
		}
	}
}

// BenchmarkMsgSize sizes a task's message: its id is its one header.
func BenchmarkMsgSize(b *testing.B) {
	m := &nats.Msg{Subject: "s", Header: nats.Header{jetstream.MsgIDHeader: {"r-0123456789abcdef/agent/1/12/1"}}, Data: make([]byte, 300)}
	for range b.N {
		_ = outbox.MsgSize(m)
	}
}
