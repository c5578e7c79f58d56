package loop

import "github.com/reins-run/reins/model"

// window is the conversation a model call is sent under a context policy: the goal, the summary
// (State.Context.Summary) if any, then the messages from State.Context.From on, the tool results
// before TruncatedBefore shortened. It follows the state without building the whole view again
// at every call: new messages are appended, the goal and summary are moved over the messages
// left out, and tool results are shortened in place; only a new summary, which is rare, builds
// it anew. A run may have thousands of messages; this costs what changed, not the history.
type window struct {
	msgs    []model.Message // header (goal, summary) then body
	tokens  int64           // estimate of msgs
	head    int             // header length
	from    int             // state index of msgs[head]
	n       int             // msgs[head:] is state messages [from, n)
	trunc   int             // TruncatedBefore as applied
	summary string          // Summary as applied
	built   bool
}

// sync brings the window up to date with st.
func (w *window) sync(st *State) {
	v := &st.Context
	if !w.built || v.Summary != w.summary || v.from() < w.from || v.TruncatedBefore < w.trunc || len(st.Messages) < w.n {
		w.rebuild(st)
		return
	}
	w.leaveOut(v.from())
	w.shorten(st, v.TruncatedBefore)
	w.extend(st)
}

// rebuild builds the window from st alone.
func (w *window) rebuild(st *State) {
	v := &st.Context
	clear(w.msgs)
	w.msgs, w.tokens = w.msgs[:0], 0
	if len(st.Messages) > 0 {
		w.push(st.Messages[0])
	}
	if v.Summary != "" {
		w.push(summaryMessage(v.Summary))
	}
	w.head, w.from, w.n, w.trunc, w.summary, w.built = len(w.msgs), v.from(), v.from(), v.TruncatedBefore, v.Summary, true
	w.extend(st)
}

// leaveOut drops the body messages before from, moving the header over them.
func (w *window) leaveOut(from int) {
	if from <= w.from {
		return
	}
	d := min(from, w.n) - w.from
	for i := w.head; i < w.head+d; i++ {
		w.tokens -= estimate(&w.msgs[i])
	}
	copy(w.msgs[d:d+w.head], w.msgs[:w.head])
	clear(w.msgs[:d]) // let the dropped messages' text go
	w.msgs = w.msgs[d:]
	w.from, w.n = from, max(w.n, from)
}

// shorten applies a TruncatedBefore that moved forward to the messages already in the window.
func (w *window) shorten(st *State, trunc int) {
	if trunc <= w.trunc {
		return
	}
	for i := max(w.trunc, w.from); i < min(trunc, w.n); i++ {
		if m := &st.Messages[i]; truncatable(m) {
			k := w.head + i - w.from
			w.tokens -= estimate(&w.msgs[k])
			w.msgs[k] = shortened(*m)
			w.tokens += estimate(&w.msgs[k])
		}
	}
	w.trunc = trunc
}

// extend appends the state's messages the window does not have yet.
func (w *window) extend(st *State) {
	for i := w.n; i < len(st.Messages); i++ {
		w.push(sentMessage(st, i))
	}
	w.n = max(w.n, len(st.Messages))
}

func (w *window) push(m model.Message) {
	w.msgs = append(w.msgs, m)
	w.tokens += estimate(&w.msgs[len(w.msgs)-1])
}
