package runstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
)

// Saver writes the records of runs: the one writer of run state, used by the engine after its
// decisions and by a fork to create the record of the run it starts, so that both write the
// same record format, index a status before the record that has it, and save with
// compare-and-set.
type Saver struct {
	JS    jetstream.JetStream
	Names natsbox.Names
	Runs  jetstream.KeyValue // Names.RunsBucket
	Index jetstream.KeyValue // Names.StatusBucket
	// Values stores the values too large to stay inline in a record.
	Values *wire.Values
	// MaxPayload is the server's message limit (0: none): a record that would pass it has
	// every value over a kibibyte stored by reference, and is refused when still too large.
	MaxPayload int
}

// RecordOverhead is what a KV put adds to a run record in its message (subject, headers).
const RecordOverhead = 1 << 10

// ErrUnencodable: the run's state cannot be written as JSON (a raw value that is not JSON);
// saving it again cannot help.
var ErrUnencodable = errors.New("the run's state cannot be written as a record")

// TooLargeError is the error of a save of a record larger than a message may be.
type TooLargeError struct{ Size, Limit int }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the run's state is %d bytes, more than the %d bytes a record may be (the server's message limit)", e.Size, e.Limit)
}

// Encode returns rec as it is saved, its large values stored by reference: those over the
// inline bound, and when that is not enough, every one over a kibibyte. The error is a
// *TooLargeError when the record still cannot be saved, ErrUnencodable when it cannot be
// encoded, and the values' store's (worth trying again) otherwise.
func (s *Saver) Encode(ctx context.Context, rec *engine.Record) ([]byte, error) {
	limit := s.MaxPayload - RecordOverhead
	var data []byte
	for _, pack := range []bool{false, true} {
		run, err := OutRun(ctx, s.Values, rec.Run, pack)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", rec.Run.ID, err)
		}
		if data, err = EncodeRecord(&engine.Record{Run: run, Parent: rec.Parent}); err != nil { // cannot happen on a state decoded from JSON
			return nil, fmt.Errorf("run %s: %w: %w", rec.Run.ID, ErrUnencodable, err)
		}
		if s.MaxPayload <= 0 || len(data) <= limit {
			return data, nil
		}
	}
	return nil, &TooLargeError{Size: len(data), Limit: limit}
}

// IndexStatus writes the status index key of run (StatusKey): before the record that has that
// status is saved, so that the key of every saved status is there whatever crashes.
func (s *Saver) IndexStatus(ctx context.Context, run *engine.Run) error {
	if _, err := s.Index.Put(ctx, StatusKey(run), []byte{'1'}); err != nil {
		return fmt.Errorf("index run %s as %s: %w", run.ID, run.Status, err)
	}
	return nil
}

// Put saves the record data of run id: creates it (jetstream.ErrKeyExists when it exists), or
// replaces revision rev (jetstream.ErrKeyRevisionMismatch when another save came first). It
// returns the record's new revision.
func (s *Saver) Put(ctx context.Context, id string, data []byte, create bool, rev uint64) (uint64, error) {
	if create {
		return s.Runs.Create(ctx, id, data)
	}
	return natsbox.UpdateKV(ctx, s.JS, s.Names.RunsBucket(), id, data, rev)
}
