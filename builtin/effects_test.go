package builtin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/worker"
)

// effectStore opens an embedded NATS server with the reins layout for the test, and returns the
// worker's record of side effects and the bucket behind it.
func effectStore(t *testing.T) (builtin.EffectStore, jetstream.KeyValue) {
	t.Helper()
	ctx := context.Background()
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	if err := natsbox.EnsureLayout(ctx, box.JetStream(), natsbox.Layout{}); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New((*conn.Conn)(box), worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := box.JetStream().KeyValue(ctx, natsbox.EffectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return w.Effects(), kv
}

// records returns the results recorded in the effects bucket.
func records(t *testing.T, kv jetstream.KeyValue) []string {
	t.Helper()
	lister, err := kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range lister.Keys() {
		e, err := kv.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Done  bool
			Value json.RawMessage
		}
		if err := json.Unmarshal(e.Value(), &rec); err != nil || !rec.Done {
			t.Fatalf("record %s is not a result (%v)", e.Value(), err)
		}
		out = append(out, string(rec.Value))
	}
	return out
}

// counting is a Go tool that counts its calls and answers with what result returns for call n
// (1-based).
type counting struct {
	mu     sync.Mutex
	calls  int
	spec   tool.Spec
	result func(n int, args json.RawMessage) (json.RawMessage, error)
}

func (c *counting) Spec() tool.Spec { return c.spec }

func (c *counting) Call(_ context.Context, args json.RawMessage, _ string) (json.RawMessage, error) {
	c.mu.Lock()
	c.calls++
	n := c.calls
	c.mu.Unlock()
	return c.result(n, args)
}

func (c *counting) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// Each side-effecting call's result is recorded before the iteration checkpoints, and an
// iteration that runs again (its task redelivered after a crash) returns the recorded result
// without calling the tool: the same checkpoint, the same answer.
func TestSideEffectsRunOnce(t *testing.T) {
	refundArgs := func(order string) string {
		return `{ tool_calls = [{ name = "issue_refund", arguments = { order_id = "` + order + `" } }] }`
	}
	lookupTurn := `{ tool_calls = [{ name = "lookup_customer", arguments = { order_id = "O-104" } }] }`
	tests := []struct {
		name    string
		turn    string // the first iteration's proposal
		again   string // the proposal when the iteration runs again ("": the same)
		handler string // the Go tool's handler
		spec    tool.Spec
		result  func(n int, args json.RawMessage) (json.RawMessage, error)
		calls   int    // calls of the Go tool after both runs
		record  string // the record stored ("": none)
		stop    string // the loop's stop reason after iteration 1 ("": it goes on)
	}{
		{name: "a JSON result", turn: refundArgs("O-104"), handler: "payments.issue_refund",
			result: func(n int, _ json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(fmt.Sprintf(`{ "refund": %d }`, n)), nil
			},
			calls: 1, record: `{"tool":"issue_refund","output":{"refund":1}}`},
		{name: "a result that is not JSON", turn: refundArgs("O-104"), handler: "payments.issue_refund",
			result: func(n int, _ json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(fmt.Sprintf("refund #%d issued", n)), nil
			},
			calls: 1, record: `{"tool":"issue_refund","text":"refund #1 issued"}`},
		{name: "a permanent failure", turn: refundArgs("O-104"), handler: "payments.issue_refund",
			result: func(n int, _ json.RawMessage) (json.RawMessage, error) {
				return nil, &tool.Error{Message: fmt.Sprintf("card declined (attempt %d)", n)}
			},
			calls: 1, record: `{"tool":"issue_refund","error":"card declined (attempt 1)"}`, stop: "tool_failure"},
		{name: "a panic is a permanent failure", turn: refundArgs("O-104"), handler: "payments.issue_refund",
			result: func(n int, _ json.RawMessage) (json.RawMessage, error) { panic(fmt.Sprintf("boom %d", n)) },
			calls:  1, record: `{"tool":"issue_refund","error":"tool issue_refund panicked: boom 1"}`, stop: "tool_failure"},
		{name: "a retryable failure is not recorded", turn: refundArgs("O-104"), handler: "payments.issue_refund",
			result: func(n int, _ json.RawMessage) (json.RawMessage, error) {
				return nil, &tool.Error{Message: "try later", Retryable: true}
			},
			calls: 2},
		{name: "another call at the same place runs", turn: refundArgs("O-104"), again: refundArgs("O-105"), handler: "payments.issue_refund",
			result: func(n int, args json.RawMessage) (json.RawMessage, error) { return args, nil },
			calls:  2, record: `{"tool":"issue_refund","output":{"order_id":"O-104"}}` + "\n" + `{"tool":"issue_refund","output":{"order_id":"O-105"}}`},
		{name: "a tool without side effects is not recorded", turn: lookupTurn, handler: "crm.lookup",
			result: func(n int, _ json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`{"tier":"gold"}`), nil
			},
			calls: 2},
		{name: "a Go tool that says it writes", turn: lookupTurn, handler: "crm.lookup", spec: tool.Spec{SideEffect: true},
			result: func(n int, _ json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`{"tier":"gold"}`), nil
			},
			calls: 1, record: `{"tool":"lookup_customer","output":{"tier":"gold"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, kv := effectStore(t)
			spec := tt.spec
			spec.Name = "go_tool"
			goTool := &counting{spec: spec, result: tt.result}
			cfg := builtin.Config{Effects: store, Tools: map[string]tool.Tool{tt.handler: goTool}}
			tools := `["issue_refund"]`
			if tt.handler == "crm.lookup" {
				tools = `["lookup_customer"]`
			}
			wf := func(turn string) (*fakeTask, error) {
				b, hash := bundleOf(t, refundWorkflow(script(turn, answer), tools, `{}`, noBudget), "")
				ft := newTask(b, hash, "investigate", 1, "null")
				return ft, newHandlers(t, cfg).Agent(ft)
			}
			first, err := wf(tt.turn)
			if err != nil {
				t.Fatal(err)
			}
			if first.answer == "fail" || first.answer == "fail_permanent" {
				t.Fatalf("iteration 1 failed: %v", first.err)
			}
			st := state(t, first.saved)
			if string(st.StopReason) != tt.stop {
				t.Errorf("stop reason %q (%s), want %q", st.StopReason, st.Detail, tt.stop)
			}

			// The same iteration again, on fresh handlers (another worker), from the same
			// checkpoint (none: iteration 1), with the record stored by the first.
			var checked bool
			again := tt.again
			if again == "" {
				again = tt.turn
			}
			b, hash := bundleOf(t, refundWorkflow(script(again, answer), tools, `{}`, noBudget), "")
			second := newTask(b, hash, "investigate", 1, "null")
			second.onCheckpoint = func() { checked = len(records(t, kv)) > 0 }
			if err := newHandlers(t, cfg).Agent(second); err != nil {
				t.Fatal(err)
			}
			if n := goTool.count(); n != tt.calls {
				t.Errorf("the Go tool ran %d times in two runs of the iteration, want %d", n, tt.calls)
			}
			got := records(t, kv)
			if strings.Join(got, "\n") != tt.record && !(len(got) == 2 && got[1]+"\n"+got[0] == tt.record) {
				t.Errorf("records %q, want %q", got, tt.record)
			}
			if tt.record != "" && !checked {
				t.Errorf("no record was stored when the iteration checkpointed")
			}
			if tt.again == "" && tt.calls == 1 {
				if !bytes.Equal(second.saved, first.saved) || second.answer != first.answer || !bytes.Equal(second.output, first.output) {
					t.Errorf("the iteration run again checkpointed or answered otherwise:\n%s %s %s\nfirst:\n%s %s %s",
						second.answer, second.output, second.saved, first.answer, first.output, first.saved)
				}
			}
		})
	}
}

// Whatever goes wrong with the record fails the attempt (to run again) without checkpointing:
// a claim that cannot be made (the tool is not called), a record that is not valid, a result
// that cannot be recorded or a claim lost while the tool ran (the tool was called: its next
// attempt finds the claim and runs it again with the same idempotency key, or waits).
func TestSideEffectRecordFailures(t *testing.T) {
	wf := refundWorkflow(script(refund, answer), `["issue_refund"]`, `{}`, noBudget)
	b, hash := bundleOf(t, wf, "")
	const will = "step investigate: iteration 1 will run again: call run1/investigate/1/0 of tool issue_refund: "
	tests := []struct {
		name  string
		store failingStore
		calls int
		err   string
	}{
		{name: "the claim cannot be made", store: failingStore{claim: errors.New("nats: timeout")},
			err: will + "nats: timeout"},
		{name: "the record is not valid", store: failingStore{value: []byte(`{"tool":`)},
			err: "step investigate: iteration 1 will run again: the record of call run1/investigate/1/0 of tool issue_refund is not valid: unexpected end of JSON input"},
		{name: "the result cannot be recorded", store: failingStore{record: worker.ErrNotRecorded}, calls: 1,
			err: will + worker.ErrNotRecorded.Error()},
		{name: "the claim was lost", store: failingStore{record: worker.ErrLeaseLost}, calls: 1,
			err: will + worker.ErrLeaseLost.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			goTool := &counting{spec: tool.Spec{Name: "refund"}, result: func(int, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`{"ok":true}`), nil
			}}
			h := newHandlers(t, builtin.Config{Effects: &tt.store, Tools: map[string]tool.Tool{"payments.issue_refund": goTool}})
			ft := newTask(b, hash, "investigate", 1, "null")
			if err := h.Agent(ft); err != nil {
				t.Fatal(err)
			}
			if ft.answer != "fail" || ft.err == nil || ft.err.Error() != tt.err {
				t.Fatalf("answer %s (%v), want fail (%s)", ft.answer, ft.err, tt.err)
			}
			if goTool.count() != tt.calls || ft.saved != nil {
				t.Errorf("%d calls, checkpoint %s; want %d calls, no checkpoint", goTool.count(), ft.saved, tt.calls)
			}
		})
	}
}

// failingStore is an EffectStore that fails as told, or holds value for every id.
type failingStore struct {
	claim, record error
	value         []byte
}

func (f *failingStore) Once(ctx context.Context, _ string, _ worker.Lease, do func(context.Context) ([]byte, error)) ([]byte, error) {
	switch {
	case f.claim != nil:
		return nil, f.claim
	case f.value != nil:
		return f.value, nil
	}
	v, err := do(ctx)
	if err != nil {
		return nil, err
	}
	if f.record != nil {
		return nil, f.record
	}
	return v, nil
}

func (f *failingStore) LeaseFor(*protocol.Task) worker.Lease {
	return worker.Lease{Holder: "test", For: time.Minute}
}
