package runner

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/telemetry"
)

func attr(s telemetry.Ended, key attribute.Key) attribute.Value {
	for _, kv := range s.Attrs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestEndedSpans: a decision emits the span of each step activation it ended, once, under the
// run's span (a child of a map under its parent's), linked to the task that answered; and the
// run's span when the run ended.
func TestEndedSpans(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := t0.Add(time.Minute)
	running := func(act int) *engine.StepRun {
		return &engine.StepRun{Status: protocol.StepRunning, Activation: act, Iteration: 2, StartedAt: t0}
	}
	ended := func(act int, st protocol.StepStatus) *engine.StepRun {
		sr := running(act)
		sr.Status, sr.StopReason, sr.Usage = st, "completed", protocol.Usage{ModelCalls: 2, InputTokens: 7}
		return sr
	}
	old := &engine.Run{ID: "r", Workflow: "wf", Status: protocol.RunRunning, StartedAt: t0, Steps: map[string]*engine.StepRun{
		"a": running(1), "b": ended(1, protocol.StepCompleted), "loop": running(1), "m": running(1),
		"m#0":   {Status: protocol.StepRunning, Activation: 1, StartedAt: t0, Parent: "m", Item: 0},
		"never": {Status: protocol.StepPending},
	}}
	next := &engine.Run{ID: "r", Workflow: "wf", Status: protocol.RunRunning, StartedAt: t0, Steps: map[string]*engine.StepRun{
		"a": ended(1, protocol.StepFailed), "b": ended(1, protocol.StepCompleted), "loop": running(2), "m": running(1),
		"m#0":   {Status: protocol.StepCompleted, Activation: 1, StartedAt: t0, Parent: "m", Item: 0},
		"never": {Status: protocol.StepSkipped},
	}}
	answer := trace.NewSpanContext(trace.SpanContextConfig{TraceID: telemetry.TraceID("r"), SpanID: trace.SpanID{1}, Remote: true})
	got := endedSpans(old, next, nil, &protocol.Event{Type: protocol.EvFailed, Step: "a", Item: -1, At: at}, answer)
	byName := map[string]telemetry.Ended{}
	for _, s := range got {
		byName[s.Name] = s
	}
	if len(got) != 3 || len(byName) != 3 {
		t.Fatalf("spans %v, want steps a, loop (its first activation) and m#0", byName)
	}
	a, loop, child := byName["step a"], byName["step loop"], byName["step m#0"]
	if !a.ID.Equal(telemetry.StepSpan("r", "a", 1)) || !a.Parent.Equal(telemetry.RunSpan("r")) || a.Start != t0 || a.End != at || a.Error != "completed" {
		t.Errorf("step a: %+v", a)
	}
	if len(a.Links) != 1 || !a.Links[0].SpanContext.Equal(answer) {
		t.Errorf("step a links %v, want the answer's span", a.Links)
	}
	if attr(a, telemetry.AttrSumInputTokens).AsInt64() != 7 || attr(a, telemetry.AttrInputTokens).Type() != attribute.INVALID || attr(a, telemetry.AttrStatus).AsString() != "failed" || attr(a, telemetry.AttrIteration).AsInt64() != 2 {
		t.Errorf("step a attributes: %v", a.Attrs)
	}
	if !loop.ID.Equal(telemetry.StepSpan("r", "loop", 1)) || len(loop.Links) != 0 {
		t.Errorf("step loop: %+v, want its first activation's span", loop)
	}
	if !child.Parent.Equal(telemetry.StepSpan("r", "m", 1)) || attr(child, telemetry.AttrStep).AsString() != "m" || attr(child, telemetry.AttrItem).AsInt64() != 0 {
		t.Errorf("map child: %+v", child)
	}

	// The run ends: its span, a sub-run's linked to the step that started it.
	done := next.Clone()
	done.Status, done.Error = protocol.RunFailed, &protocol.RunError{Code: "E_STEP_FAILED", Message: "the private detail"}
	parent := &protocol.Parent{RunID: "p", Step: "call", Item: -1, Activation: 2}
	got = endedSpans(next, done, parent, &protocol.Event{Type: protocol.EvTick, At: at}, trace.SpanContext{})
	if len(got) != 1 || got[0].Name != "run wf" || !got[0].ID.Equal(telemetry.RunSpan("r")) || got[0].Parent.IsValid() || got[0].Error != "E_STEP_FAILED" {
		t.Fatalf("run spans: %+v", got)
	}
	if len(got[0].Links) != 1 || !got[0].Links[0].SpanContext.Equal(telemetry.StepSpan("p", "call", 2)) || attr(got[0], telemetry.AttrParentRunID).AsString() != "p" {
		t.Errorf("sub-run span links %v", got[0].Links)
	}
	if got := endedSpans(done, done, parent, &protocol.Event{Type: protocol.EvTick, At: at}, trace.SpanContext{}); len(got) != 0 {
		t.Errorf("a decision that ends nothing more emitted %v", got)
	}
}
