// Package workermetrics reports what a worker hears ([worker.Metrics]) to a process's
// Prometheus instruments ([metrics.Metrics]): what package host gives the workers it starts,
// and what a worker program that serves its own /metrics gives [worker.Options]. It decides
// nothing, and is the one package that knows both: the worker links no Prometheus without it.
package workermetrics

import (
	"context"

	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/worker"
)

// New returns the [worker.Metrics] that counts in m (nil for a nil m: the worker counts nothing).
func New(m *metrics.Metrics) worker.Metrics {
	if m == nil {
		return nil
	}
	return workerInstruments{m}
}

// workerInstruments is a worker's [worker.Metrics] on package metrics.
type workerInstruments struct{ m *metrics.Metrics }

func (w workerInstruments) Handler(name string) worker.HandlerMetrics { return w.m.ForHandler(name) }

func (w workerInstruments) EffectClaim(outcome string) { w.m.EffectClaim(outcome) }

func (w workerInstruments) TaskQueues(queues func(context.Context) ([]worker.TaskQueue, error)) func() {
	return w.m.AddTaskQueues(func(ctx context.Context) ([]metrics.TaskQueue, error) {
		qs, err := queues(ctx)
		out := make([]metrics.TaskQueue, len(qs))
		for i, q := range qs {
			out[i] = metrics.TaskQueue(q)
		}
		return out, err
	})
}
