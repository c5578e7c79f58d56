package engine

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// Timers returns the schedule commands a run that has not finished waits for, as Decide emitted
// them: the run's deadline (Step "", Item -1); the end of the timeout of every running parallel,
// map or call step (a call step that runs as a parallel branch included), at StartedAt +
// timeout; the [TaskWatch] of every running task with a timeout; the end of every sleep, and the timeout of every waiting step that has one, at their
// Until. Each is addressed by step (or parent) and item, and activation. A shell that keeps
// timers in memory arms them again from the saved state with it (after a restart, or when it
// loads a run another engine decided), so that sleeps and waits are durable. A finished run
// waits for nothing. The commands are ordered by step key, the deadline first.
func Timers(def *workflow.Definition, run *Run) []Command {
	if def == nil || !active(run) {
		return nil
	}
	cmds := []Command{{Type: CmdSchedule, At: run.Deadline, Item: -1}}
	for _, key := range slices.Sorted(maps.Keys(run.Steps)) {
		sr := run.Steps[key]
		if sr == nil {
			continue
		}
		var at time.Time
		watch := false
		switch sr.Status {
		case protocol.StepWaiting:
			at = sr.Until
		case protocol.StepRunning:
			if sr.Wait == protocol.WaitSleep {
				at = sr.Until
				break
			}
			step := def.StepByID(sr.Step)
			if step != nil && step.Timeout > 0 && timed(step.Type) {
				at = sr.StartedAt.Add(step.Timeout.Std())
			} else {
				at, watch = TaskWatch(sr, step), true
			}
		}
		if at.IsZero() {
			continue
		}
		name, item := address(key, sr)
		c := Command{Type: CmdSchedule, At: at, Step: name, Item: item, Activation: sr.Activation, Watch: watch}
		if watch {
			c.Dispatched = sr.Dispatched
		}
		cmds = append(cmds, c)
	}
	return cmds
}

// SubRuns returns the sub-runs run started and has not seen end: its running call steps, its
// running children that run a workflow file, and the sub-runs of the calls of its agent steps
// (running or waiting) that have not ended, as the start_child commands named them (Step, Item
// and Activation address the step, Iteration and CallID a call; Input, Workflow and Agent are
// the ones it started with). It
// reads the state whatever the run's status: when a run ends, the steps it had in flight become
// cancelled, and the shell cancels these sub-runs. Ordered by run id.
func SubRuns(def *workflow.Definition, run *Run) []ChildRun {
	if def == nil || run == nil {
		return nil
	}
	d := &decider{def: def, g: graphOf(def), run: run}
	var subs []ChildRun
	for key, sr := range run.Steps {
		if sr == nil {
			continue
		}
		subs = append(subs, d.toolSubRuns(key, sr)...)
		if !inFlight(sr.Status) || !d.runsChild(sr) {
			continue
		}
		if sr.Parent != "" {
			if p := run.Steps[sr.Parent]; p == nil || !inFlight(p.Status) || p.Activation != sr.Activation {
				continue
			}
		}
		file := sr.Workflow
		if file == "" {
			if step := d.g.steps[sr.Step]; step != nil {
				file = step.Workflow
			}
		}
		name, item := address(key, sr)
		subs = append(subs, ChildRun{RunID: d.childRunID(key, sr), Workflow: file, Input: sr.Input,
			Step: name, Item: item, Activation: sr.Activation})
	}
	slices.SortFunc(subs, func(a, b ChildRun) int { return strings.Compare(a.RunID, b.RunID) })
	return subs
}

// inFlight reports whether a step with status s had work in flight: running, or cancelled
// because its run ended while it ran.
func inFlight(s protocol.StepStatus) bool {
	return s == protocol.StepRunning || s == protocol.StepCancelled
}

// AwaitsChild reports whether run, still going on, waits for the sub-run childID that p says
// it started: a sub-run [SubRuns] lists under that id, at p's step, item, activation, iteration
// and call. A shell starts a sub-run only then, so that nobody but the parent's own decision
// makes a run another run's child. A start decided before the parent's state that emitted it
// was saved (the commands go out first) finds no such child yet: the shell waits for the save.
func AwaitsChild(def *workflow.Definition, run *Run, childID string, p protocol.Parent) bool {
	if !active(run) || run.ID != p.RunID {
		return false
	}
	for _, c := range SubRuns(def, run) {
		if c.RunID == childID && c.Step == p.Step && c.Item == p.Item && c.Activation == p.Activation && c.Iteration == p.Iteration && c.CallID == p.CallID {
			return true
		}
	}
	return false
}
