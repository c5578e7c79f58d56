package bench

import (
	"fmt"
	"testing"
)

// Benchmark is one figure of BENCHMARKS.md.
type Benchmark struct {
	Name        string
	Description string
	Fn          func(*testing.B)
}

// Suite lists every benchmark `reins bench` runs; the first is the floor the others are compared
// with.
func Suite() []Benchmark {
	return []Benchmark{
		{"jetstream_floor", "JetStream publish → fetch → ack of one durable message (the floor)", JetStreamFloor},
		{"loop_iteration", "one loop iteration: scripted model, schema-validated no-op tool, tracing on", LoopIterations},
		{"http_post", "a raw net/http POST of a chat request to a local server, reply read (no SDK)", HTTPPost},
		{"openai_call", "one model call through the OpenAI provider to a local server: build, SDK, HTTP, parse", OpenAICall},
		{"anthropic_call", "one model call through the Anthropic provider to a local server: build, SDK, HTTP, parse", AnthropicCall},
		{"engine_iteration", "one engine decision of an agent_loop iteration: Decide on continued, next dispatch", EngineIteration},
		{"workflow_load_1k", "parse and validate a generated 1,000-step workflow file", LoadValidate(1000)},
		{"workflow_load_10k", "parse and validate a generated 10,000-step workflow file", LoadValidate(10000)},
	}
}

// Result is one measured figure.
type Result struct {
	Name         string  `json:"name"`
	Description  string  `json:"description"`
	N            int     `json:"n"`
	NsPerOp      float64 `json:"ns_per_op"`
	AllocsPerOp  int64   `json:"allocs_per_op"`
	BytesPerOp   int64   `json:"bytes_per_op"`
	RatioToFloor float64 `json:"ratio_to_floor"`
}

// Run measures every benchmark of the suite whose name passes keep (nil keeps all; the floor is
// always measured, since every ratio needs it), calling progress before each.
func Run(keep func(name string) bool, progress func(name string)) ([]Result, error) {
	var out []Result
	var floor float64
	for i, bm := range Suite() {
		if i > 0 && keep != nil && !keep(bm.Name) {
			continue
		}
		if progress != nil {
			progress(bm.Name)
		}
		r := testing.Benchmark(bm.Fn)
		if r.N == 0 {
			return out, fmt.Errorf("benchmark %s failed (see the messages above)", bm.Name)
		}
		ns := float64(r.T.Nanoseconds()) / float64(r.N)
		if i == 0 {
			floor = ns
		}
		out = append(out, Result{Name: bm.Name, Description: bm.Description, N: r.N, NsPerOp: ns,
			AllocsPerOp: r.AllocsPerOp(), BytesPerOp: r.AllocedBytesPerOp(), RatioToFloor: ns / floor})
	}
	return out, nil
}
