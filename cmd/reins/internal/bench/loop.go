// Package bench holds the measurements that `reins bench` and BENCHMARKS.md report, so that the
// command and `go test -bench` measure exactly the same code.
//
// It owns benchmark fixtures and nothing else: it must not be imported by runtime packages.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
)

// noopSchema is the input schema of the benchmark's tool: small, but real, so that every
// iteration pays for JSON Schema validation as a production loop does.
var noopSchema = json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string","minLength":1}},"required":["order_id"]}`)

// RunLength is how many iterations each benchmark run has before a new run starts: runs are
// bounded in production, and a bounded run keeps its trace and conversation at a realistic size.
const RunLength = 50

// LoopIterations measures b.Loops() iterations of the loop controller: a scripted model proposing one
// call per turn to a tool that does nothing, with tracing on (events kept in the result and sent
// to a sink). Each iteration is budget check, model call, validation against the tool's JSON
// Schema, repeated-call accounting, execution with an idempotency key, and the result message.
// A new run starts every RunLength iterations, and its setup is part of the measurement.
func LoopIterations(b B) {
	turns := make([]model.Turn, RunLength)
	for i := range turns {
		// Distinct arguments, so the repeated-call budget never fires.
		args := json.RawMessage(fmt.Sprintf(`{"order_id":"O-%d"}`, i))
		turns[i] = model.Turn{ToolCalls: []model.ToolCall{{Name: "noop", Arguments: args}}}
	}
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := model.NewScripted(turns, clk)
	if err != nil {
		b.Fatal(err)
	}
	noop := tool.New(tool.Spec{Name: "noop", InputSchema: noopSchema},
		func(context.Context, json.RawMessage, string) (json.RawMessage, error) { return okOutput, nil })
	var events int
	c, err := loop.New(loop.Config{
		Model: m, Tools: []tool.Tool{noop}, Clock: clk,
		Budget: loop.Budget{MaxIterations: RunLength, MaxToolCalls: RunLength},
		Sink:   trace.SinkFunc(func(trace.Event) { events++ }),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var r *loop.Run
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.Loops() {
		if i%RunLength == 0 {
			r = c.Start("bench", "benchmark")
		}
		if r.Step(ctx) {
			b.Fatalf("run stopped early: %s (%s)", r.State().StopReason, r.State().Detail)
		}
	}
	b.StopTimer()
	if events < 6*b.Loops() {
		b.Fatalf("tracing was off: %d events for %d iterations", events, b.Loops())
	}
}

var okOutput = json.RawMessage(`{"ok":true}`)
