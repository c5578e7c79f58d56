package builtin_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/clock"
)

// A compaction changes what the checkpoint holds, never what the agent does: a run whose
// checkpoint is compacted answers, records and uses exactly what the same run does without,
// whether each iteration folds the checkpoint whole or takes the state the previous one left;
// the compactions add at most a fifth to the bytes written; and folding a compacted checkpoint
// gives the same state, but for the messages the context policy no longer sends.
func TestAgentCompactionIsEquivalent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n, size  int
		context  string
		compacts bool
	}{
		{"results by reference", 60, 10_000, `{ max_tokens = 9000, keep_last = 2 }`, true},
		{"results inline", 80, 2_000, `{ max_tokens = 3000, keep_last = 1 }`, true},
		{"a wide window", 40, 20_000, `{ max_tokens = 30000, keep_last = 4 }`, true},
		{"summaries", 60, 10_000, `{ max_tokens = 9000, strategy = "summarize", keep_last = 2, summarizer = "cheap" }`, true},
		// Shortened results stay in the window: a compaction would hold the whole conversation.
		{"results truncated", 60, 10_000, `{ max_tokens = 9000, strategy = "truncate_tool_results", keep_last = 2 }`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := checkCompaction(t, tc.n, pagesWorkflowWith(tc.n, tc.size, tc.context)); (n > 0) != tc.compacts {
				t.Errorf("%d compactions", n)
			}
		})
	}
}

// FuzzAgentCompaction: the same, whatever the length of the run, the size of the results and
// the window.
func FuzzAgentCompaction(f *testing.F) {
	f.Add(uint8(30), uint16(10_000), uint16(9000), uint8(2))
	f.Add(uint8(50), uint16(100), uint16(500), uint8(1))
	f.Fuzz(func(t *testing.T, n uint8, size, maxTokens uint16, keepLast uint8) {
		if n < 2 || n > 80 || size > 40_000 || maxTokens < 200 || keepLast > 8 {
			return
		}
		checkCompaction(t, int(n), pagesWorkflow(int(n), int(size), int(maxTokens), int(keepLast)))
	})
}

// checkCompaction runs workflow's agent with compactions, folding whole or keeping the state,
// and without, requires what TestAgentCompactionIsEquivalent says, and returns the number of
// compactions.
func checkCompaction(t *testing.T, n int, workflow string) int {
	b, hash := bundleOf(t, workflow, "")
	clk := clock.NewVirtual(epoch)
	fresh := func() *builtin.Handlers { return newHandlers(t, builtin.Config{Clock: clk}) }
	compacted, compactedSaves := runPages(t, b, hash, n, fresh, false)
	one := newHandlers(t, builtin.Config{Clock: clk})
	cached, cachedSaves := runPages(t, b, hash, n, func() *builtin.Handlers { return one }, true)
	builtin.SetCompactEvery(t, 0)
	plain, plainSaves := runPages(t, b, hash, n, fresh, false)

	if len(compacted) != len(plain) || len(cached) != len(plain) {
		t.Fatalf("%d, %d and %d iterations", len(compacted), len(cached), len(plain))
	}
	compactions, written, plainWritten := 0, 0, 0
	for i := range plain {
		for _, other := range []*fakeTask{compacted[i], cached[i]} {
			z := plain[i]
			if other.answer != z.answer || !bytes.Equal(other.output, z.output) || other.usage != z.usage || !reflect.DeepEqual(other.records, z.records) {
				t.Fatalf("iteration %d differs: answered %s and %s, records\n%+v\n%+v", i+1, other.answer, z.answer, other.records, z.records)
			}
		}
		if !bytes.Equal(compactedSaves[i], cachedSaves[i]) {
			t.Fatalf("iteration %d wrote %d bytes folding whole and %d taking the kept state", i+1, len(compactedSaves[i]), len(cachedSaves[i]))
		}
		w, set := writeOf(compactedSaves, i)
		if set {
			compactions++
		}
		written += w
		pw, _ := writeOf(plainSaves, i)
		plainWritten += pw
		checkFold(t, i+1, compactedSaves[i], plainSaves[i])
	}
	if written*5 > plainWritten*6 {
		t.Errorf("the compacted run wrote %d bytes, more than 1.2 times the %d of the run without", written, plainWritten)
	}
	t.Logf("%d iterations, %d compactions, %d bytes written (%d without)", len(plain), compactions, written, plainWritten)
	return compactions
}

// writeOf is what iteration i wrote: the bytes it appended, or the whole checkpoint it set
// (a compaction).
func writeOf(saves [][]byte, i int) (int, bool) {
	if i > 0 && len(saves[i]) > len(saves[i-1]) && bytes.Equal(saves[i][:len(saves[i-1])-1], saves[i-1][:len(saves[i-1])-1]) {
		return len(saves[i]) - len(saves[i-1]), false
	}
	return len(saves[i]), i > 0
}

// checkFold requires the fold of a compacted checkpoint to be the fold of the same run's
// checkpoint without compactions, but for the messages before the context's window, which it
// holds as empty placeholders.
func checkFold(t *testing.T, iter int, compacted, plain json.RawMessage) {
	t.Helper()
	a, err := builtin.DecodeAgentState(compacted)
	if err != nil {
		t.Fatalf("iteration %d: %v", iter, err)
	}
	z, err := builtin.DecodeAgentState(plain)
	if err != nil {
		t.Fatalf("iteration %d: %v", iter, err)
	}
	if len(a.Messages) != len(z.Messages) {
		t.Fatalf("iteration %d: %d and %d messages", iter, len(a.Messages), len(z.Messages))
	}
	w := max(z.Context.From, 1)
	for i := range a.Messages {
		if i > 0 && i < w {
			if !reflect.DeepEqual(a.Messages[i], z.Messages[i]) && !reflect.ValueOf(a.Messages[i]).IsZero() {
				t.Fatalf("iteration %d: message %d, before the window (%d), is %+v", iter, i, w, a.Messages[i])
			}
			continue
		}
		if !reflect.DeepEqual(a.Messages[i], z.Messages[i]) {
			t.Fatalf("iteration %d: message %d differs:\n%+v\n%+v", iter, i, a.Messages[i], z.Messages[i])
		}
	}
	a.Messages, z.Messages = nil, nil
	if !reflect.DeepEqual(a, z) {
		t.Fatalf("iteration %d: the states differ:\n%+v\n%+v", iter, a, z)
	}
}

// BenchmarkAgentStateLoad is what a worker that did not run the previous iteration decodes to
// go on with an agent of 1,000 iterations (30 KB results by reference, a window of about ten
// of them): the whole history without compactions; with them, the last compaction and what
// followed it (the worker's read back, too, starts at the last set).
func BenchmarkAgentStateLoad(b *testing.B) {
	const n = 1000
	bundle, hash := bundleOf(b, pagesWorkflow(n, 30_000, 100_000, 2), "")
	for _, every := range []int{0, 6} {
		name := "compacted"
		if every == 0 {
			name = "plain"
		}
		b.Run(name, func(b *testing.B) {
			builtin.SetCompactEvery(b, every)
			one := newHandlers(b, builtin.Config{Clock: clock.NewVirtual(epoch)})
			_, saves := runPages(b, bundle, hash, n, func() *builtin.Handlers { return one }, true)
			raw := saves[len(saves)-1] // a compaction replaced what came before it
			b.ResetTimer()
			for b.Loop() {
				if _, err := builtin.DecodeAgentState(raw); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(raw)), "checkpoint-B")
		})
	}
}
