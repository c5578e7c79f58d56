package loop

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/reins-run/reins/model"
)

// naiveView builds what the window must hold from the state alone, the simple way: the goal,
// the labelled summary, then every message from From on, tool results before TruncatedBefore
// shortened.
func naiveView(st *State) ([]model.Message, int64) {
	v := &st.Context
	out := []model.Message{st.Messages[0]}
	if v.Summary != "" {
		out = append(out, model.Message{Role: model.RoleUser, Content: summaryLabel + v.Summary})
	}
	for i := max(v.From, 1); i < len(st.Messages); i++ {
		m := st.Messages[i]
		if i < v.TruncatedBefore && m.Role == model.RoleTool && len(m.Content) > 2*truncHead {
			m = shortened(m)
		}
		out = append(out, m)
	}
	var tokens int64
	for i := range out {
		tokens += model.EstimateInputTokens(&model.Request{Messages: out[i : i+1]})
	}
	return out, tokens
}

// windowOps drives a state and a window with ops decoded from data, and checks after every op
// that the window equals the naive view. Ops: append a user message, an assistant turn of
// calls with their results (sizes from the data), move From, move TruncatedBefore, set a new
// summary, or start over from a copy of the state through JSON (a resumed run, whose window is
// rebuilt).
func windowOps(t *testing.T, data []byte) {
	st := &State{Messages: []model.Message{{Role: model.RoleUser, Content: "the goal"}}}
	var w window
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := int(data[0])
		data = data[1:]
		return b
	}
	for step := 0; len(data) > 0 && step < 200; step++ {
		v := &st.Context
		switch op := next() % 7; op {
		case 0:
			st.Messages = append(st.Messages, model.Message{Role: model.RoleUser, Content: strings.Repeat("u", next()*7)})
		case 1:
			calls := next()%3 + 1
			turn := model.Message{Role: model.RoleAssistant, Content: strings.Repeat("a", next()%40)}
			for j := range calls {
				turn.Calls = append(turn.Calls, model.ToolCall{ID: fmt.Sprintf("c%d_%d", step, j), Name: "read", Arguments: json.RawMessage(`{"n":1}`)})
			}
			st.Messages = append(st.Messages, turn)
			for j := range calls {
				// Sizes around the truncation threshold, and far over it, with a multi-byte
				// rune where a cut may fall.
				size := next() * 9
				st.Messages = append(st.Messages, model.Message{Role: model.RoleTool, Name: "read", CallID: turn.Calls[j].ID,
					Content: strings.Repeat("é", size/2) + strings.Repeat("r", size%2)})
			}
		case 2:
			v.From = max(v.From, min(max(v.From, 1)+next()%5, len(st.Messages)+next()%2))
		case 3:
			v.TruncatedBefore = max(v.TruncatedBefore, min(v.TruncatedBefore+next()%6, len(st.Messages)+next()%2))
		case 4:
			v.Summary = strings.Repeat("s", next()%50+1)
		case 5:
			data, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			st = new(State)
			if err := json.Unmarshal(data, st); err != nil {
				t.Fatal(err)
			}
			w = window{}
		case 6:
			// A sync with nothing changed must change nothing.
		}
		w.sync(st)
		msgs, tokens := naiveView(st)
		if !reflect.DeepEqual(w.msgs, msgs) || w.tokens != tokens {
			t.Fatalf("step %d: the window (%d messages, %d tokens) differs from the naive view (%d messages, %d tokens)\nwindow %+v\nnaive  %+v",
				step, len(w.msgs), w.tokens, len(msgs), tokens, w.msgs, msgs)
		}
	}
}

// FuzzWindow: the incremental window always equals the naive rebuild.
func FuzzWindow(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 1, 0, 40, 90, 100, 2, 1, 0, 3, 3, 0, 1, 1, 5, 70, 0, 4, 9, 2, 2, 0, 5, 1, 1, 1, 60, 3, 6, 1})
	f.Add([]byte{1, 1, 10, 250, 250, 1, 2, 5, 250, 3, 250, 3, 5, 0, 2, 4, 0, 4, 7, 2, 3, 0, 6, 0, 12})
	f.Add([]byte{0, 9, 0, 200, 2, 1, 1, 4, 20, 2, 4, 1, 0, 1, 0, 0, 0, 30, 2, 4, 0, 3, 5, 0})
	f.Fuzz(func(t *testing.T, data []byte) { windowOps(t, data) })
}

// TestWindowSeeds runs long random-looking op sequences through the equivalence check.
func TestWindowSeeds(t *testing.T) {
	for seed := range 60 {
		data := make([]byte, 300)
		x := uint32(seed*2654435761 + 1)
		for i := range data {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			data[i] = byte(x)
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { windowOps(t, data) })
	}
}
