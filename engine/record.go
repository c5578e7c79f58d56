package engine

import "github.com/reins-run/reins/protocol"

// Record is what the runs bucket holds under a run id: the run state, and the parent run
// waiting for it when it is a sub-run.
type Record struct {
	Run    *Run             `json:"run"`
	Parent *protocol.Parent `json:"parent,omitempty"`
	// Revision is the bucket's revision of the record (not stored).
	Revision uint64 `json:"-"`
}

// Finished reports whether the run has ended.
func (r *Record) Finished() bool {
	return r != nil && r.Run.Finished()
}
