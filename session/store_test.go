package session_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/session"
)

// openStore opens the sessions bucket of a new embedded server, and the bucket itself to look
// at its keys.
func openStore(t testing.TB) (context.Context, *session.Store, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir(), Logger: runtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	if err := natsbox.EnsureLayout(ctx, box.JetStream(), box.Layout()); err != nil {
		t.Fatal(err)
	}
	st, err := session.Open(ctx, (*conn.Conn)(box))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := box.JetStream().KeyValue(ctx, box.Names().SessionsBucket())
	if err != nil {
		t.Fatal(err)
	}
	return ctx, st, kv
}

var (
	t0    = time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	scope = session.Scope{Principal: "alice", Workflow: "support", Step: "reply", Session: "c-7"}
)

func user(s string) model.Message      { return model.Message{Role: model.RoleUser, Content: s} }
func assistant(s string) model.Message { return model.Message{Role: model.RoleAssistant, Content: s} }

// turn is the conversation of a run that began from prior (nil: none) with question q and
// ended with answers.
func turn(id string, prior *session.Session, q string, answers ...string) (*session.Conversation, session.Mark) {
	msgs, mark := session.Continue(prior, q)
	for _, a := range answers {
		msgs = append(msgs, assistant(a))
	}
	return &session.Conversation{TurnID: id, Goal: q, Messages: msgs, Window: 1}, mark
}

func get(t *testing.T, ctx context.Context, st *session.Store) *session.Session {
	t.Helper()
	sess, err := st.Get(ctx, scope.Key())
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

// TestSaveOnce: the save of a turn saved already (a delivery that saved and died before it
// answered, run again) changes nothing; the same turn gone on (after a human's answer) appends
// only what it added.
func TestSaveOnce(t *testing.T) {
	ctx, st, _ := openStore(t)
	c, m := turn("r1/reply", nil, "q1", "a1")
	if saved, err := st.Save(ctx, scope, m, c, t0, time.Hour); err != nil || !saved {
		t.Fatalf("first save: %t, %v", saved, err)
	}
	first := get(t, ctx, st)
	for range 2 {
		if saved, err := st.Save(ctx, scope, m, c, t0.Add(time.Minute), time.Hour); err != nil || saved {
			t.Fatalf("the same turn again: saved %t, %v; want nothing saved", saved, err)
		}
	}
	if again := get(t, ctx, st); again.Revision != first.Revision {
		t.Fatalf("the session was written again: revision %d, then %d", first.Revision, again.Revision)
	}
	c.Messages = append(c.Messages, user("a human's answer"), assistant("a2"))
	if saved, err := st.Save(ctx, scope, m, c, t0.Add(time.Minute), time.Hour); err != nil || !saved {
		t.Fatalf("the turn gone on: %t, %v", saved, err)
	}
	sess := get(t, ctx, st)
	if got, want := texts(sess.Messages), []string{"q1", "a1", "a human's answer", "a2"}; !slices.Equal(got, want) || sess.Saves != 2 || len(sess.Turns) != 1 || sess.Turns[0].Messages != 4 {
		t.Fatalf("session %q, %d saves, turns %+v; want %q, 2 saves, one turn of 4", got, sess.Saves, sess.Turns, want)
	}
}

// TestSaveConcurrently: saves of many runs that began from the same session, at once: every
// turn is in the session once, after what the runs began from.
func TestSaveConcurrently(t *testing.T) {
	ctx, st, _ := openStore(t)
	c, m := turn("r0/reply", nil, "q0", "a0")
	if _, err := st.Save(ctx, scope, m, c, t0, time.Hour); err != nil {
		t.Fatal(err)
	}
	base := get(t, ctx, st)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			q := "q" + strings.Repeat("x", i+1)
			c, m := turn("r"+q+"/reply", base, q, "a"+q)
			if _, err := st.Save(ctx, scope, m, c, t0, time.Hour); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := texts(get(t, ctx, st).Messages)
	if len(got) != 2+2*n || !slices.Equal(got[:2], []string{"q0", "a0"}) {
		t.Fatalf("session %q: want q0, a0 and the %d turns", got, n)
	}
	for i := range n {
		q := "q" + strings.Repeat("x", i+1)
		if j := slices.Index(got, q); j < 0 || got[j+1] != "a"+q || count(got, q) != 1 {
			t.Errorf("turn %s is not in the session once with its answer: %q", q, got)
		}
	}
}

// TestChunks: a session over ChunkSize is kept in chunks, read back whole, and a save that
// replaces it leaves no chunk of the older one behind; Delete removes them all.
func TestChunks(t *testing.T) {
	ctx, st, kv := openStore(t)
	big := strings.Repeat("a long tool result ", 20_000) // ~380 KB
	c, m := turn("r1/reply", nil, "q1", big, big)
	if _, err := st.Save(ctx, scope, m, c, t0, time.Hour); err != nil {
		t.Fatal(err)
	}
	sess := get(t, ctx, st)
	if sess.Chunks < 2 || !slices.Equal(texts(sess.Messages), []string{"q1", big, big}) || sess.Count != 3 {
		t.Fatalf("%d chunks, %d messages: want the conversation whole from at least 2 chunks", sess.Chunks, len(sess.Messages))
	}
	c2, m2 := turn("r2/reply", sess, "q2", "a2")
	if _, err := st.Save(ctx, scope, m2, c2, t0, time.Hour); err != nil {
		t.Fatal(err)
	}
	keys := liveKeys(t, ctx, kv)
	next := get(t, ctx, st)
	if want := next.Chunks + 1; len(keys) != want || next.Gen == sess.Gen {
		t.Fatalf("keys %q after a second save: want the head and the %d chunks of the new generation", keys, next.Chunks)
	}
	list, err := st.List(ctx)
	if err != nil || len(list) != 1 || list[0].Count != 5 || list[0].Messages != nil {
		t.Fatalf("List: %v, %v; want the one head, 5 messages not read", list, err)
	}
	if err := st.Delete(ctx, scope.Key()); err != nil {
		t.Fatal(err)
	}
	if keys := liveKeys(t, ctx, kv); len(keys) != 0 {
		t.Fatalf("keys %q after Delete", keys)
	}
	for _, key := range []string{scope.Key(), "not-a-key"} {
		if _, err := st.Get(ctx, key); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("Get(%q) after Delete: %v, want ErrNotFound", key, err)
		}
		if err := st.Delete(ctx, key); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("Delete(%q) again: %v, want ErrNotFound", key, err)
		}
	}
}

// TestTooLarge: a conversation over MaxBytes is refused with ErrTooLarge, nothing written.
func TestTooLarge(t *testing.T) {
	ctx, st, kv := openStore(t)
	huge := strings.Repeat("x", session.MaxBytes/2+1)
	c, m := turn("r1/reply", nil, "q1", huge, huge)
	if _, err := st.Save(ctx, scope, m, c, t0, time.Hour); !errors.Is(err, session.ErrTooLarge) {
		t.Fatalf("Save: %v, want ErrTooLarge", err)
	}
	if keys := liveKeys(t, ctx, kv); len(keys) != 0 {
		t.Fatalf("keys %q after a refused save", keys)
	}
}

// liveKeys lists the keys of the bucket that hold a value.
func liveKeys(t *testing.T, ctx context.Context, kv jetstream.KeyValue) []string {
	t.Helper()
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// texts are the messages' contents, in order.
func texts(msgs []model.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Content
	}
	return out
}

// count is how many times s is in list.
func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
