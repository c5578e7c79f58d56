package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// bigString is a JSON string of n bytes.
func bigString(n int) string { return strconv.Quote(strings.Repeat("x", n-2)) }

// testValues is the values' store as a worker of another language would use it.
func testValues(t testing.TB, v *env) *wire.Values {
	t.Helper()
	ov, err := natsbox.OpenValues(v.Ctx, v.Box.JetStream(), v.Box.Names())
	if err != nil {
		t.Fatal(err)
	}
	return wire.NewValues(ov, 0, 0)
}

// No size is poison: inputs and outputs larger than a message travel by reference, through the
// values' store, and the run record keeps references; Get and Wait give them back whole. 2 MiB,
// and 20 MiB in the full suite (buildtest.Heavy).
func TestValuesByReference(t *testing.T) {
	sizes := []int{2 << 20}
	if buildtest.Heavy { // 20 s without -race: the full suite's
		sizes = append(sizes, 20<<20)
	}
	for _, size := range sizes {
		t.Run(fmt.Sprintf("%d MiB", size>>20), func(t *testing.T) {
			// Under -race every copy of 20 MiB is checked byte range by byte range: the run
			// takes 30 s alone on 2 cores, and more beside other packages' tests.
			v := newEnvWithin(t, t.TempDir(), 5*time.Minute)
			values := testValues(t, v)
			wf := workflow.New("big")
			wf.Task("echo", "echo")
			wf.Task("count", "count")
			wf.Edge("echo", "count")
			_, bs := runtest.Bundles(t, wf)
			input := json.RawMessage(bigString(size))
			got := make(chan json.RawMessage, 2)
			serve := func(handler string, answer func(ctx context.Context, task *protocol.Task, in json.RawMessage) *protocol.Event) {
				v.Worker(handler).Serve(func(task *protocol.Task) *protocol.Event {
					if !wire.IsRef(task.Input) {
						t.Errorf("%s: the task carries its %d-byte input inline", handler, len(task.Input))
					}
					in, err := values.In(v.Ctx, task.RunID, task.Input)
					if err != nil {
						t.Error(err)
						return runtest.Failed(task, err.Error(), true)
					}
					got <- in
					return answer(v.Ctx, task, in)
				})
			}
			serve("echo", func(ctx context.Context, task *protocol.Task, in json.RawMessage) *protocol.Event {
				ref, err := values.Out(ctx, task.RunID, in) // the answer would not fit in a message
				if err != nil {
					t.Error(err)
				}
				return runtest.Completed(task, string(ref))
			})
			serve("count", func(_ context.Context, task *protocol.Task, in json.RawMessage) *protocol.Event {
				return runtest.Completed(task, strconv.Itoa(len(in)))
			})
			id := v.Start(bs, string(input), "")
			rec := v.Wait(id)
			if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != strconv.Itoa(size) {
				t.Fatalf("run %s, output %.40s, error %+v", rec.Run.Status, rec.Run.Output, rec.Run.Error)
			}
			for _, step := range []string{"echo", "count"} {
				if in := <-got; !bytes.Equal(in, input) {
					t.Errorf("step %s got an input of %d bytes, want the run's %d", step, len(in), len(input))
				}
			}
			if !bytes.Equal(rec.Run.Input, input) || !bytes.Equal(rec.Run.Steps["echo"].Output, input) {
				t.Errorf("Wait: the run input (%d bytes) or echo's output (%d bytes) is not the value", len(rec.Run.Input), len(rec.Run.Steps["echo"].Output))
			}
			kve, err := v.KV(natsbox.RunsBucket).Get(v.Ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(kve.Value()); n > 8<<10 {
				t.Errorf("the run record is %d bytes: the values are not stored by reference", n)
			}
			// Prune removes the values with the run: nothing of them is left.
			rep, err := v.Client.Prune(v.Ctx, 0, time.Now().Add(time.Hour))
			if err != nil || rep.Runs != 1 || rep.Values != 1 {
				t.Fatalf("prune: %+v, %v; want 1 run and its 1 value (stored once, by digest)", rep, err)
			}
			if n := v.StreamMsgs("OBJ_" + natsbox.ValuesBucket); n != 0 {
				t.Errorf("after the prune the values' stream holds %d messages, want 0", n)
			}
		})
	}
}

// A reference that cannot be read back ends what it was for with one sentence: a start is
// refused (E_VALUE_UNREADABLE), an answer fails its step for good (value_unreadable). A
// reference to another run's value reads nothing of it.
func TestUnreadableValues(t *testing.T) {
	v := newEnv(t)
	values := testValues(t, v)
	secret, err := values.Out(v.Ctx, "other-run", json.RawMessage(bigString(100<<10)))
	if err != nil {
		t.Fatal(err)
	}
	wf := workflow.New("forged")
	wf.Task("work", "work")
	wf.Task("recover", "recover")
	wf.Edge("work", "recover").When("error")
	_, bs := runtest.Bundles(t, wf)
	v.Worker("work").Serve(func(task *protocol.Task) *protocol.Event {
		if task.RunID == "forged-input" {
			t.Errorf("a task ran for a run whose input cannot be read")
		}
		return runtest.Completed(task, string(secret)) // a value of another run
	})
	v.Worker("recover").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `"recovered"`) })

	v.Start(bs, `{}`, "stores-the-workflow")
	missing := `"\u0000reins-value:10:forged-input/` + strings.Repeat("0", 64) + `"`
	runtest.PublishEvent(v.Ctx, t, v.Box.JetStream(), &protocol.Event{RunID: "forged-input", Workflow: bs.Root,
		Type: protocol.EvStart, At: time.Now(), Item: -1, Input: json.RawMessage(missing)}, "")
	rec := v.Wait("forged-input")
	if rec.Run.Status != protocol.RunFailed || rec.Run.Error == nil || rec.Run.Error.Code != protocol.CodeValueUnreadable ||
		!strings.Contains(rec.Run.Error.Message, "the run's input cannot be read") {
		t.Fatalf("run %s, error %+v; want failed with %s", rec.Run.Status, rec.Run.Error, protocol.CodeValueUnreadable)
	}

	rec = v.Wait(v.Start(bs, `{}`, "forged-output"))
	sr := rec.Run.Steps["work"]
	if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != `"recovered"` || sr.StopReason != StopValueUnreadable ||
		!strings.Contains(sr.Error, "not a value of run forged-output") || len(sr.Output) != 0 {
		t.Fatalf("run %s (output %.40s), step work: stop reason %q, error %q, output %.40s", rec.Run.Status, rec.Run.Output, sr.StopReason, sr.Error, sr.Output)
	}
}

// A state still too large to save once its values are stored by reference (here: outputs under
// the kibibyte below which a value stays inline, against a small record bound) never makes the
// engine retry its save forever: the answer that makes it too large fails its step for good
// (output_too_large), and an error edge routes on it.
func TestStateTooLarge(t *testing.T) {
	v := newEnv(t)
	v.stop()
	// A record may be 2,376 bytes: the state with write's output (and read's input) is about
	// 2,950, with write failed instead about 1,950.
	v.eng, v.stop = v.startEngine(func(e *Engine) { e.maxPayload = 3400 })
	wf := workflow.New("inline-outputs")
	wf.Task("write", "write")
	wf.Task("read", "read")
	wf.Task("recover", "recover")
	wf.Edge("write", "read")
	wf.Edge("write", "recover").When("error")
	_, bs := runtest.Bundles(t, wf)
	v.Worker("write").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, bigString(1000)) })
	v.Worker("read").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `"read"`) })
	v.Worker("recover").Serve(func(task *protocol.Task) *protocol.Event { return runtest.Completed(task, `"recovered"`) })
	rec := v.Wait(v.Start(bs, `{}`, "inline"))
	if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != `"recovered"` {
		t.Fatalf("run %s, output %.80s, error %+v; want completed through the error edge", rec.Run.Status, rec.Run.Output, rec.Run.Error)
	}
	sr := rec.Run.Steps["write"]
	if sr.StopReason != StopOutputTooLarge || !strings.Contains(sr.Error, "the step's output of 1000 bytes cannot be kept") {
		t.Errorf("step write: stop reason %q, error %q", sr.StopReason, sr.Error)
	}
}

// A run that ends with a state still too large to save is saved without its values: it ends,
// failed with E_STATE_TOO_LARGE, whatever it held. The record bound is measured on the run,
// then set just above it, so that a signal too large to keep makes the run fail, and the
// failed state (its error said) is too large as well.
func TestStateTooLargeEvenFailed(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("waits")
	wf.WaitEvent("wait", "go")
	_, bs := runtest.Bundles(t, wf)
	input := bigString(1000) // inline: under the kibibyte that a value stays inline below
	id := v.Start(bs, input, "waits")
	v.WaitFor(id, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
	kve, err := v.KV(natsbox.RunsBucket).Get(v.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	v.stop()
	v.eng, v.stop = v.startEngine(func(e *Engine) { e.maxPayload = len(kve.Value()) + runstore.RecordOverhead + 50 })
	if err := v.Client.Signal(v.Ctx, id, "other", json.RawMessage(bigString(1000))); err != nil {
		t.Fatal(err)
	}
	rec := v.Wait(id)
	if rec.Run.Status != protocol.RunFailed || rec.Run.Error == nil || rec.Run.Error.Code != protocol.CodeStateTooLarge ||
		!strings.HasSuffix(rec.Run.Error.Message, "(the run's inputs and outputs are not kept)") {
		t.Fatalf("run %s, error %+v; want failed with %s, its values not kept", rec.Run.Status, rec.Run.Error, protocol.CodeStateTooLarge)
	}
	if len(rec.Run.Input) > len("null") || len(rec.Run.Steps["wait"].Input) > len("null") {
		t.Errorf("the input was kept: %.40s, %.40s", rec.Run.Input, rec.Run.Steps["wait"].Input)
	}
}
