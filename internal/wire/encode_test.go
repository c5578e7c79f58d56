package wire_test

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// The encoders must write exactly what json.Marshal writes, and fail exactly when it fails.

// sameAsJSON encodes v with appendTo after a prefix and with json.Marshal, and fails t unless
// both succeed with the same bytes (the prefix kept) or both fail (the prefix returned as it
// was). It returns the error of appendTo.
func sameAsJSON[T any](t testing.TB, v T, appendTo func([]byte, T) ([]byte, error)) error {
	t.Helper()
	want, wantErr := json.Marshal(v)
	prefix := []byte("[1,")
	got, err := appendTo(prefix[:len(prefix):len(prefix)], v)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Fatalf("error %v, json.Marshal's %v, for %#v", err, wantErr, v)
	case err != nil:
		if string(got) != string(prefix) {
			t.Fatalf("on error %v, got %q, want the prefix %q as it was", err, got, prefix)
		}
	case !bytes.HasPrefix(got, prefix):
		t.Fatalf("the prefix %q is gone: %q", prefix, got)
	case !bytes.Equal(got[len(prefix):], want):
		t.Fatalf("got  %s\nwant %s\nfor %#v", got[len(prefix):], want, v)
	}
	return err
}

// Strings, raws, times and floats that encoding/json writes in its own ways.
var (
	trickyStrings = []string{
		"", "plain", `quote " and backslash \ and slash /`, "<script>&amp;</script>",
		"\n\r\t\b\f", "\x00\x01\x1f\x7f", "é ünïcödé 日本 🎉", "\u2028 and \u2029",
		"bad \xff utf-8 \xe2\x80", "\xe2\x80\xa8\xe2\x80\xa9\xe2\x82\xac", "\ufffd",
	}
	// validRaws are JSON; the ones with white space between tokens or with <, >, &, U+2028 or
	// U+2029 are compacted and escaped.
	validRaws = []string{
		`null`, `true`, `0`, `-1.5e-300`, `"x"`, `{}`, `[]`,
		`{"notes":"looked at one more file","n":[1,2.5,"x"],"ok":true,"none":null}`,
		` { "a" : [ 1 , 2 ] }` + "\n\t\r", `{"html":"<b>&amp;</b>"}`, `{"ls":"\u2028\u2029"}`,
		`{"ls":"` + "\u2028\u2029" + `"}`, `"\"quoted \\\" space\""`, `{"k":"tab\tescaped","s":" "}`,
		`"€ unicode é"`, `{"esc":"\\","q":"\"","u":"\u00e9"}`, `["a",{"b":[{}]}]`,
		"\"bad \xff utf-8\"", `[ ]`, `"ends in backslash quote \\"`,
		// White space after a string, after an escaped quote, after an escaped backslash.
		`["a", 1]`, `{"q":"\"", "n":1}`, `["\\", 1]`, `["\\\"", 1]`,
	}
	// invalidRaws are not JSON, and encoding/json refuses them. (The encoders trust raws to be
	// JSON: these have white space, which sends them through encoding/json.)
	invalidRaws = []string{``, ` `, `{ "a": }`, `[1, 2`, `nul l`}

	plus0530 = time.FixedZone("", 5*3600+30*60)
	times    = []time.Time{
		{}, time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC),
		time.Date(2026, 11, 21, 10, 0, 0, 120000000, plus0530), time.Date(1, 1, 1, 0, 0, 0, 1, time.FixedZone("", -3*3600)),
		time.Date(2026, 3, 1, 0, 0, 0, 0, time.FixedZone("odd", 3600+30)), // seconds of offset are dropped
		time.Date(2026, 3, 1, 0, 0, 0, 0, time.FixedZone("", -23*3600-59*60)),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Time{}.In(plus0530), time.Now(), // a zero time elsewhere; a monotonic reading
	}
	badTimes = []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)), time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -100*3600)),
	}
	floats    = []float64{0.001, 1, -2.5, 1e-6, 9.99e-7, 1e-7, 1.5e-300, 5e-324, 1e20, 1e21, 123456789012345678901234.0, math.MaxFloat64, -1e-10, math.Copysign(0, -1), 0.1 + 0.2}
	badFloats = []float64{math.NaN(), math.Inf(1), math.Inf(-1)}
)

func TestAppendStrings(t *testing.T) {
	for _, s := range trickyStrings {
		sameAsJSON(t, &protocol.Task{RunID: s, Step: s, Prompt: s, Decisions: []protocol.Decision{{CallID: s, By: s}}}, wire.AppendTask)
		sameAsJSON(t, &protocol.Event{RunID: s, Type: protocol.EventType(s), Reason: s, Nonce: s}, wire.AppendEvent)
		// Map keys are escaped too, and sorted by their bytes before.
		sameAsJSON(t, &engine.Run{ID: s, Path: []string{s, s},
			Steps:   map[string]*engine.StepRun{s: {Step: s}, "z" + s: {Decisions: map[string]protocol.Decision{s: {By: s}, "<": {}}}},
			Signals: map[string][]json.RawMessage{s: {json.RawMessage(`1`)}, ">" + s: nil},
			Slot:    &engine.Slot{Key: s, Limit: 3},
			Limits:  &engine.Limits{MaxSteps: 5, MaxEvents: 100000}, Events: 7,
		}, runstore.AppendRun)
	}
}

func TestAppendRaws(t *testing.T) {
	for _, r := range validRaws {
		raw := json.RawMessage(r)
		sameAsJSON(t, &protocol.Task{Input: raw, HumanInput: raw}, wire.AppendTask)
		sameAsJSON(t, &protocol.Event{Input: raw, Output: raw, Pending: []protocol.PendingCall{{Arguments: raw}}}, wire.AppendEvent)
		sameAsJSON(t, &engine.Run{Input: raw, Output: raw, Signals: map[string][]json.RawMessage{"s": {raw, nil, raw}}}, runstore.AppendRun)
	}
	// An empty raw is omitted where omitempty applies and refused where it does not.
	sameAsJSON(t, &protocol.Task{Input: json.RawMessage{}, HumanInput: json.RawMessage{}}, wire.AppendTask)
	sameAsJSON(t, &protocol.Event{Input: json.RawMessage{}, Output: json.RawMessage{}}, wire.AppendEvent)
	for _, r := range invalidRaws {
		raw := json.RawMessage(r)
		if err := sameAsJSON(t, &protocol.Task{Input: raw}, wire.AppendTask); err == nil || !strings.HasPrefix(err.Error(), "input: ") {
			t.Errorf("raw %q: error %v, want one at input", r, err)
		}
		sameAsJSON(t, &protocol.Event{Pending: []protocol.PendingCall{{Arguments: raw}}}, wire.AppendEvent)
		sameAsJSON(t, &engine.Run{Signals: map[string][]json.RawMessage{"s": {raw}}}, runstore.AppendRun)
	}
}

func TestAppendTimes(t *testing.T) {
	for _, at := range append(times, badTimes...) {
		sameAsJSON(t, &protocol.Task{NotBefore: at}, wire.AppendTask)
		sameAsJSON(t, &protocol.Event{At: at}, wire.AppendEvent)
		sameAsJSON(t, &engine.Run{StartedAt: at, Deadline: at, Steps: map[string]*engine.StepRun{"s": {StartedAt: at, Until: at}}, Slot: &engine.Slot{Granted: at}, Limits: &engine.Limits{}}, runstore.AppendRun)
	}
}

func TestAppendFloats(t *testing.T) {
	for _, f := range append(floats, badFloats...) {
		u := protocol.Usage{CostUSD: f}
		sameAsJSON(t, &protocol.Event{Usage: &u}, wire.AppendEvent)
		sameAsJSON(t, &engine.Run{Steps: map[string]*engine.StepRun{"s": {Usage: u}}}, runstore.AppendRun)
	}
}

// TestAppendEmpty: nil and empty slices, maps and pointers, which omitempty and omitzero treat
// differently.
func TestAppendEmpty(t *testing.T) {
	for _, task := range []*protocol.Task{nil, {}, {Decisions: []protocol.Decision{}}, {Decisions: []protocol.Decision{{}}}, {Input: json.RawMessage{}}} {
		sameAsJSON(t, task, wire.AppendTask)
	}
	for _, ev := range []*protocol.Event{nil, {}, {Usage: &protocol.Usage{}, Pending: []protocol.PendingCall{}, Parent: &protocol.Parent{}, Registered: &protocol.Registration{}}} {
		sameAsJSON(t, ev, wire.AppendEvent)
	}
	for _, r := range []*engine.Run{
		nil, {}, {Steps: map[string]*engine.StepRun{}, Edges: []engine.EdgeState{}, Path: []string{}, Signals: map[string][]json.RawMessage{}, SignalIDs: []string{}},
		{Steps: map[string]*engine.StepRun{"nil": nil, "empty": {}, "maps": {Pending: []protocol.PendingCall{}, Decisions: map[string]protocol.Decision{}}}},
		{Signals: map[string][]json.RawMessage{"nil": nil, "empty": {}, "nulls": {nil, json.RawMessage("null")}}, Error: &protocol.RunError{}},
		{Steps: map[string]*engine.StepRun{"-0": {Usage: protocol.Usage{CostUSD: math.Copysign(0, -1)}}}}, // omitzero keeps nothing
	} {
		sameAsJSON(t, r, runstore.AppendRun)
	}
	for _, p := range []*protocol.Parent{nil, {}, {RunID: "r<", Step: "s", Item: -1, Activation: 3}} {
		sameAsJSON(t, p, wire.AppendParent)
	}
}

func TestAppendInts(t *testing.T) {
	for _, n := range []int{0, 1, -1, math.MaxInt, math.MinInt} {
		sameAsJSON(t, &protocol.Task{Item: n, Activation: n, Timeout: time.Duration(n), Resume: n}, wire.AppendTask)
		sameAsJSON(t, &protocol.Event{Item: n, Resume: n, Usage: &protocol.Usage{ModelCalls: n}, Parent: &protocol.Parent{Item: n}, Registered: &protocol.Registration{Version: n}}, wire.AppendEvent)
		sameAsJSON(t, &engine.Run{Executed: n, Edges: []engine.EdgeState{{Uses: n}}, Steps: map[string]*engine.StepRun{"s": {Item: n, Waited: time.Duration(n)}}}, runstore.AppendRun)
	}
}

// TestAppendErrorsSayWhere: an error names the member that failed, from the value encoded.
func TestAppendErrorsSayWhere(t *testing.T) {
	bad := badTimes[0]
	for _, c := range []struct {
		err  error
		want string
	}{
		{appendErr(wire.AppendTask(nil, &protocol.Task{NotBefore: bad})), "not_before: Time.MarshalJSON: year outside of range [0,9999]"},
		{appendErr(wire.AppendEvent(nil, &protocol.Event{Usage: &protocol.Usage{CostUSD: math.NaN()}})), "usage.cost_usd: NaN is not a JSON number"},
		{appendErr(wire.AppendEvent(nil, &protocol.Event{Pending: []protocol.PendingCall{{Arguments: json.RawMessage("null")}, {Arguments: json.RawMessage("{ ")}}})), "pending[1].arguments: "},
		{appendErr(runstore.AppendRun(nil, &engine.Run{Steps: map[string]*engine.StepRun{"a": {}, `b"`: {Until: bad}}})), `steps["b\""].until: Time.MarshalJSON: `},
		{appendErr(runstore.AppendRun(nil, &engine.Run{Steps: map[string]*engine.StepRun{"a": {Usage: protocol.Usage{CostUSD: math.Inf(-1)}}}})), `steps["a"].usage.cost_usd: -Inf is not a JSON number`},
		{appendErr(runstore.AppendRun(nil, &engine.Run{Steps: map[string]*engine.StepRun{"a": {Pending: []protocol.PendingCall{{Arguments: json.RawMessage{}}}}}})), `steps["a"].pending[0].arguments: `},
		{appendErr(runstore.AppendRun(nil, &engine.Run{Signals: map[string][]json.RawMessage{"go": {nil, json.RawMessage(" x")}}})), `signals["go"][1]: `},
		// The first error is the one reported.
		{appendErr(runstore.AppendRun(nil, &engine.Run{StartedAt: bad, Steps: map[string]*engine.StepRun{"a": {Until: bad}}})), "started_at: "},
	} {
		if c.err == nil || !strings.HasPrefix(c.err.Error(), c.want) {
			t.Errorf("error %v, want one starting with %q", c.err, c.want)
		}
	}
}

func appendErr(_ []byte, err error) error { return err }

// TestEncodeIsAppend: EncodeTask and EncodeEvent return what the appenders write, in slices of
// their own (the scratch buffer they encode in is reused).
func TestEncodeIsAppend(t *testing.T) {
	task := sampleTask()
	first, err := wire.EncodeTask(task)
	if err != nil {
		t.Fatal(err)
	}
	want := string(first)
	for _, ev := range sampleEvents() {
		data, err := wire.EncodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		sameAsJSON(t, ev, wire.AppendEvent)
		if appended, _ := wire.AppendEvent(nil, ev); !bytes.Equal(data, appended) {
			t.Fatalf("EncodeEvent: %s, AppendEvent: %s", data, appended)
		}
	}
	if string(first) != want {
		t.Fatalf("a task encoded before was overwritten: %s", first)
	}
	if _, err := wire.EncodeTask(&protocol.Task{NotBefore: badTimes[0]}); err == nil {
		t.Fatal("EncodeTask encoded a time out of range")
	}
}

// TestAppendEveryField sets each field of a task, an event and a run, one at a time and all at
// once, at every depth (a step's pending call's arguments, a signal's data), and compares with
// encoding/json. A field added to one of these types and forgotten by the encoders fails here;
// so does a field of a kind or type the test cannot fill (teach it, and the encoders, what
// encoding/json does with it).
func TestAppendEveryField(t *testing.T) {
	everyField(t, func() *protocol.Task { return new(protocol.Task) }, wire.AppendTask)
	everyField(t, func() *protocol.Event { return new(protocol.Event) }, wire.AppendEvent)
	everyField(t, func() *engine.Run { return new(engine.Run) }, runstore.AppendRun)
	everyField(t, func() *protocol.Parent { return new(protocol.Parent) }, wire.AppendParent)
}

func everyField[T any](t *testing.T, zero func() *T, appendTo func([]byte, *T) ([]byte, error)) {
	t.Run(reflect.TypeFor[T]().String(), func(t *testing.T) {
		sameAsJSON(t, zero(), appendTo) // nil pointers, slices and maps
		skeleton := zero()
		f := filler{t: t, target: 0}
		f.fill(reflect.ValueOf(skeleton).Elem()) // every container made, every leaf zero
		sameAsJSON(t, skeleton, appendTo)
		leaves := f.n
		if leaves < 4 {
			t.Fatalf("only %d fields found", leaves)
		}
		for target := 1; target <= leaves; target++ {
			v := zero()
			f := filler{t: t, target: target}
			f.fill(reflect.ValueOf(v).Elem())
			if err := sameAsJSON(t, v, appendTo); err != nil {
				t.Fatalf("field %d (%s): %v", target, f.set, err)
			}
		}
		all := zero()
		f = filler{t: t, target: -1}
		f.fill(reflect.ValueOf(all).Elem())
		sameAsJSON(t, all, appendTo)
	})
}

// filler fills a value by reflection: it makes every pointer, slice (one element) and map (two
// keys) on the way, and gives leaf number target (counted from 1 in field order; -1: every
// leaf) a value of its own, not zero, with characters to escape.
type filler struct {
	t      *testing.T
	target int
	n      int    // leaves seen
	set    string // the type of the leaf set, for messages
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	rawType           = reflect.TypeFor[json.RawMessage]()
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

func (f *filler) fill(v reflect.Value) {
	typ := v.Type()
	switch {
	case typ == timeType || typ == rawType:
		f.leaf(v)
		return
	case reflect.PointerTo(typ).Implements(marshalerType) || reflect.PointerTo(typ).Implements(textMarshalerType):
		f.t.Fatalf("%s has a MarshalJSON or MarshalText method: the encoders and this test must do what encoding/json does with it", typ)
	}
	switch typ.Kind() {
	case reflect.Struct:
		for i := range typ.NumField() {
			if typ.Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(typ.Elem()))
		f.fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(typ, 1, 1))
		f.fill(v.Index(0))
	case reflect.Map:
		if typ.Key().Kind() != reflect.String {
			f.t.Fatalf("%s: the test fills maps with string keys only", typ)
		}
		v.Set(reflect.MakeMap(typ))
		for _, k := range []string{"b", "a<"} { // out of order, one to escape
			elem := reflect.New(typ.Elem()).Elem()
			f.fill(elem)
			v.SetMapIndex(reflect.ValueOf(k).Convert(typ.Key()), elem)
		}
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
		f.leaf(v)
	default:
		f.t.Fatalf("%s: the test cannot fill a %s", typ, typ.Kind())
	}
}

// leaf gives v, when it is the target, a value made from its number.
func (f *filler) leaf(v reflect.Value) {
	f.n++
	if f.target != -1 && f.target != f.n {
		return
	}
	n := f.n
	f.set = v.Type().String()
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, n, plus0530)))
	case v.Type() == rawType:
		raw := fmt.Sprintf(`{"n":%d,"s":"a b"}`, n) // copied as it is
		if n%2 == 0 {
			raw = fmt.Sprintf(`{ "n": %d, "s": "<&>" }`, n) // compacted and escaped
		}
		v.SetBytes([]byte(raw))
	case v.Kind() == reflect.String:
		v.SetString(fmt.Sprintf("s%d <é\u2028\"", n))
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		v.SetInt(int64(n) * 1001)
	case v.Kind() == reflect.Float64:
		v.SetFloat(float64(n) / 3)
	}
}

// The fuzz targets build a task, an event and a run from what the fuzzer gives (strings, numbers,
// a raw, a time, and bits that choose between nil, empty and filled lists and maps), and require
// what json.Marshal gives: the same bytes, or an error when it fails. Raws that are not JSON
// become nil: the encoders trust raws to be JSON.

// fuzzInput is what one fuzz input holds.
type fuzzInput struct {
	s1, s2 string
	n      int
	f      float64
	raw    json.RawMessage
	at     time.Time
	shape  uint8
}

func newFuzzInput(s1, s2 string, n int64, f float64, raw []byte, sec, nsec int64, offset int32, shape uint8) fuzzInput {
	in := fuzzInput{s1: s1, s2: s2, n: int(n), f: f, at: time.Unix(sec, nsec).In(time.FixedZone(s2, int(offset))), shape: shape}
	if json.Valid(raw) {
		in.raw = raw
	}
	return in
}

// has reports whether bit i of the shape is set.
func (in fuzzInput) has(i uint) bool { return in.shape&(1<<i) != 0 }

func (in fuzzInput) task() *protocol.Task {
	t := &protocol.Task{RunID: in.s1, Step: in.s2, Item: in.n, Body: in.s1 + in.s2, Handler: in.s2, Prompt: in.s1,
		Activation: in.n, Input: in.raw, MsgID: in.s1, NotBefore: in.at, Timeout: time.Duration(in.n), Resume: in.n}
	if in.has(0) {
		t.Decisions = []protocol.Decision{{CallID: in.s1, Approve: in.has(1), Message: in.s2}}
	}
	if in.has(2) {
		t.HumanInput = in.raw
	}
	return t
}

func (in fuzzInput) event() *protocol.Event {
	ev := &protocol.Event{RunID: in.s1, Type: protocol.EventType(in.s2), At: in.at, Output: in.raw, Item: in.n,
		Permanent: in.has(1), Message: in.s1, Nonce: in.s2}
	if in.has(0) {
		ev.Usage = &protocol.Usage{ModelCalls: in.n, CostUSD: in.f}
	}
	if in.has(2) {
		ev.Pending = []protocol.PendingCall{{CallID: in.s1, Arguments: in.raw}}
	}
	if in.has(3) {
		ev.Parent = &protocol.Parent{RunID: in.s2, Item: in.n}
	}
	return ev
}

func (in fuzzInput) run() *engine.Run {
	r := &engine.Run{ID: in.s1, Status: protocol.RunStatus(in.s2), Input: in.raw, StartedAt: in.at, Executed: in.n}
	if in.has(0) {
		s := &engine.StepRun{Step: in.s2, Item: in.n, Until: in.at, Input: in.raw, Usage: protocol.Usage{CostUSD: in.f}, Waited: time.Duration(in.n)}
		if in.has(1) {
			s.Pending = []protocol.PendingCall{{Tool: in.s1, Arguments: in.raw}}
			s.Decisions = map[string]protocol.Decision{in.s1: {By: in.s2}, in.s2: {Approve: true}}
		}
		r.Steps = map[string]*engine.StepRun{in.s1: s, in.s2: {Status: protocol.StepStatus(in.s1)}}
	}
	if in.has(2) {
		r.Edges, r.Path, r.SignalIDs = []engine.EdgeState{{State: engine.EdgeStatus(in.s1), Uses: in.n}}, []string{in.s1, in.s2}, []string{in.s2}
	}
	if in.has(3) {
		r.Signals = map[string][]json.RawMessage{in.s1: {in.raw}, in.s2: nil}
	}
	if in.has(4) {
		r.Error = &protocol.RunError{Code: in.s1, Message: in.s2}
	}
	return r
}

func addFuzzSeeds(f *testing.F) {
	for i, s := range trickyStrings {
		raw := validRaws[i%len(validRaws)]
		at := times[i%len(times)]
		_, offset := at.Zone()
		f.Add(s, trickyStrings[(i+1)%len(trickyStrings)], int64(i-3), floats[i%len(floats)], []byte(raw), at.Unix(), int64(at.Nanosecond()), int32(offset), uint8(i*37))
	}
	f.Add("a", "b", int64(1), math.NaN(), []byte(`1`), badTimes[0].Unix(), int64(0), int32(0), uint8(0xff))
	f.Add("a", "b", int64(1), 1.0, []byte(`1`), int64(0), int64(0), int32(24*3600), uint8(0xff))
}

func FuzzAppendTask(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, s1, s2 string, n int64, fl float64, raw []byte, sec, nsec int64, offset int32, shape uint8) {
		sameAsJSON(t, newFuzzInput(s1, s2, n, fl, raw, sec, nsec, offset, shape).task(), wire.AppendTask)
	})
}

func FuzzAppendEvent(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, s1, s2 string, n int64, fl float64, raw []byte, sec, nsec int64, offset int32, shape uint8) {
		sameAsJSON(t, newFuzzInput(s1, s2, n, fl, raw, sec, nsec, offset, shape).event(), wire.AppendEvent)
	})
}

func FuzzAppendRun(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, s1, s2 string, n int64, fl float64, raw []byte, sec, nsec int64, offset int32, shape uint8) {
		sameAsJSON(t, newFuzzInput(s1, s2, n, fl, raw, sec, nsec, offset, shape).run(), runstore.AppendRun)
	})
}

// The benchmarks encode what one agent_loop iteration encodes: the task, the worker's
// continued answer, and the run record the engine saves, mid-run with raws of about 100 bytes.
// Each runs json.Marshal, the appender into a reused buffer, and the Encode function the code
// calls (the appender and one copy).

var (
	benchInput  = json.RawMessage(`{"repo":"github.com/reins-run/reins","question":"where is the run saved?","files_seen":17}`)
	benchOutput = json.RawMessage(`{"notes":"looked at one more file: runner/event.go saves it","next":"engine/decide.go"}`)
	benchAt     = time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
)

func benchTask() *protocol.Task {
	return &protocol.Task{RunID: "run-8f3a2c", Step: "explore", Item: -1, Body: "explore", Type: "agent_loop", Handler: "explorer",
		Workflow: "5d41402abc4b2a76b9719d911017c592", Activation: 1, Iteration: 12, Attempt: 1, Input: benchOutput,
		MsgID: "run-8f3a2c/explore/1/12/1", Timeout: 5 * time.Minute}
}

func benchEvent() *protocol.Event {
	ev := wire.Answer(benchTask(), protocol.EvContinued, benchAt)
	ev.Output, ev.Nonce = benchOutput, "7c1e9a"
	ev.Usage = &protocol.Usage{ModelCalls: 1, ToolCalls: 2, InputTokens: 5120, OutputTokens: 380, CostUSD: 0.01931}
	return ev
}

func benchRun() *engine.Run {
	started := benchAt.Add(-3 * time.Minute)
	return &engine.Run{
		ID: "run-8f3a2c", Workflow: "explore-and-report", Hash: "5d41402abc4b2a76b9719d911017c592", Status: protocol.RunRunning,
		Input: benchInput, StartedAt: started, Deadline: started.Add(time.Hour), Executed: 13,
		Steps: map[string]*engine.StepRun{
			"plan": {Step: "plan", Status: protocol.StepCompleted, Activation: 1, Iteration: 1, Attempt: 1, Attempts: 1,
				StartedAt: started, Input: benchInput, Output: benchOutput, Label: "completed",
				Usage: protocol.Usage{ModelCalls: 1, InputTokens: 900, OutputTokens: 120, CostUSD: 0.0021}, Prompt: "Plan how to answer: where is the run saved?"},
			"explore": {Step: "explore", Status: protocol.StepRunning, Activation: 1, Iteration: 12, Attempt: 1, Attempts: 12,
				StartedAt: started.Add(10 * time.Second), FirstIterationAt: started.Add(10 * time.Second), Input: benchOutput, Output: benchOutput,
				Usage: protocol.Usage{ModelCalls: 11, ToolCalls: 23, InputTokens: 48000, OutputTokens: 4100, CostUSD: 0.1873}},
			"report": {Status: protocol.StepPending},
		},
		Edges: []engine.EdgeState{{State: engine.EdgeFired, Uses: 1}, {State: engine.EdgePending}},
		Path:  []string{"plan"},
	}
}

func BenchmarkEncodeTask(b *testing.B)  { benchEncode(b, benchTask(), wire.AppendTask) }
func BenchmarkEncodeEvent(b *testing.B) { benchEncode(b, benchEvent(), wire.AppendEvent) }
func BenchmarkEncodeRun(b *testing.B)   { benchEncode(b, benchRun(), runstore.AppendRun) }

func benchEncode[T any](b *testing.B, v T, appendTo func([]byte, T) ([]byte, error)) {
	sameAsJSON(b, v, appendTo)
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = appendTo(buf[:0], v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := wire.Encode(v, appendTo); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAppendAllocatesNothing: the appenders write into the buffer they are given and allocate
// nothing else, runstore's run records included, whose encoder lives in another package (an
// Encoder the compiler moves to the heap is one allocation per record the engine saves).
func TestAppendAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 64<<10)
	task, ev, run := benchTask(), benchEvent(), goldenRun().Run
	for _, c := range []struct {
		name string
		f    func() ([]byte, error)
	}{
		{"AppendTask", func() ([]byte, error) { return wire.AppendTask(buf[:0], task) }},
		{"AppendEvent", func() ([]byte, error) { return wire.AppendEvent(buf[:0], ev) }},
		{"runstore.AppendRun", func() ([]byte, error) { return runstore.AppendRun(buf[:0], run) }},
	} {
		if _, err := c.f(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := testing.AllocsPerRun(50, func() { _, _ = c.f() }); n != 0 {
			t.Errorf("%s allocates %v times, want 0", c.name, n)
		}
	}
}

// The decoding benchmarks decode what an engine and a worker decode at every iteration of 64
// loops at once: the answers and the tasks of 64 runs in turn.

func BenchmarkDecodeTask(b *testing.B) {
	benchDecode(b, func(i int) []byte {
		t := benchTask()
		t.RunID = fmt.Sprintf("run-%06x", i)
		t.MsgID = t.RunID + "/explore/1/12/1"
		data, _ := wire.AppendTask(nil, t)
		return data
	}, wire.DecodeTask)
}

func BenchmarkDecodeEvent(b *testing.B) {
	benchDecode(b, func(i int) []byte {
		ev := benchEvent()
		ev.RunID = fmt.Sprintf("run-%06x", i)
		data, _ := wire.AppendEvent(nil, ev)
		return data
	}, wire.DecodeEvent)
}

func benchDecode[T any](b *testing.B, body func(int) []byte, decode func([]byte) (T, error)) {
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = body(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := decode(bodies[i%len(bodies)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
