package runner

import (
	"maps"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/telemetry"
)

// Spans of runs and steps. No engine holds a span open: the engine that decides the end of a
// step's activation, or of the run, emits its span then, with the ids every process derives
// from the run id (telemetry.RunSpan, StepSpan) and the start time the run record kept, once
// the save of that decision succeeded. A decision decided again after a crash on the saved
// state changes nothing and emits nothing; one whose save was lost emits its spans when it is
// decided and saved again.

// endedSpans returns the spans of what the decision of ev, from old (nil: the run's start) to
// next, ended: each step activation, and the run. answer is the trace context the event's
// message carried (the span of the worker's task that answered), linked from the step it
// ended.
func endedSpans(old, next *engine.Run, parent *protocol.Parent, ev *protocol.Event, answer trace.SpanContext) []telemetry.Ended {
	var out []telemetry.Ended
	at := ev.At
	for _, key := range slices.Sorted(maps.Keys(next.Steps)) {
		sr := next.Steps[key]
		var prev *engine.StepRun
		if old != nil {
			prev = old.Steps[key]
		}
		if prev != nil && prev.Activation < sr.Activation && !prev.StartedAt.IsZero() && !stepEnded(prev.Status) {
			// Ended and started again within this decision (a loop edge back to it).
			out = append(out, stepSpan(next.ID, key, prev, at, trace.SpanContext{}))
		}
		if sr.StartedAt.IsZero() || !stepEnded(sr.Status) {
			continue
		}
		if prev != nil && prev.Activation == sr.Activation && stepEnded(prev.Status) {
			continue // ended before
		}
		var link trace.SpanContext
		if ev.Step != "" && protocol.StepKey(ev.Step, ev.Item) == key {
			link = answer
		}
		out = append(out, stepSpan(next.ID, key, sr, at, link))
	}
	if next.Finished() && (old == nil || !old.Finished()) {
		out = append(out, runSpan(next, parent, at))
	}
	return out
}

// stepEnded reports whether a step with status s has ended its activation.
func stepEnded(s protocol.StepStatus) bool {
	switch s {
	case protocol.StepCompleted, protocol.StepFailed, protocol.StepCancelled, protocol.StepSkipped:
		return true
	}
	return false
}

// stepSpan is the span of sr's activation, step key of run runID, ended at end. A child of a
// parallel or map step is a child of its parent's span, any other step of the run's.
func stepSpan(runID, key string, sr *engine.StepRun, end time.Time, link trace.SpanContext) telemetry.Ended {
	step, parent := key, telemetry.RunSpan(runID)
	attrs := []attribute.KeyValue{telemetry.AttrRunID.String(runID), telemetry.AttrActivation.Int(sr.Activation)}
	if sr.Parent != "" {
		step, parent = sr.Parent, telemetry.StepSpan(runID, sr.Parent, sr.Activation)
		attrs = append(attrs, telemetry.AttrItem.Int(sr.Item))
	}
	attrs = append(attrs, telemetry.AttrStep.String(step), telemetry.AttrStatus.String(string(sr.Status)),
		telemetry.AttrIteration.Int(sr.Iteration))
	attrs = append(attrs, usageAttrs(sr.Usage)...)
	if sr.StopReason != "" {
		attrs = append(attrs, telemetry.AttrStopReason.String(sr.StopReason))
	}
	s := telemetry.Ended{ID: telemetry.StepSpan(runID, key, sr.Activation), Parent: parent,
		Name: "step " + key, Start: sr.StartedAt, End: end, Attrs: attrs}
	if link.IsValid() {
		s.Links = []trace.Link{{SpanContext: link}}
	}
	if sr.Status == protocol.StepFailed {
		s.Error = orElse(sr.StopReason, string(sr.Status))
	}
	return s
}

// runSpan is the span of run, ended at end: a root span, linked to the step that started it
// when it is a sub-run (whose trace is its parent's, another run's).
func runSpan(run *engine.Run, parent *protocol.Parent, end time.Time) telemetry.Ended {
	attrs := []attribute.KeyValue{telemetry.AttrRunID.String(run.ID), telemetry.AttrWorkflow.String(run.Workflow),
		telemetry.AttrStatus.String(string(run.Status))}
	attrs = append(attrs, usageAttrs(run.Usage())...)
	if reason, _ := run.Ending(); reason != "" {
		attrs = append(attrs, telemetry.AttrStopReason.String(reason))
	}
	s := telemetry.Ended{ID: telemetry.RunSpan(run.ID), Name: "run " + run.Workflow, Start: run.StartedAt, End: end}
	if parent != nil {
		attrs = append(attrs, telemetry.AttrParentRunID.String(parent.RunID))
		s.Links = []trace.Link{{SpanContext: telemetry.StepSpan(parent.RunID, protocol.StepKey(parent.Step, parent.Item), parent.Activation)}}
	}
	s.Attrs = attrs
	if run.Status != protocol.RunCompleted {
		s.Error = string(run.Status)
		if run.Error != nil && run.Error.Code != "" {
			s.Error = strings.TrimSpace(run.Error.Code)
		}
	}
	return s
}

func usageAttrs(u protocol.Usage) []attribute.KeyValue {
	return telemetry.Usage(u.ModelCalls, u.ToolCalls, u.InputTokens, u.OutputTokens, u.CostUSD)
}

func orElse(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// spansOf returns the spans the decision of d ended, when tracing is on.
func spansOf(d decided, old, next *entry) []telemetry.Ended {
	if !telemetry.Enabled() {
		return nil
	}
	var prev *engine.Run
	if old != nil {
		prev = old.rec.Run
	}
	var answer trace.SpanContext
	if d.m != nil {
		answer = telemetry.Extract(d.m.Headers())
	}
	return endedSpans(prev, next.rec.Run, next.rec.Parent, d.ev, answer)
}

// emitSpans emits the spans of the decisions of ds, now saved.
func emitSpans(ds ...decided) {
	for _, d := range ds {
		for _, s := range d.spans {
			telemetry.Emit(s)
		}
	}
}
