package builtin_test

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/protocol"
)

// deltaSink collects the deltas the handlers publish.
type deltaSink struct {
	mu sync.Mutex
	ds []protocol.Delta
}

func (s *deltaSink) add(d protocol.Delta) { s.mu.Lock(); s.ds = append(s.ds, d); s.mu.Unlock() }

func (s *deltaSink) text(turn int) string {
	var b strings.Builder
	for _, d := range s.ds {
		if d.Turn == turn {
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

// TestLLMStreams: an llm step with stream = true publishes its reply in pieces that make the
// reply, a repair's in a turn of its own; the answer, usage and records are those of the same
// step without stream; without stream (or without Deltas) nothing is published.
func TestLLMStreams(t *testing.T) {
	script := `[{ text = "Accept." }, { text = '{"verdict": "accept"}' }]`
	run := func(stream bool, sink *deltaSink) *fakeTask {
		keys := verdictSchema
		if stream {
			keys += "\nstream = true"
		}
		b, hash := bundleOf(t, llmWorkflow(script, keys), "")
		cfg := builtin.Config{}
		if sink != nil {
			cfg.Deltas = sink.add
		}
		ft := newTask(b, hash, "write", 1, "null")
		if err := newHandlers(t, cfg).LLM(ft); err != nil {
			t.Fatal(err)
		}
		return ft
	}
	var on, off deltaSink
	streamed, plain := run(true, &on), run(false, &off)
	if len(off.ds) != 0 {
		t.Errorf("a step without stream published %d deltas", len(off.ds))
	}
	if streamed.answer != "complete" || string(streamed.output) != string(plain.output) || streamed.usage != plain.usage || !reflect.DeepEqual(streamed.records, plain.records) {
		t.Errorf("streamed: %s %s %+v, want as without stream: %s %s %+v", streamed.answer, streamed.output, streamed.usage, plain.answer, plain.output, plain.usage)
	}
	if got := on.text(1); got != "Accept." {
		t.Errorf("turn 1 streamed %q, want the first reply", got)
	}
	if got := on.text(2); got != `{"verdict": "accept"}` {
		t.Errorf("turn 2 streamed %q, want the repaired reply", got)
	}
	for _, d := range on.ds {
		if d.RunID != "run1" || d.Step != "write" || d.Iteration != 1 {
			t.Fatalf("delta %+v, want run1, step write, iteration 1", d)
		}
	}
	if len(on.ds) < 3 {
		t.Errorf("%d deltas, want the replies in pieces", len(on.ds))
	}
	run(true, nil) // no Deltas: streams nowhere, and does not fail
}

// TestAgentStreams: an agent step with stream = true publishes each turn's reply (text and
// tool calls) as it comes; the step's answers and records are those without stream.
func TestAgentStreams(t *testing.T) {
	sc := script(readOrder, answer)
	run := func(stream bool, sink *deltaSink) []*fakeTask {
		src := refundWorkflow(sc, allTools, noRefunds, noBudget)
		if stream {
			src += "stream = true\n"
		}
		b, hash := bundleOf(t, src, "")
		cfg := builtin.Config{Deltas: sink.add}
		return drive(t, newHandlers(t, cfg), b, hash, `{"order_id":"O-104"}`)
	}
	var on, off deltaSink
	streamed, plain := run(true, &on), run(false, &off)
	if len(off.ds) != 0 {
		t.Errorf("a step without stream published %d deltas", len(off.ds))
	}
	if len(streamed) != len(plain) {
		t.Fatalf("%d iterations streamed, %d without", len(streamed), len(plain))
	}
	for i := range streamed {
		s, p := streamed[i], plain[i]
		if s.answer != p.answer || string(s.output) != string(p.output) || string(s.saved) != string(p.saved) || !reflect.DeepEqual(s.records, p.records) {
			t.Errorf("iteration %d differs when streamed: %s %s, want %s %s", i+1, s.answer, s.output, p.answer, p.output)
		}
	}
	var call *protocol.Delta
	for i, d := range on.ds {
		if d.CallName != "" {
			call = &on.ds[i]
		}
	}
	if call == nil || call.CallName != "read_order" || call.Iteration != 1 || call.Step != "investigate" {
		t.Errorf("the tool call's delta is %+v, want read_order in iteration 1", call)
	}
	if got, want := on.text(2), "Refund: the order arrived 4 days late."; got != want {
		t.Errorf("turn 2 streamed %q, want %q (deltas %+v)", got, want, on.ds)
	}
}
