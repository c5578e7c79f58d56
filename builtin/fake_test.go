package builtin_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
	"github.com/reins-run/reins/workflow"
)

// fakeTask is an in-memory worker task: it hands the handler a task, its input, bundle and
// checkpoint, and records the answer, the checkpoint written and the usage reported. (The
// worker's NATS behaviour is tested in package worker.)
type fakeTask struct {
	context.Context
	task       *protocol.Task
	bundle     *workflow.Bundle
	checkpoint json.RawMessage // what LoadCheckpoint returns

	answer     string // continue, complete, wait, fail, fail_permanent
	output     json.RawMessage
	pending    []protocol.PendingCall // what Wait answered
	stopReason string
	stopDetail string
	err        error
	answers    int
	saved      json.RawMessage // the last Checkpoint written
	usage      protocol.Usage
	records    []trace.Iteration // what the handler recorded, in order
	// inPlace makes AppendCheckpoint write in the loaded array, as the worker does.
	inPlace bool
	// onCheckpoint, when set, runs when the handler checkpoints, before the write.
	onCheckpoint func()
	// checkpointErr, when set, is what Checkpoint returns (nothing is written).
	checkpointErr error
}

func (f *fakeTask) Task() *protocol.Task              { return f.task }
func (f *fakeTask) Input() json.RawMessage            { return f.task.Input }
func (f *fakeTask) Bundle() (*workflow.Bundle, error) { return f.bundle, nil }
func (f *fakeTask) AddUsage(u protocol.Usage)         { f.usage.Add(u) }
func (f *fakeTask) Record(it trace.Iteration)         { f.records = append(f.records, it) }

// LoadCheckpoint returns the checkpoint as of the earlier iterations and this task's writes, as
// the worker does.
func (f *fakeTask) LoadCheckpoint() (json.RawMessage, error) {
	if f.saved != nil {
		return f.saved, nil
	}
	return f.checkpoint, nil
}

// AppendCheckpoint appends items to the checkpoint the task loaded: saved is then the whole
// array. With inPlace it writes as the worker does, in the loaded array while it has room (its
// ']' becomes ',' and the items follow), which changes the bytes of earlier views of it;
// otherwise in a new array.
func (f *fakeTask) AppendCheckpoint(items ...any) error {
	if f.onCheckpoint != nil {
		f.onCheckpoint()
	}
	if f.checkpointErr != nil {
		return f.checkpointErr
	}
	raw, _ := f.LoadCheckpoint()
	if !f.inPlace {
		raw = bytes.Clone(raw)
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" || string(t) == "[]" {
		raw = []byte{'['}
	} else if t[0] != '[' {
		return fmt.Errorf("fakeTask: cannot append to %.40s", t)
	} else {
		raw = append(raw[:len(raw)-1], ',')
	}
	for i, it := range items {
		data, err := json.Marshal(it)
		if err != nil {
			return err
		}
		if i > 0 {
			raw = append(raw, ',')
		}
		raw = append(raw, data...)
	}
	f.saved = append(raw, ']')
	return nil
}

func (f *fakeTask) Checkpoint(v any) error {
	if f.onCheckpoint != nil {
		f.onCheckpoint()
	}
	if f.checkpointErr != nil {
		return f.checkpointErr
	}
	data, err := json.Marshal(v)
	f.saved = data
	return err
}

func (f *fakeTask) record(answer string, output any, err error) error {
	f.answers++
	if f.answers > 1 {
		return errors.New("answered twice")
	}
	f.answer, f.err = answer, err
	if answer == "continue" || answer == "complete" {
		data, merr := json.Marshal(output)
		if merr != nil {
			return merr
		}
		f.output = data
	}
	return nil
}

func (f *fakeTask) Continue(output any) error { return f.record("continue", output, nil) }
func (f *fakeTask) Complete(output any) error { return f.record("complete", output, nil) }
func (f *fakeTask) Fail(err error) error      { return f.record("fail", nil, err) }
func (f *fakeTask) FailPermanent(err error) error {
	return f.record("fail_permanent", nil, err)
}

func (f *fakeTask) Wait(pending []protocol.PendingCall) error {
	f.pending = pending
	return f.record("wait", nil, nil)
}

func (f *fakeTask) CompleteWithStop(output any, stopReason, detail string) error {
	f.stopReason, f.stopDetail = stopReason, detail
	return f.record("complete", output, nil)
}

// bundleOf parses a workflow file's text into a bundle whose relative paths resolve in baseDir.
func bundleOf(t testing.TB, toml, baseDir string) (*workflow.Bundle, string) {
	t.Helper()
	def, ps := workflow.Parse("test.toml", []byte(toml))
	if len(ps) > 0 {
		t.Fatalf("workflow: %v", ps)
	}
	def.Normalize()
	hash, err := def.Hash()
	if err != nil {
		t.Fatal(err)
	}
	return &workflow.Bundle{Definition: def, BaseDir: baseDir}, hash
}

// newTask is the task of attempt 1 of iteration iter of activation 1 of step.
func newTask(b *workflow.Bundle, hash, step string, iter int, input string) *fakeTask {
	s := b.Definition.StepByID(step)
	handler := protocol.HandlerLLM
	if s != nil && s.Type == workflow.Agent {
		handler = protocol.HandlerAgent
	}
	task := &protocol.Task{
		RunID: "run1", Step: step, Item: -1, Body: step, Handler: handler, Workflow: hash,
		Activation: 1, Iteration: iter, Attempt: 1, Input: json.RawMessage(input),
	}
	if s != nil {
		task.Type, task.Model = s.Type, s.Model
		task.Prompt, task.Instructions, task.Goal = s.Prompt, s.Instructions, s.Goal
	}
	return &fakeTask{Context: context.Background(), task: task, bundle: b}
}

// epoch is where the virtual clock of the tests starts, so that checkpoints are reproducible.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newHandlers(t testing.TB, cfg builtin.Config) *builtin.Handlers {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = clock.NewVirtual(epoch)
	}
	h, err := builtin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// keptTexts is the values' store of every fakeTask: refs name their text's digest, as the
// worker's do, so that tasks of one run read what another kept.
var keptTexts sync.Map

func (f *fakeTask) KeepText(text string) (string, error) {
	sum := sha256.Sum256([]byte(text))
	ref := "\x00reins-value:" + strconv.Itoa(len(text)) + ":" + f.task.RunID + "/" + hex.EncodeToString(sum[:])
	keptTexts.Store(ref, text)
	return ref, nil
}

func (f *fakeTask) ReadText(ref string) (string, error) {
	text, ok := keptTexts.Load(ref)
	if !ok {
		return "", fmt.Errorf("fakeTask: no text kept as %q", ref)
	}
	return text.(string), nil
}
