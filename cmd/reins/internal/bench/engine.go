package bench

import (
	"encoding/json"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// EngineIteration measures one engine decision of an agent_loop iteration: Decide on the
// continued event of the task in flight, returning the next iteration's dispatch. It is the
// engine's share of a durable iteration (the NATS shell adds the JetStream round trip, measured by
// jetstream_floor). A run is restarted when it reaches its iteration bound.
func EngineIteration(b B) {
	const bound = 1000
	wf := workflow.New("bench")
	wf.AgentLoop("review", "llm-review").WithMaxIterations(bound)
	def, err := wf.Build()
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	output := json.RawMessage(`{"notes":"looked at one more file"}`)
	start := func() (*engine.Run, *protocol.Task) {
		run, cmds, err := engine.Start(def, "bench-run", json.RawMessage(`{"pr":42}`), at)
		if err != nil {
			b.Fatal(err)
		}
		return run, dispatched(b, cmds)
	}
	run, task := start()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.Loops() {
		if task.Iteration == bound {
			b.StopTimer()
			run, task = start()
			b.StartTimer()
		}
		ev := protocol.Event{Type: protocol.EvContinued, At: at, Step: task.Step, Item: task.Item,
			Activation: task.Activation, Iteration: task.Iteration, Attempt: task.Attempt, Output: output}
		next, cmds, err := engine.Decide(def, run, ev)
		if err != nil {
			b.Fatal(err)
		}
		run, task = next, dispatched(b, cmds)
	}
}

func dispatched(b B, cmds []engine.Command) *protocol.Task {
	for _, c := range cmds {
		if c.Type == engine.CmdDispatch {
			return c.Task
		}
	}
	b.Fatalf("no dispatch among %d commands", len(cmds))
	return nil
}
