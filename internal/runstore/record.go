package runstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
)

// ErrCorrupt: the run's record cannot be decoded; List shows it with StatusCorrupt, and
// Delete removes it.
var ErrCorrupt = errors.New("the run's record is corrupt")

// StatusCorrupt is the status List gives a run whose record cannot be decoded; its Error says
// why (code CodeCorrupt).
const StatusCorrupt protocol.RunStatus = "corrupt"

// CodeCorrupt is the error code of a run whose record cannot be decoded.
const CodeCorrupt = "E_CORRUPT_RECORD"

// EncodeRecord returns json.Marshal(rec), written without reflection by wire's Encoder: the
// engine encodes a record after every decision.
func EncodeRecord(rec *engine.Record) ([]byte, error) { return wire.Encode(rec, appendRecord) }

// appendRecord appends json.Marshal(rec) to b: the run, and the parent when there is one.
func appendRecord(b []byte, rec *engine.Record) ([]byte, error) {
	if rec == nil {
		return append(b, "null"...), nil
	}
	out, err := AppendRun(append(b, `{"run":`...), rec.Run)
	if err == nil && rec.Parent != nil {
		out, err = wire.AppendParent(append(out, `,"parent":`...), rec.Parent)
	}
	if err != nil {
		return b, err
	}
	return append(out, '}'), nil
}

func DecodeRecord(e jetstream.KeyValueEntry) (*engine.Record, error) {
	var rec engine.Record
	err := json.Unmarshal(e.Value(), &rec)
	switch {
	case err != nil:
		return nil, fmt.Errorf("run %s: %w: its %d bytes are not a run record: %v", e.Key(), ErrCorrupt, len(e.Value()), err)
	case rec.Run == nil || rec.Run.ID != e.Key():
		return nil, fmt.Errorf("run %s: %w: its %d bytes hold no run of that id", e.Key(), ErrCorrupt, len(e.Value()))
	}
	rec.Revision = e.Revision()
	return &rec, nil
}

// CorruptRecord stands for a record that cannot be decoded, in a list: the run id, status
// StatusCorrupt, and the error saying why.
func CorruptRecord(e jetstream.KeyValueEntry, err error) *engine.Record {
	run := &engine.Run{ID: e.Key(), Status: StatusCorrupt, StartedAt: e.Created().UTC(),
		Error: &protocol.RunError{Code: CodeCorrupt, Message: err.Error()}}
	return &engine.Record{Run: run, Revision: e.Revision()}
}

// StatusKey is the key of run in the status index (natsbox.StatusBucket):
// STATUS.WORKFLOW.STARTED.RUNID, STARTED being the start time in Unix nanoseconds written in 20
// digits, so that a filter selects a status, a workflow or both, and the keys sort oldest
// first. A workflow name that is not a subject token (validation forbids it) is indexed as "-".
func StatusKey(run *engine.Run) string {
	name := run.Workflow
	if natsbox.CheckToken(name) != nil {
		name = "-"
	}
	return string(run.Status) + "." + name + "." + startedToken(run.StartedAt) + "." + run.ID
}

func startedToken(t time.Time) string {
	return fmt.Sprintf("%020d", max(t.UnixNano(), 0))
}

// StatusFilter is the filter of the index keys of the runs with status of workflow ("" for
// any).
func StatusFilter(status protocol.RunStatus, workflow string) string {
	orAll := func(s string) string {
		if s == "" {
			return "*"
		}
		return s
	}
	return orAll(string(status)) + "." + orAll(workflow) + ".*.*"
}

// IndexKey is a status index key read back: ok false for a key of another form (one an older
// version wrote).
type IndexKey struct {
	Status   protocol.RunStatus
	Workflow string
	// Cursor is STARTED.RUNID: the order of the keys, and where a page ends.
	Cursor string
	RunID  string
}

// ParseStatusKey reads key back.
func ParseStatusKey(key string) (IndexKey, bool) {
	status, rest, _ := strings.Cut(key, ".")
	workflow, cursor, _ := strings.Cut(rest, ".")
	id, ok := cursorRun(cursor)
	if !ok {
		return IndexKey{}, false
	}
	return IndexKey{Status: protocol.RunStatus(status), Workflow: workflow, Cursor: cursor, RunID: id}, true
}

// Started is when the run of k started, as its key holds it (to the nanosecond, UTC).
func (k IndexKey) Started() time.Time {
	n, _ := strconv.ParseInt(k.Cursor[:min(20, len(k.Cursor))], 10, 64)
	return time.Unix(0, n).UTC()
}

// CheckCursor reports whether c can be an IndexKey's Cursor (a page's end): STARTED.RUNID.
func CheckCursor(c string) bool {
	_, ok := cursorRun(c)
	return ok
}

// cursorRun returns the run id of cursor STARTED.RUNID, STARTED being 20 digits.
func cursorRun(cursor string) (string, bool) {
	started, id, _ := strings.Cut(cursor, ".")
	if len(started) != 20 || id == "" {
		return "", false
	}
	for _, c := range started {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return id, true
}
