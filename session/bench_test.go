package session_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/session"
)

// BenchmarkSessionSave: what a step with a session adds to a run, on an embedded NATS server:
// reading the session when the step starts and saving its turn when it completes (a Get and a
// Save, which reads the head again for its compare-and-set), for sessions of a few short
// messages, of many, and of one kept in chunks. Each save replaces the session with the same
// number of messages (a context policy's window), so the size stays put.
func BenchmarkSessionSave(b *testing.B) {
	for _, bc := range []struct {
		name           string
		messages, size int
	}{
		{"10x200B", 10, 200},
		{"200x200B", 200, 200},
		{"40x16KB-chunked", 40, 16 << 10},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx, st, _ := openStore(b)
			sc := session.Scope{Principal: "alice", Workflow: "support", Step: "reply", Session: "c-" + bc.name}
			text := strings.Repeat("x", bc.size)
			msgs := make([]model.Message, bc.messages)
			for i := range msgs {
				msgs[i] = model.Message{Role: model.RoleAssistant, Content: text}
			}
			c := &session.Conversation{TurnID: "r0/reply", Goal: "q", Messages: msgs, Window: 1}
			if _, err := st.Save(ctx, sc, session.Mark{}, c, t0, time.Hour); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				cur, err := st.Get(ctx, sc.Key())
				if err != nil {
					b.Fatal(err)
				}
				// The run's conversation: the session's, its question and answer; the window
				// leaves out the two oldest so that the session keeps its size.
				conv := append(append([]model.Message{}, cur.Messages...), model.Message{Role: model.RoleUser, Content: "q"}, model.Message{Role: model.RoleAssistant, Content: text})
				c := &session.Conversation{TurnID: "r" + strconv.Itoa(i+1) + "/reply", Goal: "q", Messages: conv, Window: 3}
				if _, err := st.Save(ctx, sc, session.Mark{Revision: cur.Revision, Prior: len(cur.Messages)}, c, t0, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
