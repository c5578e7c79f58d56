package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
)

// The encoding of tasks, events and run records, on the path of every durable iteration:
// encoding/json's reflection was 7% of an iteration's CPU. AppendTask, AppendEvent, AppendRun
// and AppendParent write their type member by member, without reflection, and write exactly
// what json.Marshal writes (TestAppendEveryField and the FuzzAppend targets hold them to it):
//
//   - members in the order of the struct's fields, an embedded struct's in its place;
//     omitempty and omitzero as encoding/json reads them;
//   - strings with encoding/json's escapes, <, > and & included, invalid UTF-8 as \ufffd;
//   - map members sorted by key; nil maps, slices and pointers as null;
//   - times as Time.MarshalJSON writes them; floats in encoding/json's format;
//   - a json.RawMessage compacted and HTML-escaped. Raws are trusted to be valid JSON, as every
//     raw the engine and the workers hold was decoded or encoded by encoding/json: one that
//     compacting and escaping would not change is copied as it is, any other goes through
//     encoding/json (which checks it).
//
// They fail where encoding/json fails (a time out of RFC 3339's range of years or zone offsets,
// a NaN cost, an empty raw where null is not omitted): the error names the member, as in
// steps["a"].pending[0].arguments, and the caller names the task, event or run.

// buffers holds the scratch buffers of Encode.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled bounds the buffers Encode keeps, so that one huge run does not pin its buffer.
const maxPooled = 1 << 20

// Encode returns what appendTo (AppendTask, AppendEvent, ...) appends for v, in a slice of its
// own. It encodes into a pooled buffer and copies the result out: one allocation of the exact
// size, where appending to nil would grow the slice several times.
func Encode[T any](v T, appendTo func([]byte, T) ([]byte, error)) ([]byte, error) {
	p := buffers.Get().(*[]byte)
	b, err := appendTo((*p)[:0], v)
	var out []byte
	if err == nil {
		out = bytes.Clone(b)
	}
	if cap(b) <= maxPooled {
		*p = b[:0]
		buffers.Put(p)
	}
	return out, err
}

// AppendTask appends json.Marshal(t) to b. On error it returns b as it was.
func AppendTask(b []byte, t *protocol.Task) ([]byte, error) {
	if t == nil {
		return append(b, "null"...), nil
	}
	e := encoder{b: b}
	e.task(t)
	return e.result(b)
}

// AppendEvent appends json.Marshal(ev) to b. On error it returns b as it was.
func AppendEvent(b []byte, ev *protocol.Event) ([]byte, error) {
	if ev == nil {
		return append(b, "null"...), nil
	}
	e := encoder{b: b}
	e.event(ev)
	return e.result(b)
}

// AppendRun appends json.Marshal(r) to b. On error it returns b as it was.
func AppendRun(b []byte, r *engine.Run) ([]byte, error) {
	if r == nil {
		return append(b, "null"...), nil
	}
	e := encoder{b: b}
	e.run(r)
	return e.result(b)
}

// AppendParent appends json.Marshal(p) to b (it cannot fail).
func AppendParent(b []byte, p *protocol.Parent) ([]byte, error) {
	e := encoder{b: b}
	e.parent(p)
	return e.result(b)
}

// encoder appends one value to b. The members of an object record the first error in err and
// go on (what they append is then thrown away): the code lists members without a check after
// each.
type encoder struct {
	b   []byte
	err error
}

func (e *encoder) result(orig []byte) ([]byte, error) {
	if e.err != nil {
		return orig, e.err
	}
	return e.b, nil
}

// The types, member by member as encoding/json writes them.

func (e *encoder) task(t *protocol.Task) {
	e.b = append(e.b, '{')
	e.str("run_id", t.RunID)
	e.str("step", t.Step)
	e.int("item", t.Item)
	e.str("body", t.Body)
	e.str("type", string(t.Type))
	e.str("handler", t.Handler)
	e.strOmit("workflow", t.Workflow)
	e.strOmit("model", t.Model)
	e.strOmit("prompt", t.Prompt)
	e.strOmit("instructions", t.Instructions)
	e.strOmit("goal", t.Goal)
	e.strOmit("session", t.Session)
	e.strOmit("started_by", t.StartedBy)
	e.int("activation", t.Activation)
	e.int("iteration", t.Iteration)
	e.int("attempt", t.Attempt)
	e.raw("input", t.Input)
	e.str("msg_id", t.MsgID)
	e.timeOmitZero("not_before", t.NotBefore)
	e.durationOmit("timeout", t.Timeout)
	e.intOmit("resume", t.Resume)
	if len(t.Decisions) > 0 {
		e.name("decisions")
		e.decisions(t.Decisions)
	}
	e.rawOmit("human_input", t.HumanInput)
	if len(t.ChildResults) > 0 {
		e.name("child_results")
		e.childResults(t.ChildResults)
	}
	e.intOmit("protocol", t.Protocol)
	e.b = append(e.b, '}')
}

func (e *encoder) event(ev *protocol.Event) {
	e.b = append(e.b, '{')
	e.str("run_id", ev.RunID)
	e.engineEvent(ev) // embedded: encoding/json writes its members in its place
	e.strOmit("workflow", ev.Workflow)
	if ev.Parent != nil {
		e.name("parent")
		e.parent(ev.Parent)
	}
	if ev.Registered != nil {
		e.name("registered")
		e.registration(ev.Registered)
	}
	e.strOmit("child", ev.Child)
	e.strOmit("nonce", ev.Nonce)
	e.intOmit("protocol", ev.Protocol)
	e.b = append(e.b, '}')
}

// engineEvent writes the members of ev, in the object of the Event that embeds it.
func (e *encoder) engineEvent(ev *protocol.Event) {
	e.str("type", string(ev.Type))
	e.time("at", ev.At)
	e.rawOmit("input", ev.Input)
	e.strOmit("step", ev.Step)
	e.int("item", ev.Item)
	e.intOmit("activation", ev.Activation)
	e.intOmit("iteration", ev.Iteration)
	e.intOmit("attempt", ev.Attempt)
	e.rawOmit("output", ev.Output)
	e.strOmit("label", ev.Label)
	e.strOmit("stop_reason", ev.StopReason)
	e.strOmit("stop_detail", ev.StopDetail)
	e.strOmit("error", ev.Error)
	if ev.Usage != nil {
		e.name("usage")
		e.usage(ev.Usage)
	}
	e.boolOmit("permanent", ev.Permanent)
	if ev.Record != nil {
		e.name("record")
		e.reflected("record", ev.Record)
	}
	e.strOmit("reason", ev.Reason)
	e.strOmit("status", string(ev.Status))
	e.intOmit("resume", ev.Resume)
	if len(ev.Pending) > 0 {
		e.name("pending")
		e.pending(ev.Pending)
	}
	e.strOmit("call_id", ev.CallID)
	e.boolOmit("approve", ev.Approve)
	e.strOmit("message", ev.Message)
	e.strOmit("by", ev.By)
	e.strOmit("on_behalf_of", ev.OnBehalfOf)
	e.strOmit("name", ev.Name)
	e.strOmit("id", ev.ID)
}

func (e *encoder) registration(r *protocol.Registration) {
	e.b = append(e.b, '{')
	e.str("name", r.Name)
	e.int("version", r.Version)
	e.b = append(e.b, '}')
}

func (e *encoder) parent(p *protocol.Parent) {
	if p == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '{')
	e.str("run_id", p.RunID)
	e.str("step", p.Step)
	e.int("item", p.Item)
	e.int("activation", p.Activation)
	e.intOmit("iteration", p.Iteration)
	e.strOmit("call_id", p.CallID)
	e.b = append(e.b, '}')
}

func (e *encoder) run(r *engine.Run) {
	e.b = append(e.b, '{')
	e.str("id", r.ID)
	e.str("workflow", r.Workflow)
	e.str("hash", r.Hash)
	e.str("status", string(r.Status))
	e.raw("input", r.Input)
	e.time("started_at", r.StartedAt)
	e.time("deadline", r.Deadline)
	e.int("executed", r.Executed)
	e.name("steps")
	e.steps(r.Steps)
	e.name("edges")
	e.edges(r.Edges)
	e.name("path")
	e.strs(r.Path)
	e.rawOmit("output", r.Output)
	if r.Error != nil {
		e.name("error")
		e.b = append(e.b, '{')
		e.str("code", r.Error.Code)
		e.str("message", r.Error.Message)
		e.strOmit("step", r.Error.Step)
		e.b = append(e.b, '}')
	}
	if len(r.Signals) > 0 {
		e.name("signals")
		e.signals(r.Signals)
	}
	if len(r.SignalIDs) > 0 {
		e.name("signal_ids")
		e.strs(r.SignalIDs)
	}
	e.strOmit("started_by", r.StartedBy)
	if len(r.Acts) > 0 {
		e.name("acts")
		e.acts(r.Acts)
	}
	if s := r.Slot; s != nil {
		e.name("slot")
		e.b = append(e.b, '{')
		e.str("key", s.Key)
		e.int("limit", s.Limit)
		e.timeOmitZero("granted", s.Granted)
		e.b = append(e.b, '}')
	}
	if l := r.Limits; l != nil {
		e.name("limits")
		e.b = append(e.b, '{')
		e.intOmit("max_steps", l.MaxSteps)
		e.intOmit("max_signals", l.MaxSignals)
		e.intOmit("max_events", l.MaxEvents)
		e.b = append(e.b, '}')
	}
	e.intOmit("events", r.Events)
	e.b = append(e.b, '}')
}

func (e *encoder) acts(acts []engine.Act) {
	e.b = append(e.b, '[')
	for i := range acts {
		a := &acts[i]
		e.sep()
		e.b = append(e.b, '{')
		e.str("id", a.ID)
		e.str("type", string(a.Type))
		e.time("at", a.At)
		e.str("by", a.By)
		e.strOmit("on_behalf_of", a.OnBehalfOf)
		e.strOmit("step", a.Step)
		e.strOmit("call_id", a.CallID)
		e.strOmit("refused", a.Refused)
		e.strOmit("reason", a.Reason)
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, ']')
}

func (e *encoder) steps(steps map[string]*engine.StepRun) {
	if steps == nil {
		e.b = append(e.b, "null"...)
		return
	}
	var buf [16]string
	e.b = append(e.b, '{')
	for _, k := range sortedKeys(steps, buf[:0]) {
		e.key(k)
		ok := e.err == nil
		e.stepRun(steps[k])
		if ok && e.err != nil {
			e.under("steps[" + strconv.Quote(k) + "]")
		}
	}
	e.b = append(e.b, '}')
}

func (e *encoder) stepRun(s *engine.StepRun) {
	if s == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '{')
	e.strOmit("step", s.Step)
	e.strOmit("parent", s.Parent)
	e.intOmit("item", s.Item)
	e.strOmit("workflow", s.Workflow)
	e.str("status", string(s.Status))
	e.int("activation", s.Activation)
	e.intOmit("iteration", s.Iteration)
	e.intOmit("attempt", s.Attempt)
	e.intOmit("attempts", s.Attempts)
	e.timeOmitZero("started_at", s.StartedAt)
	e.timeOmitZero("first_iteration_at", s.FirstIterationAt)
	e.timeOmitZero("not_before", s.NotBefore)
	e.timeOmitZero("dispatched", s.Dispatched)
	e.rawOmit("input", s.Input)
	e.rawOmit("output", s.Output)
	e.strOmit("label", s.Label)
	e.strOmit("stop_reason", s.StopReason)
	e.strOmit("stop_detail", s.StopDetail)
	e.strOmit("error", s.Error)
	if s.Usage != (protocol.Usage{}) { // omitzero: == is what reflect.Value.IsZero compares with
		e.name("usage")
		e.usage(&s.Usage)
	}
	e.strOmit("prompt", s.Prompt)
	e.strOmit("instructions", s.Instructions)
	e.strOmit("goal", s.Goal)
	e.strOmit("session", s.Session)
	e.intOmit("children", s.Children)
	e.intOmit("next", s.Next)
	e.intOmit("running", s.Running)
	e.intOmit("done", s.Done)
	e.strOmit("wait", string(s.Wait))
	e.timeOmitZero("until", s.Until)
	e.timeOmitZero("waiting_since", s.WaitingSince)
	e.durationOmit("waited", s.Waited)
	if len(s.Pending) > 0 {
		e.name("pending")
		e.pending(s.Pending)
	}
	if len(s.Decisions) > 0 {
		e.name("decisions")
		e.decisionMap(s.Decisions)
	}
	if len(s.ChildResults) > 0 {
		e.name("child_results")
		e.childResultMap(s.ChildResults)
	}
	e.intOmit("resume", s.Resume)
	e.rawOmit("human_input", s.HumanInput)
	e.b = append(e.b, '}')
}

func (e *encoder) usage(u *protocol.Usage) {
	e.b = append(e.b, '{')
	e.intOmit("model_calls", u.ModelCalls)
	e.intOmit("tool_calls", u.ToolCalls)
	e.intOmit("input_tokens", u.InputTokens)
	e.intOmit("output_tokens", u.OutputTokens)
	if u.CostUSD != 0 { // omitempty: -0 too
		e.name("cost_usd")
		var err error
		if e.b, err = appendFloat(e.b, u.CostUSD); err != nil {
			e.fail("usage.cost_usd", err) // usage is a member of its name in events and steps
		}
	}
	e.b = append(e.b, '}')
}

// array writes the list xs (never nil: the members that hold lists omit an empty one), each
// item with item; an item's error is placed under name[i].
func array[T listed](e *encoder, name string, xs []T) {
	e.b = append(e.b, '[')
	for i := range xs {
		e.sep()
		ok := e.err == nil
		e.item(&xs[i])
		if ok && e.err != nil {
			e.under(name + "[" + strconv.Itoa(i) + "]")
		}
	}
	e.b = append(e.b, ']')
}

// members writes the map m (never nil: the members that hold maps omit an empty one) with its
// keys sorted, each value with item; a value's error is placed under name["key"].
func members[T listed](e *encoder, name string, m map[string]T) {
	var buf [8]string
	e.b = append(e.b, '{')
	for _, k := range sortedKeys(m, buf[:0]) {
		e.key(k)
		ok := e.err == nil
		v := m[k]
		e.item(&v)
		if ok && e.err != nil {
			e.under(name + "[" + strconv.Quote(k) + "]")
		}
	}
	e.b = append(e.b, '}')
}

// listed are the types of the items of the lists and maps array and members write.
type listed interface {
	protocol.PendingCall | protocol.Decision | protocol.ChildResult
}

// item writes one item of a list or map (a direct call, so that the encoder stays on the
// stack, where a function value would move it to the heap).
func (e *encoder) item(v any) {
	switch v := v.(type) {
	case *protocol.PendingCall:
		e.pendingCall(v)
	case *protocol.Decision:
		e.decision(v)
	case *protocol.ChildResult:
		e.childResult(v)
	}
}

// pending writes pending calls (Event.Pending, StepRun.Pending).
func (e *encoder) pending(calls []protocol.PendingCall) { array(e, "pending", calls) }

func (e *encoder) pendingCall(c *protocol.PendingCall) {
	e.b = append(e.b, '{')
	e.str("call_id", c.CallID)
	e.str("tool", c.Tool)
	e.raw("arguments", c.Arguments)
	if c.Child != nil {
		e.name("child")
		e.b = append(e.b, '{')
		e.strOmit("agent", c.Child.Agent)
		e.strOmit("workflow", c.Child.Workflow)
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, '}')
}

// decisions writes Task.Decisions; decisionMap StepRun.Decisions.
func (e *encoder) decisions(ds []protocol.Decision) { array(e, "decisions", ds) }

func (e *encoder) decisionMap(ds map[string]protocol.Decision) { members(e, "decisions", ds) }

func (e *encoder) decision(d *protocol.Decision) {
	e.b = append(e.b, '{')
	e.str("call_id", d.CallID)
	e.bool("approve", d.Approve)
	e.strOmit("message", d.Message)
	e.strOmit("by", d.By)
	e.strOmit("on_behalf_of", d.OnBehalfOf)
	e.b = append(e.b, '}')
}

// childResults writes Task.ChildResults; childResultMap StepRun.ChildResults.
func (e *encoder) childResults(rs []protocol.ChildResult) { array(e, "child_results", rs) }

func (e *encoder) childResultMap(rs map[string]protocol.ChildResult) {
	members(e, "child_results", rs)
}

func (e *encoder) childResult(r *protocol.ChildResult) {
	e.b = append(e.b, '{')
	e.str("call_id", r.CallID)
	e.str("run_id", r.RunID)
	e.str("status", string(r.Status))
	e.rawOmit("output", r.Output)
	e.strOmit("stop_reason", r.StopReason)
	e.strOmit("stop_detail", r.StopDetail)
	e.strOmit("error", r.Error)
	if r.Usage != nil {
		e.name("usage")
		e.usage(r.Usage)
	}
	e.b = append(e.b, '}')
}

func (e *encoder) edges(edges []engine.EdgeState) {
	if edges == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i := range edges {
		e.sep()
		e.b = append(e.b, '{')
		e.str("state", string(edges[i].State))
		e.intOmit("uses", edges[i].Uses)
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, ']')
}

// signals is never nil: Run.Signals omits an empty map.
func (e *encoder) signals(signals map[string][]json.RawMessage) {
	var buf [8]string
	e.b = append(e.b, '{')
	for _, k := range sortedKeys(signals, buf[:0]) {
		e.key(k)
		q := signals[k]
		if q == nil {
			e.b = append(e.b, "null"...)
			continue
		}
		e.b = append(e.b, '[')
		for i, raw := range q {
			e.sep()
			var err error
			if e.b, err = appendRaw(e.b, raw); err != nil {
				e.fail("signals["+strconv.Quote(k)+"]["+strconv.Itoa(i)+"]", err)
			}
		}
		e.b = append(e.b, ']')
	}
	e.b = append(e.b, '}')
}

func (e *encoder) strs(s []string) {
	if s == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for _, v := range s {
		e.sep()
		e.b = appendString(e.b, v)
	}
	e.b = append(e.b, ']')
}

// sortedKeys returns the keys of m in the order encoding/json writes them (byte order),
// appended to buf: a buffer on the caller's stack spares an allocation for a few keys.
func sortedKeys[V any](m map[string]V, buf []string) []string {
	for k := range m {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}

// Members. Each writes the separator, its name and its value; the ...Omit ones write nothing for
// the values omitempty (or omitzero, for times) leaves out.

// sep writes the comma before a member or an element, unless it is the first. It looks at the
// last byte: only the '{' or '[' that opens an object or array ends there, as no value ends with
// one.
func (e *encoder) sep() {
	if c := e.b[len(e.b)-1]; c != '{' && c != '[' {
		e.b = append(e.b, ',')
	}
}

// name writes the name of a member. The names are the json tags of the types, which need no
// escaping.
func (e *encoder) name(n string) {
	e.sep()
	e.b = append(e.b, '"')
	e.b = append(e.b, n...)
	e.b = append(e.b, '"', ':')
}

// key writes the key of a map member, escaped as every string.
func (e *encoder) key(k string) {
	e.sep()
	e.b = appendString(e.b, k)
	e.b = append(e.b, ':')
}

func (e *encoder) str(name, s string) {
	e.name(name)
	e.b = appendString(e.b, s)
}

func (e *encoder) strOmit(name, s string) {
	if s != "" {
		e.str(name, s)
	}
}

func (e *encoder) int(name string, n int) {
	e.name(name)
	e.b = strconv.AppendInt(e.b, int64(n), 10)
}

func (e *encoder) intOmit(name string, n int) {
	if n != 0 {
		e.int(name, n)
	}
}

// durationOmit writes d as encoding/json does: its number of nanoseconds.
func (e *encoder) durationOmit(name string, d time.Duration) {
	if d != 0 {
		e.name(name)
		e.b = strconv.AppendInt(e.b, int64(d), 10)
	}
}

func (e *encoder) bool(name string, v bool) {
	e.name(name)
	e.b = strconv.AppendBool(e.b, v)
}

func (e *encoder) boolOmit(name string, v bool) {
	if v {
		e.bool(name, v)
	}
}

func (e *encoder) time(name string, t time.Time) {
	e.name(name)
	var err error
	if e.b, err = appendTime(e.b, t); err != nil {
		e.fail(name, err)
	}
}

// timeOmitZero leaves out a zero time, as omitzero does (Time.IsZero, whatever the location).
func (e *encoder) timeOmitZero(name string, t time.Time) {
	if !t.IsZero() {
		e.time(name, t)
	}
}

func (e *encoder) raw(name string, raw json.RawMessage) {
	e.name(name)
	var err error
	if e.b, err = appendRaw(e.b, raw); err != nil {
		e.fail(name, err)
	}
}

// reflected writes v as encoding/json does, with its reflective encoder: for a value off the
// path of every iteration (an iteration record).
func (e *encoder) reflected(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		e.fail(name, err)
		return
	}
	e.b = append(e.b, data...)
}

// rawOmit leaves out a raw of length 0, as omitempty does (a nil raw, or an empty one, which
// encoding/json would refuse).
func (e *encoder) rawOmit(name string, raw json.RawMessage) {
	if len(raw) > 0 {
		e.raw(name, raw)
	}
}

// Errors. The encoder does not track where it is: fail records the member that failed, and the
// few values that nest a member that can fail (a time, a float, a raw) put the error under their
// own place with under when it happened inside them.

// memberError is an error of encoding/json's at a member; path is where, from the value
// encoded: steps["a"].pending[0].arguments.
type memberError struct {
	path string
	err  error
}

func (m *memberError) Error() string { return m.path + ": " + m.err.Error() }
func (m *memberError) Unwrap() error { return m.err }

// fail records err at the member path, unless an error came first.
func (e *encoder) fail(path string, err error) {
	if e.err == nil {
		e.err = &memberError{path, err}
	}
}

// under puts the error recorded inside a nested value under the place of that value.
func (e *encoder) under(place string) {
	m := e.err.(*memberError)
	if m.path[0] == '[' {
		m.path = place + m.path
	} else {
		m.path = place + "." + m.path
	}
}

// Values, as encoding/json writes them (with HTML escaping, as json.Marshal does).

// htmlSafe holds the ASCII bytes a string holds as they are: not a control character, '"',
// '\\', '<', '>' or '&'.
var htmlSafe = func() (safe [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		safe[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return safe
}()

const hexDigits = "0123456789abcdef"

// appendString appends s quoted as encoding/json quotes it: \", \\, \b, \f, \n, \r and \t, the
// other control characters and <, > and & as \u00XX, U+2028 and U+2029 as \u2028 and \u2029,
// and each byte of invalid UTF-8 as \ufffd.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is yet to be copied
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendRaw appends raw as encoding/json does: nil as null, anything else compacted, with <, >,
// &, U+2028 and U+2029 escaped, and an error for an empty raw. raw is trusted to be valid JSON:
// one that compacting and escaping leaves as it is goes as it is, without the validation
// encoding/json would do.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	switch {
	case raw == nil:
		return append(b, "null"...), nil
	case len(raw) > 0 && compactSafe(raw):
		return append(b, raw...), nil
	}
	c, err := json.Marshal(raw) // compacts, escapes, and refuses what is not JSON
	if err != nil {
		return b, err
	}
	return append(b, c...), nil
}

// rawSpecial marks the bytes compactSafe looks at: the ones encoding/json escapes (<, >, & and
// 0xE2, which starts U+2028 and U+2029 and many other characters), white space, and the quote and
// backslash that start and end strings.
var rawSpecial = func() (special [256]bool) {
	for _, c := range []byte("<>&\xE2 \t\r\n\"\\") {
		special[c] = true
	}
	return special
}()

// compactSafe reports whether the valid JSON raw is what encoding/json writes for it: no white
// space between tokens (white space in a string is kept) and no byte it escapes.
func compactSafe(raw []byte) bool {
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !rawSpecial[c] {
			continue
		}
		switch c {
		case '<', '>', '&', 0xE2:
			return false
		case '"':
			inString = !inString
		case '\\':
			i++ // only in a string: the escaped byte, maybe a quote, is no end
		default: // white space
			if !inString {
				return false
			}
		}
	}
	return true
}

// appendTime appends t as Time.MarshalJSON writes it, with its error (a year outside [0,9999],
// a zone offset of 24 hours or more). AppendText writes the same RFC 3339 text without
// allocating.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	out, err := t.AppendText(append(b, '"'))
	if err != nil {
		if _, jerr := t.MarshalJSON(); jerr != nil {
			err = jerr // the error encoding/json reports
		}
		return b, err
	}
	return append(out, '"'), nil
}

// appendFloat appends f as encoding/json writes a float64: like strconv's 'f' format, or 'e'
// for magnitudes below 1e-6 or from 1e21 (with an exponent of at least one digit, e-7 not
// e-07), the way ECMAScript writes numbers. NaN and infinities are not JSON.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, errors.New(strconv.FormatFloat(f, 'g', -1, 64) + " is not a JSON number")
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' { // e-07 to e-7
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}
