package builtin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
)

// The agent's checkpoint grows by what an iteration added, not by the whole conversation: each
// iteration appends one stateDelta (TaskContext.AppendCheckpoint), so the bytes written per
// iteration stay flat however long the run, and no write nears the message limit because the
// history did. The checkpoint is the array of the deltas; DecodeAgentState folds it. A state set
// whole (an object: what earlier versions wrote, or a fork of such a run) is read as it is and
// followed by an array.

// stateDelta is one iteration's write: the conversation from message From on, and the rest of
// the loop's state. A context policy's summary (State.Context.Summary), which may be long, is
// written when it changes: SameSummary says it is the previous write's.
type stateDelta struct {
	From        int             `json:"from"`
	Messages    []model.Message `json:"messages"`
	SameSummary bool            `json:"same_summary,omitempty"`
	State       loop.State      `json:"state"` // its Messages empty
}

// DecodeAgentState reads the checkpoint of an agent step (an array of deltas, or a state set
// whole): the loop's state, nil when there is none.
func DecodeAgentState(raw json.RawMessage) (*loop.State, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] != '[' {
		st := new(loop.State)
		if err := json.Unmarshal(raw, st); err != nil {
			return nil, err
		}
		return st, nil
	}
	var deltas []stateDelta
	if err := json.Unmarshal(raw, &deltas); err != nil {
		return nil, err
	}
	if len(deltas) == 0 {
		return nil, nil
	}
	var msgs []model.Message
	summary := ""
	for i, d := range deltas {
		if d.From < 0 || d.From > len(msgs) {
			return nil, fmt.Errorf("write %d continues the conversation at message %d, but it has %d", i, d.From, len(msgs))
		}
		msgs = append(msgs[:d.From], d.Messages...)
		if !d.SameSummary {
			summary = d.State.Context.Summary
		}
	}
	st := deltas[len(deltas)-1].State
	st.Messages, st.Context.Summary = msgs, summary
	return &st, nil
}

// stateBase is what the checkpoint held before an iteration: whether it was an array of deltas
// (or nothing), and the conversation's length and last message then, to find what the
// iteration added.
type stateBase struct {
	whole   bool // a state set whole: the next write sets an array
	n       int
	last    model.Message
	summary string
}

func baseOf(raw json.RawMessage, st *loop.State) stateBase {
	raw = bytes.TrimSpace(raw)
	b := stateBase{whole: len(raw) > 0 && raw[0] == '{'}
	if st != nil && len(st.Messages) > 0 {
		b.n, b.last = len(st.Messages), st.Messages[len(st.Messages)-1]
	}
	if st != nil {
		b.summary = st.Context.Summary
	}
	return b
}

// delta is what to write after an iteration that led to st: the messages it appended, or the
// whole conversation when it changed earlier ones.
func (b stateBase) delta(st *loop.State) stateDelta {
	from := 0
	if n := b.n; n > 0 && len(st.Messages) >= n && reflect.DeepEqual(st.Messages[n-1], b.last) {
		from = n
	}
	d := stateDelta{From: from, Messages: st.Messages[from:], State: *st}
	d.State.Messages = nil
	if st.Context.Summary != "" && st.Context.Summary == b.summary {
		d.SameSummary, d.State.Context.Summary = true, ""
	}
	return d
}

// write checkpoints the iteration that led to st.
func (b stateBase) write(t Task, st *loop.State) error {
	if b.whole {
		d := b.delta(st)
		d.From, d.Messages = 0, st.Messages
		d.SameSummary, d.State.Context.Summary = false, st.Context.Summary
		return t.Checkpoint([]stateDelta{d})
	}
	return t.AppendCheckpoint(b.delta(st))
}
