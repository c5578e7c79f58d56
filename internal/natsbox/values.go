package natsbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/wirespec"
)

// ValuesBucket is the object store of values too large to travel inline (wire.Values): object
// name = run id + "/" + the SHA-256 of the value, so that a value is stored once per run and
// the values of a run (and of its sub-runs, whose ids extend it) are deleted with it.
const ValuesBucket = "reins_values"

// ErrNoValue is wrapped by the error of GetValue when the store has no object of that name, and
// ErrValueChanged when the object is larger than asked or its chunks do not match its digest.
// Other errors of GetValue are the server's or the connection's: worth trying again.
var (
	ErrNoValue      = wirespec.ErrNoValue
	ErrValueChanged = wirespec.ErrValueChanged
)

// ObjectValues keeps values in ValuesBucket (it implements wire.ValueStore).
type ObjectValues struct {
	js     jetstream.JetStream
	obs    jetstream.ObjectStore
	bucket string // names.ValuesBucket()
}

// OpenValues binds to the object store of values of names (EnsureLayout created it).
func OpenValues(ctx context.Context, js jetstream.JetStream, names Names) (*ObjectValues, error) {
	bucket := names.ValuesBucket()
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("natsbox: object store %s: %w", bucket, err)
	}
	return &ObjectValues{js: js, obs: obs, bucket: bucket}, nil
}

// PutValue stores data under name unless an object of that name exists: names are digests of
// their data, and replacing an object would purge chunks, which only the engine may.
func (o *ObjectValues) PutValue(ctx context.Context, name string, data []byte) error {
	info, err := o.obs.GetInfo(ctx, name)
	switch {
	case err == nil && info.Size == uint64(len(data)):
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrObjectNotFound):
		return fmt.Errorf("natsbox: object store %s: %s: %w", o.bucket, name, err)
	}
	if _, err := o.obs.PutBytes(ctx, name, data); err != nil {
		return fmt.Errorf("natsbox: object store %s: store %s (%d bytes): %w", o.bucket, name, len(data), err)
	}
	return nil
}

// GetValue returns the data stored under name, refusing an object larger than max bytes before
// reading it.
func (o *ObjectValues) GetValue(ctx context.Context, name string, max int64) ([]byte, error) {
	info, err := o.obs.GetInfo(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, fmt.Errorf("natsbox: object store %s: %s: %w", o.bucket, name, ErrNoValue)
	case err != nil:
		return nil, fmt.Errorf("natsbox: object store %s: %s: %w", o.bucket, name, err)
	case info.Size > uint64(max):
		return nil, fmt.Errorf("natsbox: object store %s: %s is %d bytes, more than %d: %w", o.bucket, name, info.Size, max, ErrValueChanged)
	}
	if _, ok := ctx.Deadline(); !ok {
		// Without a deadline the library gives the whole read its API timeout (5 s): a large
		// value on a slow or busy link would fail every time it is read.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readTimeout(info.Size))
		defer cancel()
	}
	data, err := o.obs.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		err = fmt.Errorf("%w: %w", ErrValueChanged, err)
	}
	if err != nil {
		return nil, fmt.Errorf("natsbox: object store %s: read %s: %w", o.bucket, name, err)
	}
	return data, nil
}

// Reads of values without a deadline of their own are bounded by readTimeout: a fixed part for
// the requests, and the time the value takes at the slowest link the store is meant for.
const (
	readBase = 30 * time.Second
	readRate = 1 << 20 // bytes per second
)

func readTimeout(size uint64) time.Duration {
	return readBase + time.Duration(size)*time.Second/readRate
}

// DeleteValues removes every value of the runs for which of returns true (given each object's
// run id, the name up to its last "/"), leaving nothing behind: chunks and the object's
// description, delete marker included. It returns the number of objects removed.
func (o *ObjectValues) DeleteValues(ctx context.Context, of func(runID string) bool) (int, error) {
	infos, err := o.obs.List(ctx, jetstream.ListObjectsShowDeleted())
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("natsbox: object store %s: list: %w", o.bucket, err)
	}
	s, err := o.js.Stream(ctx, "OBJ_"+o.bucket)
	if err != nil {
		return 0, fmt.Errorf("natsbox: object store %s: %w", o.bucket, err)
	}
	n := 0
	for _, info := range infos {
		i := strings.LastIndexByte(info.Name, '/')
		if i < 0 || !of(info.Name[:i]) {
			continue
		}
		for _, subj := range []string{"$O." + o.bucket + ".C." + info.NUID, "$O." + o.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(info.Name))} {
			if err := s.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
				return n, fmt.Errorf("natsbox: object store %s: remove %s: %w", o.bucket, info.Name, err)
			}
		}
		n++
	}
	return n, nil
}
