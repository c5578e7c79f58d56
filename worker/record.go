package worker

import (
	"encoding/json"
	"fmt"

	"github.com/reins-run/reins/protocol"
)

// The texts of an iteration record travel with the answer: each is clipped at recordInline
// bytes, its whole kept by reference in the run's values (wire.Values), so that the record
// costs an answer a few kilobytes whatever the tools returned. A record still larger than
// recordMax (a turn of hundreds of calls) is clipped at recordTight and loses its trace
// events: the answer must fit a message, and the record must not be what fails it.
const (
	recordInline = 2 << 10
	recordTight  = 256
	recordMax    = 256 << 10
)

func (tc *taskContext) Record(it protocol.Iteration) {
	tc.mu.Lock()
	tc.record = &it
	tc.mu.Unlock()
}

// withRecord sets ev's Record from what the handler recorded: clipped, the whole texts kept by
// reference (unless keep is false), and the task's wall time so far.
func (tc *taskContext) withRecord(ev *protocol.Event, keep bool) error {
	tc.mu.Lock()
	rec := tc.record
	tc.mu.Unlock()
	if rec == nil {
		return nil
	}
	it := *rec
	it.Calls = append([]protocol.CallRecord(nil), rec.Calls...)
	if p := rec.Proposal; p != nil {
		cp := *p
		it.Proposal = &cp
	}
	it.Duration = tc.w.now().Sub(tc.started)
	store := func(text string) (string, error) {
		raw, err := json.Marshal(text)
		if err != nil {
			return "", err
		}
		ref, err := tc.w.values.Keep(tc, tc.task.RunID, raw)
		if err != nil {
			return "", &storeError{fmt.Errorf("the record of step %s cannot be stored: %w", tc.stepName(), err)}
		}
		return string(ref), nil
	}
	if !keep {
		store = nil
	}
	if _, err := it.Clip(recordInline, store); err != nil {
		return err
	}
	if data, err := json.Marshal(&it); err == nil && len(data) > recordMax {
		it.Events = nil
		if _, err := it.Clip(recordTight, store); err != nil {
			return err
		}
	}
	ev.Record = &it
	return nil
}

// KeepText stores text with the run's values (wire.Values) and returns a reference to it, a
// string that starts with NUL: for a handler that keeps large texts out of its checkpoint (the
// built-in agent's tool results). The text goes when the run is pruned.
func (tc *taskContext) KeepText(text string) (string, error) {
	raw, err := json.Marshal(text)
	if err != nil {
		return "", fmt.Errorf("worker: keep a text of task %s: %w", tc.task.MsgID, err)
	}
	ref, err := tc.w.values.Keep(tc, tc.task.RunID, raw)
	if err != nil {
		return "", fmt.Errorf("worker: keep a text of %d bytes of task %s: %w", len(text), tc.task.MsgID, err)
	}
	var s string
	if err := json.Unmarshal(ref, &s); err != nil {
		return "", fmt.Errorf("worker: keep a text of task %s: %w", tc.task.MsgID, err)
	}
	return s, nil
}

// ReadText returns the text a reference of KeepText names, for this task's run only.
func (tc *taskContext) ReadText(ref string) (string, error) {
	raw, err := json.Marshal(ref)
	if err != nil {
		return "", fmt.Errorf("worker: read a kept text of task %s: %w", tc.task.MsgID, err)
	}
	data, err := tc.w.values.In(tc, tc.task.RunID, raw)
	if err != nil {
		return "", fmt.Errorf("worker: read a kept text of task %s: %w", tc.task.MsgID, err)
	}
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return "", fmt.Errorf("worker: the kept text of task %s is not a JSON string: %w", tc.task.MsgID, err)
	}
	return text, nil
}
