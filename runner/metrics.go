package runner

import (
	"cmp"
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// count reports to the metrics what a decision carried out changed between before (nil for a
// start) and after: a run that started or ended, step activations and iterations that ended.
// A decision made again (a crash, a conflict) counts again: the counters count decisions.
func (e *Engine) count(def *workflow.Definition, before, after *engine.Run, at time.Time) {
	m := e.metrics
	if m == nil || after == nil {
		return
	}
	if before == nil {
		m.RunStarted(after.Workflow)
	}
	if !before.Finished() && after.Finished() {
		m.RunEnded(after.Workflow, string(after.Status))
	}
	for key, sr := range after.Steps {
		var old *engine.StepRun
		if before != nil {
			old = before.Steps[key]
		}
		if sr == nil {
			continue
		}
		e.countStep(def, after.Workflow, old, sr, at)
	}
}

// countStep reports the end of a step activation (old is the step before the decision, nil when
// it started in it) and of the iterations of an agent or agent_loop step.
func (e *Engine) countStep(def *workflow.Definition, wf string, old, sr *engine.StepRun, at time.Time) {
	ended := over(sr.Status) && (old == nil || !over(old.Status) || old.Activation != sr.Activation)
	if ended {
		e.metrics.StepEnded(wf, string(sr.Status), cmp.Or(sr.StopReason, metrics.NoStop), since(sr.StartedAt, at))
	}
	if old == nil || old.Activation != sr.Activation {
		return
	}
	went := sr.Iteration - old.Iteration                                         // iterations after which the loop went on
	stopped := ended && !over(old.Status) && sr.Status != protocol.StepCancelled // the last one
	if (went <= 0 && !stopped) || !iterates(def, sr.Step) {
		return
	}
	due := old.Dispatched
	if old.NotBefore.After(due) {
		due = old.NotBefore
	}
	for range went {
		e.metrics.IterationEnded(wf, metrics.NoStop, since(due, at))
	}
	if went <= 0 && stopped {
		e.metrics.IterationEnded(wf, cmp.Or(sr.StopReason, string(sr.Status)), since(due, at))
	}
}

// over reports whether a step with status s has ended (a skipped step never started).
func over(s protocol.StepStatus) bool {
	return s == protocol.StepCompleted || s == protocol.StepFailed || s == protocol.StepCancelled
}

// iterates reports whether step id of def runs in iterations (agent, agent_loop).
func iterates(def *workflow.Definition, id string) bool {
	if def == nil {
		return false
	}
	s := def.StepByID(id)
	return s != nil && (s.Type == workflow.Agent || s.Type == workflow.AgentLoop)
}

// since is at minus t, or -1 (unknown) when t is unset.
func since(t, at time.Time) time.Duration {
	if t.IsZero() {
		return -1
	}
	return max(at.Sub(t), 0)
}

// engineStats is what the engine reports at each scrape.
func (e *Engine) engineStats() metrics.EngineStats {
	s := &e.stats
	return metrics.EngineStats{
		Decided: s.decided.Load(), Acked: s.acked.Load(), Held: s.held.Load(), Dropped: s.dropped.Load(), Refused: s.refused.Load(),
		Reloads: s.reloads.Load(), Saves: s.saves.Load(), Conflicts: s.conflicts.Load(),
		Cached: s.cached.Load(), Evicted: s.evicted.Load(),
		Partitions: bits.OnesCount32(s.partitions.Load()),
	}
}

// consuming records whether the engine consumes partition p, for the metrics.
func (s *stats) consuming(p int, on bool) {
	for {
		old := s.partitions.Load()
		next := old &^ (1 << p)
		if on {
			next = old | 1<<p
		}
		if s.partitions.CompareAndSwap(old, next) {
			return
		}
	}
}

// waitingRuns counts the waiting runs of the partitions the engine consumes, by workflow, from
// the status index: one key per waiting run, read at each scrape.
func (e *Engine) waitingRuns(ctx context.Context) (map[string]int, error) {
	mine := e.stats.partitions.Load()
	n := map[string]int{}
	if mine == 0 {
		return n, nil
	}
	keys, err := e.index.ListKeysFiltered(ctx, runstore.StatusFilter(protocol.RunWaiting, ""))
	if err != nil {
		return nil, fmt.Errorf("runner: list the waiting runs: %w", err)
	}
	defer func() { _ = keys.Stop() }()
	for k := range keys.Keys() {
		if ik, ok := runstore.ParseStatusKey(k); ok && mine&(1<<natsbox.Partition(ik.RunID)) != 0 {
			n[ik.Workflow]++
		}
	}
	return n, nil
}
