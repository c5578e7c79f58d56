package worker

import (
	"context"
	"time"
)

// Metrics hears what a worker does, for the process's metrics: package host reports it to the
// process's Prometheus instruments. The worker owns this interface, so that a worker program
// links no metrics library; [Options.Metrics] nil hears nothing.
type Metrics interface {
	// Handler returns what hears the tasks of the handler name: Run asks once for each.
	Handler(name string) HandlerMetrics
	// EffectClaim hears a claim of a side effect ([Effects.Once]) with its outcome: one of
	// EffectOutcomes.
	EffectClaim(outcome string)
	// TaskQueues adds the handlers' task queues, for the metrics to read when they are read,
	// until remove is called (when Run returns).
	TaskQueues(queues func(context.Context) ([]TaskQueue, error)) (remove func())
}

// HandlerMetrics hears the tasks of one handler.
type HandlerMetrics interface {
	// Settled hears a task settled with outcome (the answer's type, or how it was settled
	// without one: answered_before, run_ended, running_here, ...); ran is how long its handler
	// ran (0: it did not run).
	Settled(outcome string, ran time.Duration)
	// Redelivered hears a task received delivered more than once.
	Redelivered()
}

// TaskQueue is what the task consumer of one handler holds, from its consumer info.
type TaskQueue struct {
	Handler string
	// Pending is the tasks not delivered yet; Unacknowledged those delivered and not settled
	// (running, or waiting for their loop_delay); Redelivered those among them delivered more
	// than once.
	Pending, Unacknowledged, Redelivered uint64
}

// The outcomes of a side effect's claim ([Metrics.EffectClaim]).
const (
	EffectClaimed   = "claimed"    // the call ran here
	EffectRecorded  = "recorded"   // a recorded result was reused
	EffectWaited    = "waited"     // another attempt's call was waited for
	EffectTakenOver = "taken_over" // a claim whose lease ran out was taken
)

// EffectOutcomes lists the outcomes of a side effect's claim.
var EffectOutcomes = []string{EffectClaimed, EffectRecorded, EffectWaited, EffectTakenOver}

func orNoMetrics(m Metrics) Metrics {
	if m == nil {
		return noMetrics{}
	}
	return m
}

// noMetrics hears nothing: a worker without Options.Metrics.
type noMetrics struct{}

func (noMetrics) Handler(string) HandlerMetrics { return noMetrics{} }
func (noMetrics) EffectClaim(string)            {}
func (noMetrics) TaskQueues(func(context.Context) ([]TaskQueue, error)) func() {
	return func() {}
}
func (noMetrics) Settled(string, time.Duration) {}
func (noMetrics) Redelivered()                  {}
