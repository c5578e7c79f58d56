package wire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// memStore is a ValueStore in memory: what the tests of package wire need of one (the store on
// JetStream is natsbox.ObjectValues, tested there and end to end in runner).
type memStore struct {
	mu   sync.Mutex
	objs map[string][]byte
	puts int
}

func newMemStore() *memStore { return &memStore{objs: map[string][]byte{}} }

func (m *memStore) PutValue(_ context.Context, name string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[name] = bytes.Clone(data)
	m.puts++
	return nil
}

func (m *memStore) GetValue(_ context.Context, name string, max int64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objs[name]
	switch {
	case !ok:
		return nil, fmt.Errorf("%s: %w", name, natsbox.ErrNoValue)
	case int64(len(data)) > max:
		return nil, fmt.Errorf("%s is %d bytes, more than %d: %w", name, len(data), max, natsbox.ErrValueChanged)
	}
	return bytes.Clone(data), nil
}

func TestValuesRoundTrip(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	v := wire.NewValues(store, 100, 0)
	for _, tc := range []struct {
		name   string
		raw    string
		inline bool
	}{
		{"small", `{"a":1}`, true},
		{"at the bound", strconv.Quote(strings.Repeat("x", 98)), true},
		{"over the bound", strconv.Quote(strings.Repeat("x", 99)), false},
		{"a string that starts with NUL", `"\u0000reins-value:3:r/abc"`, false},
		{"NUL, short", `"\u0000"`, false},
		{"NUL after space", " \"\\u0000x\"", false},
		{"NUL inside", `"a\u0000"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := v.Out(ctx, "r", json.RawMessage(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			if inline := string(out) == tc.raw; inline != tc.inline || wire.IsRef(out) == tc.inline {
				t.Fatalf("Out(%.40s) = %.80s: inline %t, want %t", tc.raw, out, inline, tc.inline)
			}
			back, err := v.In(ctx, "r", out)
			if err != nil || string(back) != tc.raw {
				t.Fatalf("In(Out(%.40s)) = %.40s, %v", tc.raw, back, err)
			}
			if got := wire.ValueSize(out); got != int64(len(tc.raw)) {
				t.Errorf("ValueSize = %d, want %d", got, len(tc.raw))
			}
		})
	}
	// Stored once per run and value.
	before := store.puts
	for range 3 {
		if _, err := v.Out(ctx, "r", json.RawMessage(strconv.Quote(strings.Repeat("y", 500)))); err != nil {
			t.Fatal(err)
		}
	}
	if n := store.puts - before; n != 1 {
		t.Errorf("the same value was stored %d times, want 1", n)
	}
}

// A reference reads only a value of its own run, of the size and digest it names; every other
// one is refused with an error wrapping ErrValue (never used).
func TestValuesRefused(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	v := wire.NewValues(store, 10, 1000)
	secret, err := v.Out(ctx, "other", json.RawMessage(strconv.Quote(strings.Repeat("s", 50))))
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSuffix(string(secret)[strings.LastIndex(string(secret), ":")+1:], `"`)
	hash := name[len("other/"):]
	store.objs["r/"+hash] = store.objs[name] // the same bytes under run r's prefix: not r's digest? it is
	changed := strings.Repeat("0", 64)
	store.objs["r/"+changed] = []byte(`"changed"`)
	big, _ := wire.NewValues(store, 10, 0).Out(ctx, "r", json.RawMessage(strconv.Quote(strings.Repeat("b", 2000))))
	for _, tc := range []struct{ name, ref, want string }{
		{"another run's", string(secret), "not a value of run r"},
		{"a missing one", `"\u0000reins-value:9:r/` + strings.Repeat("1", 64) + `"`, "no such value"},
		{"a changed one", `"\u0000reins-value:9:r/` + changed + `"`, "is not the value its reference names"},
		{"a wrong size", `"\u0000reins-value:7:r/` + changed + `"`, "is not the value its reference names"},
		{"a nested name", `"\u0000reins-value:9:r/x/` + changed + `"`, "not a value of run r"},
		{"a bad size", `"\u0000reins-value:-1:r/` + changed + `"`, "has no valid size"},
		{"a size with zeros", `"\u0000reins-value:09:r/` + changed + `"`, "has no valid size"},
		{"too large to read", string(big), "more than the 1000 bytes a value may be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.In(ctx, "r", json.RawMessage(tc.ref))
			if !errors.Is(err, wire.ErrValue) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("In(%.60s) = %.40s, %v; want an ErrValue saying %q", tc.ref, got, err, tc.want)
			}
		})
	}
	// The same bytes under r's name are r's value: a digest names content, not who stored it.
	if got, err := v.In(ctx, "r", json.RawMessage(strings.Replace(string(secret), "other/", "r/", 1))); err != nil || !bytes.Equal(got, store.objs[name]) {
		t.Errorf("r's copy: %.40s, %v", got, err)
	}
}

// OutRun stores what is large and leaves the run it was given alone; InRun restores it.
func TestValuesOfARun(t *testing.T) {
	ctx := context.Background()
	v := wire.NewValues(newMemStore(), 100, 0)
	big := json.RawMessage(strconv.Quote(strings.Repeat("x", 300)))
	mid := json.RawMessage(strconv.Quote(strings.Repeat("m", 1500)))
	small := json.RawMessage(`1`)
	run := &engine.Run{ID: "r", Input: big, Output: small,
		Steps: map[string]*engine.StepRun{
			"a": {Input: big, Output: mid, Pending: []protocol.PendingCall{{CallID: "c", Arguments: big}},
				ChildResults: map[string]protocol.ChildResult{"c": {CallID: "c", Output: big}, "d": {CallID: "d", Output: small}}},
			"b": {Input: small},
		},
		Signals: map[string][]json.RawMessage{"go": {small, big}}}
	keep := run.Clone()
	out, err := runstore.OutRun(ctx, v, run, false)
	if err != nil {
		t.Fatal(err)
	}
	for what, raw := range map[string]json.RawMessage{"input": out.Input, "a's input": out.Steps["a"].Input, "a's output": out.Steps["a"].Output,
		"a's call": out.Steps["a"].Pending[0].Arguments, "a signal": out.Signals["go"][1], "a's child's output": out.Steps["a"].ChildResults["c"].Output} {
		if !wire.IsRef(raw) {
			t.Errorf("%s stayed inline", what)
		}
	}
	if !bytes.Equal(out.Output, small) || !bytes.Equal(out.Steps["b"].Input, small) || !bytes.Equal(out.Signals["go"][0], small) ||
		!bytes.Equal(out.Steps["a"].ChildResults["d"].Output, small) {
		t.Error("a small value went out")
	}
	packed, err := runstore.OutRun(ctx, v, &engine.Run{ID: "r", Input: json.RawMessage(strconv.Quote(strings.Repeat("p", 1100))), Output: small}, true)
	if err != nil || !wire.IsRef(packed.Input) || !bytes.Equal(packed.Output, small) {
		t.Errorf("packed: input %.40s, output %s, %v; want the kibibyte value out, the small one in", packed.Input, packed.Output, err)
	}
	if !equalRuns(run, keep) {
		t.Fatal("OutRun changed the run it was given")
	}
	if err := runstore.InRun(ctx, v, out); err != nil || !equalRuns(out, keep) {
		t.Errorf("InRun did not restore the run: %v", err)
	}
	kept := out.Clone()
	dropped, had := runstore.DropValues(out)
	if _, again := runstore.DropValues(dropped); !had || dropped.Input != nil || dropped.Steps["a"].Output != nil || again {
		t.Error("DropValues did not drop every value once")
	}
	if !equalRuns(out, kept) {
		t.Error("DropValues changed the run it was given")
	}
}

// The outputs of the sub-runs a resumed task carries go by reference too.
func TestValuesOfATask(t *testing.T) {
	ctx := context.Background()
	v := wire.NewValues(newMemStore(), 100, 0)
	big := json.RawMessage(strconv.Quote(strings.Repeat("x", 300)))
	task := &protocol.Task{RunID: "r", Input: json.RawMessage(`1`), ChildResults: []protocol.ChildResult{{CallID: "c", Output: big}}}
	out, err := v.OutTask(ctx, task)
	if err != nil || !wire.IsRef(out.ChildResults[0].Output) || !bytes.Equal(task.ChildResults[0].Output, big) {
		t.Fatalf("OutTask: %v, child output %.40s, the task's own %.40s; want a reference in a copy", err, out.ChildResults[0].Output, task.ChildResults[0].Output)
	}
	if err := v.InTask(ctx, out); err != nil || !bytes.Equal(out.ChildResults[0].Output, big) {
		t.Errorf("InTask: %v, child output %.40s", err, out.ChildResults[0].Output)
	}
}

func equalRuns(a, b *engine.Run) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// FuzzValues: whatever JSON value a user sends comes back the same through Out and In, and a
// value that stays inline is never taken for a reference.
func FuzzValues(f *testing.F) {
	for _, s := range []string{`1`, `"x"`, `"\u0000"`, `"\u0000reins-value:1:r/` + strings.Repeat("a", 64) + `"`, `{"a":[1,2]}`, ` "\u0000"`} {
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, raw string, inline int) {
		if !json.Valid([]byte(raw)) {
			return
		}
		ctx := context.Background()
		v := wire.NewValues(newMemStore(), max(inline%200, 1), 0)
		out, err := v.Out(ctx, "r", json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		if string(out) == raw && wire.IsRef(out) {
			t.Fatalf("the inline value %q is a reference", raw)
		}
		back, err := v.In(ctx, "r", out)
		if err != nil || string(back) != raw {
			t.Fatalf("In(Out(%q)) = %q, %v", raw, back, err)
		}
	})
}
