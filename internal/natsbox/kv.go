package natsbox

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// PurgeKeys removes keys of bucket for good: a purge of the stream's subject of each key, which
// leaves no purge marker behind.
func PurgeKeys(ctx context.Context, js jetstream.JetStream, bucket string, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	stream, err := js.Stream(ctx, KVStream(bucket))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(KVSubject(bucket, k))); err != nil {
			return fmt.Errorf("remove %s: %w", k, err)
		}
	}
	return nil
}

// KVStream and KVSubject name the stream of a KV bucket and the subject of one of its keys.
func KVStream(bucket string) string { return "KV_" + bucket }

func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// StoredKeys returns the keys of bucket that match filter, from the stream's count of messages
// per subject: one request (paged by the server) instead of a consumer that delivers a message
// per key, several times faster on large buckets. It lists every key with a message, a delete
// marker's too, so it serves the buckets whose keys go with PurgeKeys only (the status index).
func StoredKeys(ctx context.Context, js jetstream.JetStream, bucket, filter string) (map[string]bool, error) {
	stream, err := js.Stream(ctx, KVStream(bucket))
	if err != nil {
		return nil, fmt.Errorf("list the keys of %s: %w", bucket, err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(KVSubject(bucket, filter)))
	if err != nil {
		return nil, fmt.Errorf("list the keys of %s: %w", bucket, err)
	}
	prefix := KVSubject(bucket, "")
	keys := make(map[string]bool, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys[subj[len(prefix):]] = true
	}
	return keys, nil
}
