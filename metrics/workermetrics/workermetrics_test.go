package workermetrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/reins-run/reins/internal/testkit/promtest"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/metrics/workermetrics"
	"github.com/reins-run/reins/worker"
)

// TestWorkerMetrics: what a worker hears reaches the process's instruments, its side-effect
// outcomes being the label values package metrics makes series of, and its task queues are
// read until it removes them.
func TestWorkerMetrics(t *testing.T) {
	if !slices.Equal(worker.EffectOutcomes, metrics.EffectOutcomes) {
		t.Fatalf("worker.EffectOutcomes %v, metrics.EffectOutcomes %v: they must be the same", worker.EffectOutcomes, metrics.EffectOutcomes)
	}
	if workermetrics.New(nil) != nil {
		t.Fatal("workermetrics.New(nil) is not nil: a worker without metrics would count")
	}
	m := metrics.New()
	wm := workermetrics.New(m)
	h := wm.Handler("h")
	h.Settled("completed", time.Second)
	h.Redelivered()
	wm.EffectClaim(worker.EffectTakenOver)
	remove := wm.TaskQueues(func(context.Context) ([]worker.TaskQueue, error) {
		return []worker.TaskQueue{{Handler: "h", Pending: 3, Unacknowledged: 2, Redelivered: 1}}, nil
	})
	want := []struct {
		name   string
		labels []string
		value  float64
	}{
		{"reins_worker_tasks_total", []string{"handler", "h", "outcome", "completed"}, 1},
		{"reins_worker_task_redeliveries_total", []string{"handler", "h"}, 1},
		{"reins_effect_claims_total", []string{"outcome", "taken_over"}, 1},
		{"reins_tasks_pending", []string{"handler", "h"}, 3},
		{"reins_tasks_unacknowledged", []string{"handler", "h"}, 2},
		{"reins_tasks_redelivered", []string{"handler", "h"}, 1},
	}
	got := scrape(t, m)
	for _, w := range want {
		if v, ok := promtest.Value(got, w.name, w.labels...); !ok || v != w.value {
			t.Errorf("%s%v = %v (found: %v), want %v", w.name, w.labels, v, ok, w.value)
		}
	}
	remove()
	if _, ok := promtest.Value(scrape(t, m), "reins_tasks_pending", "handler", "h"); ok {
		t.Error("the task queues are still read after their removal")
	}
}

func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	fams, err := promtest.Parse(string(body))
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	return fams
}
