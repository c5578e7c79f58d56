package runner

import (
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// counts gathers the reins_ counters and histogram counts of m by name and labels, as
// NAME{k=v,...} (labels in their name order).
func counts(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			key := f.GetName() + "{"
			for i, l := range s.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			key += "}"
			switch {
			case s.Counter != nil:
				out[key] = s.GetCounter().GetValue()
			case s.Histogram != nil:
				out[key] = float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestCount: what a decision changed in a run's state is what the engine counts: a start, the
// iterations of an agent_loop step (the one that stops it with the step's stop reason), the
// end of a step that does not iterate, and a cancelled run's steps.
func TestCount(t *testing.T) {
	wb := workflow.New("wf")
	wb.AgentLoop("loop", "h").WithMaxIterations(5)
	wb.Task("after", "h")
	wb.Edge("loop", "after")
	def, err := wb.Build()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	run := func(status protocol.RunStatus, steps map[string]*engine.StepRun) *engine.Run {
		return &engine.Run{ID: "r", Workflow: "wf", Status: status, Steps: steps}
	}
	step := func(id string, status protocol.StepStatus, iter int, stop string) *engine.StepRun {
		return &engine.StepRun{Step: id, Status: status, Activation: 1, Iteration: iter, StopReason: stop, StartedAt: t0, Dispatched: t0.Add(time.Duration(iter) * time.Second)}
	}
	running := protocol.StepRunning
	for _, tc := range []struct {
		name          string
		before, after *engine.Run
		want          map[string]float64
	}{
		{"start", nil, run(protocol.RunRunning, map[string]*engine.StepRun{"loop": step("loop", running, 1, "")}),
			map[string]float64{"reins_runs_started_total{workflow=wf}": 1}},
		{"an iteration goes on",
			run(protocol.RunRunning, map[string]*engine.StepRun{"loop": step("loop", running, 1, "")}),
			run(protocol.RunRunning, map[string]*engine.StepRun{"loop": step("loop", running, 2, "")}),
			map[string]float64{"reins_iterations_total{stop_reason=none,workflow=wf}": 1, "reins_iteration_duration_seconds{workflow=wf}": 1}},
		{"the last iteration",
			run(protocol.RunRunning, map[string]*engine.StepRun{"loop": step("loop", running, 2, "")}),
			run(protocol.RunRunning, map[string]*engine.StepRun{"loop": step("loop", protocol.StepCompleted, 2, "max_iterations"), "after": step("after", running, 1, "")}),
			map[string]float64{"reins_iterations_total{stop_reason=max_iterations,workflow=wf}": 1, "reins_iteration_duration_seconds{workflow=wf}": 1,
				"reins_steps_ended_total{status=completed,stop_reason=max_iterations,workflow=wf}": 1, "reins_step_duration_seconds{workflow=wf}": 1}},
		{"a task step and the run end",
			run(protocol.RunRunning, map[string]*engine.StepRun{"after": step("after", running, 1, "")}),
			run(protocol.RunCompleted, map[string]*engine.StepRun{"after": step("after", protocol.StepCompleted, 1, "completed")}),
			map[string]float64{"reins_steps_ended_total{status=completed,stop_reason=completed,workflow=wf}": 1, "reins_step_duration_seconds{workflow=wf}": 1,
				"reins_runs_ended_total{status=completed,workflow=wf}": 1}},
		{"cancelled",
			run(protocol.RunRunning, map[string]*engine.StepRun{"loop": step("loop", running, 3, "")}),
			run(protocol.RunCancelled, map[string]*engine.StepRun{"loop": step("loop", protocol.StepCancelled, 3, "cancelled")}),
			map[string]float64{"reins_steps_ended_total{status=cancelled,stop_reason=cancelled,workflow=wf}": 1, "reins_step_duration_seconds{workflow=wf}": 1,
				"reins_runs_ended_total{status=cancelled,workflow=wf}": 1}},
		{"nothing ended",
			run(protocol.RunWaiting, map[string]*engine.StepRun{"loop": step("loop", protocol.StepWaiting, 3, "")}),
			run(protocol.RunRunning, map[string]*engine.StepRun{"loop": step("loop", running, 3, "")}),
			map[string]float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{metrics: metrics.New()}
			e.count(def, tc.before, tc.after, t0.Add(time.Minute))
			got := counts(t, e.metrics)
			for k, v := range got {
				if k[:6] == "reins_" && tc.want[k] != v {
					t.Errorf("%s = %v, want %v", k, v, tc.want[k])
				}
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}
