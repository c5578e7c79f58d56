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
	e := Encoder{b: b}
	e.task(t)
	return e.Result(b)
}

// AppendEvent appends json.Marshal(ev) to b. On error it returns b as it was.
func AppendEvent(b []byte, ev *protocol.Event) ([]byte, error) {
	if ev == nil {
		return append(b, "null"...), nil
	}
	e := Encoder{b: b}
	e.event(ev)
	return e.Result(b)
}

// AppendParent appends json.Marshal(p) to b (it cannot fail).
func AppendParent(b []byte, p *protocol.Parent) ([]byte, error) {
	e := Encoder{b: b}
	e.parent(p)
	return e.Result(b)
}

// Encoder appends one value to a buffer, member by member, as encoding/json writes it (the rules
// above). The members of an object record the first error and go on (what they append is then
// thrown away): the code lists members without a check after each. AppendTask and AppendEvent
// use it, and so do the encoders of types other packages own (internal/runstore's run records),
// with the members of the protocol's types (Usage, Pending, ...) they hold.
type Encoder struct {
	b   []byte
	err error
}

// NewEncoder returns an encoder that appends to b.
func NewEncoder(b []byte) Encoder { return Encoder{b: b} }

// Result returns what the encoder appended, or orig and the first error.
func (e *Encoder) Result(orig []byte) ([]byte, error) {
	if e.err != nil {
		return orig, e.err
	}
	return e.b, nil
}

// The types, member by member as encoding/json writes them.

func (e *Encoder) task(t *protocol.Task) {
	e.b = append(e.b, '{')
	e.Str("run_id", t.RunID)
	e.Str("step", t.Step)
	e.Int("item", t.Item)
	e.Str("body", t.Body)
	e.Str("type", string(t.Type))
	e.Str("handler", t.Handler)
	e.StrOmit("workflow", t.Workflow)
	e.StrOmit("model", t.Model)
	e.StrOmit("prompt", t.Prompt)
	e.StrOmit("instructions", t.Instructions)
	e.StrOmit("goal", t.Goal)
	e.StrOmit("session", t.Session)
	e.StrOmit("started_by", t.StartedBy)
	e.Int("activation", t.Activation)
	e.Int("iteration", t.Iteration)
	e.Int("attempt", t.Attempt)
	e.Raw("input", t.Input)
	e.Str("msg_id", t.MsgID)
	e.TimeOmitZero("not_before", t.NotBefore)
	e.DurationOmit("timeout", t.Timeout)
	e.IntOmit("resume", t.Resume)
	if len(t.Decisions) > 0 {
		e.Name("decisions")
		e.decisions(t.Decisions)
	}
	e.RawOmit("human_input", t.HumanInput)
	if len(t.ChildResults) > 0 {
		e.Name("child_results")
		e.childResults(t.ChildResults)
	}
	e.IntOmit("protocol", t.Protocol)
	e.b = append(e.b, '}')
}

func (e *Encoder) event(ev *protocol.Event) {
	e.b = append(e.b, '{')
	e.Str("run_id", ev.RunID)
	e.engineEvent(ev) // embedded: encoding/json writes its members in its place
	e.StrOmit("workflow", ev.Workflow)
	if ev.Parent != nil {
		e.Name("parent")
		e.parent(ev.Parent)
	}
	if ev.Registered != nil {
		e.Name("registered")
		e.registration(ev.Registered)
	}
	e.StrOmit("child", ev.Child)
	e.StrOmit("nonce", ev.Nonce)
	e.IntOmit("protocol", ev.Protocol)
	e.b = append(e.b, '}')
}

// engineEvent writes the members of ev, in the object of the Event that embeds it.
func (e *Encoder) engineEvent(ev *protocol.Event) {
	e.Str("type", string(ev.Type))
	e.Time("at", ev.At)
	e.RawOmit("input", ev.Input)
	e.StrOmit("step", ev.Step)
	e.Int("item", ev.Item)
	e.IntOmit("activation", ev.Activation)
	e.IntOmit("iteration", ev.Iteration)
	e.IntOmit("attempt", ev.Attempt)
	e.RawOmit("output", ev.Output)
	e.StrOmit("label", ev.Label)
	e.StrOmit("stop_reason", ev.StopReason)
	e.StrOmit("stop_detail", ev.StopDetail)
	e.StrOmit("error", ev.Error)
	if ev.Usage != nil {
		e.Name("usage")
		e.Usage(ev.Usage)
	}
	e.boolOmit("permanent", ev.Permanent)
	if ev.Record != nil {
		e.Name("record")
		e.reflected("record", ev.Record)
	}
	e.StrOmit("reason", ev.Reason)
	e.StrOmit("status", string(ev.Status))
	e.IntOmit("resume", ev.Resume)
	if len(ev.Pending) > 0 {
		e.Name("pending")
		e.Pending(ev.Pending)
	}
	e.StrOmit("call_id", ev.CallID)
	e.boolOmit("approve", ev.Approve)
	e.StrOmit("message", ev.Message)
	e.StrOmit("by", ev.By)
	e.StrOmit("on_behalf_of", ev.OnBehalfOf)
	e.StrOmit("name", ev.Name)
	e.StrOmit("id", ev.ID)
}

func (e *Encoder) registration(r *protocol.Registration) {
	e.b = append(e.b, '{')
	e.Str("name", r.Name)
	e.Int("version", r.Version)
	e.b = append(e.b, '}')
}

func (e *Encoder) parent(p *protocol.Parent) {
	if p == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '{')
	e.Str("run_id", p.RunID)
	e.Str("step", p.Step)
	e.Int("item", p.Item)
	e.Int("activation", p.Activation)
	e.IntOmit("iteration", p.Iteration)
	e.StrOmit("call_id", p.CallID)
	e.b = append(e.b, '}')
}

func (e *Encoder) Usage(u *protocol.Usage) {
	e.b = append(e.b, '{')
	e.IntOmit("model_calls", u.ModelCalls)
	e.IntOmit("tool_calls", u.ToolCalls)
	e.IntOmit("input_tokens", u.InputTokens)
	e.IntOmit("output_tokens", u.OutputTokens)
	if u.CostUSD != 0 { // omitempty: -0 too
		e.Name("cost_usd")
		var err error
		if e.b, err = appendFloat(e.b, u.CostUSD); err != nil {
			e.Fail("usage.cost_usd", err) // usage is a member of its name in events and steps
		}
	}
	e.b = append(e.b, '}')
}

// array writes the list xs (never nil: the members that hold lists omit an empty one), each
// item with item; an item's error is placed under name[i].
func array[T listed](e *Encoder, name string, xs []T) {
	e.b = append(e.b, '[')
	for i := range xs {
		e.Sep()
		ok := e.err == nil
		e.item(&xs[i])
		if ok && e.err != nil {
			e.Under(name + "[" + strconv.Itoa(i) + "]")
		}
	}
	e.b = append(e.b, ']')
}

// members writes the map m (never nil: the members that hold maps omit an empty one) with its
// keys sorted, each value with item; a value's error is placed under name["key"].
func members[T listed](e *Encoder, name string, m map[string]T) {
	var buf [8]string
	e.b = append(e.b, '{')
	for _, k := range SortedKeys(m, buf[:0]) {
		e.Key(k)
		ok := e.err == nil
		v := m[k]
		e.item(&v)
		if ok && e.err != nil {
			e.Under(name + "[" + strconv.Quote(k) + "]")
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
func (e *Encoder) item(v any) {
	switch v := v.(type) {
	case *protocol.PendingCall:
		e.pendingCall(v)
	case *protocol.Decision:
		e.decision(v)
	case *protocol.ChildResult:
		e.childResult(v)
	}
}

// The writers of lists and maps below are not inlined into other packages: there, the
// generic array and members they call would be instantiated anew, and the escape analysis of
// that instantiation moves the Encoder to the heap (an allocation per run record encoded).
//
// Pending writes pending calls (Event.Pending, StepRun.Pending).
//
//go:noinline
func (e *Encoder) Pending(calls []protocol.PendingCall) { array(e, "pending", calls) }

func (e *Encoder) pendingCall(c *protocol.PendingCall) {
	e.b = append(e.b, '{')
	e.Str("call_id", c.CallID)
	e.Str("tool", c.Tool)
	e.Raw("arguments", c.Arguments)
	if c.Child != nil {
		e.Name("child")
		e.b = append(e.b, '{')
		e.StrOmit("agent", c.Child.Agent)
		e.StrOmit("workflow", c.Child.Workflow)
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, '}')
}

// decisions writes Task.Decisions; decisionMap StepRun.Decisions.
func (e *Encoder) decisions(ds []protocol.Decision) { array(e, "decisions", ds) }

//go:noinline
func (e *Encoder) DecisionMap(ds map[string]protocol.Decision) { members(e, "decisions", ds) }

func (e *Encoder) decision(d *protocol.Decision) {
	e.b = append(e.b, '{')
	e.Str("call_id", d.CallID)
	e.bool("approve", d.Approve)
	e.StrOmit("message", d.Message)
	e.StrOmit("by", d.By)
	e.StrOmit("on_behalf_of", d.OnBehalfOf)
	e.b = append(e.b, '}')
}

// childResults writes Task.ChildResults; childResultMap StepRun.ChildResults.
func (e *Encoder) childResults(rs []protocol.ChildResult) { array(e, "child_results", rs) }

//go:noinline
func (e *Encoder) ChildResultMap(rs map[string]protocol.ChildResult) {
	members(e, "child_results", rs)
}

func (e *Encoder) childResult(r *protocol.ChildResult) {
	e.b = append(e.b, '{')
	e.Str("call_id", r.CallID)
	e.Str("run_id", r.RunID)
	e.Str("status", string(r.Status))
	e.RawOmit("output", r.Output)
	e.StrOmit("stop_reason", r.StopReason)
	e.StrOmit("stop_detail", r.StopDetail)
	e.StrOmit("error", r.Error)
	if r.Usage != nil {
		e.Name("usage")
		e.Usage(r.Usage)
	}
	e.b = append(e.b, '}')
}

func (e *Encoder) Strs(s []string) {
	if s == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for _, v := range s {
		e.Sep()
		e.b = appendString(e.b, v)
	}
	e.b = append(e.b, ']')
}

// SortedKeys returns the keys of m in the order encoding/json writes them (byte order),
// appended to buf: a buffer on the caller's stack spares an allocation for a few keys.
func SortedKeys[V any](m map[string]V, buf []string) []string {
	for k := range m {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}

// Byte writes c: the brace, bracket or comma the caller's type puts there.
func (e *Encoder) Byte(c byte) { e.b = append(e.b, c) }

// Null writes null: a nil pointer, slice or map.
func (e *Encoder) Null() { e.b = append(e.b, "null"...) }

// Failed reports whether a member failed: a caller puts the error under its own place with
// Under when it did inside a nested value.
func (e *Encoder) Failed() bool { return e.err != nil }

// RawValue writes raw as an element (no name) and returns the error of encoding/json's when it
// cannot be written, for the caller to Fail at its place.
func (e *Encoder) RawValue(raw json.RawMessage) error {
	var err error
	e.b, err = appendRaw(e.b, raw)
	return err
}

// Members. Each writes the separator, its name and its value; the ...Omit ones write nothing for
// the values omitempty (or omitzero, for times) leaves out.

// Sep writes the comma before a member or an element, unless it is the first. It looks at the
// last byte: only the '{' or '[' that opens an object or array ends there, as no value ends with
// one.
func (e *Encoder) Sep() {
	if c := e.b[len(e.b)-1]; c != '{' && c != '[' {
		e.b = append(e.b, ',')
	}
}

// Name writes the name of a member. The names are the json tags of the types, which need no
// escaping.
func (e *Encoder) Name(n string) {
	e.Sep()
	e.b = append(e.b, '"')
	e.b = append(e.b, n...)
	e.b = append(e.b, '"', ':')
}

// Key writes the key of a map member, escaped as every string.
func (e *Encoder) Key(k string) {
	e.Sep()
	e.b = appendString(e.b, k)
	e.b = append(e.b, ':')
}

func (e *Encoder) Str(name, s string) {
	e.Name(name)
	e.b = appendString(e.b, s)
}

func (e *Encoder) StrOmit(name, s string) {
	if s != "" {
		e.Str(name, s)
	}
}

func (e *Encoder) Int(name string, n int) {
	e.Name(name)
	e.b = strconv.AppendInt(e.b, int64(n), 10)
}

func (e *Encoder) IntOmit(name string, n int) {
	if n != 0 {
		e.Int(name, n)
	}
}

// DurationOmit writes d as encoding/json does: its number of nanoseconds.
func (e *Encoder) DurationOmit(name string, d time.Duration) {
	if d != 0 {
		e.Name(name)
		e.b = strconv.AppendInt(e.b, int64(d), 10)
	}
}

func (e *Encoder) bool(name string, v bool) {
	e.Name(name)
	e.b = strconv.AppendBool(e.b, v)
}

func (e *Encoder) boolOmit(name string, v bool) {
	if v {
		e.bool(name, v)
	}
}

func (e *Encoder) Time(name string, t time.Time) {
	e.Name(name)
	var err error
	if e.b, err = appendTime(e.b, t); err != nil {
		e.Fail(name, err)
	}
}

// TimeOmitZero leaves out a zero time, as omitzero does (Time.IsZero, whatever the location).
func (e *Encoder) TimeOmitZero(name string, t time.Time) {
	if !t.IsZero() {
		e.Time(name, t)
	}
}

func (e *Encoder) Raw(name string, raw json.RawMessage) {
	e.Name(name)
	var err error
	if e.b, err = appendRaw(e.b, raw); err != nil {
		e.Fail(name, err)
	}
}

// reflected writes v as encoding/json does, with its reflective encoder: for a value off the
// path of every iteration (an iteration record).
func (e *Encoder) reflected(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		e.Fail(name, err)
		return
	}
	e.b = append(e.b, data...)
}

// RawOmit leaves out a raw of length 0, as omitempty does (a nil raw, or an empty one, which
// encoding/json would refuse).
func (e *Encoder) RawOmit(name string, raw json.RawMessage) {
	if len(raw) > 0 {
		e.Raw(name, raw)
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

// Fail records err at the member path, unless an error came first.
func (e *Encoder) Fail(path string, err error) {
	if e.err == nil {
		e.err = &memberError{path, err}
	}
}

// Under puts the error recorded inside a nested value under the place of that value.
func (e *Encoder) Under(place string) {
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
