package session

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/reins-run/reins/model"
)

// Scope names a session: the principal who started the runs (empty where nobody
// authenticates), the workflow's name, the step, and the step's rendered session. Two runs share
// a session only when all four are the same, so a workflow another principal submits under the
// same name, with the same step and value, never reads this one's.
type Scope struct {
	Principal string `json:"principal,omitempty"`
	Workflow  string `json:"workflow"`
	Step      string `json:"step"`
	Session   string `json:"session"`
}

// Key is the session's key in the bucket: 32 hex digits of the SHA-256 of the scope's four
// parts, so that any rendered value makes a valid key and one part cannot run into another.
func (s Scope) Key() string {
	data, _ := json.Marshal([]string{s.Principal, s.Workflow, s.Step, s.Session}) // strings only: never fails
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// MaxTurns is how many turns a session remembers having saved (the latest): a step that saves
// again (its run went on after a human's answer, or an attempt runs again after a crash) finds
// its turn among them and appends only what it did not save.
const MaxTurns = 64

// Turn is one step activation's part of a session: its id (the loop run's, RUN/STEP[#ITEM][/ACTIVATION])
// and how many messages of its conversation were saved.
type Turn struct {
	ID       string `json:"id"`
	Messages int    `json:"messages"`
}

// Session is a session's record. Messages is the conversation as the context policy still
// sends it: the first message of the session (kept like a run's goal), then the messages after
// what the policy left out, whose summary is Summary; tool results before TruncatedBefore are
// sent shortened (truncate_tool_results).
type Session struct {
	Scope
	Key             string          `json:"key"`
	Messages        []model.Message `json:"messages,omitempty"`
	Summary         string          `json:"summary,omitempty"`
	TruncatedBefore int             `json:"truncated_before,omitempty"`
	// Count is len(Messages), kept in the head so that a list need not read chunks.
	Count int    `json:"count"`
	Turns []Turn `json:"turns"`
	// Saves counts the saves since the session was created.
	Saves     int       `json:"saves"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// A head whose messages did not fit travels without them: Chunks keys KEY.GEN.0 … hold
	// their JSON, whose SHA-256 is Digest.
	Chunks int    `json:"chunks,omitempty"`
	Gen    string `json:"gen,omitempty"`
	Digest string `json:"digest,omitempty"`
	// Bytes is the size of the record's JSON with its messages.
	Bytes int `json:"bytes"`

	// Revision is the head's revision in the bucket, for a compare-and-set.
	Revision uint64 `json:"-"`
}

// Expired reports whether the session is past its expiry at now: it is then as if there were
// none (a step starts afresh, list and show leave it out) until the bucket's max age removes it.
func (s *Session) Expired(now time.Time) bool {
	return !s.ExpiresAt.IsZero() && !now.Before(s.ExpiresAt)
}

// Mark is what a step's run took from the session when it began: the revision it read (0:
// none, or one expired) and how many of the session's messages come before the run's own.
type Mark struct {
	Revision uint64 `json:"revision,omitempty"`
	Prior    int    `json:"prior"`
}

// Conversation is what a step's loop ended with, as Save needs it: its turn id, its goal (the
// turn's user message), its whole conversation (the session's Prior messages first; those the
// context policy left out may be placeholders: they are not read), where the policy's window
// begins (>= 1: message 0 is always sent), and the policy's summary and truncation.
type Conversation struct {
	TurnID          string
	Goal            string
	Messages        []model.Message
	Window          int
	Summary         string
	TruncatedBefore int
}

// Continue returns the loop's starting conversation for a run that continues s (nil: a new
// session) with the user message goal: s's messages, then goal; and the mark to save with.
func Continue(s *Session, goal string) ([]model.Message, Mark) {
	if s == nil {
		return []model.Message{{Role: model.RoleUser, Content: goal}}, Mark{}
	}
	msgs := make([]model.Message, 0, len(s.Messages)+1)
	msgs = append(msgs, s.Messages...)
	msgs = append(msgs, model.Message{Role: model.RoleUser, Content: goal})
	return msgs, Mark{Revision: s.Revision, Prior: len(s.Messages)}
}

// whole is the session after c when nobody saved since its run began from prev (nil: none, or
// one that expired): message 0 and the window, the summary, prev's turns and c's.
func whole(sc Scope, prev *Session, m Mark, c *Conversation) *Session {
	w := max(c.Window, 1)
	next := &Session{Scope: sc, Key: sc.Key(), Summary: c.Summary}
	if len(c.Messages) == 0 { // no conversation: the goal alone
		c = &Conversation{TurnID: c.TurnID, Goal: c.Goal, Messages: []model.Message{{Role: model.RoleUser, Content: c.Goal}}}
	}
	next.Messages = make([]model.Message, 0, 1+len(c.Messages)-min(w, len(c.Messages)))
	next.Messages = append(next.Messages, c.Messages[0])
	if w < len(c.Messages) {
		next.Messages = append(next.Messages, c.Messages[w:]...)
	}
	if tb := c.TruncatedBefore - (w - 1); tb > 1 {
		next.TruncatedBefore = tb
	}
	if prev != nil && m.Prior > 0 {
		next.Turns, next.Saves, next.CreatedAt = slices.Clone(prev.Turns), prev.Saves, prev.CreatedAt
	}
	next.addTurn(c.TurnID, max(len(c.Messages)-m.Prior, 1))
	return next
}

// appended is cur (nil: none, or one that expired), which another run saved since c's run
// began, with c's turn appended: its user message, then its messages from the window on; or
// only those after what an earlier save of the same turn saved. It reports false when the
// turn is saved already.
func appended(sc Scope, cur *Session, m Mark, c *Conversation) (*Session, bool) {
	next := &Session{Scope: sc, Key: sc.Key()}
	if cur != nil {
		next.Messages, next.Summary, next.TruncatedBefore = slices.Clone(cur.Messages), cur.Summary, cur.TruncatedBefore
		next.Turns, next.Saves, next.CreatedAt = slices.Clone(cur.Turns), cur.Saves, cur.CreatedAt
	}
	n := max(len(c.Messages)-m.Prior, 1)
	done := next.turn(c.TurnID)
	if done >= n {
		return nil, false
	}
	from := m.Prior + done
	if done == 0 {
		next.Messages = append(next.Messages, model.Message{Role: model.RoleUser, Content: c.Goal})
		from++
	}
	from = max(from, c.Window)
	if from < len(c.Messages) {
		next.Messages = append(next.Messages, c.Messages[from:]...)
	}
	next.addTurn(c.TurnID, n)
	return next, true
}

// turn is how many messages of turn id s has saved (0: none).
func (s *Session) turn(id string) int {
	for _, t := range s.Turns {
		if t.ID == id {
			return t.Messages
		}
	}
	return 0
}

// addTurn records that turn id saved n messages, the latest MaxTurns kept.
func (s *Session) addTurn(id string, n int) {
	s.Turns = slices.DeleteFunc(s.Turns, func(t Turn) bool { return t.ID == id })
	s.Turns = append(s.Turns, Turn{ID: id, Messages: n})
	if len(s.Turns) > MaxTurns {
		s.Turns = slices.Delete(s.Turns, 0, len(s.Turns)-MaxTurns)
	}
}
