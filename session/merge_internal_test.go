package session

import (
	"strconv"
	"testing"

	"github.com/reins-run/reins/model"
)

// FuzzMerge: whatever a run's conversation, mark and window, and whatever the session holds,
// whole and appended never fail, keep the turn once, and saving the same turn again appends
// nothing.
func FuzzMerge(f *testing.F) {
	f.Add(3, 0, 1, 2, 1, 0)
	f.Add(9, 4, 6, 1, 3, 2)
	f.Add(1, 0, 0, 0, 0, 0)
	f.Add(5, 2, 9, 7, 0, 64)
	f.Fuzz(func(t *testing.T, n, prior, window, cur, tb, turns int) {
		n, prior, cur, turns = abs(n)%64, abs(prior)%64, abs(cur)%64, abs(turns)%80
		prior = min(prior, max(n-1, 0))
		msgs := make([]model.Message, n)
		for i := range msgs {
			msgs[i] = model.Message{Role: model.RoleAssistant, Content: strconv.Itoa(i)}
		}
		c := &Conversation{TurnID: "r/s", Goal: "goal", Messages: msgs, Window: window, TruncatedBefore: tb}
		sc := Scope{Workflow: "w", Step: "s", Session: "k"}
		m := Mark{Prior: prior, Revision: 1}
		w := whole(sc, nil, m, c)
		if len(w.Messages) == 0 || w.turn("r/s") == 0 {
			t.Fatalf("whole: %d messages, turn %d", len(w.Messages), w.turn("r/s"))
		}
		other := &Session{Messages: make([]model.Message, cur)}
		for i := range turns {
			other.addTurn("t"+strconv.Itoa(i), 1)
		}
		a, ok := appended(sc, other, m, c)
		if !ok || len(a.Messages) <= cur || len(a.Turns) > MaxTurns || a.turn("r/s") == 0 {
			t.Fatalf("appended: ok %t, %d messages over %d, %d turns", ok, len(a.Messages), cur, len(a.Turns))
		}
		if again, ok := appended(sc, a, m, c); ok {
			t.Fatalf("the same turn appended twice: %d messages", len(again.Messages))
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
