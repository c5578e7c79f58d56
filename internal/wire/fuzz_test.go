package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// FuzzDecodeTask: DecodeTask never panics, fails only with ErrMalformed, and what it accepts
// encodes to a body it accepts again as the same task (the encoding is then a fixed point).
func FuzzDecodeTask(f *testing.F) {
	good, err := wire.EncodeTask(sampleTask())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `"x"`, `{"run_id":1}`,
		`{"run_id":"r","step":"s","msg_id":"r/s/1/1/1","activation":1,"iteration":1,"attempt":1}`,
		`{"run_id":"r","step":"s","msg_id":"m","activation":1,"iteration":1,"attempt":1,"input":null,"item":-1}`,
		`{"run_id":"r","step":"s","msg_id":"m","activation":1,"iteration":1,"attempt":1,"not_before":"2026-01-02T03:04:05.123+01:00","timeout":5000000000}`,
		`{"run_id":"r","step":"s","msg_id":"m","activation":1,"iteration":1,"attempt":0}`,
		`{"RUN_ID":"r","Step":"s","msg_id":"m","activation":1,"iteration":1,"attempt":1,"input":{ "a" : [1, 2] }}`,
		`{"run_id":"r\u00e9\ud800","step":"s","msg_id":"m","activation":1,"iteration":1,"attempt":1,"type":"agent"}`,
		`{"run_id":"r","step":"s","msg_id":"r/s/1/2/1/r1","activation":1,"iteration":2,"attempt":1,"resume":1,"decisions":[{"call_id":"c","approve":true},{"call_id":"d","approve":false,"message":"no"}]}`,
		`{"run_id":"r","step":"s","msg_id":"m","activation":1,"iteration":3,"attempt":1,"human_input":{ "note" : "go" }}`,
		`{"run_id":"r","step":"s","msg_id":"m","activation":1,"iteration":3,"attempt":1,"human_input":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		t1, err := wire.DecodeTask(data)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("DecodeTask: %v does not wrap ErrMalformed", err)
			}
			return
		}
		if t1.RunID == "" || t1.Step == "" || t1.MsgID == "" || t1.Activation < 1 || t1.Iteration < 1 || t1.Attempt < 1 {
			t.Fatalf("DecodeTask accepted an invalid task %+v", t1)
		}
		_, _ = natsbox.Names{}.TaskSubject(t1.Handler)
		b1, err := wire.EncodeTask(t1)
		if err != nil {
			t.Fatalf("EncodeTask of a decoded task %+v: %v", t1, err)
		}
		t2, err := wire.DecodeTask(b1)
		if err != nil {
			t.Fatalf("DecodeTask of its own encoding %s: %v", b1, err)
		}
		// An absent input encodes as null.
		if t1.Input == nil {
			t1.Input = json.RawMessage("null")
		}
		if !taskEqual(t1, t2) {
			t.Fatalf("round trip changed the task:\n%+v\n%+v", t1, t2)
		}
		b2, err := wire.EncodeTask(t2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("the encoding is not stable:\n%s\n%s", b1, b2)
		}
	})
}

// FuzzDecodeEvent: the same for events, and EventMsgID and EventSubject never panic.
func FuzzDecodeEvent(f *testing.F) {
	for _, ev := range sampleEvents() {
		data, err := wire.EncodeEvent(ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `{"type":"start"}`, `{"run_id":"r"}`,
		`{"run_id":"r","type":"start","at":"2026-01-02T03:04:05Z","input":null,"item":-1}`,
		`{"run_id":"r","type":"start","parent":null,"usage":null,"output":null}`,
		`{"run_id":"r","type":"tick","at":"0001-01-01T00:00:00Z","step":"s","item":3}`,
		`{"run_id":"r","type":"continued","nonce":"x","step":"s","item":-1,"activation":1,"iteration":2,"attempt":1,"usage":{"cost_usd":1e-9}}`,
		`{"run_id":"r","type":"child_finished","status":"failed","parent":{"run_id":"p","step":"s","item":-1,"activation":1}}`,
		`{"run_id":"r","type":"x","at":"9999-12-31T23:59:59.999999999-23:59"}`,
		`{"run_id":"r","type":"waiting","step":"s","item":-1,"activation":1,"iteration":2,"attempt":1,"pending":[{"call_id":"c1","tool":"t","arguments":{ "a" : 1 }}]}`,
		`{"run_id":"r","type":"completed","step":"s","item":2,"activation":1,"iteration":2,"attempt":1,"resume":3}`,
		`{"run_id":"r","type":"decision","step":"s","call_id":"c1","approve":true,"message":"ok","by":"ann","nonce":"n"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e1, err := wire.DecodeEvent(data)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("DecodeEvent: %v does not wrap ErrMalformed", err)
			}
			return
		}
		if e1.RunID == "" || e1.Type == "" {
			t.Fatalf("DecodeEvent accepted an invalid event %+v", e1)
		}
		_ = wire.EventMsgID(e1, "child")
		_, _ = natsbox.Names{}.EventSubject(e1.RunID)
		b1, err := wire.EncodeEvent(e1)
		if err != nil {
			t.Fatalf("EncodeEvent of a decoded event %+v: %v", e1, err)
		}
		e2, err := wire.DecodeEvent(b1)
		if err != nil {
			t.Fatalf("DecodeEvent of its own encoding %s: %v", b1, err)
		}
		if !eventEqual(e1, e2) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e1, e2)
		}
		if id1, id2 := wire.EventMsgID(e1, "child"), wire.EventMsgID(e2, "child"); id1 != id2 {
			t.Fatalf("the message id changed in the round trip: %q, %q", id1, id2)
		}
		b2, err := wire.EncodeEvent(e2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("the encoding is not stable:\n%s\n%s", b1, b2)
		}
	})
}

// FuzzDecodeEventInto: decoding into an event that held another gives what DecodeEvent gives,
// error or event: nothing of the first is left (an engine decodes every event into one it
// kept).
func FuzzDecodeEventInto(f *testing.F) {
	samples := sampleEvents()
	for i, ev := range samples {
		first, _ := wire.EncodeEvent(ev)
		second, _ := wire.EncodeEvent(samples[(i+1)%len(samples)])
		f.Add(first, second)
	}
	f.Add([]byte(`{"run_id":"r","type":"continued","usage":{"model_calls":1},"output":[1,2,3]}`), []byte(`{"run_id":"r","type":"continued","usage":{"tool_calls":2}}`))
	f.Add([]byte(`{"run_id":"r","type":"continued","output":"long output"}`), []byte(`{"run_id":"s","type":"x","output":1}`))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		ev := new(protocol.Event)
		_ = wire.DecodeEventInto(first, ev)
		err := wire.DecodeEventInto(second, ev)
		want, wantErr := wire.DecodeEvent(second)
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("DecodeEventInto(%q) after %q: %v; DecodeEvent: %v", second, first, err, wantErr)
		case err == nil && !reflect.DeepEqual(ev, want):
			t.Fatalf("DecodeEventInto(%q) after %q = %+v, want %+v", second, first, ev, want)
		}
	})
}

// FuzzParseCheckpointKey: a key ParseCheckpointWrite accepts is the one CheckpointWrite.Key makes
// of its parts, ParseCheckpointKey accepts exactly those of first tasks (Resume 0), and every
// other key is refused with ErrMalformed.
func FuzzParseCheckpointKey(f *testing.F) {
	for _, s := range []string{
		"r-1/loop/1.1.0", "r-1/fan=2/3.12.7", "r-1/sub/1/work/1.0.0", "", ".", "..", "a.b.c", "a.1.2.3",
		"a.01.0", "a.+1.0", "a.-1.0", "a.1.9223372036854775807", "a.1.9223372036854775808", ".1.1", "a\x00.1.1",
		"a.1.r1.0", "a.1.r0.0", "a.1.r01.0", "a.1.r.0", "a.1.r9223372036854775807.3", "a.1.r1.0.1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		w, err := wire.ParseCheckpointWrite(key)
		scope, iter, n, kerr := wire.ParseCheckpointKey(key)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) || !errors.Is(kerr, wire.ErrMalformed) {
				t.Fatalf("ParseCheckpointWrite(%q): %v; ParseCheckpointKey: %v; want both to wrap ErrMalformed", key, err, kerr)
			}
			return
		}
		if w.Scope == "" || strings.Contains(w.Scope, ".") || w.Iteration < 0 || w.N < 0 || w.Resume < 0 {
			t.Fatalf("ParseCheckpointWrite(%q) = %+v", key, w)
		}
		if again := w.Key(); again != key {
			t.Fatalf("ParseCheckpointWrite(%q) = %+v, whose Key is %q", key, w, again)
		}
		switch {
		case w.Resume > 0 && (kerr == nil || !errors.Is(kerr, wire.ErrMalformed)):
			t.Fatalf("ParseCheckpointKey(%q) of a resumed write = %q, %d, %d, %v; want ErrMalformed", key, scope, iter, n, kerr)
		case w.Resume == 0 && (kerr != nil || scope != w.Scope || iter != w.Iteration || n != w.N):
			t.Fatalf("ParseCheckpointKey(%q) = %q, %d, %d, %v; want %+v", key, scope, iter, n, kerr, w)
		case w.Resume == 0 && wire.CheckpointKey(scope, iter, n) != key:
			t.Fatalf("CheckpointKey of %q's parts is %q", key, wire.CheckpointKey(scope, iter, n))
		}
	})
}

// FuzzCheckpointScope: every scope is a KV key without dots, and its keys parse back.
func FuzzCheckpointScope(f *testing.F) {
	f.Add("r-1", "loop", -1, 1, 1, 0, 0)
	f.Add("r-1/sub/2", "fan", 3, 2, 12, 2, 7)
	f.Add("r.x", "a b.c*>é\x00", 4, 2, 0, 1, 0)
	f.Add("", "", 0, 0, 0, 0, 0)
	f.Fuzz(func(t *testing.T, run, step string, item, activation, iter, resume, n int) {
		scope := wire.CheckpointScope(run, step, item, activation)
		if strings.Contains(scope, ".") {
			t.Fatalf("scope %q holds a dot", scope)
		}
		if !kvKey.MatchString(scope) {
			t.Fatalf("scope %q is not a KV key", scope)
		}
		if iter < 0 || n < 0 || resume < 0 {
			return // keys are made of iterations (1 or more), resumes and write numbers (0 or more)
		}
		want := wire.CheckpointWrite{Scope: scope, Iteration: iter, Resume: resume, N: n}
		key := want.Key()
		if !kvKey.MatchString(key) {
			t.Fatalf("key %q is not a KV key", key)
		}
		if w, err := wire.ParseCheckpointWrite(key); err != nil || w != want {
			t.Fatalf("ParseCheckpointWrite(%q) = %+v, %v; want %+v", key, w, err, want)
		}
		if resume == 0 && key != wire.CheckpointKey(scope, iter, n) {
			t.Fatalf("CheckpointKey(%q, %d, %d) = %q, want %q", scope, iter, n, wire.CheckpointKey(scope, iter, n), key)
		}
	})
}

// FuzzEffectKey: every id has a KV key of 64 hex digits, the same every time.
func FuzzEffectKey(f *testing.F) {
	for _, s := range []string{"", "r-1/s/1/0", "a.b*>\x00é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		k := wire.EffectKey(id)
		if len(k) != 64 || !kvKey.MatchString(k) || strings.ContainsAny(k, "./") || k != wire.EffectKey(id) {
			t.Fatalf("EffectKey(%q) = %q", id, k)
		}
	})
}
