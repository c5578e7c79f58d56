package runstore

import (
	"encoding/json"
	"strconv"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// AppendRun appends json.Marshal(r) to b. On error it returns b as it was.
func AppendRun(b []byte, r *engine.Run) ([]byte, error) {
	if r == nil {
		return append(b, "null"...), nil
	}
	e := wire.NewEncoder(b)
	run(&e, r)
	return e.Result(b)
}

func run(e *wire.Encoder, r *engine.Run) {
	e.Byte('{')
	e.Str("id", r.ID)
	e.Str("workflow", r.Workflow)
	e.Str("hash", r.Hash)
	e.Str("status", string(r.Status))
	e.Raw("input", r.Input)
	e.Time("started_at", r.StartedAt)
	e.Time("deadline", r.Deadline)
	e.Int("executed", r.Executed)
	e.Name("steps")
	steps(e, r.Steps)
	e.Name("edges")
	edges(e, r.Edges)
	e.Name("path")
	e.Strs(r.Path)
	e.RawOmit("output", r.Output)
	if r.Error != nil {
		e.Name("error")
		e.Byte('{')
		e.Str("code", r.Error.Code)
		e.Str("message", r.Error.Message)
		e.StrOmit("step", r.Error.Step)
		e.Byte('}')
	}
	if len(r.Signals) > 0 {
		e.Name("signals")
		signals(e, r.Signals)
	}
	if len(r.SignalIDs) > 0 {
		e.Name("signal_ids")
		e.Strs(r.SignalIDs)
	}
	e.StrOmit("started_by", r.StartedBy)
	if len(r.Acts) > 0 {
		e.Name("acts")
		acts(e, r.Acts)
	}
	if s := r.Slot; s != nil {
		e.Name("slot")
		e.Byte('{')
		e.Str("key", s.Key)
		e.Int("limit", s.Limit)
		e.TimeOmitZero("granted", s.Granted)
		e.Byte('}')
	}
	if l := r.Limits; l != nil {
		e.Name("limits")
		e.Byte('{')
		e.IntOmit("max_steps", l.MaxSteps)
		e.IntOmit("max_signals", l.MaxSignals)
		e.IntOmit("max_events", l.MaxEvents)
		e.Byte('}')
	}
	e.IntOmit("events", r.Events)
	e.Byte('}')
}

func acts(e *wire.Encoder, acts []engine.Act) {
	e.Byte('[')
	for i := range acts {
		a := &acts[i]
		e.Sep()
		e.Byte('{')
		e.Str("id", a.ID)
		e.Str("type", string(a.Type))
		e.Time("at", a.At)
		e.Str("by", a.By)
		e.StrOmit("on_behalf_of", a.OnBehalfOf)
		e.StrOmit("step", a.Step)
		e.StrOmit("call_id", a.CallID)
		e.StrOmit("refused", a.Refused)
		e.StrOmit("reason", a.Reason)
		e.Byte('}')
	}
	e.Byte(']')
}

func steps(e *wire.Encoder, steps map[string]*engine.StepRun) {
	if steps == nil {
		e.Null()
		return
	}
	var buf [16]string
	e.Byte('{')
	for _, k := range wire.SortedKeys(steps, buf[:0]) {
		e.Key(k)
		ok := !e.Failed()
		stepRun(e, steps[k])
		if ok && e.Failed() {
			e.Under("steps[" + strconv.Quote(k) + "]")
		}
	}
	e.Byte('}')
}

func stepRun(e *wire.Encoder, s *engine.StepRun) {
	if s == nil {
		e.Null()
		return
	}
	e.Byte('{')
	e.StrOmit("step", s.Step)
	e.StrOmit("parent", s.Parent)
	e.IntOmit("item", s.Item)
	e.StrOmit("workflow", s.Workflow)
	e.Str("status", string(s.Status))
	e.Int("activation", s.Activation)
	e.IntOmit("iteration", s.Iteration)
	e.IntOmit("attempt", s.Attempt)
	e.IntOmit("attempts", s.Attempts)
	e.TimeOmitZero("started_at", s.StartedAt)
	e.TimeOmitZero("first_iteration_at", s.FirstIterationAt)
	e.TimeOmitZero("not_before", s.NotBefore)
	e.TimeOmitZero("dispatched", s.Dispatched)
	e.RawOmit("input", s.Input)
	e.RawOmit("output", s.Output)
	e.StrOmit("label", s.Label)
	e.StrOmit("stop_reason", s.StopReason)
	e.StrOmit("stop_detail", s.StopDetail)
	e.StrOmit("error", s.Error)
	if s.Usage != (protocol.Usage{}) { // omitzero: == is what reflect.Value.IsZero compares with
		e.Name("usage")
		e.Usage(&s.Usage)
	}
	e.StrOmit("prompt", s.Prompt)
	e.StrOmit("instructions", s.Instructions)
	e.StrOmit("goal", s.Goal)
	e.StrOmit("session", s.Session)
	e.IntOmit("children", s.Children)
	e.IntOmit("next", s.Next)
	e.IntOmit("running", s.Running)
	e.IntOmit("done", s.Done)
	e.StrOmit("wait", string(s.Wait))
	e.TimeOmitZero("until", s.Until)
	e.TimeOmitZero("waiting_since", s.WaitingSince)
	e.DurationOmit("waited", s.Waited)
	if len(s.Pending) > 0 {
		e.Name("pending")
		e.Pending(s.Pending)
	}
	if len(s.Decisions) > 0 {
		e.Name("decisions")
		e.DecisionMap(s.Decisions)
	}
	if len(s.ChildResults) > 0 {
		e.Name("child_results")
		e.ChildResultMap(s.ChildResults)
	}
	e.IntOmit("resume", s.Resume)
	e.RawOmit("human_input", s.HumanInput)
	e.Byte('}')
}

func edges(e *wire.Encoder, edges []engine.EdgeState) {
	if edges == nil {
		e.Null()
		return
	}
	e.Byte('[')
	for i := range edges {
		e.Sep()
		e.Byte('{')
		e.Str("state", string(edges[i].State))
		e.IntOmit("uses", edges[i].Uses)
		e.Byte('}')
	}
	e.Byte(']')
}

// signals is never nil: Run.Signals omits an empty map.
func signals(e *wire.Encoder, signals map[string][]json.RawMessage) {
	var buf [8]string
	e.Byte('{')
	for _, k := range wire.SortedKeys(signals, buf[:0]) {
		e.Key(k)
		q := signals[k]
		if q == nil {
			e.Null()
			continue
		}
		e.Byte('[')
		for i, raw := range q {
			e.Sep()
			if err := e.RawValue(raw); err != nil {
				e.Fail("signals["+strconv.Quote(k)+"]["+strconv.Itoa(i)+"]", err)
			}
		}
		e.Byte(']')
	}
	e.Byte('}')
}
