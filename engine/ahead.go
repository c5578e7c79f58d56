package engine

import (
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// Ahead reports whether ev answers something run has not dispatched yet: a task event
// (waiting included) or a child_finished event whose step (or child) has no state, or whose
// activation, iteration, attempt and resume come after the ones the state holds (for the
// sub-run of an agent step's call: its activation and iteration, or the same ones while the
// call is not pending yet). Decide ignores such an event like a stale one,
// but a shell must not drop it: it arrives when the state that dispatched its task has not been
// saved yet (a shell that crashed between publishing a task and saving the state), and it
// counts once the redelivered event that dispatched the task has been decided again. Other
// events are never ahead.
func Ahead(def *workflow.Definition, run *Run, ev protocol.Event) bool {
	if def == nil || !active(run) {
		return false
	}
	switch ev.Type {
	case protocol.EvCompleted, protocol.EvContinued, protocol.EvFailed, protocol.EvTimedOut, protocol.EvWaiting, protocol.EvChildFinished:
	default:
		return false
	}
	step := def.StepByID(ev.Step)
	if step == nil {
		return false
	}
	sr := run.Steps[keyOf(step, ev.Item)]
	if sr == nil {
		return true
	}
	// Within an iteration, attempts and resumes only grow: a later task has a higher attempt or
	// a higher resume, never a lower one.
	have := [4]int{sr.Activation, sr.Iteration, sr.Attempt, sr.Resume}
	want := [4]int{ev.Activation, ev.Iteration, ev.Attempt, ev.Resume}
	switch {
	case ev.Type == protocol.EvChildFinished && ev.CallID != "":
		// The sub-run of an agent step's call: ahead of a state that has not recorded the
		// waiting answer that started it (same iteration, the call not pending yet).
		have, want = [4]int{sr.Activation, sr.Iteration}, [4]int{ev.Activation, ev.Iteration}
		if have == want {
			p := sr.pendingCall(ev.CallID)
			return (sr.Status == protocol.StepRunning || sr.Status == protocol.StepWaiting) && (p == nil || p.Child == nil)
		}
	case ev.Type == protocol.EvChildFinished:
		have, want = [4]int{sr.Activation}, [4]int{ev.Activation}
	}
	for i := range have {
		if want[i] != have[i] {
			return want[i] > have[i]
		}
	}
	return false
}
