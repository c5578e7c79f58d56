package engine_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// The engine watches every task it dispatched: an attempt that no answer ends (the task was
// lost: its worker dropped it on a stray cancel, or its answer never came) is timed out by the
// engine at its timeout plus the grace, and retried by the step's policy.
func TestTaskWatch(t *testing.T) {
	retry := &workflow.Retry{MaxAttempts: 2, Backoff: "fixed", InitialDelay: clock.Duration(time.Second)}
	for _, tc := range []struct {
		name    string
		retry   *workflow.Retry
		replies []reply
		status  protocol.RunStatus
		code    string
	}{
		{"a lost attempt is retried", retry, []reply{hangs(), done(`"ok"`)}, protocol.RunCompleted, ""},
		{"the last attempt lost fails the step", nil, []reply{hangs()}, protocol.RunFailed, "E_STEP_FAILED"},
		{"an answer in time is not watched", nil, []reply{done(`"ok"`).after(50 * time.Second)}, protocol.RunCompleted, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := drive(t, retrying(t, tc.retry), `{}`, script{"t": tc.replies, "next": {done(`"n"`)}})
			d.expect(tc.status, tc.code)
			ts := d.tasksOf("t")
			if len(ts) != len(tc.replies) {
				t.Fatalf("%d attempts, want %d", len(ts), len(tc.replies))
			}
			if len(ts) == 2 {
				// 30s timeout + 30s grace after the first dispatch, then the 1s backoff.
				if got, want := ts[1].task.NotBefore, t0.Add(61*time.Second); !got.Equal(want) {
					t.Errorf("the retry is due at %s, want %s", got, want)
				}
			}
			if tc.status == protocol.RunFailed {
				if msg := d.stepRun("t").Error; !strings.Contains(msg, "attempt 1 was not answered within 1m0s of being due") {
					t.Errorf("step error %q, want it to say the attempt was not answered", msg)
				}
			}
		})
	}
}

// A watch is counted from when the attempt is due (a retry's backoff, an iteration's
// loop_delay), and it is at least the timeout plus 30s; a tick before it, or an answer of an
// attempt the engine timed out, changes nothing.
func TestTaskWatchTimes(t *testing.T) {
	step := &workflow.Step{Type: workflow.Task, Timeout: clock.Duration(10 * time.Minute)}
	sr := &engine.StepRun{Status: protocol.StepRunning, Dispatched: t0, NotBefore: t0.Add(time.Minute)}
	if got, want := engine.TaskWatch(sr, step), t0.Add(21*time.Minute); !got.Equal(want) {
		t.Errorf("TaskWatch = %s, want %s (due + 2 × timeout)", got, want)
	}
	step.Timeout = clock.Duration(5 * time.Second)
	if got, want := engine.TaskWatch(sr, step), t0.Add(time.Minute+35*time.Second); !got.Equal(want) {
		t.Errorf("TaskWatch = %s, want %s (due + timeout + 30s)", got, want)
	}
	for _, no := range []*workflow.Step{{Type: workflow.Task}, {Type: workflow.Approval, Timeout: step.Timeout}} {
		if got := engine.TaskWatch(sr, no); !got.IsZero() {
			t.Errorf("TaskWatch of a %s step with timeout %s = %s, want none", no.Type, no.Timeout, got)
		}
	}

	def := retrying(t, nil)
	run, _, err := engine.Start(def, "run1", json.RawMessage(`{}`), t0)
	if err != nil {
		t.Fatal(err)
	}
	early := protocol.Event{Type: protocol.EvTick, At: t0.Add(59 * time.Second), Step: "t", Item: -1, Activation: 1}
	if next, cmds, err := engine.Decide(def, run, early); err != nil || len(cmds) != 0 || next.Steps["t"].Status != protocol.StepRunning {
		t.Fatalf("a tick before the watch: %v, %d commands, step %s", err, len(cmds), next.Steps["t"].Status)
	}
	watch := early
	watch.At = t0.Add(time.Minute)
	run, _, err = engine.Decide(def, run, watch)
	if err != nil || run.Steps["t"].Status != protocol.StepFailed {
		t.Fatalf("the watch: %v, step %+v; want failed", err, run.Steps["t"])
	}
	late := protocol.Event{Type: protocol.EvCompleted, At: t0.Add(2 * time.Minute), Step: "t", Item: -1, Activation: 1, Iteration: 1, Attempt: 1, Output: json.RawMessage(`1`)}
	if _, cmds, err := engine.Decide(def, run, late); err != nil || len(cmds) != 0 {
		t.Errorf("a late answer after the watch: %v, %d commands; want nothing", err, len(cmds))
	}
}
