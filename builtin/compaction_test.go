package builtin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
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

// A durable agent whose worker changes after its checkpoint was compacted: the new worker reads
// the checkpoint back from the bucket (from the last compaction on) and the run completes with
// every iteration counted once.
func TestCompactedAgentMovesToAnotherWorker(t *testing.T) {
	const n, switchAt = 60, 40
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	eng, err := runner.New(runner.Config{Conn: (*conn.Conn)(box)})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = eng.Run(ctx) }()
	a := startBuiltinWorker(t, ctx, box)
	def, ps := workflow.Parse("pages.toml", []byte(pagesWorkflowWith(n, 10_000, `{ max_tokens = 9000, keep_last = 2 }`)))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	bundles, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Config{Conn: (*conn.Conn)(box)})
	id, err := c.Start(ctx, bundles, json.RawMessage(`null`), "")
	if err != nil {
		t.Fatal(err)
	}
	for u, err := range c.Watch(ctx, id, client.WatchOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev := u.Event; ev != nil && ev.Type == protocol.EvContinued && ev.Iteration >= switchAt {
			break
		}
	}
	a.stop() // its task in hand goes back to the queue
	if sets := compactions(t, ctx, box, id); len(sets) == 0 || slices.Min(sets) >= switchAt {
		t.Fatalf("compactions at iterations %v: none before the worker changed at %d", sets, switchAt)
	}
	startBuiltinWorker(t, ctx, box)
	run := waitCompleted(t, ctx, c, id)
	s := run.Steps["investigate"]
	if s.Iteration != n || s.StopReason != "completed" || s.Usage.ModelCalls != n || s.Usage.ToolCalls != n-1 || s.Usage.InputTokens != 100*(n-1) {
		t.Errorf("investigate: iteration %d, stop %q, usage %+v; want %d iterations, %d model calls, %d tool calls, once each", s.Iteration, s.StopReason, s.Usage, n, n, n-1)
	}
}

// builtinWorker is a worker with the built-in handlers, running until stop or the test's end.
type builtinWorker struct{ stop func() }

func startBuiltinWorker(t *testing.T, ctx context.Context, box *natsbox.Box) builtinWorker {
	t.Helper()
	w, err := worker.New((*conn.Conn)(box), worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := builtin.Register(w, builtin.Config{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	t.Cleanup(stop)
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("the worker stopped before it was ready: %v", err)
	}
	return builtinWorker{stop: stop}
}

// compactions lists the iterations of run id that set the agent's checkpoint whole.
func compactions(t *testing.T, ctx context.Context, box *natsbox.Box, id string) []int {
	t.Helper()
	kv, err := box.JetStream().KeyValue(ctx, box.Names().CheckpointsBucket())
	if err != nil {
		t.Fatal(err)
	}
	var sets []int
	for ke, err := range natsbox.Entries(ctx, kv, wire.CheckpointScope(id, "investigate", -1, 1)+".>") {
		if err != nil {
			t.Fatal(err)
		}
		w, err := wire.ParseCheckpointWrite(ke.Key())
		if err != nil {
			t.Fatal(err)
		}
		if bytes.HasPrefix(ke.Value(), []byte(`{"set":`)) {
			sets = append(sets, w.Iteration)
		}
	}
	return sets
}
