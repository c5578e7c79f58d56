package builtin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/session"
)

// The agent's checkpoint grows by what an iteration added, not by the whole conversation: each
// iteration appends one stateDelta (TaskContext.AppendCheckpoint), so the bytes written per
// iteration stay flat however long the run, and no write nears the message limit because the
// history did. The checkpoint is the array of the deltas; DecodeAgentState folds it. A state set
// whole (an object: what earlier versions wrote, or a fork of such a run) is read as it is and
// followed by an array.

// stateDelta is one iteration's write: the conversation from message From on, and the rest of
// the loop's state.
//
// Three parts of the state grow with the history, and a write carries only what changed of
// them: the messages; State.CallProposed (a count per distinct call proposed), whose changed
// entries are in Proposed (the State of a write has none; one of earlier versions carries the
// whole map, which folding then starts from); and a context policy's summary
// (State.Context.Summary), written when it changes (SameSummary says it is the previous
// write's). A message whose text is longer than keepMin (a tool's large result) is written as a
// reference to the text kept with the run's values (Task.KeepText): the checkpoint holds what
// the next call needs to find it, and loading reads the texts the model will be sent, not those
// the context policy left behind.
//
// A compaction (Window > 0) is a write that replaces the checkpoint (Task.Checkpoint) instead of
// extending it: the goal and the messages from Window on (what the context policy still sends),
// the whole of CallProposed (in State), the summary, and From as a delta's (where the writing
// iteration's messages begin). Folding it gives the conversation with the messages between the
// goal and Window as empty placeholders: no call reads them again (the window only moves
// forward), and they stay in the bucket's earlier keys, which nothing purges (a fork from an
// earlier iteration folds those). See compaction.
type stateDelta struct {
	From        int             `json:"from"`
	Window      int             `json:"window,omitempty"`
	Messages    []model.Message `json:"messages"`
	Proposed    map[uint64]int  `json:"proposed,omitempty"`
	SameSummary bool            `json:"same_summary,omitempty"`
	State       loop.State      `json:"state"` // its Messages empty
	// Session is what the loop took from its step's session when it began (a step with a
	// session; every write carries it, a compaction too): what the save at its end needs.
	Session *session.Mark `json:"session,omitempty"`
}

// keepMin is the size from which a message's text is kept by reference.
const keepMin = 8 << 10

// isKept reports whether a message's text is a reference (Task.KeepText): a text that starts
// with NUL, which every text written inline never does (see keep).
func isKept(text string) bool { return strings.HasPrefix(text, "\x00") }

// DecodeAgentState reads the checkpoint of an agent step (an array of deltas, or a state set
// whole): the loop's state, nil when there is none.
func DecodeAgentState(raw json.RawMessage) (*loop.State, error) {
	st, _, _, err := decodeAgentState(raw)
	return st, err
}

// decodeAgentState is DecodeAgentState that also says where the last write's messages begin
// (0 for a state set whole): the messages of the iteration that wrote it; and the session mark
// the writes carry (nil: a step without a session).
func decodeAgentState(raw json.RawMessage) (*loop.State, int, *session.Mark, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, 0, nil, nil
	}
	if raw[0] != '[' {
		st := new(loop.State)
		if err := json.Unmarshal(raw, st); err != nil {
			return nil, 0, nil, err
		}
		return st, 0, nil, nil
	}
	var deltas []stateDelta
	if err := json.Unmarshal(raw, &deltas); err != nil {
		return nil, 0, nil, err
	}
	if len(deltas) == 0 {
		return nil, 0, nil, nil
	}
	f := folded{proposed: map[uint64]int{}}
	if err := f.add(deltas); err != nil {
		return nil, 0, nil, err
	}
	return f.state(), f.from, f.session, nil
}

// folded is the fold of an agent checkpoint's writes, as far as it went: the conversation, the
// proposed calls, the summary, and the last write's state and first message.
type folded struct {
	msgs     []model.Message
	proposed map[uint64]int
	summary  string
	last     loop.State
	from     int
	n        int // writes folded
	session  *session.Mark
}

// foldedOf is the fold a state is the end of, to fold later writes onto it.
func foldedOf(st *loop.State, from int) folded {
	return folded{msgs: st.Messages, proposed: st.CallProposed, summary: st.Context.Summary, last: *st, from: from}
}

// add folds deltas, the writes after those folded so far.
func (f *folded) add(deltas []stateDelta) error {
	for _, d := range deltas {
		if d.Window > 0 {
			if err := f.compacted(d); err != nil {
				return err
			}
			continue
		}
		if d.From < 0 || d.From > len(f.msgs) {
			return fmt.Errorf("write %d continues the conversation at message %d, but it has %d", f.n, d.From, len(f.msgs))
		}
		f.msgs = append(f.msgs[:d.From], d.Messages...)
		if d.State.CallProposed != nil { // a write of an earlier version: the whole map
			f.proposed = maps.Clone(d.State.CallProposed)
		}
		maps.Copy(f.proposed, d.Proposed)
		if !d.SameSummary {
			f.summary = d.State.Context.Summary
		}
		f.last, f.from = d.State, d.From
		if d.Session != nil {
			f.session = d.Session
		}
		f.n++
	}
	return nil
}

// compacted starts the fold again from compaction d.
func (f *folded) compacted(d stateDelta) error {
	if len(d.Messages) == 0 || d.From < d.Window {
		return fmt.Errorf("write %d is a compaction from message %d with %d messages, and says its iteration began at message %d", f.n, d.Window, len(d.Messages), d.From)
	}
	f.msgs = make([]model.Message, d.Window, d.Window+len(d.Messages)-1)
	f.msgs[0] = d.Messages[0]
	f.msgs = append(f.msgs, d.Messages[1:]...)
	if d.From > len(f.msgs) {
		return fmt.Errorf("write %d is a compaction of %d messages, and says its iteration began at message %d", f.n, len(f.msgs), d.From)
	}
	f.proposed = maps.Clone(d.State.CallProposed)
	if f.proposed == nil {
		f.proposed = map[uint64]int{}
	}
	f.summary = d.State.Context.Summary
	f.last, f.from = d.State, d.From
	f.last.CallProposed = nil
	if d.Session != nil {
		f.session = d.Session
	}
	f.n++
	return nil
}

// state is the loop's state the fold ends with.
func (f *folded) state() *loop.State {
	st := f.last
	st.Messages, st.CallProposed, st.Context.Summary = f.msgs, f.proposed, f.summary
	return &st
}

// stateBase is what the checkpoint held before an iteration: whether it was an array of deltas
// (or nothing), and the conversation's length and last message then, to find what the
// iteration added.
type stateBase struct {
	whole bool // a state set whole: the next write sets an array
	n     int
	last  model.Message
	// from is where the last write's messages begin: those of the iteration that wrote it.
	from int
	// refs are the messages left as references (before the context's window); kept the
	// references of the messages whose texts the state holds whole (read back, or written by
	// reference), by index. Neither is nil once baseOf made the base.
	refs    map[int]bool
	kept    map[int]string
	summary string
	// size is the checkpoint's length in bytes before the iteration: what was written since
	// the last compaction (see compaction).
	size int
	// session is the mark of the step's session, written with every write (nil: none).
	session *session.Mark
}

// baseOf is what st, loaded from raw, holds before the iteration (st's kept texts read back).
func baseOf(raw json.RawMessage, st *loop.State, from int) stateBase {
	raw = bytes.TrimSpace(raw)
	b := stateBase{whole: len(raw) > 0 && raw[0] == '{', from: from, refs: map[int]bool{}, kept: map[int]string{}, size: len(raw)}
	if st != nil && len(st.Messages) > 0 {
		b.n, b.last = len(st.Messages), st.Messages[len(st.Messages)-1]
	}
	if st != nil {
		b.summary = st.Context.Summary
	}
	return b
}

// delta is what to write after an iteration that led to st: the messages it appended, or the
// whole conversation when it changed earlier ones; proposed, the entries of CallProposed it
// changed (loop.Run.ProposedChanged); the summary when it changed.
func (b stateBase) delta(st *loop.State, proposed map[uint64]int) stateDelta {
	from := 0
	if n := b.n; n > 0 && len(st.Messages) >= n && reflect.DeepEqual(st.Messages[n-1], b.last) {
		from = n
	}
	d := stateDelta{From: from, Messages: st.Messages[from:], Proposed: proposed, State: *st, Session: b.session}
	d.State.Messages, d.State.CallProposed = nil, nil
	if st.Context.Summary != "" && st.Context.Summary == b.summary {
		d.SameSummary, d.State.Context.Summary = true, ""
	}
	return d
}

// write checkpoints the iteration that led to st (proposed as delta takes it), its large texts
// kept by reference, and returns where the write's messages begin. With compact (a step with a
// context policy, on a task that is not a human's resume) the write may be a compaction.
func (b stateBase) write(t Task, st *loop.State, proposed map[uint64]int, compact bool) (int, error) {
	d := b.delta(st, proposed)
	if b.whole {
		d.From, d.Messages, d.Proposed = 0, st.Messages, st.CallProposed
	}
	msgs, err := b.keep(t, d.Messages, d.From)
	if err != nil {
		return 0, err
	}
	d.Messages = msgs
	if b.whole {
		d.SameSummary, d.State.Context.Summary = false, st.Context.Summary
		return 0, t.Checkpoint([]stateDelta{d})
	}
	if compact {
		if c, ok := b.compaction(st, d); ok {
			return d.From, t.Checkpoint(c)
		}
	}
	return d.From, t.AppendCheckpoint(d)
}

// compactEvery bounds what compactions cost: one is written when it is at most 1/compactEvery of
// what was written since the previous one (the checkpoint's length), so that they add at most
// 1/(compactEvery-1) to the bytes the deltas write (20% for 6), and loading the checkpoint
// after the worker changed decodes at most about compactEvery times a compaction's size
// however long the run. A variable for the tests.
var compactEvery = 6

// compaction returns the checkpoint to set instead of appending d, the delta of the iteration
// that led to st, when a compaction is due (compactEvery): an array of the one compaction,
// encoded (its size decides), with the goal and the window's messages, the texts kept by
// reference that the iteration read back (b.kept) or wrote (d) put back as references.
func (b stateBase) compaction(st *loop.State, d stateDelta) (json.RawMessage, bool) {
	w := window(st)
	if w < 2 || d.From < w || b.size == 0 || b.size < compactEvery*b.estimate(st, w) {
		return nil, false
	}
	c := stateDelta{From: d.From, Window: w, State: *st, Session: b.session}
	c.Messages = make([]model.Message, 0, 1+len(st.Messages)-w)
	c.Messages = append(c.Messages, b.message(st, 0))
	for i := w; i < d.From; i++ {
		c.Messages = append(c.Messages, b.message(st, i))
	}
	c.Messages = append(c.Messages, d.Messages...)
	c.State.Messages = nil
	data, err := json.Marshal([]stateDelta{c})
	if err != nil || b.size < compactEvery*len(data) {
		return nil, false
	}
	return data, true
}

// message is st's message i as the checkpoint holds it: its text by reference when it was kept.
func (b stateBase) message(st *loop.State, i int) model.Message {
	m := st.Messages[i]
	if ref, ok := b.kept[i]; ok {
		m.Content = ref
	}
	return m
}

// estimate is a lower bound of a compaction's size, to encode one only when it may be due: its
// messages' texts (references for those kept) and the calls counted in CallProposed.
func (b stateBase) estimate(st *loop.State, w int) int {
	n := len(st.Goal) + 16*len(st.CallProposed)
	for i := w; i < len(st.Messages); i++ {
		if ref, ok := b.kept[i]; ok {
			n += len(ref)
		} else if len(st.Messages[i].Content) <= keepMin {
			n += len(st.Messages[i].Content)
		}
	}
	return n
}

// keep returns msgs (the conversation from message from on) with every text longer than
// keepMin, or starting with NUL (which an inline text must not, see isKept), replaced by a
// reference to it (Task.KeepText), but for the messages b left as references; msgs itself when
// there is none.
func (b stateBase) keep(t Task, msgs []model.Message, from int) ([]model.Message, error) {
	var out []model.Message
	for i := range msgs {
		text := msgs[i].Content
		if len(text) <= keepMin && !isKept(text) || b.refs[from+i] {
			continue
		}
		ref, err := t.KeepText(text)
		if err != nil {
			return nil, fmt.Errorf("keep the text of message %d (%d bytes) out of the checkpoint: %w", from+i, len(text), err)
		}
		if out == nil {
			out = slices.Clone(msgs)
		}
		out[i].Content = ref
		b.kept[from+i] = ref
	}
	if out == nil {
		return msgs, nil
	}
	return out, nil
}

// resolve reads back the kept texts of the goal and of the messages from message from on (those
// the model may be sent: the context policy's window), through cache; it notes in b the
// messages it leaves as references (refs) and the references of those it read back (kept).
func resolve(t Task, st *loop.State, from int, cache *textCache, b *stateBase) error {
	for i := range st.Messages {
		m := &st.Messages[i]
		if !isKept(m.Content) {
			continue
		}
		if i > 0 && i < from {
			b.refs[i] = true
			continue
		}
		ref := m.Content
		text, ok := cache.get(ref)
		if !ok {
			var err error
			if text, err = t.ReadText(ref); err != nil {
				return fmt.Errorf("read back the text of message %d: %w", i, err)
			}
			cache.put(ref, text)
		}
		m.Content = text
		b.kept[i] = ref
		delete(b.refs, i)
	}
	return nil
}

// textCache keeps the texts resolve read last, up to max bytes, the oldest out first: an agent
// reads the same recent tool results back every iteration.
type textCache struct {
	mu    sync.Mutex
	max   int
	size  int
	texts map[string]string
	order []string
}

func newTextCache(max int) *textCache { return &textCache{max: max, texts: map[string]string{}} }

func (c *textCache) get(ref string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	text, ok := c.texts[ref]
	return text, ok
}

func (c *textCache) put(ref, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.texts[ref]; ok || len(text) > c.max {
		return
	}
	for c.size+len(text) > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.size -= len(c.texts[old])
		delete(c.texts, old)
	}
	c.texts[ref] = text
	c.order = append(c.order, ref)
	c.size += len(text)
}

// window is the first message after the goal that the context policy still sends.
func window(st *loop.State) int { return max(st.Context.From, 1) }
