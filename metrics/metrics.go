// Package metrics owns reins's Prometheus instruments: their names, types, labels and buckets
// (docs/observability.md lists them), on a registry of this process's own rather than the
// global default, so that two engines in one test count apart, and the handler that exposes
// them on /metrics.
//
// It decides nothing about what happened: the engine's shell (package runner), the worker
// (package worker) and the built-in handlers (package builtin) report the facts where they
// happen. It must not import any other reins package, and its labels must never carry a
// secret, an input or an output: only names an operator chose (workflows, handlers, tools,
// providers, models) and the closed sets of statuses, stop reasons and outcomes. Every method
// of a nil *Metrics does nothing, so that a part configured without metrics pays one nil check.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Label values of the closed sets.
const (
	// NoStop is the stop_reason of an iteration after which its loop went on, and of a step
	// that ended without one (a step that does not iterate).
	NoStop = "none"
	// TokensInput and TokensOutput are the values of the type label of the token counter.
	TokensInput  = "input"
	TokensOutput = "output"
	// OK and Error are the outcomes of a model call.
	OK    = "ok"
	Error = "error"
)

// The closed sets of label values whose series exist from the start at 0 (a series that
// appeared with its first increment would lose it to increase() and rate()): the series of a
// name an operator chose (a workflow, a handler, a model, a tool) are made, at 0, for each
// value of the set as soon as the name is known (Workflow, ForHandler, ForModel, Tools).
var (
	// RunStatuses are the statuses a run ends with (reins_runs_ended_total).
	RunStatuses = []string{"completed", "failed", "cancelled", "timed_out"}
	// TaskOutcomes are how a worker settles a task (reins_worker_tasks_total): the answer's
	// type, or how it was settled without one.
	TaskOutcomes = []string{"completed", "continued", "waiting", "failed", "timed_out", "run_ended", "answered_before", "running_here", "stopped", "lost"}
	// EffectOutcomes are the outcomes of a side-effect claim (reins_effect_claims_total).
	EffectOutcomes = []string{EffectClaimed, EffectRecorded, EffectWaited, EffectTakenOver}
	// ToolOutcomes are the outcomes of a proposed tool call (reins_tool_calls_total).
	ToolOutcomes = []string{"ok", "error", "denied", "invalid", "forbidden", "not_run"}
)

// durationBuckets are the buckets of every latency histogram, in seconds: from a scripted
// model's iteration (milliseconds) to a human-paced or long tool-calling step (tens of minutes).
var durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// Metrics is the set of instruments of one process. Create it with New; a nil *Metrics records
// nothing.
type Metrics struct {
	reg *prometheus.Registry

	runsStarted      *prometheus.CounterVec
	runsEnded        *prometheus.CounterVec
	stepsEnded       *prometheus.CounterVec
	stepSeconds      *prometheus.HistogramVec
	iterations       *prometheus.CounterVec
	iterationSeconds *prometheus.HistogramVec

	tasks            *prometheus.CounterVec
	taskSeconds      *prometheus.HistogramVec
	taskRedeliveries *prometheus.CounterVec
	effectClaims     *prometheus.CounterVec

	modelCalls   *prometheus.CounterVec
	modelTokens  *prometheus.CounterVec
	modelCost    *prometheus.CounterVec
	modelSeconds *prometheus.HistogramVec
	modelWait    *prometheus.HistogramVec
	toolCalls    *prometheus.CounterVec

	sources *sources
}

// New returns the instruments of a process on a registry of their own, with the Go runtime's
// and the process's collectors beside them.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), sources: newSources()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: durationBuckets}, labels)
		m.reg.MustRegister(h)
		return h
	}
	m.runsStarted = counter("reins_runs_started_total", "Runs started, by workflow.", "workflow")
	m.runsEnded = counter("reins_runs_ended_total", "Runs ended, by workflow and final status.", "workflow", "status")
	m.stepsEnded = counter("reins_steps_ended_total", "Step activations ended, by workflow, status and stop reason.", "workflow", "status", "stop_reason")
	m.stepSeconds = histogram("reins_step_duration_seconds", "Time from a step activation's start to its end, by workflow (waits for humans included).", "workflow")
	m.iterations = counter("reins_iterations_total", "Iterations of agent and agent_loop steps ended, by workflow and the stop reason of the step they ended (none: the loop went on).", "workflow", "stop_reason")
	m.iterationSeconds = histogram("reins_iteration_duration_seconds", "Time from an iteration's task being due (dispatched, or its loop_delay over) to its answer, by workflow.", "workflow")
	m.tasks = counter("reins_worker_tasks_total", "Tasks settled by this worker, by handler and outcome (the answer's type, or how it was settled without one).", "handler", "outcome")
	m.taskSeconds = histogram("reins_worker_task_duration_seconds", "Time a handler ran for a task until it was settled, by handler.", "handler")
	m.taskRedeliveries = counter("reins_worker_task_redeliveries_total", "Tasks this worker received delivered more than once, by handler.", "handler")
	m.effectClaims = counter("reins_effect_claims_total", "Side-effect claims, by outcome: claimed (the call ran here), recorded (a recorded result was reused), waited (another attempt's call was waited for), taken_over (a claim whose lease ran out was taken).", "outcome")
	m.modelCalls = counter("reins_model_calls_total", "Model calls of the built-in handlers, by provider, model and outcome (ok, error).", "provider", "model", "outcome")
	m.modelTokens = counter("reins_model_tokens_total", "Tokens of model calls, by provider, model and type (input, output).", "provider", "model", "type")
	m.modelCost = counter("reins_model_cost_usd_total", "Cost of model calls in US dollars, by provider and model (0 for models without a price).", "provider", "model")
	m.modelSeconds = histogram("reins_model_call_duration_seconds", "Duration of model calls, by provider and model.", "provider", "model")
	m.modelWait = histogram("reins_model_wait_seconds", "Time model calls waited for capacity under the operator's shared rate limits (rpm, tpm, max_concurrent) and providers' pauses, by provider and model; 0 for a call that did not wait.", "provider", "model")
	m.toolCalls = counter("reins_tool_calls_total", "Tool calls proposed by agents, by tool and outcome (ok, error, denied, invalid, forbidden, ...).", "tool", "outcome")
	for _, o := range EffectOutcomes {
		m.effectClaims.WithLabelValues(o)
	}
	m.reg.MustRegister(m.sources, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry the instruments are on, for a program that adds its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text (or OpenMetrics) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// Workflow makes the series of workflow exist at 0 before its first run: its runs started and
// ended (by status), and its iterations after which the loop went on. A server calls it for
// the workflows it knows at start (registered ones); RunStarted calls it for the others, whose
// first start only is then seen late.
func (m *Metrics) Workflow(workflow string) {
	if m == nil {
		return
	}
	m.runsStarted.WithLabelValues(workflow)
	m.workflowEnds(workflow)
}

// workflowEnds makes the series of workflow's ends exist at 0.
func (m *Metrics) workflowEnds(workflow string) {
	for _, st := range RunStatuses {
		m.runsEnded.WithLabelValues(workflow, st)
	}
	m.iterations.WithLabelValues(workflow, NoStop)
}

// RunStarted counts a run of workflow started.
func (m *Metrics) RunStarted(workflow string) {
	if m == nil {
		return
	}
	m.runsStarted.WithLabelValues(workflow).Inc()
	m.workflowEnds(workflow)
}

// RunEnded counts a run of workflow ended with status.
func (m *Metrics) RunEnded(workflow, status string) {
	if m == nil {
		return
	}
	m.runsEnded.WithLabelValues(workflow, status).Inc()
}

// StepEnded counts a step activation ended with status and stopReason after d.
func (m *Metrics) StepEnded(workflow, status, stopReason string, d time.Duration) {
	if m == nil {
		return
	}
	m.stepsEnded.WithLabelValues(workflow, status, stopReason).Inc()
	if d >= 0 {
		m.stepSeconds.WithLabelValues(workflow).Observe(d.Seconds())
	}
}

// IterationEnded counts an iteration of workflow that ended with stopReason (NoStop: its loop
// went on), d after it was due; a negative d is not observed (the time is unknown).
func (m *Metrics) IterationEnded(workflow, stopReason string, d time.Duration) {
	if m == nil {
		return
	}
	m.iterations.WithLabelValues(workflow, stopReason).Inc()
	if d >= 0 {
		m.iterationSeconds.WithLabelValues(workflow).Observe(d.Seconds())
	}
}

// Handler is the instruments of one worker handler, resolved once when the handler is
// registered: a task's settlement then costs no label lookup but its outcome's.
type Handler struct {
	m           *Metrics
	name        string
	seconds     prometheus.Observer
	redelivered prometheus.Counter
}

// ForHandler returns the instruments of the worker handler name (nil for a nil *Metrics).
func (m *Metrics) ForHandler(name string) *Handler {
	if m == nil {
		return nil
	}
	for _, o := range TaskOutcomes {
		m.tasks.WithLabelValues(name, o)
	}
	return &Handler{m: m, name: name, seconds: m.taskSeconds.WithLabelValues(name), redelivered: m.taskRedeliveries.WithLabelValues(name)}
}

// Settled counts a task settled with outcome; ran is how long its handler ran (0: it did not
// run).
func (h *Handler) Settled(outcome string, ran time.Duration) {
	if h == nil {
		return
	}
	h.m.tasks.WithLabelValues(h.name, outcome).Inc()
	if ran > 0 {
		h.seconds.Observe(ran.Seconds())
	}
}

// Redelivered counts a task received delivered more than once.
func (h *Handler) Redelivered() {
	if h == nil {
		return
	}
	h.redelivered.Inc()
}

// Effect outcomes (reins_effect_claims_total).
const (
	EffectClaimed   = "claimed"
	EffectRecorded  = "recorded"
	EffectWaited    = "waited"
	EffectTakenOver = "taken_over"
)

// EffectClaim counts a side-effect claim with outcome (Effect...).
func (m *Metrics) EffectClaim(outcome string) {
	if m == nil {
		return
	}
	m.effectClaims.WithLabelValues(outcome).Inc()
}

// Model is the instruments of one model of the built-in handlers, resolved once when the
// model is opened.
type Model struct {
	calls, errors, input, output, cost prometheus.Counter
	seconds, wait                      prometheus.Observer
}

// ForModel returns the instruments of model of provider (nil for a nil *Metrics); its series
// exist at 0 from then on. A worker calls it for the models it knows at start (a program's own,
// the operator's providers' listed models), the others when they are first opened.
func (m *Metrics) ForModel(provider, model string) *Model {
	if m == nil {
		return nil
	}
	return &Model{
		calls:   m.modelCalls.WithLabelValues(provider, model, OK),
		errors:  m.modelCalls.WithLabelValues(provider, model, Error),
		input:   m.modelTokens.WithLabelValues(provider, model, TokensInput),
		output:  m.modelTokens.WithLabelValues(provider, model, TokensOutput),
		cost:    m.modelCost.WithLabelValues(provider, model),
		seconds: m.modelSeconds.WithLabelValues(provider, model),
		wait:    m.modelWait.WithLabelValues(provider, model),
	}
}

// Called counts a successful model call with its tokens and cost.
func (mm *Model) Called(d time.Duration, inputTokens, outputTokens int64, costUSD float64) {
	if mm == nil {
		return
	}
	mm.calls.Inc()
	mm.input.Add(float64(inputTokens))
	mm.output.Add(float64(outputTokens))
	if costUSD > 0 {
		mm.cost.Add(costUSD)
	}
	mm.seconds.Observe(d.Seconds())
}

// Failed counts a model call that failed.
func (mm *Model) Failed(d time.Duration) {
	if mm == nil {
		return
	}
	mm.errors.Inc()
	mm.seconds.Observe(d.Seconds())
}

// Waited records how long a model call waited for capacity under shared rate limits.
func (mm *Model) Waited(d time.Duration) {
	if mm == nil {
		return
	}
	mm.wait.Observe(d.Seconds())
}

// Tools makes the series of the tools named exist at 0, for each outcome, before their first
// call: a worker calls it with the tools it serves when it starts.
func (m *Metrics) Tools(names ...string) {
	if m == nil {
		return
	}
	for _, name := range names {
		for _, o := range ToolOutcomes {
			m.toolCalls.WithLabelValues(name, o)
		}
	}
}

// ToolCall counts a proposed tool call with its outcome.
func (m *Metrics) ToolCall(tool, outcome string) {
	if m == nil {
		return
	}
	m.toolCalls.WithLabelValues(tool, outcome).Inc()
}
