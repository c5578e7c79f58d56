package runner

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/wire"
	"github.com/reins-run/reins/workflow"
)

// bigString is a JSON string of n bytes.
func bigString(n int) string { return strconv.Quote(strings.Repeat("x", n-2)) }

// No size is poison: a state too large to save never makes the engine retry its save forever.
// An answer whose output makes it too large fails its step for good (output_too_large, and an
// error edge may route on it); a start whose input makes it too large ends the run failed with
// E_INPUT_TOO_LARGE. Either way the run ends, and Wait returns.
func TestStateTooLarge(t *testing.T) {
	t.Run("an output", func(t *testing.T) {
		v := newEnv(t)
		wf := workflow.New("big-output")
		wf.Task("write", "write")
		wf.Task("read", "read")
		wf.Task("recover", "recover")
		wf.Edge("write", "read")
		wf.Edge("write", "recover").When("error")
		_, bs := bundles(t, wf)
		// 600 KB: the answer fits in a message, but the state keeps it twice (the step's
		// output and the next step's input).
		v.worker("write").serve(func(task *engine.Task) *wire.Event { return completed(task, bigString(600<<10)) })
		v.worker("read").serve(func(task *engine.Task) *wire.Event { return completed(task, `"read"`) })
		v.worker("recover").serve(func(task *engine.Task) *wire.Event { return completed(task, `"recovered"`) })
		rec := v.wait(v.start(bs, `{}`, "big-out"))
		if rec.Run.Status != engine.RunCompleted || string(rec.Run.Output) != `"recovered"` {
			t.Fatalf("run %s, output %.80s, error %+v; want completed through the error edge", rec.Run.Status, rec.Run.Output, rec.Run.Error)
		}
		sr := rec.Run.Steps["write"]
		if sr.StopReason != StopOutputTooLarge || !strings.Contains(sr.Error, "the step's output of 614400 bytes cannot be kept") {
			t.Errorf("step write: stop reason %q, error %q", sr.StopReason, sr.Error)
		}
	})
	t.Run("an input", func(t *testing.T) {
		v := newEnv(t)
		wf := workflow.New("big-input")
		wf.Task("work", "work")
		_, bs := bundles(t, wf)
		v.worker("work").serve(func(task *engine.Task) *wire.Event {
			if task.RunID == "big-in" {
				t.Errorf("a task ran for a run whose input is too large")
			}
			return completed(task, `1`)
		})
		// The client refuses it (TestClientStartErrors): a start published by hand does not.
		v.start(bs, `{}`, "stores-the-workflow")
		publishEvent(v.ctx, t, v.box.JetStream(), &wire.Event{RunID: "big-in", Workflow: bs.Root,
			Event: engine.Event{Type: engine.EvStart, At: time.Now(), Item: -1, Input: json.RawMessage(bigString(900 << 10))}}, "")
		rec := v.wait("big-in")
		if rec.Run.Status != engine.RunFailed || rec.Run.Error == nil || rec.Run.Error.Code != engine.CodeInputTooLarge ||
			!strings.Contains(rec.Run.Error.Message, "the run's input is 921600 bytes") {
			t.Fatalf("run %s, error %+v; want failed with E_INPUT_TOO_LARGE", rec.Run.Status, rec.Run.Error)
		}
		if string(rec.Run.Input) != "null" {
			t.Errorf("the input kept is %.40s, want null", rec.Run.Input)
		}
	})
}
