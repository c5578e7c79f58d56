package builtin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/session"
)

// sessionStore is the sessions bucket of a new embedded server.
func sessionStore(t *testing.T) *session.Store {
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
	return session.New((*conn.Conn)(box))
}

// failingSaves is a session store whose first save fails after it wrote nothing: a worker that
// checkpointed the step's last iteration and died before it saved the session.
type failingSaves struct {
	*session.Store
	failed bool
}

func (f *failingSaves) Save(ctx context.Context, sc session.Scope, m session.Mark, c *session.Conversation, now time.Time, ttl time.Duration) (bool, error) {
	if !f.failed {
		f.failed = true
		return false, errors.New("the worker died")
	}
	return f.Store.Save(ctx, sc, m, c, now, ttl)
}

// TestAgentSessionSavedOnce: the last iteration of a step with a session saves its turn once,
// whether the delivery that checkpointed it died before saving (the next one finds the
// iteration done and saves) or after (the next one saves nothing again).
func TestAgentSessionSavedOnce(t *testing.T) {
	store := sessionStore(t)
	b, hash := bundleOf(t, refundWorkflow(script(answer), allTools, `{ forbid = ["issue_refund"] }`, noBudget), "")
	sessions := &failingSaves{Store: store}
	h := newHandlers(t, builtin.Config{Sessions: sessions})
	sc := session.Scope{Principal: "alice", Workflow: b.Definition.Name, Step: "investigate", Session: "c-7"}
	task := func() *fakeTask {
		ft := newTask(b, hash, "investigate", 1, "null")
		ft.task.Session, ft.task.StartedBy = "c-7", "alice"
		return ft
	}
	first := task()
	if err := h.Agent(first); err != nil || first.answer != "fail" || first.saved == nil {
		t.Fatalf("the delivery whose save failed answered %s (%v, %v), checkpoint %s; want fail after the checkpoint", first.answer, err, first.err, first.saved)
	}
	if _, err := store.Get(first, sc.Key()); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("a session after the failed save: %v", err)
	}
	var rev uint64
	for i := range 2 {
		again := task()
		again.checkpoint = first.saved
		if err := h.Agent(again); err != nil || again.answer != "complete" {
			t.Fatalf("delivery %d answered %s, %v", i+2, again.answer, err)
		}
		sess, err := store.Get(again, sc.Key())
		if err != nil {
			t.Fatal(err)
		}
		if sess.Saves != 1 || len(sess.Messages) != 2 || i == 1 && sess.Revision != rev {
			t.Fatalf("after delivery %d: %d saves, %d messages, revision %d (was %d); want the turn saved once", i+2, sess.Saves, len(sess.Messages), sess.Revision, rev)
		}
		rev = sess.Revision
	}
}

// TestAgentSessionWithoutStore: a step with a session on handlers that keep none fails for
// good, naming it.
func TestAgentSessionWithoutStore(t *testing.T) {
	b, hash := bundleOf(t, refundWorkflow(script(answer), allTools, `{ forbid = ["issue_refund"] }`, noBudget), "")
	ft := newTask(b, hash, "investigate", 1, "null")
	ft.task.Session = "c-7"
	if err := newHandlers(t, builtin.Config{}).Agent(ft); err != nil || ft.answer != "fail_permanent" {
		t.Fatalf("answered %s, %v; want a permanent failure", ft.answer, err)
	}
}
