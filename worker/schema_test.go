package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/protocoltest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// TestWhatTheWorkerSendsConforms: the answers a worker publishes (each type, with their message
// ids), the checkpoint writes and effect records it writes (a value by reference among them) and
// the deltas it publishes conform to the JSON Schemas of docs/protocol (docs/protocol.md).
func TestWhatTheWorkerSendsConforms(t *testing.T) {
	e := newEnv(t)
	big := strings.Repeat("y", 70<<10) // by reference: more than 64 KiB
	claims := make(chan []byte, 1)
	handlers := map[string]Handler{
		"continue": func(tc TaskContext) error {
			if err := tc.Checkpoint([]any{map[string]any{"seen": 1}}); err != nil {
				return err
			}
			if err := tc.AppendCheckpoint("a", 2, nil); err != nil {
				return err
			}
			tc.AddUsage(protocol.Usage{ModelCalls: 1, InputTokens: 12, CostUSD: 0.001})
			return tc.Continue(map[string]int{"next": 2})
		},
		"complete": func(tc TaskContext) error {
			if err := tc.Checkpoint(big); err != nil {
				return err
			}
			out, err := tc.Effect("charge", func(ctx context.Context, key string) (any, error) {
				kv, err := e.js.KeyValue(ctx, natsbox.EffectsBucket)
				if err != nil {
					return nil, err
				}
				claim, err := kv.Get(ctx, wire.EffectKey(key))
				if err != nil {
					return nil, err
				}
				claims <- claim.Value()
				return map[string]string{"charge": "ch_1"}, nil
			})
			if err != nil {
				return err
			}
			return tc.CompleteWith(out, Outcome{Label: "paid", StopReason: "completed", StopDetail: "charged once"})
		},
		"wait": func(tc TaskContext) error {
			return tc.Wait([]protocol.PendingCall{{CallID: "c1", Tool: "refund", Arguments: json.RawMessage(`{"amount":10}`)},
				{CallID: "c2", Tool: "research", Arguments: json.RawMessage(`{}`), Child: &protocol.ChildCall{Agent: "researcher"}}})
		},
		"fail":      func(tc TaskContext) error { return tc.FailPermanent(errors.New("bad input")) },
		"retryable": func(tc TaskContext) error { return errors.New("flaky") },
		"slow": func(tc TaskContext) error {
			<-tc.Done()
			return tc.Err()
		},
	}
	w := e.start(Options{}, handlers)
	types := map[string]protocol.EventType{"continue": protocol.EvContinued, "complete": protocol.EvCompleted,
		"wait": protocol.EvWaiting, "fail": protocol.EvFailed, "retryable": protocol.EvFailed, "slow": protocol.EvTimedOut}
	for _, name := range []string{"continue", "complete", "wait", "fail", "retryable", "slow"} {
		tk := task("run-"+name, "s", name, 2, 1)
		tk.Protocol = protocol.Version
		if name == "slow" {
			tk.Timeout = 50 * time.Millisecond
		}
		protocoltest.Validate(t, "task.schema.json", mustEncode(t, tk))
		e.publish(tk)
		msg, err := e.events.Next(jetstream.FetchMaxWait(failsafe))
		if err != nil {
			t.Fatalf("%s: no answer: %v", name, err)
		}
		typ := types[name]
		protocoltest.Validate(t, "answer.schema.json", msg.Data())
		protocoltest.Validate(t, "answer-"+string(typ)+".schema.json", msg.Data())
		ev, err := wire.DecodeEvent(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		want := tk.MsgID + "/" + string(typ)
		if typ == protocol.EvContinued {
			want += "/" + ev.Nonce
		}
		if id != want || id != wire.EventMsgID(ev, "") {
			t.Errorf("%s: Nats-Msg-Id %q, want %q", name, id, want)
		}
		if subj, _ := natsbox.EventSubject(tk.RunID); msg.Subject() != subj {
			t.Errorf("%s: answered on %s, want %s", name, msg.Subject(), subj)
		}
		e.waitSettled(tk.MsgID)
	}

	// The checkpoint writes: a set and an append, and a set by reference.
	for _, name := range []string{"continue", "complete"} {
		writes := e.checkpointValues(wire.CheckpointScope("run-"+name, "s", -1, 1))
		if len(writes) == 0 {
			t.Fatalf("%s: no checkpoint write", name)
		}
		for key, value := range writes {
			if _, err := wire.ParseCheckpointWrite(key); err != nil || !strings.HasPrefix(key, "run-"+name+"/s/1.2.") {
				t.Errorf("checkpoint key %s: %v", key, err)
			}
			protocoltest.Validate(t, "checkpoint.schema.json", value)
		}
		if name == "complete" {
			if v := writes["run-complete/s/1.2.0"]; !wire.IsRef(v) {
				t.Errorf("a write of %d bytes is not by reference: %.60s", len(big), v)
			}
		}
	}

	// The claim the effect ran under, then its record.
	protocoltest.Validate(t, "effect.schema.json", recv(t, claims))
	kv, err := e.js.KeyValue(testCtx(t), natsbox.EffectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := kv.Get(testCtx(t), wire.EffectKey("run-complete/s/-1/1/2/charge"))
	if err != nil {
		t.Fatal(err)
	}
	protocoltest.Validate(t, "effect.schema.json", rec.Value())
	protocoltest.Refuse(t, "effect.schema.json", []byte(`{"holder":"x"}`))
	protocoltest.Refuse(t, "checkpoint.schema.json", []byte(`{"set":1,"append":[2]}`))

	// A delta, as PublishDelta sends it.
	deltas := make(chan []byte, 1)
	subj, _ := natsbox.Names{}.DeltaSubject("run-d")
	sub, err := e.box.Conn().Subscribe(subj, func(m *nats.Msg) { deltas <- m.Data })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := e.box.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	w.PublishDelta(protocol.Delta{RunID: "run-d", Step: "draft", Iteration: 1, Turn: 1, Text: "Hel"})
	protocoltest.Validate(t, "delta.schema.json", recv(t, deltas))
}

func mustEncode(t *testing.T, tk *protocol.Task) []byte {
	t.Helper()
	data, err := wire.EncodeTask(tk)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
