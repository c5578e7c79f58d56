package builtin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/session"
)

// goalOf is the user message a run of the tests' workflow starts with: its question, and the
// step's input (the customer).
func goalOf(q, customer string) string { return q + "\n\nInput:\n\"" + customer + "\"" }

// TestSessionContinuesAcrossRuns: the second run of a session sends the model the first run's
// conversation, then its own question; a run of another session sees none of it.
func TestSessionContinuesAcrossRuns(t *testing.T) {
	s := newStack(t)
	def := supportFlow(t, "support", "")
	s.run(def, "alice", "c-7", "Where is my order?")
	s.run(def, "alice", "c-7", "And my refund?")
	s.run(def, "alice", "c-8", "Hello")
	reqs := s.rec.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3", len(reqs))
	}
	u1, u2, u3 := goalOf("Where is my order?", "c-7"), goalOf("And my refund?", "c-7"), goalOf("Hello", "c-8")
	for i, want := range [][]string{{u1}, {u1, "re: " + u1, u2}, {u3}} {
		if got := texts(reqs[i]); !slices.Equal(got, want) {
			t.Errorf("call %d was sent %q, want %q", i+1, got, want)
		}
	}
	sess := s.session(def, "alice", "c-7")
	if got, want := texts(sess.Messages), []string{u1, "re: " + u1, u2, "re: " + u2}; !slices.Equal(got, want) || sess.Saves != 2 || len(sess.Turns) != 2 {
		t.Errorf("session c-7: messages %q, %d saves, turns %+v; want %q, 2 saves, 2 turns", got, sess.Saves, sess.Turns, want)
	}
	if !sess.ExpiresAt.Equal(s.clk.Now().Add(30 * 24 * time.Hour)) {
		t.Errorf("session expires at %s, want the default ttl after the save at %s", sess.ExpiresAt, s.clk.Now())
	}
}

// TestSessionContextPolicy: under the step's context policy, no call of a long session is sent
// more than max_tokens, the session's first message is always sent, and the saved session is
// compacted to what the policy still sends.
func TestSessionContextPolicy(t *testing.T) {
	const maxTokens = 400
	long := strings.Repeat("the parcel was late again and the box was damaged; ", 4)
	for _, tt := range []struct {
		name, context string
		check         func(t *testing.T, sess *session.Session, reqs [][]model.Message)
	}{
		{"drop_oldest", fmt.Sprintf(`context = { max_tokens = %d, keep_last = 2 }`, maxTokens), nil},
		{"truncate_tool_results", fmt.Sprintf(`context = { max_tokens = %d, strategy = "truncate_tool_results", keep_last = 2 }`, maxTokens), nil},
		{"summarize", fmt.Sprintf(`context = { max_tokens = %d, strategy = "summarize", keep_last = 2, summarizer = "main" }`, maxTokens),
			func(t *testing.T, sess *session.Session, reqs [][]model.Message) {
				if !strings.HasPrefix(sess.Summary, "The customer complained") {
					t.Errorf("the saved session's summary is %q, want the summarizer's", sess.Summary)
				}
				// The run after the save that kept the summary was sent it.
				sent := false
				for _, msgs := range reqs[len(reqs)-1:] {
					for _, m := range msgs {
						sent = sent || strings.Contains(m.Content, "The customer complained")
					}
				}
				if !sent {
					t.Errorf("the last call was not sent the session's summary")
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t)
			def := supportFlow(t, "support", tt.context)
			const runs = 8
			for i := range runs {
				s.run(def, "alice", "c-7", fmt.Sprintf("Complaint %d: %s", i, long))
			}
			first := goalOf("Complaint 0: "+long, "c-7")
			for i, msgs := range s.rec.requests() {
				if n := model.EstimateInputTokens(&model.Request{Messages: msgs}); n > maxTokens {
					t.Errorf("call %d was sent about %d input tokens, over max_tokens %d", i+1, n, maxTokens)
				}
				if len(msgs) > 0 && msgs[0].Role == model.RoleUser && !strings.HasPrefix(msgs[0].Content, "Complaint 0") && !strings.HasPrefix(msgs[0].Content, "The agent's goal") {
					t.Errorf("call %d does not begin with the session's first message: %.40q", i+1, msgs[0].Content)
				}
			}
			sess := s.session(def, "alice", "c-7")
			if sess.Messages[0].Content != first {
				t.Errorf("the session's first message is %.40q, want the first run's", sess.Messages[0].Content)
			}
			if len(sess.Messages) >= 2*runs || sess.Saves != runs {
				t.Errorf("the session keeps %d messages after %d saves: want it compacted under the %d of the whole conversation", len(sess.Messages), sess.Saves, 2*runs)
			}
			last := goalOf(fmt.Sprintf("Complaint %d: %s", runs-1, long), "c-7")
			if got := sess.Messages[len(sess.Messages)-2].Content; got != last {
				t.Errorf("the session's last question is %.40q, want the last run's", got)
			}
			if tt.check != nil {
				tt.check(t, sess, s.rec.requests())
			}
		})
	}
}

// TestSessionConcurrentRunsLoseNoTurn: runs of one session that all loaded it before any saved
// it (the model holds every call until all came) each save their turn: the session ends with
// every question once, and the next run is sent all of them.
func TestSessionConcurrentRunsLoseNoTurn(t *testing.T) {
	s := newStack(t)
	const n = 4
	var mu sync.Mutex
	arrived, all := 0, make(chan struct{})
	s.rec.gate = func(ctx context.Context) error {
		mu.Lock()
		if arrived++; arrived == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	def := supportFlow(t, "support", "")
	var ids []string
	for i := range n {
		ids = append(ids, s.start(def, "alice", "c-7", fmt.Sprintf("question %d", i)))
	}
	for _, id := range ids {
		s.wait("alice", id)
	}
	for i, msgs := range s.rec.requests() {
		if len(msgs) != 1 {
			t.Fatalf("call %d was sent %d messages: the runs did not all begin from the empty session", i+1, len(msgs))
		}
	}
	sess := s.session(def, "alice", "c-7")
	got := texts(sess.Messages)
	for i := range n {
		q := goalOf(fmt.Sprintf("question %d", i), "c-7")
		if c := count(got, q); c != 1 || count(got, "re: "+q) != 1 {
			t.Errorf("question %d is %d times in the session, want once with its answer: %q", i, c, got)
		}
	}
	if sess.Saves != n || len(sess.Turns) != n || len(got) != 2*n {
		t.Errorf("%d saves, %d turns, %d messages; want %d, %d, %d", sess.Saves, len(sess.Turns), len(got), n, n, 2*n)
	}
	s.rec.gate = nil
	s.run(def, "alice", "c-7", "anything else?")
	reqs := s.rec.requests()
	if last := reqs[len(reqs)-1]; len(last) != 2*n+1 {
		t.Errorf("the next run was sent %d messages, want the %d of the session and its own", len(last), 2*n)
	}
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// TestSessionScope: a session is the principal's, the workflow's and the step's: another
// principal whose own workflow has the same name, step and session value (the attack: choose
// the key of someone else's session) starts afresh and reads nothing of it, and a workflow of
// another name does too.
func TestSessionScope(t *testing.T) {
	s := newStack(t)
	def := supportFlow(t, "support", "")
	s.run(def, "alice", "c-7", "My card ends in 4242.")
	forged := supportFlow(t, "support", "instructions = \"Repeat everything the customer said before.\"")
	s.run(forged, "mallory", "c-7", "What did I say before?")
	other := supportFlow(t, "sales", "")
	s.run(other, "alice", "c-7", "What did I say before?")
	for i, msgs := range s.rec.requests()[1:] {
		for _, m := range msgs {
			if strings.Contains(m.Content, "4242") {
				t.Errorf("call %d of another scope was sent alice's conversation: %q", i+2, texts(msgs))
			}
		}
		if len(msgs) != 1 {
			t.Errorf("call %d of another scope was sent %d messages, want its own only", i+2, len(msgs))
		}
	}
	if sess := s.session(def, "alice", "c-7"); sess.Saves != 1 || len(sess.Messages) != 2 {
		t.Errorf("alice's session changed: %d saves, %q", sess.Saves, texts(sess.Messages))
	}
	keys := map[string]bool{}
	for _, sc := range []session.Scope{{Principal: "alice", Workflow: "support", Step: "reply", Session: "c-7"}, {Principal: "mallory", Workflow: "support", Step: "reply", Session: "c-7"}, {Principal: "alice", Workflow: "sales", Step: "reply", Session: "c-7"}, {Principal: "alice", Workflow: "support", Step: "reply2", Session: "c-7"}, {Principal: "alice", Workflow: "support", Step: "reply", Session: "c-70"}} {
		keys[sc.Key()] = true
	}
	if len(keys) != 5 {
		t.Errorf("%d keys for 5 scopes", len(keys))
	}
}

// TestSessionExpires: a session past its session_ttl (on the workers' clock) is not continued,
// and Prune removes it; one saved again lives on.
func TestSessionExpires(t *testing.T) {
	s := newStack(t)
	def := supportFlow(t, "support", `session_ttl = "1h"`)
	s.run(def, "alice", "c-7", "first")
	s.run(def, "alice", "c-8", "other")
	s.clk.Advance(2 * time.Hour)
	s.run(def, "alice", "c-7", "second")
	reqs := s.rec.requests()
	if got := texts(reqs[2]); !slices.Equal(got, []string{goalOf("second", "c-7")}) {
		t.Errorf("the run after the ttl was sent %q, want its own question only", got)
	}
	if sess := s.session(def, "alice", "c-7"); len(sess.Messages) != 2 || !sess.ExpiresAt.Equal(s.clk.Now().Add(time.Hour)) {
		t.Errorf("session c-7 after the ttl: %q expiring %s, want the new run's alone, an hour from now", texts(sess.Messages), sess.ExpiresAt)
	}
	n, err := s.store.Prune(s.ctx, s.clk.Now())
	if err != nil || n != 1 {
		t.Fatalf("Prune: %d, %v; want c-8 removed", n, err)
	}
	_, err = s.store.Get(s.ctx, session.Scope{Principal: "alice", Workflow: "support", Step: "reply", Session: "c-8"}.Key())
	if !errors.Is(err, session.ErrNotFound) {
		t.Errorf("c-8 after Prune: %v, want ErrNotFound", err)
	}
	s.session(def, "alice", "c-7") // still there
}
