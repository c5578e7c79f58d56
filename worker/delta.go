package worker

import (
	"encoding/json"

	"github.com/reins-run/reins/protocol"
)

// PublishDelta publishes d, a piece of a model's reply, on its run's delta subject
// (natsbox.Names.DeltaSubject): core NATS, fire and forget. It never blocks on the server and
// never fails: a delta that cannot be sent is dropped, since deltas are not kept and the run's
// record does not depend on them.
func (w *Worker) PublishDelta(d protocol.Delta) {
	subj, err := w.names.DeltaSubject(d.RunID)
	if err != nil {
		return
	}
	data, err := json.Marshal(d)
	if err != nil {
		return
	}
	_ = w.box.Conn().Publish(subj, data) // buffered by the connection; no flush, no reply
}
