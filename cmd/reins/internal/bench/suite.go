package bench

import (
	"fmt"
	"maps"
	"strings"
	"time"
)

// Benchmark is one figure of BENCHMARKS.md.
type Benchmark struct {
	Name        string
	Description string
	Fn          func(B)
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
		{"agent_loop_iteration", "one durable agent_loop iteration, no-op handler, one loop: worker answer → engine decision → next task, through JetStream", AgentLoopIteration},
		{"agent_loop_iteration_traced", "agent_loop_iteration with tracing on: an iteration span per task, trace context in tasks and answers, exported over OTLP/HTTP to a local receiver", AgentLoopIterationTraced},
		{"agent_loop_64", "durable agent_loop iterations with 64 loops at once (ns/op per iteration; iterations/s)", AgentLoopThroughput(64)},
		{"agent_loop_1000", "durable agent_loop iterations with 1,000 loops at once (ns/op per iteration; iterations/s)", AgentLoopThroughput(1000)},
		{"checkpoint_growth", "one agent_loop of 1,000 iterations each appending 1 KB to its checkpoint (ns/op per run)", CheckpointGrowth},
		{"agent_long", "one built-in agent of 1,000 iterations with 30 KB tool results: bytes written per iteration, time per iteration and RSS, early and late", AgentLong},
		{"waiting_runs", "10,000 runs waiting in loop_delay: resident memory of engine, worker and embedded server, at once and idle", WaitingRuns},
		{"waiting_runs_100k", "100,000 runs waiting in loop_delay: the same", WaitingRuns100k},
		{"limiter_call", "the shared rate limits around one model call that does not wait: acquire (rpm, tpm, a slot) and release, two compare-and-set writes of a KV record", LimiterOverhead},
		{"limiter_fairness_64", "64 loops in two processes sharing max_concurrent = 8: ns/op per call; calls/s, max/min calls per loop, Jain's index", LimiterFairness64},
		{"workflow_load_1k", "parse and validate a generated 1,000-step workflow file", LoadValidate(1000)},
		{"workflow_load_10k", "parse and validate a generated 10,000-step workflow file", LoadValidate(10000)},
		{"composed_loop_iteration", "one iteration of a Loop agent in process: an LLM agent's turn (scripted answer), events and state write", ComposedLoopIterations},
		{"composed_func_iteration", "one iteration of a Loop agent in process with a Func leaf writing state: the composition's own cost", ComposedFuncIterations},
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
	// Extra holds the benchmark's own metrics (p50-ns, iterations/s, rss-MB...), for a p50 or
	// p99 its ratio to the floor (p50/floor, p99/floor: to its mean time), and for a p99 its
	// ratio to the floor's own p99 (p99/floor-p99).
	Extra map[string]float64 `json:"extra,omitempty"`
}

// RunConfig says what Run measures and how long.
type RunConfig struct {
	// Keep selects the benchmarks by name (nil keeps all; the floor is always measured, since
	// every ratio needs it).
	Keep func(name string) bool
	// Progress, when set, is called before each benchmark.
	Progress func(name string)
	// Benchtime is how long each benchmark runs at least (0: DefaultBenchtime); a shorter one
	// measures with fewer samples.
	Benchtime time.Duration
}

// Run measures the benchmarks of the suite cfg keeps.
func Run(cfg RunConfig) ([]Result, error) {
	keep, progress := cfg.Keep, cfg.Progress
	var out []Result
	var floor, floorP99 float64
	for i, bm := range Suite() {
		if i > 0 && keep != nil && !keep(bm.Name) {
			continue
		}
		if progress != nil {
			progress(bm.Name)
		}
		r := Measure(bm.Fn, cfg.Benchtime)
		if r.Failed {
			return out, fmt.Errorf("benchmark %s failed: %s", bm.Name, strings.Join(r.Messages, "; "))
		}
		ns := float64(r.T.Nanoseconds()) / float64(r.N)
		if i == 0 {
			floor, floorP99 = ns, r.Extra["p99-ns"]
		}
		res := Result{Name: bm.Name, Description: bm.Description, N: r.N, NsPerOp: ns,
			AllocsPerOp: int64(r.Allocs) / int64(r.N), BytesPerOp: int64(r.Bytes) / int64(r.N), RatioToFloor: ns / floor}
		if len(r.Extra) > 0 {
			res.Extra = maps.Clone(r.Extra)
			for _, q := range []string{"p50-ns", "p99-ns"} {
				if v, ok := r.Extra[q]; ok && i > 0 {
					res.Extra[strings.TrimSuffix(q, "-ns")+"/floor"] = v / floor
				}
			}
			if v, ok := r.Extra["p99-ns"]; ok && i > 0 && floorP99 > 0 {
				res.Extra["p99/floor-p99"] = v / floorP99 // tail against tail
			}
		}
		out = append(out, res)
	}
	return out, nil
}
