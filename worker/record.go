package worker

import (
	"encoding/json"
	"fmt"

	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
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

func (tc *taskContext) Record(it trace.Iteration) {
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
	it.Calls = append([]trace.CallRecord(nil), rec.Calls...)
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
