package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/reins-run/reins/internal/testkit/promtest"
	"github.com/reins-run/reins/metrics"
)

// scrape serves m on a loopback server and parses what /metrics answers.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	fams, err := promtest.Parse(string(body))
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	return fams
}

// TestNil: every method of a nil *Metrics does nothing, so that parts without metrics need no
// checks of their own.
func TestNil(t *testing.T) {
	var m *metrics.Metrics
	m.RunStarted("w")
	m.RunEnded("w", "completed")
	m.StepEnded("w", "completed", "completed", time.Second)
	m.IterationEnded("w", metrics.NoStop, time.Second)
	m.EffectClaim(metrics.EffectClaimed)
	m.ToolCall("t", "ok")
	m.ForHandler("h").Settled("completed", time.Second)
	m.ForHandler("h").Redelivered()
	m.ForModel("p", "m").Called(time.Second, 1, 2, 3)
	m.ForModel("p", "m").Failed(time.Second)
	m.AddEngine(func() metrics.EngineStats { return metrics.EngineStats{} })()
	m.AddWaitingRuns(nil)()
	m.AddTaskQueues(nil)()
}

// TestInstruments: what the parts report is exposed under the documented names and labels, and
// two sets of metrics count apart.
func TestInstruments(t *testing.T) {
	m, other := metrics.New(), metrics.New()
	m.RunStarted("w")
	m.RunStarted("w")
	m.RunEnded("w", "failed")
	m.StepEnded("w", "completed", "completed", 2*time.Second)
	m.StepEnded("w", "failed", "max_iterations", -1) // an unknown duration is not observed
	m.IterationEnded("w", metrics.NoStop, time.Millisecond)
	h := m.ForHandler("reins-agent")
	h.Settled("continued", time.Millisecond)
	h.Settled("run_ended", 0) // did not run: no duration
	h.Redelivered()
	mm := m.ForModel("openai", "gpt-x")
	mm.Called(time.Second, 10, 3, 0.5)
	mm.Called(time.Second, 5, 1, 0)
	mm.Failed(time.Second)
	mm.Waited(0)
	mm.Waited(2 * time.Second)
	m.ToolCall("read", "ok")
	m.ToolCall("read", "ok")
	m.ToolCall("read", "denied")
	m.EffectClaim(metrics.EffectRecorded)
	other.RunStarted("w")

	fams := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"reins_runs_started_total", []string{"workflow", "w"}, 2},
		{"reins_runs_ended_total", []string{"status", "failed", "workflow", "w"}, 1},
		{"reins_steps_ended_total", []string{"status", "completed", "stop_reason", "completed", "workflow", "w"}, 1},
		{"reins_steps_ended_total", []string{"status", "failed", "stop_reason", "max_iterations", "workflow", "w"}, 1},
		{"reins_step_duration_seconds", []string{"workflow", "w"}, 1},
		{"reins_iterations_total", []string{"stop_reason", "none", "workflow", "w"}, 1},
		{"reins_iteration_duration_seconds", []string{"workflow", "w"}, 1},
		{"reins_worker_tasks_total", []string{"handler", "reins-agent", "outcome", "continued"}, 1},
		{"reins_worker_tasks_total", []string{"handler", "reins-agent", "outcome", "run_ended"}, 1},
		{"reins_worker_task_duration_seconds", []string{"handler", "reins-agent"}, 1},
		{"reins_worker_task_redeliveries_total", []string{"handler", "reins-agent"}, 1},
		{"reins_model_calls_total", []string{"model", "gpt-x", "outcome", "ok", "provider", "openai"}, 2},
		{"reins_model_calls_total", []string{"model", "gpt-x", "outcome", "error", "provider", "openai"}, 1},
		{"reins_model_tokens_total", []string{"model", "gpt-x", "provider", "openai", "type", "input"}, 15},
		{"reins_model_tokens_total", []string{"model", "gpt-x", "provider", "openai", "type", "output"}, 4},
		{"reins_model_cost_usd_total", []string{"model", "gpt-x", "provider", "openai"}, 0.5},
		{"reins_model_call_duration_seconds", []string{"model", "gpt-x", "provider", "openai"}, 3},
		{"reins_model_wait_seconds", []string{"model", "gpt-x", "provider", "openai"}, 2},
		{"reins_tool_calls_total", []string{"outcome", "ok", "tool", "read"}, 2},
		{"reins_tool_calls_total", []string{"outcome", "denied", "tool", "read"}, 1},
		{"reins_effect_claims_total", []string{"outcome", "recorded"}, 1},
	} {
		if got, ok := promtest.Value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if got, _ := promtest.Value(scrape(t, other), "reins_runs_started_total", "workflow", "w"); got != 1 {
		t.Errorf("the other registry counts %v runs, want its own 1", got)
	}
}

// TestSources: what is read at scrape time adds up over engines, counts each handler's
// consumer once however many workers of the process serve it, leaves out a source that
// fails, and stops once removed.
func TestSources(t *testing.T) {
	m := metrics.New()
	removeA := m.AddEngine(func() metrics.EngineStats {
		return metrics.EngineStats{Decided: 3, Saves: 2, Partitions: 10, Cached: 4}
	})
	removeB := m.AddEngine(func() metrics.EngineStats {
		return metrics.EngineStats{Decided: 1, Dropped: 1, Refused: 2, Partitions: 6}
	})
	m.AddWaitingRuns(func(context.Context) (map[string]int, error) { return map[string]int{"a": 2, "b": 1}, nil })
	m.AddWaitingRuns(func(context.Context) (map[string]int, error) { return map[string]int{"a": 1}, nil })
	m.AddWaitingRuns(func(context.Context) (map[string]int, error) { return nil, errors.New("no answer") })
	queue := func(context.Context) ([]metrics.TaskQueue, error) {
		return []metrics.TaskQueue{{Handler: "h", Pending: 5, Unacknowledged: 2, Redelivered: 1}}, nil
	}
	m.AddTaskQueues(queue)
	m.AddTaskQueues(queue)

	fams := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"reins_engine_events_total", []string{"outcome", "decided"}, 4},
		{"reins_engine_events_total", []string{"outcome", "dropped"}, 1},
		{"reins_engine_events_total", []string{"outcome", "refused"}, 2},
		{"reins_engine_saves_total", nil, 2},
		{"reins_engine_cached_runs", nil, 4},
		{"reins_engine_partitions_owned", nil, 16},
		{"reins_runs_waiting", []string{"workflow", "a"}, 3},
		{"reins_runs_waiting", []string{"workflow", "b"}, 1},
		{"reins_tasks_pending", []string{"handler", "h"}, 5},
		{"reins_tasks_unacknowledged", []string{"handler", "h"}, 2},
		{"reins_tasks_redelivered", []string{"handler", "h"}, 1},
	} {
		if got, ok := promtest.Value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	removeA()
	removeB()
	if _, ok := scrape(t, m)["reins_engine_partitions_owned"]; ok {
		t.Errorf("the engines' metrics stay after both were removed")
	}
}

// TestDocumented: docs/observability.md lists every metric the package exposes, each once,
// and nothing else; the Grafana dashboard queries only those.
func TestDocumented(t *testing.T) {
	m := metrics.New()
	m.RunStarted("w")
	m.RunEnded("w", "completed")
	m.StepEnded("w", "completed", "completed", time.Second)
	m.IterationEnded("w", metrics.NoStop, time.Second)
	m.ForHandler("h").Settled("completed", time.Second)
	m.ForHandler("h").Redelivered()
	m.ForModel("p", "m").Called(time.Second, 1, 1, 1)
	m.ToolCall("t", "ok")
	m.EffectClaim(metrics.EffectClaimed)
	m.AddEngine(func() metrics.EngineStats { return metrics.EngineStats{} })
	m.AddWaitingRuns(func(context.Context) (map[string]int, error) { return map[string]int{"w": 1}, nil })
	m.AddTaskQueues(func(context.Context) ([]metrics.TaskQueue, error) { return []metrics.TaskQueue{{Handler: "h"}}, nil })
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]bool{}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "reins_") {
			exposed[f.GetName()] = true
		}
	}

	doc, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	section = section[strings.Index(section, "\n## Metrics"):strings.Index(section, "\n## Logs")]
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(reins_[a-z_]+)` \\|").FindAllStringSubmatch(section, -1) {
		if documented[m[1]] {
			t.Errorf("docs/observability.md lists %s twice", m[1])
		}
		documented[m[1]] = true
	}
	for name := range exposed {
		if !documented[name] {
			t.Errorf("%s is not in docs/observability.md's list", name)
		}
	}
	for name := range documented {
		if !exposed[name] {
			t.Errorf("docs/observability.md lists %s, which the package does not expose", name)
		}
	}

	dash, err := os.ReadFile("../deploy/grafana/reins-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	used := map[string]bool{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, name := range regexp.MustCompile(`reins_[a-z_]+`).FindAllString(tg.Expr, -1) {
				name = strings.TrimSuffix(name, "_bucket")
				used[name] = true
				if !exposed[name] {
					t.Errorf("panel %q queries %s, which is no metric", p.Title, name)
				}
			}
		}
	}
	if len(used) < len(exposed)*3/4 {
		t.Errorf("the dashboard uses %d of the %d metrics", len(used), len(exposed))
	}
}

// TestZeroAtStart: the series of the closed sets exist at 0 as soon as the name they go with is
// known, before any increment, so that increase() and rate() count the first one.
func TestZeroAtStart(t *testing.T) {
	m := metrics.New()
	m.Workflow("refund")
	m.ForHandler("reins-agent")
	m.ForModel("go", "clerk")
	m.Tools("lookup")
	fams := scrape(t, m)
	type series struct {
		name   string
		labels []string
	}
	want := []series{{"reins_runs_started_total", []string{"workflow", "refund"}}, {"reins_iterations_total", []string{"workflow", "refund", "stop_reason", metrics.NoStop}}}
	for _, st := range metrics.RunStatuses {
		want = append(want, series{"reins_runs_ended_total", []string{"workflow", "refund", "status", st}})
	}
	for _, o := range metrics.TaskOutcomes {
		want = append(want, series{"reins_worker_tasks_total", []string{"handler", "reins-agent", "outcome", o}})
	}
	want = append(want, series{"reins_worker_task_redeliveries_total", []string{"handler", "reins-agent"}})
	for _, o := range metrics.EffectOutcomes {
		want = append(want, series{"reins_effect_claims_total", []string{"outcome", o}})
	}
	for _, o := range metrics.ToolOutcomes {
		want = append(want, series{"reins_tool_calls_total", []string{"tool", "lookup", "outcome", o}})
	}
	for _, o := range []string{metrics.OK, metrics.Error} {
		want = append(want, series{"reins_model_calls_total", []string{"provider", "go", "model", "clerk", "outcome", o}})
	}
	for _, ty := range []string{metrics.TokensInput, metrics.TokensOutput} {
		want = append(want, series{"reins_model_tokens_total", []string{"provider", "go", "model", "clerk", "type", ty}})
	}
	want = append(want, series{"reins_model_cost_usd_total", []string{"provider", "go", "model", "clerk"}})
	for _, s := range want {
		if got, ok := promtest.Value(fams, s.name, s.labels...); !ok || got != 0 {
			t.Errorf("%s%v = %v (present %v), want present at 0", s.name, s.labels, got, ok)
		}
	}

	// A workflow first seen at its first run: its ends exist at 0 from then on.
	m.RunStarted("adhoc")
	fams = scrape(t, m)
	for _, st := range metrics.RunStatuses {
		if got, ok := promtest.Value(fams, "reins_runs_ended_total", "workflow", "adhoc", "status", st); !ok || got != 0 {
			t.Errorf("reins_runs_ended_total{adhoc,%s} = %v (present %v), want present at 0", st, got, ok)
		}
	}
}
